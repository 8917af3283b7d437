#!/usr/bin/env bash
# Breaks the coordinator on purpose, one sabotage at a time, and checks that
# `harness swarm` catches each within SEEDS seeds and shrinks it to a scenario
# that fails on the sabotaged code and passes on main. Nothing is committed:
# each patch is applied to the work tree and reverted.
#
#   scripts/sabotage/run.sh [SEEDS] [PATCH...]     (default: 2000 seeds, every patch)
#
# Writes target/sabotage/<patch>/ (the swarm's output and shrunk scenario) and
# target/sabotage/summary.md (seeds to failure, invariant, shrunk file).
set -euo pipefail
cd "$(dirname "$0")/../.."
seeds=${1:-2000}
shift || true
patches=("$@")
if [ ${#patches[@]} -eq 0 ]; then
  patches=(scripts/sabotage/*.patch)
fi
if ! git diff --quiet -- coordinator; then
  echo "coordinator/ has uncommitted changes; refusing to patch it" >&2
  exit 2
fi
out=target/sabotage
mkdir -p "$out"
summary="$out/summary.md"
echo "| sabotage | caught | invariant | first failing seed | shrunk lines | fails on sabotage | passes on main |" > "$summary"
echo "|---|---|---|---|---|---|---|" >> "$summary"
for patch in "${patches[@]}"; do
  name=$(basename "$patch" .patch)
  dir="$out/$name"
  rm -rf "$dir"; mkdir -p "$dir"
  echo "== $name"
  git apply "$patch"
  trap 'git apply -R "$patch" 2>/dev/null || true' EXIT
  cargo build -q --release --bin harness
  set +e
  target/release/harness swarm --seeds "0..$seeds" --fail-fast --out "$dir" > "$dir/swarm.txt" 2>&1
  set -e
  shrunk=$(ls "$dir"/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; invariant=-; ran=-; lines=-; fails=-; passes=-
  if [ -n "$shrunk" ]; then
    caught=yes
    invariant=$(grep -m1 '^FAILED seed' "$dir/swarm.txt" | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' "$dir/swarm.txt" | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' "$shrunk")
    target/release/harness "$shrunk" > "$dir/replay-sabotaged.txt" 2>&1 && fails=no || fails=yes
  fi
  git apply -R "$patch"
  trap - EXIT
  if [ -n "$shrunk" ]; then
    cargo build -q --release --bin harness
    target/release/harness "$shrunk" > "$dir/replay-main.txt" 2>&1 && passes=yes || passes=no
  fi
  echo "| $name | $caught | $invariant | $ran | $lines | $fails | $passes |" | tee -a "$summary"
done
cat "$summary"
