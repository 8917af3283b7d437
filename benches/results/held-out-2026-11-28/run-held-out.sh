#!/usr/bin/env bash
# The held-out sabotage runs: scripts/sabotage/run.sh's steps, one patch at a
# time (apply, release build, `harness swarm --seeds 0..SEEDS --fail-fast`,
# replay the shrunk file on the sabotaged build, revert), with two changes to
# fit two shared cores: an uncaught patch's sabotaged build also runs every
# scenario in scenarios/ (the report's question "does a scenario catch it?"),
# and the shrunk files' replays on main are done once, at the end, with one
# main build (run.sh rebuilds main after every caught patch).
#
#   benches/results/held-out-2026-11-28/run-held-out.sh SEEDS PATCH...
#
# OUT and ROWS override the output folder and the rows file (the second
# held-out set's runner sets them); SCENARIOS=0 skips the scenario suite.
set -euo pipefail
cd "$(dirname "$0")/../../.."
seeds=$1; shift
out=${OUT:-target/sabotage}
mkdir -p "$out"
rows=${ROWS:-benches/results/held-out-2026-11-28/rows.md}
for patch in "$@"; do
  name=$(basename "$patch" .patch)
  dir="$out/$name"
  rm -rf "$dir"; mkdir -p "$dir"
  echo "== $name $(date -u +%H:%M:%S)"
  git apply "$patch"
  trap 'git apply -R "$patch" 2>/dev/null || true' EXIT
  cargo build -q --release --bin harness
  set +e
  start=$(date +%s)
  target/release/harness swarm --seeds "0..$seeds" --fail-fast --out "$dir" > "$dir/swarm.txt" 2>&1
  echo "swarm exit $? after $(( $(date +%s) - start )) s" > "$dir/swarm-time.txt"
  set -e
  shrunk=$(ls "$dir"/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; invariant=-; ran=-; lines=-; fails=-; scen=-
  if [ -n "$shrunk" ]; then
    caught=yes
    invariant=$(grep -m1 '^FAILED seed' "$dir/swarm.txt" | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' "$dir/swarm.txt" | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' "$shrunk")
    target/release/harness "$shrunk" > "$dir/replay-sabotaged.txt" 2>&1 && fails=no || fails=yes
  elif [ "${SCENARIOS:-1}" = 1 ]; then
    # SCENARIOS=0 skips this (re-runs on two busy cores).
    set +e
    target/release/harness scenarios/*.toml > "$dir/scenarios.txt" 2>&1
    echo "scenarios exit $?" >> "$dir/scenarios.txt"
    set -e
    scen=$(grep -c '^FAIL' "$dir/scenarios.txt" || true)
  fi
  git apply -R "$patch"
  trap - EXIT
  echo "| $name | $caught | $invariant | $ran | $lines | $fails | (main: see below) | scenarios failing: $scen |" | tee -a "$rows"
done
