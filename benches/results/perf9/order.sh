#!/usr/bin/env bash
# dispatch_core/64 alone in its process, and after dispatch_core/1 in the same
# process (as in the full group), alternated; binary /tmp/q/s10-h-dispatch (8557372)
set -u
for i in 1 2 3 4; do
  echo "== alone round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/q/s10-h-dispatch --bench 'dispatch_core/64$' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "thrpt" | grep -v "%"
  echo "== after-1 round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  /tmp/q/s10-h-dispatch --bench 'dispatch_core/(1|64)$' --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "^dispatch|thrpt" | grep -v "%" | tail -1
done
