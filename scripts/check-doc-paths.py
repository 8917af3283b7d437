#!/usr/bin/env python3
"""Fails when a Markdown file of the repository names a repository path that does not exist.

Checked: every link target `](path)` (from the file's own folder) and every backticked token that starts with one of the
repository's top-level entries (`coordinator/src/core/mod.rs`, `docs/decisions/`, ...), resolved from
the repository root or from the Markdown file's own folder. Globs (`*`, `{a,b}`) must match something.
A bare file name (`session.rs`) must be the name of some file of the repository.
URLs, absolute paths and API routes are not paths of the repository and are skipped.

    scripts/check-doc-paths.py        (exit 1 and one line per missing path)
"""
import glob
import os
import re
import subprocess
import sys

root = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                      check=True).stdout.strip()
os.chdir(root)
tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout.split()
top = {p.split("/", 1)[0] for p in tracked}
markdown = [p for p in tracked if p.endswith(".md") and "node_modules" not in p and os.path.exists(p)]
BARE = re.compile(r"^[A-Za-z0-9_-]+\.(rs|sh|py|toml|json|mjs|patch|html)$")
basenames = {os.path.basename(p) for p in tracked}
TOKEN = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.*{},-]+)+/?(:[0-9-]+)?$")


def exists(path, base, starts=None):
    path = re.sub(r":[0-9-]+$", "", path).split("#", 1)[0]
    if not path:
        return True
    for start in starts or (".", base):
        candidate = os.path.normpath(os.path.join(start, path))
        if any(c in path for c in "*{"):
            pattern = re.sub(r"\{[^}]*\}", "*", candidate)
            if glob.glob(pattern):
                return True
        elif os.path.exists(candidate):
            return True
    return False


missing = []
for md in markdown:
    base = os.path.dirname(md)
    text = open(md, encoding="utf-8").read()
    candidates = set()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        # A link resolves from the file's own folder, as every Markdown renderer reads it.
        if not re.match(r"^(https?:|mailto:|#)", target) and not exists(target, base, starts=(base,)):
            missing.append(f"{md}: links to {target}, which does not exist from {base or '.'}")
    for token in re.findall(r"`([^`\s]+)`", text):
        first = token.split("/", 1)[0]
        if TOKEN.match(token) and (first in top | {".."} or os.path.exists(os.path.join(base, first))):
            candidates.add(token)
        elif BARE.match(token) and token not in basenames:
            missing.append(f"{md}: names the file {token}, which no file of the repository is called")
    for path in sorted(candidates):
        if path.startswith("../shared/") or path.startswith("/"):
            continue
        if not exists(path, base):
            missing.append(f"{md}: names {path}, which does not exist")
for line in missing:
    print(line)
print(f"{len(markdown)} Markdown files read, {len(missing)} missing path(s)")
sys.exit(1 if missing else 0)
