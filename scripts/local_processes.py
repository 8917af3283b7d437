"""What the live scripts share: the binaries of a local build, a free
loopback port, a JSON GET, a process's RSS, and waiting for a started process to be ready.

Imported by scripts/openai-sdk.py, scripts/stream-bench.py,
scripts/x402-settlement.py, scripts/router-live.py and
scripts/held_polls_memory.py (run from the
repository's root or from scripts/: Python puts the script's directory on
the import path).
"""
import json
import os
import socket
import sys
import time
import urllib.request


def default_bin(path):
    """`path` under target/release, else target/debug (release if neither)."""
    for d in ("target/release", "target/debug"):
        if os.path.exists(f"{d}/{path}"):
            return f"{d}/{path}"
    return f"target/release/{path}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def rss_kib(pid):
    """The resident set size of process `pid`, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wait_for(what, check, proc=None, seconds=20):
    """Until `check()` holds (connection errors count as not yet); exits
    the script if `proc` ends or `seconds` pass first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"{what}: the process exited")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"{what}: not within {seconds} s")
