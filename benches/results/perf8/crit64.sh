#!/usr/bin/env bash
# dispatch_core/64 alone, base (01063ce) and lk (607bc2b) alternated, 5 rounds
set -u
for i in 1 2 3 4 5; do
  for b in base lk; do
    echo "== $b round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/s9-$b-bench --bench 'dispatch_core/64$' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "thrpt" | grep -v "%"
  done
done
