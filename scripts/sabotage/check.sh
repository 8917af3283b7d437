#!/usr/bin/env bash
# Checks that every sabotage patch still applies to the coordinator AND
# compiles with it: a patch that applies but no longer builds leaves the
# swarm's mutation test (run.sh) silently dead. Each patch is applied to the
# work tree, checked with `cargo check`, and reverted (also on failure).
#
#   scripts/sabotage/check.sh            (every patch)
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! git diff --quiet -- coordinator; then
  echo "coordinator/ has uncommitted changes; refusing to patch it" >&2
  exit 2
fi
trap 'git checkout -q -- coordinator' EXIT
# Each patch changes a few lines of one crate: incremental checking halves
# each check (about 5 s instead of 11 s on 2 cores, for 71 patches), and its
# cache holds only the coordinator's check (CI turns it off elsewhere).
export CARGO_INCREMENTAL=1
for patch in scripts/sabotage/*.patch; do
  git apply --check "$patch"
  git apply "$patch"
  if ! cargo check -p coordinator --quiet 2>/tmp/sabotage-check.log; then
    echo "$(basename "$patch"): applies but does not compile:" >&2
    grep -E "^error" -A8 /tmp/sabotage-check.log >&2 || cat /tmp/sabotage-check.log >&2
    exit 1
  fi
  git checkout -q -- coordinator
  echo "$(basename "$patch"): applies and compiles"
done
