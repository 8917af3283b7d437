#!/usr/bin/env bash
# alternated simulation bench runs: before (ee6e90c) and after (ae5467f)
set -u
for i in 1 2 3; do
  for tag in before q2; do
    echo "=== $tag $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/b8-$tag-sim --bench --noplot 'simulation/jobs_workers/1000x50' 2>&1 | grep -E "^simulation|thrpt:" | grep -v "%"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
