#!/usr/bin/env bash
# scripts/sabotage/run.sh's steps, one build per patch: the "passes on main"
# replay uses the branch's own unpatched release binary, copied before the
# first patch (MAIN_HARNESS, by default /tmp/harness-h4id-main), instead of a
# rebuild after each revert. Run from the repository (kept here after the run:
# only the `cd` and MAIN_HARNESS differ from the copy that ran, in /tmp).
#
#   measure.sh PATCH-NAME...      (names of scripts/sabotage/*.patch)
set -euo pipefail
cd "$(dirname "$0")/../../.."
git diff --quiet -- coordinator || { echo "coordinator dirty" >&2; exit 2; }
out=target/sabotage
summary=$out/summary-h4id.md
mkdir -p $out
echo "| sabotage | caught | invariant | first failing seed | shrunk lines | fails on sabotage | passes on main | swarm wall |" > $summary
for name in "$@"; do
  patch=scripts/sabotage/$name.patch
  dir=$out/$name; rm -rf $dir; mkdir -p $dir
  echo "== $name $(date -u +%T)"
  git apply $patch
  trap "git apply -R $patch 2>/dev/null || true" EXIT
  cargo build -q --release --bin harness
  echo "built $(date -u +%T)"
  start=$(date +%s)
  set +e
  nice -n 5 target/release/harness swarm --seeds 0..2000 --fail-fast --out $dir > $dir/swarm.txt 2>&1
  set -e
  wall=$(( $(date +%s) - start ))
  shrunk=$(ls $dir/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; inv=-; ran=-; lines=-; fails=-; passes=-
  if [ -n "$shrunk" ]; then
    caught=yes
    inv=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' $shrunk)
    target/release/harness $shrunk > $dir/replay-sabotaged.txt 2>&1 && fails=no || fails=yes
    ${MAIN_HARNESS:-/tmp/harness-h4id-main} $shrunk > $dir/replay-main.txt 2>&1 && passes=yes || passes=no
  fi
  git apply -R $patch
  trap - EXIT
  echo "| $name | $caught | $inv | $ran | $lines | $fails | $passes | ${wall}s |" | tee -a $summary
done
cat $summary
