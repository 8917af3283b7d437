#!/usr/bin/env python3
"""Streaming, measured (issue 31 #7): time to first token against a job's
total time, and the coordinator's memory while 1,000 readers of job event
streams never read.

Phase 1 (time to first token): the coordinator binary and worker-sim
workers that stream (`--stream true`) and take --latency-ms a job. Each of
--jobs LLM jobs is committed at FAST and read through
`GET /v1/jobs/{id}/events`; its time to first token is from the commit's
request to the first `delta` event, its total time from the commit's request
to the final `job` event. --concurrency jobs run at once (at most the
workers' slots, so no job queues). Prints p50 and p99 of both and of their
ratio.

Phase 2 (slow readers): --slow-jobs LLM jobs that take --slow-latency-ms, with outputs of about
8 x --word-bytes,
each followed by --readers / --slow-jobs event streams whose sockets have
a 4 KiB receive buffer and are not read for --hold-s seconds. The
coordinator's RSS is sampled before the readers, every second while they
hold, and after they are closed. Then each reader reads what it was sent:
its deltas must join to its job's output (a reader holds a cursor, not a
buffer, so a slow reader misses nothing; decision 0023).

Passes when every reader's deltas join and the peak RSS stays under
--rss-max-mib (64, the bound docs/operations.md states).

Usage: scripts/stream-bench.py [--coordinator BIN] [--worker-sim BIN] [--out FILE]
Needs `ulimit -n` above --readers + 200.
"""
import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from local_processes import default_bin, free_port, get_json, rss_kib, wait_for

HEADERS_END = b"\r\n\r\n"


def commit(base, index, max_tokens, word_bytes=0):
    """Commits an LLM job. The simulated worker's answer echoes the first
    eight words of the prompt, so words of `word_bytes` make it that long."""
    prompt = f"Tell story {index} about rivers"
    if word_bytes:
        prompt = " ".join(c * word_bytes for c in "abcdefgh") + f" {index}"
    body = json.dumps({"job_type": "LLM_INFER", "user_id": "bench",
                       "payload": {"prompt": prompt, "max_tokens": max_tokens}}).encode()
    req = urllib.request.Request(f"{base}/v1/jobs/commit/fast", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["job_id"]


def open_events(port, job, rcvbuf=None):
    """A socket that has asked for the job's events (nothing read yet)."""
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: bench\r\n"
              "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode())
    return s


class Events:
    """Server-sent events read off a socket as they come (chunked or not:
    the chunk-size lines are not `event:`/`data:` lines and are skipped)."""

    def __init__(self, sock):
        self.sock, self.buf, self.head_done = sock, b"", False

    def __iter__(self):
        event, data = None, []
        while True:
            while b"\n" not in self.buf:
                more = self.sock.recv(65536)
                if not more:
                    return
                self.buf += more
            line, self.buf = self.buf.split(b"\n", 1)
            line = line.rstrip(b"\r").decode()
            if not self.head_done:
                self.head_done = line == ""
                continue
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and event:
                yield event, "\n".join(data)
                event, data = None, []


def one_job(base, port, index, max_tokens):
    started = time.monotonic()
    job = commit(base, index, max_tokens)
    first, pieces, record = None, [], None
    with open_events(port, job) as s:
        for event, data in Events(s):
            if event == "delta":
                first = first or time.monotonic()
                pieces.append(json.loads(data)["text"])
            elif event == "restart":
                pieces = []
            elif event == "job":
                record = json.loads(data)
                break
    ended = time.monotonic()
    assert record and record["status"] == "completed", record
    assert "".join(pieces) == record["result"]["output"], "deltas join to the output"
    return {"ttft_s": first - started, "total_s": ended - started, "deltas": len(pieces)}


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def summary(values):
    return {"p50": round(statistics.median(values), 3), "p99": round(percentile(values, 99), 3),
            "max": round(max(values), 3)}


def phase_ttft(base, port, jobs, concurrency, max_tokens):
    results, lock, next_index = [], threading.Lock(), iter(range(jobs))

    def run():
        for index in next_index:
            r = one_job(base, port, index, max_tokens)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=run) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == jobs, f"{len(results)} of {jobs} jobs measured"
    return {"jobs": jobs, "concurrency": concurrency,
            "ttft_s": summary([r["ttft_s"] for r in results]),
            "total_s": summary([r["total_s"] for r in results]),
            "ttft_share": summary([r["ttft_s"] / r["total_s"] for r in results]),
            "deltas_per_job": summary([r["deltas"] for r in results])}


def phase_slow_readers(base, port, pid, args):
    time.sleep(1)
    before_kib = rss_kib(pid)
    jobs = [commit(base, 10_000 + i, 64, args.word_bytes) for i in range(args.slow_jobs)]
    time.sleep(0.5)
    with_jobs_kib = rss_kib(pid)
    per_job = args.readers // args.slow_jobs
    readers = [(job, open_events(port, job, rcvbuf=4096)) for job in jobs for _ in range(per_job)]
    samples = []
    for _ in range(args.hold_s):
        time.sleep(1)
        samples.append(rss_kib(pid))
    joined_ok = 0
    outputs = {}
    for job, s in readers:
        s.settimeout(args.slow_latency_ms / 1000 + 30)
        pieces = []
        for event, data in Events(s):
            if event == "delta":
                pieces.append(json.loads(data)["text"])
            elif event == "restart":
                pieces = []
            elif event == "job":
                outputs[job] = json.loads(data)["result"]["output"]
                break
        s.close()
        joined_ok += "".join(pieces) == outputs.get(job)
    time.sleep(1)
    return {"readers": len(readers), "jobs": len(jobs), "hold_s": args.hold_s,
            "output_bytes": max(len(o.encode()) for o in outputs.values()),
            "rss_before_kib": before_kib, "rss_with_jobs_kib": with_jobs_kib,
            "rss_peak_kib": max(samples), "rss_after_kib": rss_kib(pid),
            "rss_added_by_readers_kib": max(samples) - with_jobs_kib,
            "readers_whose_deltas_join": joined_ok}


def start(args, port, tmp, latency_ms, count):
    base = f"http://127.0.0.1:{port}"
    coord = subprocess.Popen(
        [args.coordinator, "--listen", f"127.0.0.1:{port}", "--db", ":memory:",
         "--held-streams-max", str(args.readers + 100),
         "--held-streams-per-client-max", str(args.readers + 100)],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/coordinator-{port}.log", "w"))
    wait_for("coordinator", lambda: get_json(f"{base}/v1/health")["status"] == "ok", coord, 30)
    worker = subprocess.Popen(
        [args.worker_sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws",
         "--count", str(count), "--slots", "4", "--seed", "1", "--latency-ms", str(latency_ms),
         "--stream", "true"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/worker-{port}.log", "w"))
    wait_for("workers", lambda: get_json(f"{base}/v1/health")["workers_online"] == count, coord, 30)
    return base, coord, worker


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", default=default_bin("coordinator"))
    p.add_argument("--worker-sim", default=default_bin("worker-sim"))
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--latency-ms", type=int, default=1500)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--readers", type=int, default=1000)
    p.add_argument("--slow-jobs", type=int, default=10)
    p.add_argument("--slow-latency-ms", type=int, default=40_000)
    p.add_argument("--hold-s", type=int, default=20)
    p.add_argument("--word-bytes", type=int, default=16_384)
    p.add_argument("--rss-max-mib", type=int, default=64,
                   help="the documented bound: the coordinator's peak RSS with the readers held")
    p.add_argument("--out")
    args = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="stream-bench-")
    report = {"command": " ".join(sys.argv)}
    for phase in ("ttft", "slow_readers"):
        port = free_port()
        latency = args.latency_ms if phase == "ttft" else args.slow_latency_ms
        count = -(-args.concurrency // 4) if phase == "ttft" else -(-args.slow_jobs // 4)
        base, coord, worker = start(args, port, tmp, latency, count)
        try:
            if phase == "ttft":
                report[phase] = phase_ttft(base, port, args.jobs, args.concurrency, args.max_tokens)
            else:
                report[phase] = phase_slow_readers(base, port, coord.pid, args)
        finally:
            for proc in (worker, coord):
                proc.terminate()
                proc.wait()
        print(json.dumps({phase: report[phase]}, indent=2), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(report, indent=2) + "\n")
    slow = report["slow_readers"]
    passed = (slow["readers_whose_deltas_join"] == slow["readers"]
              and slow["rss_peak_kib"] <= args.rss_max_mib * 1024)
    print(f"{slow['readers']} slow readers: peak RSS {slow['rss_peak_kib'] / 1024:.1f} MiB "
          f"(bound {args.rss_max_mib} MiB), {slow['readers_whose_deltas_join']} joined: "
          f"{'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
