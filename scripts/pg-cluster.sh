#!/usr/bin/env bash
# Cluster mode, live (ARCHITECTURE.md, "Several nodes"): starts a throwaway
# PostgreSQL (scripts/pg-throwaway.sh; stopped on exit, also on failure), then
#  1. runs the shared-store checks on it (the claim semantics the in-memory
#     store is tested for: two nodes never both hold a job, a lapsed lease
#     requeues without spending attempts, a payment buys one job, ...);
#  2. runs the live scenarios with every instance as three coordinator nodes on
#     it (`harness --live --live-db`: HTTP to the first node, workers spread
#     over the three);
#  3. starts three nodes with workers spread over them and paying clients
#     committing on one node and polling on another, kills one node with
#     SIGKILL under load, and checks that every acknowledged job ends completed
#     with a valid receipt, the survivors finish the dead node's jobs within its
#     lease, and every payment retried on another node gets its job
#     (coordinator/tests/cluster_kill.rs).
# Usage: scripts/pg-cluster.sh [RUNS]   (RUNS times step 3; default 1)
# BIN=DIR uses the harness and coordinator binaries in DIR (default: a debug build).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-1}
if [ -z "${BIN:-}" ]; then
  cargo build -q --workspace --bins
  BIN="${CARGO_TARGET_DIR:-target}/debug"
fi
dir=$(mktemp -d /tmp/pg-cluster.XXXXXX)
trap 'scripts/pg-throwaway.sh stop "$dir"' EXIT
url=$(scripts/pg-throwaway.sh start "$dir")
echo "throwaway PostgreSQL at $url"
export COORDINATOR_TEST_PG="$url"
echo "-- the shared-store checks, in memory and on PostgreSQL"
# --workspace, not -p coordinator: the test build's feature set, so nothing is
# rebuilt (-p alone changed dependencies' features: 78 s of CI rebuilding).
cargo test -q --workspace --lib cluster::tests
echo "-- a node survives a commit with U+0000 in every string field"
cargo test -q --workspace --test cluster_nul
echo "-- the live scenarios, every instance three nodes"
"$BIN/harness" --live --coordinator-bin "$BIN/coordinator" --live-db "$url" --live-nodes 3 scenarios/*.toml
for run in $(seq 1 "$runs"); do
  echo "-- kill -9 of one node of three under load, run $run of $runs"
  cargo test -q --workspace --test cluster_kill -- --nocapture 2>&1 | grep -v 'WARN\|^$'
done
