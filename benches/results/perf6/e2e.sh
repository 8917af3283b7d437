#!/usr/bin/env bash
# alternated before/after e2e runs: before = ae22c4f, after = this round
set -u
LG=/tmp/q/b7-loadgen
O=/tmp/q/b7/e2e; mkdir -p $O
for i in 1 2 3; do
  for tag in before after; do
    BIN=/tmp/q/b7-$tag-coordinator
    for m in jobs64 jobs100k; do
      echo "=== $tag $m $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
      case $m in
        jobs64) $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$tag-$m-$i.json --quiet ;;
        jobs100k) $LG --mode jobs --jobs 100000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$tag-$m-$i.json --quiet ;;
      esac 2>&1 | sed -n '/^loadgen/,$p'
    done
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
