#!/usr/bin/env python3
"""Issue 29, acceptance (findings 1 and 9): an honest completed result
survives the retention floods, from other addresses, and honest commits keep
getting 201 meanwhile. Against the release coordinator with default
settings (only --listen, --db and a loopback --metrics-listen to read the
kept bytes; plus --user-auth off when the binary has that flag, so the
attacker may pair its own worker to a made-up user).

The floods, all at once, for --duration seconds:
  1. own-worker outputs (127.0.0.9): the attacker pairs its own worker
     (worker-sim --backend openai, LLM_INFER only) to a made-up user and
     commits PRIVATE jobs for it; the worker's backend is a local stub that
     answers alternately ~1 MB (refused: past --output-bytes-max) and
     250 KB (kept) outputs.
  2. 422 refusals (127.0.0.10): PRIVATE commits with 200 KiB prompts for
     users with no trusted worker.
  3. big PUBLIC inputs (127.0.0.11): PUBLIC LLM_INFER commits with 200 KiB
     prompts, which only the attacker's worker serves (the honest workers
     take TASK only), answered with the same big outputs.

The honest user (127.0.0.1) first completes one TASK job and keeps its id,
then commits and long-polls a TASK job every 250 ms, and polls the first
result every 5 s. Passes when every honest commit got 201, every honest job
completed, and the first result polls 200 completed at the end.

  scripts/flood-retention.py [--duration 600] [--coordinator BIN]
                             [--worker-sim BIN] [--out FILE]
"""

import argparse
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ATTACKER, REFUSER, PUBLIC_FLOODER, HONEST = "127.0.0.9", "127.0.0.10", "127.0.0.11", "127.0.0.1"
PROMPT_BYTES = 200 * 1024
BIG_OUTPUT, KEPT_OUTPUT = 1_000_000, 250_000
THREADS_PER_FLOOD = 4


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None, source=HONEST, timeout=40):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data else {}
        conn.request(method, path, body=data, headers=headers)
        res = conn.getresponse()
        raw = res.read()
        try:
            return res.status, json.loads(raw)
        except ValueError:
            return res.status, raw.decode(errors="replace")
    finally:
        conn.close()


class Stub(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible chat completion answering big outputs."""
    calls = 0
    lock = threading.Lock()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with Stub.lock:
            Stub.calls += 1
            size = BIG_OUTPUT if Stub.calls % 2 else KEPT_OUTPUT
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "x" * size}}]})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_):
        pass


def count(counts, key):
    counts[str(key)] = counts.get(str(key), 0) + 1


def flood(stop, work):
    """Runs work() in THREADS_PER_FLOOD threads until stop; merged counts."""
    results = []
    def one():
        counts = {}
        while not stop.is_set():
            try:
                count(counts, work())
            except OSError as e:
                count(counts, type(e).__name__)
        results.append(counts)
    threads = [threading.Thread(target=one, daemon=True) for _ in range(THREADS_PER_FLOOD)]
    for t in threads:
        t.start()
    return threads, results


def merge(many):
    out = {}
    for counts in many:
        for k, v in counts.items():
            out[k] = out.get(k, 0) + v
    return out


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    out = {}
    for line in text.splitlines():
        if line.startswith(("job_bytes", "retention_deleted_jobs_total")):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def honest_job(port):
    status, body = request(port, "POST", "/v1/jobs/commit/cheap", {
        "job_type": "TASK", "user_id": "honest",
        "payload": {"task_type": "summarize", "input": "An honest text."}})
    if status != 201:
        return status, None
    job = body["job_id"]
    record = None
    for _ in range(10):
        _, record = request(port, "GET", f"/v1/jobs/{job}?wait_ms=5000")
        if isinstance(record, dict) and record.get("status") in ("completed", "failed"):
            break
    return status, (job, record.get("status") if isinstance(record, dict) else None)


def wait_ready(port, proc, workers=0):
    for _ in range(400):
        if proc.poll() is not None:
            sys.exit("coordinator exited")
        try:
            status, body = request(port, "GET", "/v1/health")
            if status == 200 and body.get("workers_online", 0) >= workers:
                return body
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"coordinator not ready with {workers} workers")


def pair_attacker(args, port, tmp, stub_port):
    """The attacker's own worker, paired to a made-up user."""
    status, body = request(port, "POST", "/v1/trust/create", {"user_id": "mallory"}, source=ATTACKER)
    if status != 201 and status != 200:
        sys.exit(f"trust/create: {status} {body}")
    key = f"{tmp}/attacker.key"
    subprocess.run([args.worker_sim, "keygen", "--key-file", key], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([args.worker_sim, "claim", "--coordinator", f"http://127.0.0.1:{port}",
                    "--code", body["pairing_code"], "--key-file", key], check=True, stdout=subprocess.DEVNULL)
    return subprocess.Popen(
        [args.worker_sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws", "--key-file", key,
         "--capabilities", "LLM_INFER", "--slots", "64", "--backend", "openai",
         "--backend-url", f"http://127.0.0.1:{stub_port}/v1"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/attacker-worker.log", "w"))


def run(args, port, metrics_port, coord, tmp, stub_port):
    honest_workers = subprocess.Popen(
        [args.worker_sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws",
         "--count", "2", "--latency-ms", "5", "--capabilities", "TASK"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/worker.log", "w"))
    procs = [honest_workers]
    wait_ready(port, coord, workers=2)
    status, first = honest_job(port)
    if status != 201 or first[1] != "completed":
        sys.exit(f"the first honest job: {status} {first}")
    first_id = first[0]
    procs.append(pair_attacker(args, port, tmp, stub_port))
    wait_ready(port, coord, workers=3)

    prompt = "x" * PROMPT_BYTES
    stop = threading.Event()
    floods = {
        "own_worker": lambda: request(port, "POST", "/v1/jobs/commit/fast", {
            "job_type": "LLM_INFER", "user_id": "mallory", "privacy_class": "PRIVATE",
            "payload": {"prompt": "big please", "max_tokens": 8}}, source=ATTACKER)[0],
        "refused_422": lambda: request(port, "POST", "/v1/jobs/commit/fast", {
            "job_type": "LLM_INFER", "user_id": f"nobody-{time.monotonic_ns()}", "privacy_class": "PRIVATE",
            "payload": {"prompt": prompt, "max_tokens": 8}}, source=REFUSER)[0],
        "big_public": lambda: request(port, "POST", "/v1/jobs/commit/cheap", {
            "job_type": "LLM_INFER", "user_id": "flooder",
            "payload": {"prompt": prompt, "max_tokens": 8}}, source=PUBLIC_FLOODER)[0],
    }
    running = {name: flood(stop, work) for name, work in floods.items()}
    honest = {"commits": {}, "jobs": {}, "first_polls": {}}
    samples = []
    started = time.monotonic()
    next_first_poll = next_sample = started
    while time.monotonic() - started < args.duration:
        try:
            status, job = honest_job(port)
        except OSError as e:
            # A dropped connection counts as a failure, not a crash.
            status, job = type(e).__name__, None
        count(honest["commits"], status)
        if job:
            count(honest["jobs"], job[1])
        now = time.monotonic()
        if now >= next_first_poll:
            try:
                s, record = request(port, "GET", f"/v1/jobs/{first_id}")
            except OSError as e:
                s, record = type(e).__name__, None
            count(honest["first_polls"], f"{s} {record.get('status') if isinstance(record, dict) else ''}")
            next_first_poll = now + 5
        if now >= next_sample:
            samples.append({"t": round(now - started), **metrics(metrics_port)})
            next_sample = now + 30
        time.sleep(0.25)
    stop.set()
    results = {}
    for name, (threads, counts) in running.items():
        for t in threads:
            t.join()
        results[name] = merge(counts)
    s, record = request(port, "GET", f"/v1/jobs/{first_id}")
    final = {"status": s, "job_status": record.get("status") if isinstance(record, dict) else None}
    samples.append({"t": round(time.monotonic() - started), **metrics(metrics_port)})
    return procs, {"floods": results, "honest": honest, "first_result_final": final,
                   "stub_calls": Stub.calls, "samples": samples}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--coordinator", default="target/release/coordinator")
    p.add_argument("--worker-sim", default="target/release/worker-sim")
    p.add_argument("--out")
    args = p.parse_args()
    port, metrics_port = free_port(), free_port()
    tmp = tempfile.mkdtemp(prefix="flood-retention-")
    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    help_text = subprocess.run([args.coordinator, "--help"], capture_output=True, text=True).stdout
    extra = ["--user-auth", "off"] if "--user-auth" in help_text else []
    cmd = [args.coordinator, "--listen", f"127.0.0.1:{port}", "--db", f"{tmp}/flood.db",
           "--metrics-listen", f"127.0.0.1:{metrics_port}", *extra]
    coord = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/coordinator.log", "w"))
    procs = []
    try:
        wait_ready(port, coord)
        procs, report = run(args, port, metrics_port, coord, tmp, stub.server_address[1])
        honest = report["honest"]
        ok = (set(honest["commits"]) == {"201"}
              and set(honest["jobs"]) == {"completed"}
              and set(honest["first_polls"]) == {"200 completed"}
              and report["first_result_final"] == {"status": 200, "job_status": "completed"})
        report.update({"command": " ".join(cmd), "duration_s": args.duration, "passed": ok,
                       "db_bytes": sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp)
                                       if f.startswith("flood.db"))})
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
        coord.terminate()
        coord.wait()
        stub.shutdown()


if __name__ == "__main__":
    sys.exit(main())
