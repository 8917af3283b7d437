#!/usr/bin/env bash
# alternated: before (ae22c4f) and final (this round's last code commit); criterion dispatch, then lifetime
set -u
for i in 1 2 3; do
  for tag in before final; do
    echo "=== $tag $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
    /tmp/q/b7-dispatch-$tag --bench --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | grep -E "^dispatch|thrpt:" | grep -v "%"
  done
done
echo "=== lifetime: setup, 300,000 cycles of dispatch_core/64, then the rig dropped (every job freed)"
for i in 1 2 3; do
  for tag in before final; do
    for n in 0 300000; do
      /usr/bin/time -f "$tag $i n=$n user %U sys %S wall %e maxrss_kb %M" /tmp/q/b7-dc-$tag core 64 $n > /dev/null
    done
  done
done
echo "=== done $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
