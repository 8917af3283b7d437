#!/usr/bin/env bash
# scripts/sabotage/run.sh's steps for each patch, without the rebuild of main
# between patches: the shrunk files are replayed on main afterwards with
# one saved main build (/tmp/harness-hpay-main).
set -euo pipefail
cd /work/hpay
seeds=$1; shift
out=target/sabotage
for patch in "$@"; do
  name=$(basename "$patch" .patch)
  dir="$out/$name"
  rm -rf "$dir"; mkdir -p "$dir"
  echo "== $name $(date -u +%T)"
  git apply "$patch"
  trap 'git apply -R "$patch" 2>/dev/null || true' EXIT
  cargo build -q --release --bin harness
  echo "built $(date -u +%T)"
  set +e
  target/release/harness swarm --seeds "0..$seeds" --fail-fast --out "$dir" > "$dir/swarm.txt" 2>&1
  set -e
  shrunk=$(ls "$dir"/swarm-*.toml 2>/dev/null | head -1 || true)
  fails=-
  if [ -n "$shrunk" ]; then
    target/release/harness "$shrunk" > "$dir/replay-sabotaged.txt" 2>&1 && fails=no || fails=yes
  fi
  git apply -R "$patch"
  trap - EXIT
  echo "| $name | $(grep -m1 '^FAILED seed' "$dir/swarm.txt" || echo not caught) | $shrunk | fails on sabotage: $fails | $(date -u +%T)"
done
