#!/usr/bin/env bash
# alternated before/after e2e runs: base = 01063ce (the session's start), lk = 607bc2b
set -u
LG=/tmp/q/s9-loadgen
O=/tmp/q/s9e; mkdir -p $O
for i in 1 2 3; do
  for tag in base lk; do
    BIN=/tmp/q/s9-$tag-coordinator
    echo "=== $tag jobs64 $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$tag-jobs64-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' | grep -E "jobs/s|failures|CPU / job|RSS"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
