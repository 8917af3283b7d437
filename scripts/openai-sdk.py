#!/usr/bin/env python3
"""Acceptance of issue 31: the unmodified OpenAI Python SDK against the
coordinator binary and one worker-sim worker whose jobs take 1.5 s.

- a non-streaming chat completion returns text;
- a streaming one yields its first chunk well before its last (time to
  first token under 60 % of the whole), its chunks join to the job's output,
  and the job named by `x-job-id` polls as completed with a receipt whose
  output hash covers the streamed text.

PUBLIC jobs only, so the coordinator keeps its defaults (user auth on).
Installs the SDK with pip when missing. Prints the measured time to first
token against the total, and writes them as JSON with --out.

Usage: scripts/openai-sdk.py [--coordinator BIN] [--worker-sim BIN] [--out FILE]
"""
import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
import time

from local_processes import default_bin, free_port, get_json, wait_for

LATENCY_MS = 1500
TTFT_SHARE_MAX = 0.60


def output_hash(text):
    """The receipt's output_hash of a string output: SHA-256 of its RFC 8785
    canonical JSON, which for a string is its JSON text without escaping
    anything but quotes, backslashes and control characters."""
    canonical = json.dumps(text, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def whole(client):
    raw = client.chat.completions.with_raw_response.create(
        model="coordinator", max_tokens=32,
        messages=[{"role": "user", "content": "Say hi"}])
    completion = raw.parse()
    text = completion.choices[0].message.content
    assert text, f"no text: {completion}"
    assert raw.headers.get("x-job-id") == completion.id, "x-job-id names the completion's job"
    print(f"non-streaming: {len(text)} characters, job {completion.id}")


def streamed(client, base):
    started = time.monotonic()
    first = last = None
    pieces = []
    with client.chat.completions.with_streaming_response.create(
            model="coordinator", max_tokens=64, stream=True,
            messages=[{"role": "user", "content": "Tell me a story about streams and rivers"}]) as response:
        job = response.headers.get("x-job-id")
        for chunk in response.parse():
            content = chunk.choices[0].delta.content if chunk.choices else None
            if content:
                now = time.monotonic()
                first = first or now
                last = now
                pieces.append(content)
    ended = time.monotonic()
    assert job, "x-job-id names the job"
    assert len(pieces) > 1, f"the answer came in one piece: {pieces}"
    text = "".join(pieces)
    record = get_json(f"{base}/v1/jobs/{job}")
    assert record["status"] == "completed", record
    assert record["result"]["output"] == text, "the chunks join to the job's output"
    assert record["receipt"]["output_hash"] == output_hash(text), "the receipt covers the streamed text"
    ttft, total = first - started, ended - started
    return {"job": job, "chunks": len(pieces), "ttft_s": round(ttft, 3), "total_s": round(total, 3),
            "last_chunk_s": round(last - started, 3), "ttft_share": round(ttft / total, 3)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--coordinator", default=default_bin("coordinator"))
    p.add_argument("--worker-sim", default=default_bin("worker-sim"))
    p.add_argument("--out")
    args = p.parse_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "openai"])
    import openai

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="openai-sdk-")
    coord = subprocess.Popen([args.coordinator, "--listen", f"127.0.0.1:{port}", "--db", ":memory:"],
                             stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/coordinator.log", "w"))
    worker = None
    try:
        wait_for("coordinator", lambda: get_json(f"{base}/v1/health")["status"] == "ok", coord)
        worker = subprocess.Popen(
            [args.worker_sim, "--coordinator", f"ws://127.0.0.1:{port}/v1/workers/ws",
             "--count", "1", "--seed", "1", "--latency-ms", str(LATENCY_MS)],
            stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/worker.log", "w"))
        wait_for("worker", lambda: get_json(f"{base}/v1/health")["workers_online"] == 1, coord)
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=60)
        whole(client)
        measured = streamed(client, base)
        measured["passed"] = measured["ttft_share"] < TTFT_SHARE_MAX
        print(f"streaming: {measured['chunks']} chunks; time to first token {measured['ttft_s']} s "
              f"of {measured['total_s']} s ({measured['ttft_share']:.0%}; bound {TTFT_SHARE_MAX:.0%}): "
              f"{'PASS' if measured['passed'] else 'FAIL'}")
        if args.out:
            with open(args.out, "w") as f:
                f.write(json.dumps(measured, indent=2) + "\n")
        return 0 if measured["passed"] else 1
    finally:
        for proc in (worker, coord):
            if proc:
                proc.terminate()
                proc.wait()


if __name__ == "__main__":
    sys.exit(main())
