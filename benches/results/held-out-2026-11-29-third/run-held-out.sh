#!/usr/bin/env bash
# The third held-out set's runs: the first set's runner, with this set's
# output folder and rows file.
#
#   [SCENARIOS=0] benches/results/held-out-2026-11-29-third/run-held-out.sh SEEDS PATCH...
set -euo pipefail
here=$(dirname "$0")
OUT=target/sabotage-held-out-3 ROWS=benches/results/held-out-2026-11-29-third/rows.md \
  exec "$here/../held-out-2026-11-28/run-held-out.sh" "$@"
