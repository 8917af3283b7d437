#!/usr/bin/env bash
# Conformance against coordinators the harness did not start, as a CI job
# runs it against a staging deployment: here two release coordinators are
# started by hand (one per chain), then
#   harness --target chain_a=URL,chain_b=URL --junit FILE scenarios/*.toml
# runs every live-capable scenario against them and writes JUnit XML, which a
# JUnit parser then reads back.
#
# With --pg-nodes N, each chain is N coordinator nodes on one throwaway
# PostgreSQL (a schema per chain, scripts/pg-throwaway.sh), and the harness
# targets the first node of each, as a deployment's load balancer would hand
# it one: jobs committed there run on workers of that node, and a node that
# dies has its jobs finished by the others (ARCHITECTURE.md, "Several nodes").
#
# Usage: scripts/live-target.sh BIN_DIR OUT_DIR [--pg-nodes N]
set -euo pipefail
here="$(dirname "$0")"
bin="${1:?BIN_DIR with coordinator and harness}"
out="${2:?OUT_DIR}"
nodes=1
if [ "${3:-}" = "--pg-nodes" ]; then nodes="${4:?--pg-nodes N}"; fi
mkdir -p "$out"

pids=()
pg=""
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$pg" ]; then "$here/pg-throwaway.sh" stop "$pg"; fi
}
trap cleanup EXIT

# Starts a coordinator on a free port, logging to OUT_DIR/coordinator-NAME.log.
start() {
  local network="$1" name="$2"
  "$bin/coordinator" --listen 127.0.0.1:0 --network "$network" --db "${DB:-:memory:}" "${@:3}" \
    >/dev/null 2>"$out/coordinator-$name.log" &
  pids+=("$!")
}

# The base URL coordinator NAME listens on, once it does.
url_of() {
  local log="$out/coordinator-$1.log" url
  for _ in $(seq 1 100); do
    if url=$(grep -o 'listening on http://[0-9.:]*' "$log" | head -1); then
      echo "${url#listening on }"
      return
    fi
    sleep 0.1
  done
  echo "coordinator $1 did not start: $(cat "$log")" >&2
  exit 1
}

extra=()
# Plain user names need the spec-literal mode where the coordinator has it.
if "$bin/coordinator" --help | grep -q -- '--user-auth'; then extra=(--user-auth off); fi
if [ "$nodes" = 1 ]; then
  start eip155:84532 chain_a "${extra[@]}"
  start eip155:10143 chain_b "${extra[@]}"
  a=$(url_of chain_a)
  b=$(url_of chain_b)
else
  pg=$(mktemp -d /tmp/live-target-pg.XXXXXX)
  db=$("$here/pg-throwaway.sh" start "$pg")
  for n in $(seq 1 "$nodes"); do
    DB="$db" start eip155:84532 "chain_a-$n" "${extra[@]}" --db-schema chain_a --node-id "chain_a-$n"
    DB="$db" start eip155:10143 "chain_b-$n" "${extra[@]}" --db-schema chain_b --node-id "chain_b-$n"
  done
  for n in $(seq 2 "$nodes"); do url_of "chain_a-$n" >/dev/null; url_of "chain_b-$n" >/dev/null; done
  a=$(url_of chain_a-1)
  b=$(url_of chain_b-1)
fi

"$bin/harness" --target "chain_a=$a,chain_b=$b" --junit "$out/live.xml" scenarios/*.toml

python3 - "$out/live.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == "testsuites", root.tag
cases = root.findall("./testsuite/testcase")
failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
skipped = [c for c in cases if c.find("skipped") is not None]
ran = len(cases) - len(skipped)
assert int(root.get("tests")) == len(cases), "tests count"
assert ran > 0, "no scenario ran against the target"
assert not failed, f"failed: {failed}"
print(f"JUnit: {len(cases)} cases, {ran} ran, {len(skipped)} skipped, 0 failed")
PY
