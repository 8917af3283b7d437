#!/usr/bin/env bash
# alternated before/after e2e runs: before = ee6e90c, after (q2) = ae5467f
set -u
LG=/tmp/q/b8-loadgen
O=/tmp/q/b8e; mkdir -p $O
for i in 1 2 3; do
  for tag in before q2; do
    BIN=/tmp/q/b8-$tag-coordinator
    echo "=== $tag jobs64 $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$tag-jobs64-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' | grep -E "jobs/s|failures|CPU / job|RSS"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
