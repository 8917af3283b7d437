#!/usr/bin/env bash
# The fifth held-out set's runs: the first set's runner, with this set's
# output folder and rows file. Each batch first notes in the rows file the
# commit its build is made from (the patches apply to that commit's coordinator/).
#
#   [SCENARIOS=0] benches/results/held-out-2026-11-29-fifth/run-held-out.sh SEEDS PATCH...
set -euo pipefail
here=$(dirname "$0")
rows=benches/results/held-out-2026-11-29-fifth/rows.md
( cd "$here/../../.." && echo "<!-- batch started $(date -u +%Y-%m-%dT%H:%M:%SZ) on commit $(git rev-parse HEAD), seeds 0..$1 -->" >> "$rows" )
OUT=target/sabotage-held-out-5 ROWS=$rows \
  exec "$here/../held-out-2026-11-28/run-held-out.sh" "$@"
