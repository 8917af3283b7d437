#!/usr/bin/env bash
# The seventh held-out set's runs: the first set's runner, with this set's
# output folder and rows file. Each batch first notes in the rows file the
# commit its build is made from (the patches apply to that commit's coordinator/).
# The release build is incremental and without debug info
# (CARGO_PROFILE_RELEASE_INCREMENTAL=true CARGO_PROFILE_RELEASE_DEBUG=0) so that
# each patch rebuilds in about a minute; neither changes what a seed draws.
#
#   benches/results/held-out-2026-12-08-seventh/run-held-out.sh SEEDS PATCH...
set -euo pipefail
here=$(dirname "$0")
rows=benches/results/held-out-2026-12-08-seventh/rows.md
( cd "$here/../../.." && echo "<!-- batch started $(date -u +%Y-%m-%dT%H:%M:%SZ) on commit $(git rev-parse HEAD), seeds 0..$1 -->" >> "$rows" )
export CARGO_PROFILE_RELEASE_INCREMENTAL=true CARGO_PROFILE_RELEASE_DEBUG=0
OUT=${OUT:-target/sabotage-held-out-7} ROWS=$rows \
  exec "$here/../held-out-2026-11-28/run-held-out.sh" "$@"
