#!/usr/bin/env python3
"""Acceptance of issue 30, item 4, live: the router example
(router/examples/route.rs) against the coordinator binary whose only
worker (worker-sim) takes 120 s per job, with a hosted-provider stub
(`worker-sim stub-provider --kind openai`) behind it.

  call 1: the coordinator job does not finish within ROUTER_LLM_TIMEOUT_MS;
          the router cancels it (the attempts list says `cancel: cancelled`,
          the job reads failed/cancelled, the worker drops it on the cancel
          frame), then answers from the hosted stub;
  then the coordinator is killed;
  calls 2 and 3: the breaker (ROUTER_BREAKER_FAILURES_MAX=1) skips the dead
          coordinator for its cooldown (`skipped: chain_a's coordinator kept
          failing`) and the hosted stub answers.

Takes a few seconds. Prints the transcript (the example's stderr); with
--out writes it with the checks as Markdown.

Usage: scripts/router-live.py [--coordinator BIN] [--worker-sim BIN] [--route BIN] [--out FILE]
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

from local_processes import default_bin, free_port, get_json, wait_for

TIMEOUT_MS = 1500
COOLDOWN_MS = 60_000


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", default=default_bin("coordinator"))
    p.add_argument("--worker-sim", default=default_bin("worker-sim"))
    p.add_argument("--route", default=default_bin("examples/route"))
    p.add_argument("--out")
    args = p.parse_args()
    port, stub_port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="router-live-")
    procs = []

    def start(cmd, log, env=None):
        proc = subprocess.Popen(cmd, stdout=open(f"{tmp}/{log}", "w"), stderr=subprocess.STDOUT,
                                env={**os.environ, "RUST_LOG": "info", **(env or {})})
        procs.append(proc)
        return proc

    try:
        coord = start([args.coordinator, "--listen", f"127.0.0.1:{port}", "--db", ":memory:"],
                      "coordinator.log")
        wait_for("coordinator", lambda: get_json(f"{base}/v1/health")["status"] == "ok")
        start([args.worker_sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws",
               "--count", "1", "--seed", "3", "--latency-ms", "120000"], "worker.log")
        wait_for("worker", lambda: get_json(f"{base}/v1/health")["workers_online"] == 1)
        start([args.worker_sim, "stub-provider", "--kind", "openai", "--listen",
               f"127.0.0.1:{stub_port}", "--api-key", "test-key"], "stub.log")
        wait_for("hosted stub", lambda: socket.create_connection(("127.0.0.1", stub_port), 1).close() or True)
        env = {
            **os.environ,
            # The attempts lines say what the adapter warnings would.
            "RUST_LOG": "error",
            "COORDINATOR_URL_CHAIN_A": base,
            "OPENAI_API_KEY": "test-key",
            "OPENAI_BASE_URL": f"http://127.0.0.1:{stub_port}",
            "PREFERRED_HOSTED_PROVIDER": "provider_a",
            "ROUTER_LLM_TIMEOUT_MS": str(TIMEOUT_MS),
            "ROUTER_POLL_INTERVAL_MS": "100",
            "ROUTER_BREAKER_FAILURES_MAX": "1",
            "ROUTER_BREAKER_COOLDOWN_MS": str(COOLDOWN_MS),
        }
        router = subprocess.Popen(
            [args.route, "--repeat", "3", "--pause-ms", "1000", "llm", "Why is the sky blue?",
             "--max-tokens", "16", "--user-id", "router-live"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(router)
        transcript, job, record = [], None, None
        for line in router.stderr:
            transcript.append(line.rstrip("\n"))
            found = re.search(r"gave up on job ([0-9a-f-]{36})", line)
            if found and job is None:
                job = found.group(1)
            if "answered" in line and coord.poll() is None:
                # Call 1 ended: read what became of the abandoned job, then
                # kill the coordinator before call 2 (1 s later).
                record = get_json(f"{base}/v1/jobs/{job}") if job else None
                coord.kill()
                coord.wait()
                transcript.append("(script: coordinator killed)")
        stdout, _ = router.communicate()
        worker_log = open(f"{tmp}/worker.log").read()
        checks = judge(transcript, job, record, worker_log, router.returncode)
        dropped = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in worker_log.splitlines()
                   if job and job in line and "job_dropped" in line]
        text = report(transcript, record, dropped, checks, stdout)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)
        return 0 if all(ok for ok, _ in checks) else 1
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()


def judge(transcript, job, record, worker_log, code):
    calls = "\n".join(transcript).split("call ")[1:]
    dropped = job is not None and any(job in line and "job_dropped" in line for line in worker_log.splitlines())
    return [
        (code == 0, "the example exits 0 (every call answered)"),
        (len(calls) == 3, "three calls"),
        (job is not None and "cancel: cancelled" in calls[0], "call 1: the coordinator job is given up on and cancelled"),
        (record is not None and record["status"] == "failed" and record["result"]["error"] == "cancelled",
         "call 1: the abandoned job reads failed / cancelled"),
        (dropped, "call 1: the worker got the cancel frame and dropped the job"),
        (calls[0].index("cancel: cancelled") < calls[0].index("answered") if len(calls) == 3
         and "cancel: cancelled" in calls[0] and "answered" in calls[0] else False,
         "call 1: the cancel comes before the hosted answer"),
        (all("kept failing; cooling down" in c and "hosted:provider_a answered" in c for c in calls[1:]),
         "calls 2 and 3: the dead coordinator is skipped for the cooldown, the hosted stub answers"),
    ]


def report(transcript, record, dropped, checks, stdout):
    out = ["Transcript (the example's stderr, the script's one note in parentheses):", "", "```"]
    out += transcript + ["```", ""]
    if record:
        out += [f"The abandoned job as the coordinator read it before it was killed: status "
                f"`{record['status']}`, error `{record['result']['error']}`. The worker's log line for it:", "",
                "```"] + dropped + ["```", ""]
    out += [f"- {'PASS' if ok else 'FAIL'}: {what}" for ok, what in checks]
    routes = [json.loads(doc)["route"] for doc in re.findall(r"^\{.*?^\}", stdout, re.S | re.M)]
    out += ["", f"Routes of the three results (stdout): {', '.join(routes)}"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
