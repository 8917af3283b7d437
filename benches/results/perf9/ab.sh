#!/usr/bin/env bash
# usage: ab2.sh ROUNDS N bin... ; user seconds, min and median per binary
R=$1; N=$2; shift 2
for i in $(seq $R); do for b in "$@"; do /usr/bin/time -f "$b %U" /tmp/q/s10-$b core 64 $N >/dev/null; done; done 2>&1 | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k, a[k]}' | while read k rest; do s=$(echo $rest | tr ' ' '\n' | sort -n | tr '\n' ' '); echo "$k min $(echo $s | cut -d' ' -f1) median $(echo $s | awk -v n=$R '{print $((n+1)/2)}') : $s"; done
uptime
