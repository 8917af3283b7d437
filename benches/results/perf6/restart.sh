#!/usr/bin/env bash
# Peak RSS of a coordinator starting on a database of 100,000 finished jobs
# (restart.db, filled by loadgen), alternated before/after, 3 rounds.
set -u
cd /tmp/q/b7
for i in 1 2 3; do
  for tag in ${TAGS:-before stream}; do
    rm -f r.db r.db-wal r.db-shm
    cp restart.db r.db; cp restart.db-wal r.db-wal 2>/dev/null; cp restart.db-shm r.db-shm 2>/dev/null
    BIN=/tmp/q/b7-$tag-coordinator
    $BIN --listen 127.0.0.1:18555 --db r.db --network eip155:84532 > /dev/null 2>&1 &
    pid=$!
    start=$(date +%s%N)
    until curl -sf http://127.0.0.1:18555/v1/health > /dev/null; do sleep 0.05; done
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    hwm=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
    echo "$tag $i ready_ms=$ms VmHWM_kB=$hwm load $(cut -d' ' -f1-3 /proc/loadavg)"
    kill $pid; wait $pid 2>/dev/null
  done
done
