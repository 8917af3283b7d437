#!/usr/bin/env bash
# usage: e2e.sh TAG COORDINATOR_BIN ; three rounds of the three e2e figures
set -u
cd /work/main
TAG=$1; BIN=$2; O=/tmp/q/$TAG; mkdir -p $O
LG=/tmp/q/loadgen
for i in 1 2 3; do
  for m in jobs64 endpoints jobs8; do
    echo "=== $TAG $m $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    case $m in
      jobs64) $LG --mode jobs --jobs 20000 --workers 64 --clients 128 --coordinator-bin $BIN --out $O/$m-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' ;;
      endpoints) $LG --mode endpoints --duration 3 --clients 64 --coordinator-bin $BIN --out $O/$m-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' ;;
      jobs8) $LG --mode jobs --jobs 5000 --workers 8 --clients 64 --coordinator-bin $BIN --out $O/$m-$i.json --quiet 2>&1 | sed -n '/^loadgen/,$p' ;;
    esac
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
