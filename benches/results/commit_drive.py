#!/usr/bin/env python3
"""Commit-only driver: N commits over C keep-alive connections (threads)."""
import socket, sys, threading, json
host, port = sys.argv[1], int(sys.argv[2])
total, conns = int(sys.argv[3]), int(sys.argv[4])
body = json.dumps({"job_type": "TASK", "user_id": "loadgen",
    "payload": {"task_type": "summarize", "input": "A long text that needs a short summary."}}).encode()
req = (b"POST /v1/jobs/commit/cheap HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
       b"accept: */*\r\ncontent-length: %d\r\n\r\n" % (host.encode(), port, len(body))) + body
lock = threading.Lock(); left = [total]; stats = {"ok": 0, "bad": 0}
def read_resp(s, buf):
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d: raise EOFError
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n"); status = int(lines[0].split()[1])
    n = 0
    for l in lines[1:]:
        k, v = l.split(b":", 1)
        if k.strip().lower() == b"content-length": n = int(v)
    while len(rest) < n:
        d = s.recv(65536)
        if not d: raise EOFError
        rest += d
    return status, rest[n:]
def run():
    s = socket.create_connection((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = b""
    while True:
        with lock:
            if left[0] <= 0: break
            left[0] -= 1
        s.sendall(req)
        status, buf = read_resp(s, buf)
        with lock: stats["ok" if status == 201 else "bad"] += 1
    s.close()
ts = [threading.Thread(target=run) for _ in range(conns)]
[t.start() for t in ts]; [t.join() for t in ts]
print(stats)
