#!/usr/bin/env python3
"""Memory of held job polls: RSS of a coordinator process with N idle
connections, then with a held `GET /v1/jobs/{id}?wait_ms=` on each, and
checks that one poll beyond --held-polls-max is answered at once.

Usage: scripts/held_polls_memory.py [N] [COORDINATOR_BIN]
(default 10000 and target/release/coordinator). Needs `ulimit -n` > N + 100.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request

from local_processes import rss_kib

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
BIN = sys.argv[2] if len(sys.argv) > 2 else "target/release/coordinator"
PORT = 18_000 + os.getpid() % 1000
BASE = f"http://127.0.0.1:{PORT}"


def commit():
    body = json.dumps(
        {"job_type": "TASK", "user_id": "mem",
         "payload": {"task_type": "summarize", "input": "x"}}
    ).encode()
    req = urllib.request.Request(
        f"{BASE}/v1/jobs/commit/cheap", data=body,
        headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)["job_id"]


async def main():
    proc = subprocess.Popen(
        [BIN, "--listen", f"127.0.0.1:{PORT}", "--db", ":memory:",
         "--pending-timeout-ms", "3600000",
         "--held-polls-max", str(N), "--held-polls-per-client-max", str(N)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{BASE}/v1/health").read()
                break
            except OSError:
                time.sleep(0.05)
        job = commit()
        time.sleep(0.5)
        base_kib = rss_kib(proc.pid)

        conns = []
        for i in range(N):
            conns.append(await asyncio.open_connection("127.0.0.1", PORT))
        await asyncio.sleep(2)
        idle_kib = rss_kib(proc.pid)

        request = (f"GET /v1/jobs/{job}?wait_ms=30000 HTTP/1.1\r\n"
                   f"Host: 127.0.0.1\r\n\r\n").encode()
        for _, w in conns:
            w.write(request)
        await asyncio.gather(*(w.drain() for _, w in conns))
        await asyncio.sleep(3)
        held_kib = rss_kib(proc.pid)

        # One more: beyond the bound, answered at once.
        r, w = await asyncio.open_connection("127.0.0.1", PORT)
        started = time.monotonic()
        w.write(request)
        status = await asyncio.wait_for(r.readline(), 5)
        beyond_ms = (time.monotonic() - started) * 1000
        w.close()

        print(json.dumps({
            "held_polls": N,
            "rss_base_kib": base_kib,
            "rss_idle_connections_kib": idle_kib,
            "rss_held_polls_kib": held_kib,
            "per_connection_bytes": (idle_kib - base_kib) * 1024 // N,
            "per_held_poll_bytes": (held_kib - idle_kib) * 1024 // N,
            "per_held_poll_with_connection_bytes": (held_kib - base_kib) * 1024 // N,
            "beyond_bound_status": status.decode().strip(),
            "beyond_bound_answered_ms": round(beyond_ms, 1),
        }, indent=2))
        for _, w in conns:
            w.close()
    finally:
        proc.terminate()
        proc.wait()


asyncio.run(main())
