#!/usr/bin/env bash
# a job from commit to its free: `dispatch_cycles core 64 N` less `... 0`, alternated before/after, 3 rounds
set -u
for i in 1 2 3; do
  for tag in before q2; do
    for n in 0 300000; do
      /usr/bin/time -f "$tag $i n=$n %e s %M KB" /tmp/q/b8-$tag-cycles core 64 $n >/dev/null
    done
  done
done 2>&1
echo "load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%T)"
