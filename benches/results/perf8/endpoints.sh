#!/usr/bin/env bash
# commit without workers, alternated: base = 01063ce, lk = 607bc2b
set -u
LG=/tmp/q/s9-loadgen
O=/tmp/q/s9e; mkdir -p $O
for i in 1 2 3; do
  for tag in base lk; do
    echo "=== $tag endpoints $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    $LG --mode endpoints --duration 3 --clients 64 --coordinator-bin /tmp/q/s9-$tag-coordinator --out $O/$tag-endpoints-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' | grep -E "commit \(no workers\) (req/s|server)"
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
