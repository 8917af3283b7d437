#!/usr/bin/env bash
# dispatch_core/64 alone, two builds alternated: crit64.sh ROUNDS a b (binaries /tmp/q/s10-<tag>-bench)
set -u
R=$1; shift
for i in $(seq $R); do
  for b in "$@"; do
    echo "== $b round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/s10-$b-bench --bench 'dispatch_core/64$' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "thrpt" | grep -v "%"
  done
done
