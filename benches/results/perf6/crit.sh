#!/usr/bin/env bash
# alternated criterion dispatch runs: before (ae22c4f) and after (0cf0b7c), same rig
set -u
for i in 1 2 3; do
  for tag in before after; do
    echo "=== $tag $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/b7-dispatch-$tag --bench --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "^dispatch|thrpt:" | grep -v "%"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
