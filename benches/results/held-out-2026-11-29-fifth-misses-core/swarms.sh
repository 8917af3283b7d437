#!/usr/bin/env bash
# The swarm half of benches/results/held-out-2026-11-29-fifth-misses-core/measure.sh,
# for the binaries it built before it was stopped.
set -uo pipefail
cd /work/h5core
out=target/sabotage
summary=$out/summary-h5core.md
main=/tmp/h5core-harness-clean
echo "| sabotage | caught | invariant | first failing seed | shrunk lines | fails on sabotage | passes on main | swarm wall |" > $summary
for name in "$@"; do
  bin=/tmp/h5core-harness-$name
  dir=$out/$name; rm -rf $dir; mkdir -p $dir
  echo "== swarm $name $(date -u +%T)"
  start=$(date +%s)
  nice -n 5 prlimit --as=8000000000 $bin swarm --seeds 0..2000 --fail-fast --out $dir > $dir/swarm.txt 2>&1
  wall=$(( $(date +%s) - start ))
  shrunk=$(ls $dir/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; inv=-; ran=-; lines=-; fails=-; passes=-
  if [ -n "$shrunk" ]; then
    caught=yes
    inv=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' $shrunk)
    nice -n 5 $bin $shrunk > $dir/replay-sabotaged.txt 2>&1 && fails=no || fails=yes
    nice -n 5 $main $shrunk > $dir/replay-main.txt 2>&1 && passes=yes || passes=no
  fi
  echo "| $name | $caught | $inv | $ran | $lines | $fails | $passes | ${wall}s |" | tee -a $summary
done
