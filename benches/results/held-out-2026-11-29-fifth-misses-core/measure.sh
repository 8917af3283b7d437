#!/usr/bin/env bash
# scripts/sabotage/run.sh's steps, one build per patch (as set 4's
# measure.sh): first every patched release binary is built and copied to
# /tmp (the patch reverted after each), while the branch's unpatched swarm
# may still run; then, once no swarm of ours runs (WAIT_PID), each patched
# binary runs the swarm with --fail-fast, its shrunk file is replayed on it
# and on the branch's own unpatched release binary (MAIN_HARNESS, copied
# before any patch). Run from anywhere; writes target/sabotage/.
#
#   measure.sh PATCH-NAME...      (names of scripts/sabotage/*.patch)
set -euo pipefail
cd "$(dirname "$0")/../../.."
git diff --quiet -- coordinator || { echo "coordinator dirty" >&2; exit 2; }
main=${MAIN_HARNESS:-/tmp/h5core-harness-clean}
out=target/sabotage
summary=$out/summary-h5core.md
mkdir -p $out
for name in "$@"; do
  patch=scripts/sabotage/$name.patch
  echo "== build $name $(date -u +%T)"
  git apply $patch
  trap "git apply -R $patch 2>/dev/null || true" EXIT
  nice -n 5 cargo build -q --release --bin harness
  cp target/release/harness /tmp/h5core-harness-$name
  git apply -R $patch
  trap - EXIT
done
while [ -n "${WAIT_PID:-}" ] && kill -0 "$WAIT_PID" 2>/dev/null; do sleep 10; done
echo "| sabotage | caught | invariant | first failing seed | shrunk lines | fails on sabotage | passes on main | swarm wall |" > $summary
for name in "$@"; do
  bin=/tmp/h5core-harness-$name
  dir=$out/$name; rm -rf $dir; mkdir -p $dir
  echo "== swarm $name $(date -u +%T)"
  start=$(date +%s)
  set +e
  nice -n 5 prlimit --as=8000000000 $bin swarm --seeds 0..2000 --fail-fast --out $dir > $dir/swarm.txt 2>&1
  set -e
  wall=$(( $(date +%s) - start ))
  shrunk=$(ls $dir/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; inv=-; ran=-; lines=-; fails=-; passes=-
  if [ -n "$shrunk" ]; then
    caught=yes
    inv=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' $shrunk)
    $bin $shrunk > $dir/replay-sabotaged.txt 2>&1 && fails=no || fails=yes
    $main $shrunk > $dir/replay-main.txt 2>&1 && passes=yes || passes=no
  fi
  echo "| $name | $caught | $inv | $ran | $lines | $fails | $passes | ${wall}s |" | tee -a $summary
done
cat $summary
