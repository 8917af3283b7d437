#!/usr/bin/env bash
# the other loadgen acceptance figures of issue 14 for this round's build (607bc2b), 3 rounds
set -u
LG=/tmp/q/s9-loadgen
BIN=/tmp/q/s9-lk-coordinator
O=/tmp/q/s9e; mkdir -p $O
run() {
  local name=$1; shift
  echo "=== $name $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  $LG "$@" --coordinator-bin $BIN --out "$O/$name.json" --quiet 2>&1 | sed -n '/^loadgen/,$p'
}
for i in 1 2 3; do
  run endpoints-$i --mode endpoints --duration 3 --clients 64
  run jobs-8w-$i --mode jobs --jobs 5000 --workers 8 --clients 64
  run rate-64w-$i --mode rate --rate-of-peak 0.5 --peak-secs 5 --duration 10 --workers 64 --clients 256
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
