#!/usr/bin/env python3
"""Issue 29's memory acceptance against the release binary: the coordinator's
RSS (from /proc) under three loads, each from loopback addresses.

1. 1,000 unfinished request heads from one address (15 KB of header each,
   never finished): held at most `--http-head-timeout-ms` (10 s), then closed.
2. A stalled worker: worker-sim paired to a user, 64 slots, stopped with
   SIGSTOP (it neither reads nor writes), fed 64 PRIVATE jobs of ~250 KB
   every 10 s for a minute. Records when the coordinator closes it.
3. 10,050 idle long polls from 10 addresses (1,005 each), then an 11th
   client's long poll, which must still be held 5 s later.

Usage:
  python3 scripts/memory-bounds.py --bin-dir target/release \\
      --out benches/results/memory-bounds.json [--coordinator-arg=--user-auth --coordinator-arg=off]

Each `--coordinator-arg` is passed to the coordinator as is (for flags that
exist at merge time, such as `--user-auth off`). Needs an open-file limit of
at least 12,000 (the script raises its own and the coordinator's soft limit
to the hard one).
"""

import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HEAD_CONNECTIONS = 1_000
HEAD_PAD_BYTES = 15_000
STALL_JOBS = 64
STALL_INPUT_BYTES = 250_000
STALL_SECONDS = 60
POLL_ADDRESSES = 10
POLLS_PER_ADDRESS = 1_005


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss(pid):
    """(VmRSS, VmHWM) in MiB."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def http(base, method, path, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def connect_from(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((ip, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def closed(s):
    """Whether the server closed `s` (reads nothing more, at once)."""
    s.setblocking(False)
    try:
        data = s.recv(65536)
        return data == b"" or b"HTTP/1.1 408" in data or b"HTTP/1.1 431" in data
    except BlockingIOError:
        return False
    except OSError:
        return True


def load_heads(pid, port, samples):
    socks = []
    for _ in range(HEAD_CONNECTIONS):
        try:
            s = connect_from("127.0.0.1", port)
            s.sendall(b"GET /v1/health HTTP/1.1\r\nhost: x\r\nx-pad: " + b"a" * HEAD_PAD_BYTES)
            socks.append(s)
        except OSError:
            pass
    sent_at = time.time()
    peak = rss(pid)
    for _ in range(8):
        time.sleep(1)
        peak = max(peak, rss(pid))
        samples.append(("heads", rss(pid)))
    time.sleep(max(0, sent_at + 13 - time.time()))
    closed_count = sum(1 for s in socks if closed(s))
    for s in socks:
        s.close()
    return {
        "connections_opened": len(socks),
        "rss_mib_during": peak[0],
        "closed_by_coordinator_within_13_s": closed_count,
    }


def load_stalled_worker(pid, base, port, bin_dir, samples):
    tmp = tempfile.mkdtemp()
    key = os.path.join(tmp, "worker.key")
    sim = os.path.join(bin_dir, "worker-sim")
    subprocess.run([sim, "keygen", "--key-file", key], check=True, capture_output=True)
    status, created = http(base, "POST", "/v1/trust/create", {"user_id": "mem-user"})
    assert status == 201, (status, created)
    subprocess.run([sim, "claim", "--coordinator", base, "--code", created["pairing_code"],
                    "--key-file", key], check=True, capture_output=True)
    worker = subprocess.Popen([sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws",
                               "--key-file", key, "--slots", "64", "--capabilities", "TASK",
                               "--latency-ms", "60000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 20
    while http(base, "GET", "/v1/health")[1]["workers_online"] < 1:
        assert time.time() < deadline, "worker-sim did not log in"
        time.sleep(0.2)
    os.kill(worker.pid, signal.SIGSTOP)
    stopped_at = time.time()
    closed_after = None
    statuses = {}
    peak = rss(pid)
    job = {"job_type": "TASK", "user_id": "mem-user", "privacy_class": "PRIVATE",
           "payload": {"task_type": "summarize", "input": "x" * STALL_INPUT_BYTES}}
    while time.time() < stopped_at + STALL_SECONDS:
        round_start = time.time()
        for _ in range(STALL_JOBS):
            status, _ = http(base, "POST", "/v1/jobs/commit/fast", job)
            statuses[status] = statuses.get(status, 0) + 1
        while time.time() < round_start + 10:
            if closed_after is None and http(base, "GET", "/v1/health")[1]["workers_online"] == 0:
                closed_after = round(time.time() - stopped_at, 1)
            peak = max(peak, rss(pid))
            samples.append(("stalled", rss(pid)))
            time.sleep(0.5)
    worker.kill()
    worker.wait()
    return {
        "worker_closed_after_s": closed_after,
        "commit_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "rss_mib_during": peak[0],
    }


def load_polls(pid, base, port, samples):
    status, committed = http(base, "POST", "/v1/jobs/commit/fast",
                             {"job_type": "TASK", "user_id": "poller",
                              "payload": {"task_type": "summarize", "input": "x"}})
    assert status == 201, (status, committed)
    request = f"GET /v1/jobs/{committed['job_id']}?wait_ms=30000 HTTP/1.1\r\nhost: x\r\n\r\n".encode()
    socks = []
    refused = 0
    started = time.time()
    for a in range(POLL_ADDRESSES):
        ip = f"127.0.0.{a + 2}"
        for _ in range(POLLS_PER_ADDRESS):
            try:
                s = connect_from(ip, port)
                s.sendall(request)
                socks.append(s)
            except OSError:
                refused += 1
    time.sleep(1)
    eleventh = connect_from(f"127.0.0.{POLL_ADDRESSES + 2}", port)
    eleventh.sendall(request)
    peak = rss(pid)
    for _ in range(5):
        time.sleep(1)
        peak = max(peak, rss(pid))
        samples.append(("polls", rss(pid)))
    eleventh.setblocking(False)
    try:
        answered = eleventh.recv(65536) != b""
    except BlockingIOError:
        answered = False
    answered_at_once = 0
    for s in socks:
        s.setblocking(False)
        try:
            if s.recv(65536):
                answered_at_once += 1
        except (BlockingIOError, OSError):
            pass
        s.close()
    eleventh.close()
    return {
        "polls_sent": len(socks),
        "connections_refused": refused,
        "seconds_to_send": round(time.time() - started, 1),
        "answered_within_6_s": answered_at_once,
        "eleventh_client_still_held_after_5_s": not answered,
        "rss_mib_during": peak[0],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--port", type=int, default=18931)
    ap.add_argument("--out", default="benches/results/memory-bounds.json")
    ap.add_argument("--coordinator-arg", action="append", default=[])
    args = ap.parse_args()
    raise_nofile()
    base = f"http://127.0.0.1:{args.port}"
    cmd = [os.path.join(args.bin_dir, "coordinator"), "--listen", f"127.0.0.1:{args.port}",
           "--network", "eip155:84532", "--db", ":memory:"] + args.coordinator_arg
    coordinator = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   preexec_fn=raise_nofile)
    try:
        deadline = time.time() + 20
        while True:
            try:
                http(base, "GET", "/v1/health", timeout=1)
                break
            except OSError:
                assert time.time() < deadline, "the coordinator did not start"
                time.sleep(0.2)
        pid = coordinator.pid
        samples = []
        report = {"command": " ".join(cmd), "baseline_rss_mib": rss(pid)[0]}
        report["unfinished_heads"] = load_heads(pid, args.port, samples)
        report["after_heads_rss_mib"] = rss(pid)[0]
        report["stalled_worker"] = load_stalled_worker(pid, base, args.port, args.bin_dir, samples)
        report["after_stall_rss_mib"] = rss(pid)[0]
        report["long_polls"] = load_polls(pid, base, args.port, samples)
        report["peak_rss_mib_vmhwm"] = rss(pid)[1]
        report["load_average"] = os.getloadavg()
    finally:
        coordinator.terminate()
        try:
            coordinator.wait(timeout=40)
        except subprocess.TimeoutExpired:
            coordinator.kill()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
