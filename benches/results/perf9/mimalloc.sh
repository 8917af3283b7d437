#!/usr/bin/env bash
# glibc (HEAD be6e49a) against mimalloc (the same tree with mimalloc as the
# coordinator binary's global allocator), alternated: 10,000 idle workers,
# then 64-worker jobs. Binaries in /tmp/q (s10-glibc-*, s10-mi-*).
set -u
LG=/tmp/q/s10-loadgen
O=/tmp/q/s10e; mkdir -p $O
for i in 1 2 3; do
  for tag in glibc mi; do
    echo "=== $tag idle $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $LG --mode idle --workers 10000 --hold 20 --coordinator-bin /tmp/q/s10-$tag-coordinator --out $O/$tag-idle-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' | grep -E "RSS|heartbeat"
  done
done
for i in 1 2 3 4 5; do
  for tag in glibc mi; do
    echo "=== $tag jobs64 $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin /tmp/q/s10-$tag-coordinator --out $O/$tag-jobs64-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' | grep -E "jobs/s|failures|CPU / job|RSS"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
