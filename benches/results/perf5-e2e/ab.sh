#!/usr/bin/env bash
# alternated before/after e2e runs: before = main 05c54c6, after = merged round 5
set -u
cd /work/main
LG=/tmp/q/loadgen
for i in 1 2 3; do
  for tag in before merged; do
    BIN=/tmp/q/$tag-coordinator; O=/tmp/q/ab-$tag; mkdir -p $O
    for m in jobs64 endpoints jobs8 rate; do
      echo "=== $tag $m $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
      case $m in
        jobs64) $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$m-$i.json --quiet ;;
        endpoints) $LG --mode endpoints --duration 3 --clients 64 --coordinator-bin $BIN --out $O/$m-$i.json --quiet ;;
        jobs8) $LG --mode jobs --jobs 5000 --workers 8 --clients 64 --coordinator-bin $BIN --out $O/$m-$i.json --quiet ;;
        rate) $LG --mode rate --duration 10 --peak-secs 5 --workers 64 --clients 256 --ceiling-secs 2 --coordinator-bin $BIN --out $O/$m-$i.json --quiet ;;
      esac 2>&1 | sed -n '/^loadgen/,$p'
    done
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
