#!/usr/bin/env bash
# One, two and three coordinator nodes on one throwaway PostgreSQL, measured
# with loadgen (release build): clients commit on node 0, 64 workers are
# spread over the nodes (--worker-node), so with 2 and 3 nodes most jobs are
# dispatched across nodes. Each configuration runs RUNS times on a fresh
# schema; the reports land in OUT (default target/cluster-bench).
# Usage: benches/cluster.sh [RUNS] -- LOADGEN ARGS...
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}; shift || true
[ "${1:-}" = "--" ] && shift
out=${OUT:-target/cluster-bench}
bin=${BIN:-target/release}
mkdir -p "$out"
dir=$(mktemp -d /tmp/pg-bench.XXXXXX)
pids=()
stop_nodes() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop_nodes; scripts/pg-throwaway.sh stop "$dir"' EXIT
url=$(scripts/pg-throwaway.sh start "$dir")
for nodes in 1 2 3; do
  for run in $(seq 1 "$runs"); do
    schema="bench_${nodes}_${run}"
    workers=()
    for i in $(seq 0 $((nodes - 1))); do
      port=$((19200 + 10 * nodes + i))
      "$bin/coordinator" --listen "127.0.0.1:$port" --db "$url" --db-schema "$schema" \
        --node-id "n$i" --handshakes-per-client-max 1024 2>"$out/node-$nodes-$run-$i.log" &
      pids+=($!)
      workers+=(--worker-node "http://127.0.0.1:$port")
    done
    sleep 1
    echo "== $nodes node(s), run $run (load $(cut -d' ' -f1-3 /proc/loadavg))"
    "$bin/loadgen" --target "http://127.0.0.1:$((19200 + 10 * nodes))" --pid "${pids[0]}" \
      "${workers[@]}" --out "$out/n$nodes-r$run.json" "$@" 2>/dev/null
    stop_nodes
  done
done
