#!/usr/bin/env bash
# scripts/sabotage/run.sh's steps, split in two so that the patched builds
# can run while the unpatched `swarm --seeds 0..2000` runs, and the sabotage
# swarms after it (never two swarms at once): `build` applies each patch,
# builds the release harness, copies it to /tmp/harness-h5id-NAME and
# reverts; `run` runs each copy's swarm (--fail-fast, shrinking), replays the
# shrunk file on it and on the unpatched copy (MAIN_HARNESS, by default
# /tmp/harness-h5id-main, built before the first patch).
#
#   measure.sh build PATCH-NAME...     (names of scripts/sabotage/*.patch)
#   measure.sh run PATCH-NAME...
set -euo pipefail
cd "$(dirname "$0")/../../.."
mode=$1; shift
out=target/sabotage
summary=$out/summary-h5id.md
mkdir -p $out
if [ "$mode" = build ]; then
  git diff --quiet -- coordinator || { echo "coordinator dirty" >&2; exit 2; }
  for name in "$@"; do
    patch=scripts/sabotage/$name.patch
    echo "== build $name $(date -u +%T)"
    git apply $patch
    trap "git apply -R $patch 2>/dev/null || true" EXIT
    nice -n 5 cargo build -q --release --bin harness
    cp target/release/harness /tmp/harness-h5id-$name
    git apply -R $patch
    trap - EXIT
  done
  exit 0
fi
[ -f $summary ] || echo "| sabotage | caught | invariant | first failing seed | shrunk lines | fails on sabotage | passes on main | swarm wall |" > $summary
for name in "$@"; do
  bin=/tmp/harness-h5id-$name
  dir=$out/$name; rm -rf $dir; mkdir -p $dir
  echo "== run $name $(date -u +%T)"
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
    ${MAIN_HARNESS:-/tmp/harness-h5id-main} $shrunk > $dir/replay-main.txt 2>&1 && passes=yes || passes=no
  fi
  echo "| $name | $caught | $inv | $ran | $lines | $fails | $passes | ${wall}s |" | tee -a $summary
done
cat $summary
