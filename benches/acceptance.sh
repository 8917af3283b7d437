#!/usr/bin/env bash
# The acceptance set of docs/performance.md on one build, interleaved: criterion rows RUNS_CRIT rounds
# (default 5), loadgen rows RUNS_LOAD rounds (default 3), so a noisy minute touches every row a little
# rather than one row a lot. Each run is printed with the time and the load average; the medians are read
# from the output. Loopback only; about 25 minutes.
#   benches/acceptance.sh > target/acceptance-runs.txt
set -u
cd "$(dirname "$0")/.."
cargo build --release -p coordinator -p benches --bins
cargo bench -p benches --no-run >/dev/null 2>&1
LG=target/release/loadgen
O=target/acceptance; mkdir -p "$O"
stamp() { echo "=== $1 $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"; }
crit() { grep -E "^[a-z_]+/|thrpt|time:" | grep -v -E "change|%"; }
bench() { cargo bench -q -p benches --bench "$1" -- "$2" --warm-up-time 2 --measurement-time 5 --noplot 2>&1 | crit; }
load() { local name=$1; shift; stamp "loadgen $name"; "$LG" "$@" --out "$O/$name.json" --quiet 2>&1 | sed -n '/^loadgen/,$p'; }
for i in $(seq 1 "${RUNS_CRIT:-5}"); do
  stamp "criterion dispatch round $i"; bench dispatch 'dispatch_(core|shell)/'
  stamp "criterion receipt/verify round $i"; bench crypto 'receipt/verify/64$'
  stamp "criterion simulation round $i"; bench simulation 'jobs_workers/1000x50'
  if [ "$i" -le "${RUNS_LOAD:-3}" ]; then
    load "jobs64-$i" --mode jobs --jobs 20000 --workers 64 --clients 128
    load "endpoints-$i" --mode endpoints --duration 3 --clients 64
    load "jobs8-$i" --mode jobs --jobs 5000 --workers 8 --clients 64
    load "rate50-$i" --mode rate --rate-of-peak 0.5 --peak-secs 5 --duration 10 --workers 64 --clients 256
    load "idle-$i" --mode idle --workers 10000 --hold 20
  fi
done
stamp done
