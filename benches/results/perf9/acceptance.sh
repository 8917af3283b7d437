#!/usr/bin/env bash
# Issue 14's acceptance figures for one build (8557372, round 9), binaries in
# /tmp/q/s10-h-*: criterion rows 5 rounds, loadgen rows 3 rounds, interleaved
# so a noisy minute touches every row a little rather than one row a lot.
set -u
LG=/tmp/q/s10-loadgen
BIN=/tmp/q/s10-h-coordinator
O=/tmp/q/s10a; mkdir -p $O
stamp() { echo "=== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
crit() { grep -E "^[a-z_]+/|thrpt|time:" | grep -v -E "change|%" ; }
for i in 1 2 3 4 5; do
  stamp "criterion dispatch round $i"
  /tmp/q/s10-h-dispatch --bench 'dispatch_(core|shell)/' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | crit
  stamp "criterion receipt/verify round $i"
  /tmp/q/s10-h-crypto --bench 'receipt/verify/64$' --warm-up-time 1 --measurement-time 3 --noplot 2>&1 | crit
  stamp "criterion simulation round $i"
  /tmp/q/s10-h-simulation --bench 'jobs_workers/1000x50' --noplot 2>&1 | crit
  if [ $i -le 3 ]; then
    stamp "loadgen jobs64 $i"
    $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/jobs64-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p'
    stamp "loadgen endpoints $i"
    $LG --mode endpoints --duration 3 --clients 64 --coordinator-bin $BIN --out $O/endpoints-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p'
    stamp "loadgen jobs8 $i"
    $LG --mode jobs --jobs 5000 --workers 8 --clients 64 --coordinator-bin $BIN --out $O/jobs8-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p'
    stamp "loadgen rate50 $i"
    $LG --mode rate --rate-of-peak 0.5 --peak-secs 5 --duration 10 --workers 64 --clients 256 --coordinator-bin $BIN --out $O/rate50-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p'
    stamp "loadgen idle $i"
    $LG --mode idle --workers 10000 --hold 20 --coordinator-bin $BIN --out $O/idle-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p'
  fi
done
stamp done
