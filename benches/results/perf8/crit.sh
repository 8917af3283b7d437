#!/usr/bin/env bash
# dispatch benches, before (01063ce, the session's start) and after, alternated, 3 rounds
set -u
for i in 1 2 3; do
  for b in base lk; do
    echo "== $b round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/s9-$b-bench --bench 'dispatch_(core|shell)/' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 \
      | grep -E "^dispatch_|thrpt" | grep -v "%" 
  done
done
