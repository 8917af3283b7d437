#!/usr/bin/env bash
# Runs every loadgen scenario of the README's Performance section and writes
# JSON (and SVG) reports to target/loadgen/. Bounded: about four minutes.
# COMPARE_BIN=/path/to/another/coordinator also runs the latency scenarios
# against that binary (e.g. a build with TCP_NODELAY on accepted sockets).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p coordinator -p benches --bins
LG=target/release/loadgen
O=target/loadgen
mkdir -p "$O"
run() {
  local name=$1; shift
  echo "=== $name $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$LG" "$@" --out "$O/$name.json" --quiet 2>&1 | sed -n '/^loadgen/,$p'
}
run endpoints --mode endpoints --duration 3 --clients 64
run jobs-64w --mode jobs --jobs 20000 --workers 64 --clients 128
run peak-64w-512c --mode duration --duration 10 --workers 64 --clients 512 --ceiling-secs 2
run jobs-8w --mode jobs --jobs 5000 --workers 8 --clients 64 --ceiling-secs 2
run rate-64w --mode rate --duration 10 --peak-secs 5 --workers 64 --clients 256 --ceiling-secs 2
run idle-10k --mode idle --workers 10000 --hold 20 --ceiling-secs 0 --max-secs 280
run jobs-64w-memory --mode jobs --jobs 20000 --workers 64 --clients 128 --db :memory: --ceiling-secs 2
run endpoints-memory --mode endpoints --duration 3 --clients 64 --db :memory:
if [ -n "${COMPARE_BIN:-}" ]; then
  run jobs-8w-compare --mode jobs --jobs 5000 --workers 8 --clients 64 --ceiling-secs 2 --coordinator-bin "$COMPARE_BIN"
  run rate-64w-compare --mode rate --duration 10 --peak-secs 5 --workers 64 --clients 256 --ceiling-secs 2 --coordinator-bin "$COMPARE_BIN"
  run peak-64w-512c-compare --mode duration --duration 10 --workers 64 --clients 512 --ceiling-secs 2 --coordinator-bin "$COMPARE_BIN"
fi
echo "=== done $(date -u +%T)"
