#!/usr/bin/env bash
# what a deep queue costs: `dispatch_cycles core 64 N DEPTH` less `... 0 DEPTH`, 3 rounds, ae5467f's core
set -u
for i in 1 2 3; do
  for depth in 100 1000 10000; do
    for n in 0 800000; do
      /usr/bin/time -f "$i depth=$depth n=$n %e s %M KB" /tmp/q/b8-depth-cycles core 64 $n $depth >/dev/null
    done
  done
done 2>&1
echo "load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%T)"
