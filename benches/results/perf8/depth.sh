#!/usr/bin/env bash
# what a deep queue costs: `dispatch_cycles core 64 400000 DEPTH`, user seconds incl. set-up,
# base (01063ce) and lk (607bc2b) alternated, 5 rounds
set -u
for i in 1 2 3 4 5; do
  for depth in 100 1000 10000; do
    for b in base lk; do
      /usr/bin/time -f "$b depth=$depth %U" /tmp/q/s9-$b core 64 400000 $depth >/dev/null
    done
  done
done 2>&1 | awk '{k=$1" "$2; a[k]=a[k]" "$3} END {for (k in a) print k, a[k]}' | sort -k2,2 -k1,1 | while read b d rest; do
  med=$(echo $rest | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'); echo "$b $d median $med : $rest"; done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) $(date -u +%T)"
