#!/usr/bin/env bash
# alternated criterion dispatch runs: before (ee6e90c) and after (ae5467f: queues as deques of slots)
set -u
for i in 1 2 3; do
  for tag in before q2; do
    echo "=== $tag $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/b8-$tag-dispatch --bench --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "^dispatch|thrpt:" | grep -v "%"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
