#!/usr/bin/env bash
# simulation/jobs_workers/1000x50, base (01063ce) and after (d137cc5) alternated, 5 rounds (second set)
set -u
for i in 1 2 3 4 5; do
  for b in base after; do
    echo "== $b round $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/s9-$b-sim --bench 'jobs_workers/1000x50' --noplot 2>&1 | grep -E "thrpt" | grep -v "%"
  done
done
