#!/usr/bin/env python3
"""Acceptance of issue 30 (pay for what you get): the official x402 client
(`@x402/fetch` + `@x402/evm`, `x402/interop/pay.mjs`, unmodified) pays the
coordinator binary running `--settlement on-completion` behind a RECORDING
facilitator (an HTTP stub in this script that answers every /verify and
/settle with success and logs each one). Then, judged on that record:

  a. a paid job committed while no worker is online fails no_eligible_worker
     and its payment is never settled;
  b. a paid job with a worker online completes and is settled exactly once
     (the record's payment_transaction is the facilitator's transaction);
  c. the same payment sent again (same body, then another body) buys
     nothing and settles nothing more;
  d. a paid job cancelled while its (slow) worker runs it fails `cancelled`,
     the worker gets the cancel frame and drops the job, the payment is
     never settled; cancelling the finished job of (b) answers 409.

Needs Node and `npm ci --prefix x402/interop`. Prints the facilitator's
record and, with --out, writes it as Markdown.

Usage: scripts/x402-settlement.py [--coordinator BIN] [--worker-sim BIN] [--out FILE]
"""
import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from local_processes import default_bin, free_port, wait_for

PAY_TO = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
NETWORK = "eip155:84532"
PENDING_TIMEOUT_MS = 1500
FAST_MS = 300
SLOW_MS = 120_000
# After the last check, how long to keep watching for a late settlement.
QUIET_S = 3


def request(method, url, body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def get_json(url):
    return request("GET", url)[1]


class Facilitator:
    """Records every call; answers /verify valid and /settle success with
    a transaction derived from the authorization's nonce."""

    def __init__(self):
        self.calls = []  # (seconds since start, path, nonce)
        self.payloads = {}  # nonce -> paymentPayload as sent
        self.lock = threading.Lock()
        self.started = time.monotonic()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.record(self.path, None)
                self.answer(200, {"kinds": [{"x402Version": 2, "scheme": "exact", "network": NETWORK}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                payload = body.get("paymentPayload") or {}
                auth = (payload.get("payload") or {}).get("authorization") or {}
                nonce = (auth.get("nonce") or "").lower()
                outer.record(self.path, nonce, payload)
                if self.path == "/verify":
                    self.answer(200, {"isValid": True, "payer": auth.get("from")})
                elif self.path == "/settle":
                    tx = "0x" + hashlib.sha256(nonce.encode()).hexdigest()
                    self.answer(200, {"success": True, "transaction": tx, "network": NETWORK,
                                      "payer": auth.get("from")})
                else:
                    self.answer(404, {"error": "no such path"})

            def answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def record(self, path, nonce, payload=None):
        with self.lock:
            self.calls.append((round(time.monotonic() - self.started, 3), path, nonce))
            if nonce and payload:
                self.payloads.setdefault(nonce, payload)

    def count(self, path, nonce):
        with self.lock:
            return sum(1 for _, p, n in self.calls if p == path and n == nonce)

    def snapshot(self):
        with self.lock:
            return list(self.calls)


def pay(url, body):
    """The official client pays one commit; returns what pay.mjs printed."""
    out = subprocess.run(["node", "x402/interop/pay.mjs"], capture_output=True, text=True,
                         env={**os.environ, "X402_URL": url, "X402_BODY": json.dumps(body)}, timeout=60)
    if out.returncode != 0:
        sys.exit(f"pay.mjs failed: {out.stderr}")
    return json.loads(out.stdout)


def commit(base, fac, text):
    """A paid commit by the official client: the job, the nonce of the
    authorization it paid with (the one new /verify the commit made: the
    job record shows no payment_ref before its receipt), what pay.mjs
    printed."""
    body = {"job_type": "TASK", "user_id": "acceptance",
            "payload": {"task_type": "classify", "input": text}}
    before = len(fac.snapshot())
    paid = pay(f"{base}/v1/jobs/commit/fast", body)
    assert paid["status"] == 201, paid
    job = json.loads(paid["body"])["job_id"]
    verified = [n for _, path, n in fac.snapshot()[before:] if path == "/verify"]
    assert len(verified) == 1, f"one /verify per paid commit: {verified}"
    return job, verified[0], paid


def wait_status(base, job, statuses, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        record = get_json(f"{base}/v1/jobs/{job}")
        if record["status"] in statuses:
            return record
        time.sleep(0.05)
    sys.exit(f"job {job} not {statuses} within {seconds} s: {record}")


class Run:
    def __init__(self, args, base, port, tmp, fac):
        self.args, self.base, self.port, self.tmp, self.fac = args, base, port, tmp, fac
        self.rows = []  # (case, job, nonce, expectation)
        self.workers = []
        self.dropped = []

    def worker(self, latency_ms, seed):
        log = f"{self.tmp}/worker-{seed}.log"
        proc = subprocess.Popen(
            [self.args.worker_sim, "--coordinator", f"ws://127.0.0.1:{self.port}/v1/workers/ws",
             "--count", "1", "--seed", str(seed), "--latency-ms", str(latency_ms)],
            stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "RUST_LOG": "info"})
        self.workers.append(proc)
        return proc, log

    def stop(self, proc):
        proc.terminate()
        proc.wait()

    def no_worker(self):
        job, nonce, paid = commit(self.base, self.fac, "a: no worker online")
        assert paid["paymentResponse"] is None, "settled on completion: no PAYMENT-RESPONSE at 201"
        record = wait_status(self.base, job, {"completed", "failed"})
        assert record["status"] == "failed" and record["result"]["error"] == "no_eligible_worker", record
        assert "payment_transaction" not in record, record
        self.rows.append(("a: no worker online", job, nonce, record["result"]["error"], 0))
        print(f"a: job {job} failed no_eligible_worker; verify {self.fac.count('/verify', nonce)}, "
              f"settle {self.fac.count('/settle', nonce)}")
        return job, nonce

    def completes(self, coord):
        proc, _ = self.worker(FAST_MS, 1)
        wait_for("fast worker", lambda: get_json(f"{self.base}/v1/health")["workers_online"] == 1, coord)
        job, nonce, _ = commit(self.base, self.fac, "b: a worker online")
        record = wait_status(self.base, job, {"completed", "failed"})
        assert record["status"] == "completed", record
        tx = "0x" + hashlib.sha256(nonce.encode()).hexdigest()
        assert record.get("payment_transaction") == tx, record
        assert record["receipt"]["payment_ref"].lower() == f"x402:{nonce}", record
        self.rows.append(("b: completed", job, nonce, "completed", 1))
        print(f"b: job {job} completed; settle {self.fac.count('/settle', nonce)}, transaction {tx[:18]}…")
        self.stop(proc)
        return job, nonce

    def replays(self, case, job, nonce, text):
        """The payment of `job` sent again by hand, as a client that lost
        the answer would: with the same body it answers the same job (201,
        decision 0008: no second job, no second charge); with another body
        it is refused 402 invalid_exact_evm_nonce_already_used."""
        header = base64.b64encode(json.dumps(self.fac.payloads[nonce]).encode()).decode()
        answers = []
        for same, input_text in ((True, text), (False, "c: another body")):
            body = {"job_type": "TASK", "user_id": "acceptance",
                    "payload": {"task_type": "classify", "input": input_text}}
            status, answer = request("POST", f"{self.base}/v1/jobs/commit/fast", body,
                                     {"PAYMENT-SIGNATURE": header})
            if same:
                assert status == 201 and answer["job_id"] == job, (status, answer)
                answers.append("same body: 201, the same job")
            else:
                assert status == 402 and answer.get("error") == "invalid_exact_evm_nonce_already_used", (status, answer)
                answers.append("another body: 402 invalid_exact_evm_nonce_already_used")
        settles = self.fac.count("/settle", nonce)
        self.rows.append((f"c: {case}'s payment replayed", job, nonce, "; ".join(answers), settles))
        print(f"c: {case}'s payment replayed: {'; '.join(answers)}")

    def cancels(self, coord, finished):
        proc, log = self.worker(SLOW_MS, 2)
        wait_for("slow worker", lambda: get_json(f"{self.base}/v1/health")["workers_online"] == 1, coord)
        job, nonce, _ = commit(self.base, self.fac, "d: cancelled while it runs")
        wait_status(self.base, job, {"running", "assigned"})
        status, record = request("POST", f"{self.base}/v1/jobs/{job}/cancel")
        assert status == 200 and record["status"] == "failed", (status, record)
        assert record["result"]["error"] == "cancelled", record
        wait_for("the worker drops the cancelled job", lambda: job in open(log).read()
                 and "job_dropped" in open(log).read(), coord, seconds=10)
        dropped = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in open(log)
                   if job in line and "job_dropped" in line]
        self.dropped = dropped
        status, again = request("POST", f"{self.base}/v1/jobs/{finished}/cancel")
        assert status == 409 and again["error"] == "job_not_cancellable", (status, again)
        assert again["status"] == "completed", again
        self.rows.append(("d: cancelled while running", job, nonce, "cancelled", 0))
        print(f"d: job {job} cancelled (200 failed/cancelled); worker log: {len(dropped)} line(s) with the "
              f"cancel; cancel of b's finished job: 409 {again['error']} ({again['status']})")
        self.stop(proc)

    def judge(self):
        time.sleep(QUIET_S)
        failures = []
        for case, _, nonce, _, settles in self.rows:
            got = self.fac.count("/settle", nonce)
            if got != settles:
                failures.append(f"{case}: {got} settlements, expected {settles}")
        return failures


def markdown(run, calls, failures, metrics):
    out = ["| case | job | nonce | outcome | /verify | /settle (expected) |", "|---|---|---|---|---|---|"]
    for case, job, nonce, outcome, settles in run.rows:
        out.append(f"| {case} | {job[:8]} | {nonce[:10]}… | {outcome} | {run.fac.count('/verify', nonce)} "
                   f"| {run.fac.count('/settle', nonce)} ({settles}) |")
    out += ["", "Every call the facilitator got (seconds since it started, path, nonce):", "", "```"]
    out += [f"{at:7.3f}  {path:8} {(nonce or '-')[:18]}" for at, path, nonce in calls]
    out += ["```", "", "The slow worker's log line for the cancelled job (d):", "", "```"] + run.dropped
    out += ["```", "", "Settlement metrics after the run:", "", "```"] + metrics + ["```"]
    out += ["", "Result: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures))]
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", default=default_bin("coordinator"))
    p.add_argument("--worker-sim", default=default_bin("worker-sim"))
    p.add_argument("--out")
    args = p.parse_args()
    if not os.path.exists("x402/interop/node_modules/@x402/fetch"):
        sys.exit("the official x402 client is not installed: run `npm ci --prefix x402/interop`")
    fac = Facilitator()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="x402-settlement-")
    coord = subprocess.Popen(
        [args.coordinator, "--listen", f"127.0.0.1:{port}", "--db", ":memory:", "--network", NETWORK,
         "--payment-required", "--pay-to", PAY_TO, "--facilitator-url", fac.url,
         "--settlement", "on-completion", "--pending-timeout-ms", str(PENDING_TIMEOUT_MS),
         "--metrics-on-api"],
        stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/coordinator.log", "w"))
    run = Run(args, base, port, tmp, fac)
    try:
        wait_for("coordinator", lambda: get_json(f"{base}/v1/health")["status"] == "ok", coord)
        failed, failed_nonce = run.no_worker()
        finished, nonce = run.completes(coord)
        run.replays("a", failed, failed_nonce, "a: no worker online")
        run.replays("b", finished, nonce, "b: a worker online")
        run.cancels(coord, finished)
        failures = run.judge()
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
            metrics = [line for line in r.read().decode().splitlines()
                       if line.startswith(("payments_settlements", "payments_awaiting_settlement"))]
        text = markdown(run, fac.snapshot(), failures, metrics)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        return 0 if not failures else 1
    finally:
        for proc in run.workers + [coord]:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
        fac.server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
