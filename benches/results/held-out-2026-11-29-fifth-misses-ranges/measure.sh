#!/usr/bin/env bash
# Held-out set 5's last three misses on the merged main (71d38fe, run in a
# worktree of it): one sabotaged release build per patch (reverted after),
# then each binary's swarm --seeds 0..2000 --fail-fast --jobs 1, its shrunk
# file replayed on it and on main's unpatched build (MAIN_HARNESS).
#
#   MAIN_HARNESS=/tmp/harness-merged measure.sh PATCH-NAME...
set -euo pipefail
cd "$(dirname "$0")/../../.."
main=${MAIN_HARNESS:?}
out=${OUT:-target/sabotage}
mkdir -p $out
for name in "$@"; do
  patch=scripts/sabotage/$name.patch
  echo "== build $name $(date -u +%T)"
  git apply $patch
  trap "git apply -R $patch 2>/dev/null || true" EXIT
  cargo build -q --release --bin harness
  cp target/release/harness /tmp/m5-harness-$name
  git apply -R $patch
  trap - EXIT
done
for name in "$@"; do
  bin=/tmp/m5-harness-$name
  dir=$out/$name; rm -rf $dir; mkdir -p $dir
  echo "== swarm $name $(date -u +%T)"
  start=$(date +%s)
  set +e
  prlimit --as=8000000000 $bin swarm --seeds 0..2000 --fail-fast --jobs 1 --out $dir > $dir/swarm.txt 2>&1
  set -e
  wall=$(( $(date +%s) - start ))
  shrunk=$(ls $dir/swarm-*.toml 2>/dev/null | head -1 || true)
  caught=no; inv=-; ran=-; lines=-; fails=-; passes=-
  if [ -n "$shrunk" ]; then
    caught=yes
    inv=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed [0-9]+: //')
    ran=$(grep -m1 '^FAILED seed' $dir/swarm.txt | sed -E 's/^FAILED seed ([0-9]+):.*/\1/')
    lines=$(grep -cv '^\s*$' $shrunk)
    $bin $shrunk > $dir/replay-sabotaged.txt 2>&1 && fails=no || fails=yes
    $main $shrunk > $dir/replay-main.txt 2>&1 && passes=yes || passes=no
  fi
  echo "| $name | $caught | $inv | $ran | $lines | $fails | $passes | ${wall}s |" | tee -a $out/summary.md
done
