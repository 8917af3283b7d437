#!/usr/bin/env python3
"""The renovation's two rules, checked in CI (issue 32):

1. No import cycle among the top-level modules of `coordinator/src` and `harness/src` (a file or a
   folder directly under src/ is one module; its references are `crate::NAME` paths and the names in
   `use crate::{...}` groups; inline `#[cfg(test)] mod tests` is left out).
2. No non-test function over 70 physical lines (signature to closing brace) in any crate's src/, bin/,
   examples/ or benches/, except those listed under "## Long functions" in ARCHITECTURE.md as
   "- `path/to/file.rs` `name`: reason" (at most 8; a listed function that is no longer long fails too,
   so the list stays current).

    python3 scripts/check-layers.py              (exit 1 and one line per problem)
    python3 scripts/check-layers.py --self-test  (the checks catch a planted cycle and a long function)
"""
import os
import re
import sys

LIMIT_LINES = 70
ALLOWED_MAX = 8
LAYERED = ["coordinator", "harness"]
root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.chdir(root)


def module_edges(src):
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry in ("main.rs", "lib.rs"):
            continue
        if os.path.isdir(path):
            mods[entry] = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
        elif entry.endswith(".rs"):
            mods.setdefault(entry[:-3], []).append(path)
    edges = {m: set() for m in mods}
    for m, files in mods.items():
        for f in files:
            text = open(f, encoding="utf-8").read()
            text = re.sub(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{.*", "", text, flags=re.S)
            names = set(re.findall(r"crate::([a-z_][a-z0-9_]*)", text))
            for group in re.findall(r"use\s+crate::\{([^;]*)\};", text, flags=re.S):
                names |= set(re.findall(r"(?:^|[,{\s])([a-z_][a-z0-9_]*)\s*(?:::|,|\}|$)", group))
            edges[m] |= {n for n in names if n in mods and n != m}
    return edges


def cycles(edges):
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return comps


def blank_literals(src):
    """Comments, strings and chars become spaces (newlines kept), so braces inside them do not count."""
    out, i, n = [], 0, len(src)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
        elif re.match(r'b?r#*"', src[i:i + 8]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
        elif src[i] == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
        elif src[i] == "'" and re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12]):
            j = i + len(re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12]).group(0))
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


def matching_brace(s, start):
    depth = 0
    for k in range(start, len(s)):
        if s[k] == "{":
            depth += 1
        elif s[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(s) - 1


def long_functions(path):
    s = blank_literals(open(path, encoding="utf-8").read())
    tests = [(m.end() - 1, matching_brace(s, m.end() - 1))
             for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", s)]
    found = []
    for m in re.finditer(r"\bfn\s+(\w+)", s):
        pos = m.start()
        if any(a <= pos <= b for a, b in tests):
            continue
        if re.search(r"#\[(tokio::)?test[^\]]*\][^{};]*$", s[max(0, pos - 300):pos]):
            continue
        k, depth = m.end(), 0
        while k < len(s):
            ch = s[k]
            if ch in "(<[":
                depth += 1
            elif ch in ")>]":
                depth -= 1
            elif ch == ";" and depth <= 0:
                break
            elif ch == "{" and depth <= 0:
                break
            k += 1
        if k >= len(s) or s[k] != "{":
            continue
        first = s.count("\n", 0, pos) + 1
        last = s.count("\n", 0, matching_brace(s, k)) + 1
        if last - first + 1 > LIMIT_LINES:
            found.append((path, m.group(1), last - first + 1))
    return found


def rust_files():
    for top in sorted(os.listdir(".")):
        if not os.path.isfile(os.path.join(top, "Cargo.toml")):
            continue
        for d, dirs, fs in os.walk(top):
            dirs[:] = [x for x in dirs if x not in ("target", "tests", "node_modules")]
            for f in sorted(fs):
                if f.endswith(".rs") and f != "tests.rs":
                    yield os.path.join(d, f)


def allowed_list():
    text = open("ARCHITECTURE.md", encoding="utf-8").read()
    section = text.split("## Long functions", 1)[1] if "## Long functions" in text else ""
    section = section.split("\n## ", 1)[0]
    return set(re.findall(r"^- `([^`]+\.rs)` `(\w+)`", section, flags=re.M))


def self_test():
    """Plants a cycle and a long function in a scratch crate: both must be found, and a clean
    layering, a test function and a long function inside `#[cfg(test)]` must not be."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "low"))
        files = {
            "lib.rs": "pub mod high;\npub mod low;\npub mod side;\n",
            "high.rs": "use crate::low::Thing;\n",
            "low/mod.rs": "use crate::{side, high::Up};\n",
            "side.rs": "//! no imports\n",
        }
        for name, text in files.items():
            with open(os.path.join(src, name), "w", encoding="utf-8") as f:
                f.write(text)
        assert cycles(module_edges(src)) == [["high", "low"]], cycles(module_edges(src))
        with open(os.path.join(src, "low/mod.rs"), "w", encoding="utf-8") as f:
            f.write("use crate::side;\n")
        assert cycles(module_edges(src)) == [], "a one-way import is no cycle"
        body = "    let x = \"}\"; // }\n" * LIMIT_LINES
        long_file = os.path.join(src, "long.rs")
        with open(long_file, "w", encoding="utf-8") as f:
            f.write(f"fn long() {{\n{body}}}\n#[test]\nfn long_test() {{\n{body}}}\n"
                    f"#[cfg(test)]\nmod tests {{\n    fn helper() {{\n{body}    }}\n}}\n")
        found = long_functions(long_file)
        assert [(name, lines) for _, name, lines in found] == [("long", LIMIT_LINES + 2)], found
    print("check-layers self-test: a planted cycle and a long function are found")


if "--self-test" in sys.argv:
    self_test()
    sys.exit(0)

problems = []
for crate in LAYERED:
    for comp in cycles(module_edges(os.path.join(crate, "src"))):
        problems.append(f"{crate}/src: import cycle among {' '.join(comp)}")
allowed = allowed_list()
long = [f for path in rust_files() for f in long_functions(path)]
seen = set()
for path, name, lines in long:
    seen.add((path, name))
    if (path, name) not in allowed:
        problems.append(f"{path} `{name}` is {lines} lines (limit {LIMIT_LINES}; list it in ARCHITECTURE.md with its reason, or split it)")
for path, name in sorted(allowed - seen):
    problems.append(f"ARCHITECTURE.md lists `{path}` `{name}` as long, but it is not (remove it from the list)")
if len(allowed) > ALLOWED_MAX:
    problems.append(f"ARCHITECTURE.md lists {len(allowed)} long functions; at most {ALLOWED_MAX}")
for p in problems:
    print(p)
print(f"layers: {len(LAYERED)} crates checked for cycles; {len(long)} functions over {LIMIT_LINES} lines "
      f"({len(allowed)} listed); {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
