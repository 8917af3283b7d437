#!/usr/bin/env bash
# Checks that every sabotage patch still applies to the coordinator AND
# compiles with it: a patch that applies but no longer builds leaves the
# swarm's mutation test (run.sh) silently dead.
#
#   scripts/sabotage/check.sh           (every patch, checked in groups)
#   scripts/sabotage/check.sh --each    (every patch, one `cargo check` each)
#
# Each patch must apply alone to the clean tree (`git apply --check`). To
# compile them, the patches are stacked into groups that apply together (each
# patch in turn joins the current group if it applies on top of it: a few
# groups, 3 for 77 patches), and each group gets one `cargo check` instead of one
# per patch (CI: 267 s for 72 patches one by one). A group that compiles
# vouches for each member: every patch is written alone against main and
# breaks behaviour, not other patches, so none supplies an item another
# lacks, and a member's type error stays an error beside patches whose hunks
# it does not overlap. A group that fails is checked again one patch at a
# time, which names the patch (or passes, if only the combination clashed).
# `--each` is the exact check, for when a group's verdict is in doubt. The
# work tree is restored afterwards, also on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! git diff --quiet -- coordinator; then
  echo "coordinator/ has uncommitted changes; refusing to patch it" >&2
  exit 2
fi
trap 'git checkout -q -- coordinator' EXIT
# Each check recompiles one crate after a few changed lines: incremental
# checking halves it (about 5 s instead of 11 s on 2 cores), and its cache
# holds only the coordinator's check (CI turns it off elsewhere).
export CARGO_INCREMENTAL=1
log=$(mktemp)

compiles() {
  cargo check -p coordinator --quiet 2>"$log"
}

check_one() {
  git apply "$1"
  if ! compiles; then
    echo "$(basename "$1"): applies but does not compile:" >&2
    grep -E "^error" -A8 "$log" >&2 || cat "$log" >&2
    exit 1
  fi
  git checkout -q -- coordinator
  echo "$(basename "$1"): applies and compiles"
}

patches=(scripts/sabotage/*.patch)
for patch in "${patches[@]}"; do
  git apply --check "$patch"
done
if [ "${1:-}" = "--each" ]; then
  for patch in "${patches[@]}"; do check_one "$patch"; done
  exit 0
fi

left=("${patches[@]}")
group=0
while [ ${#left[@]} -gt 0 ]; do
  group=$((group + 1))
  members=(); rest=()
  for patch in "${left[@]}"; do
    if git apply --check "$patch" 2>/dev/null; then
      git apply "$patch"; members+=("$patch")
    else
      rest+=("$patch")
    fi
  done
  if compiles; then
    git checkout -q -- coordinator
    echo "group $group: ${#members[@]} patches apply together and compile"
  else
    git checkout -q -- coordinator
    echo "group $group: ${#members[@]} patches do not compile together; checking each alone"
    for patch in "${members[@]}"; do check_one "$patch"; done
  fi
  left=("${rest[@]+"${rest[@]}"}")
done
echo "${#patches[@]} patches apply and compile"
