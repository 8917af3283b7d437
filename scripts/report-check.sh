#!/usr/bin/env bash
# Loads the harness report (report.html, written by `harness --out DIR`) in
# headless Chromium and fails unless every scenario of DIR/summary.json was
# rendered as a timeline with no error on the page. Keeps a screenshot in
# DIR/report.png. Installs Debian's chromium when it is missing.
#
# Usage: scripts/report-check.sh [DIR]   (default: target/harness)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-${CARGO_TARGET_DIR:-target}/harness}"
report="$dir/report.html"
if [ ! -f "$report" ] || [ ! -f "$dir/summary.json" ]; then
  echo "error: no $report or $dir/summary.json; run harness --out $dir first" >&2
  exit 2
fi

browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
  echo "== installing Debian's chromium (for the report check)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  browser="$(command -v chromium)"
fi

url="file://$(realpath "$report")"
# A fresh profile each run; no first-run UI, extensions or network services.
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --disable-gpu --no-sandbox --hide-scrollbars --no-first-run
  --disable-extensions --disable-background-networking --user-data-dir="$profile"
  --enable-logging=stderr --v=0 --virtual-time-budget=10000)

dom="$dir/report.dom.html"
log="$dir/chromium.log"
"$browser" "${flags[@]}" --dump-dom "$url" >"$dom" 2>"$log"
"$browser" "${flags[@]}" --window-size=1600,1000 --screenshot="$dir/report.png" "$url" \
  >/dev/null 2>>"$log"

python3 - "$dir/summary.json" "$dom" "$log" <<'EOF'
import json, re, sys

summary_path, dom_path, log_path = sys.argv[1:4]
want = len(json.load(open(summary_path)))
dom = open(dom_path, encoding="utf-8").read()
log = open(log_path, encoding="utf-8", errors="replace").read()
body = re.search(r"<body([^>]*)>", dom)
attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', body.group(1))) if body else {}
problems = []
if attrs.get("errors") != "0":
    problems.append(f"page errors: data-errors={attrs.get('errors')!r}")
if attrs.get("scenarios") != str(want) or attrs.get("rendered") != str(want):
    problems.append(f"want {want} scenarios rendered, body says {attrs}")
sections = len(re.findall(r'<section class="scenario ', dom))
timelines = len(re.findall(r'<svg [^>]*aria-label="timeline of ', dom))
if sections != want or timelines != want:
    problems.append(f"{sections} scenario sections and {timelines} timelines in the DOM, want {want}")
# Console output of any kind (the page logs nothing) and uncaught exceptions
# reach Chromium's log.
console = [l for l in log.splitlines() if "CONSOLE" in l or "Uncaught" in l]
if console:
    problems.append("console output:\n  " + "\n  ".join(console[:10]))
if problems:
    print("report check FAILED:\n- " + "\n- ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"report check: {want} scenarios rendered, {attrs.get('failed')} failed, no page errors")
EOF
echo "screenshot: $dir/report.png"
