#!/usr/bin/env python3
"""The upstream of the `idemdb proxy` tests (tests/proxy): a payment service with no idempotency
of its own, so that every request the proxy forwards performs its effect again.

    python3 tests/proxy/upstream.py --port 0 --effects FILE [--jwt-secret FILE]

Python 3.11, standard library only. `--port 0` picks a free port; when ready it prints
`listening on PORT` on stdout. Every effect is one line appended to FILE (flushed and fsynced
before the reply): `payment <n> <account> <amount> <idempotency-key or ->` or
`big <n> <bytes> <idempotency-key or ->`, where n counts on from the lines already in FILE, so a
restarted upstream goes on numbering.

    POST /payments   {"account": "...", "amount": 123}: the effect, then 201 with Location
                     /payments/<n> and {"id", "account", "amount", "nonce"} (a new nonce per
                     execution: a replay equal byte for byte to the first answer is a replay);
                     invalid JSON: 400, no effect
    POST /fail       500, no effect
    POST /flaky      X-Fail-Times: K: per idempotency key, the first K calls answer 503 without
                     effect, later ones are a payment as /payments
    POST /big?bytes=N  the effect `big ...`, then 201 with a body of N bytes
    POST /orders     Authorization: Bearer <HS256 JWT under --jwt-secret, exp in the future>:
                     the effect `order <n> <sub> <idempotency-key or ->`, then 201 with
                     {"id", "sub", "nonce"}; any other token: 401, no effect (the service
                     verifies its callers itself)
    GET /payments/<n>  200 with that effect line
    GET /health      200

Paths are routed as many frameworks do: percent-escapes decoded, `.` and `..` resolved, runs of
`/` made one, a trailing `/` dropped. X-Delay-Ms: N sleeps N ms before the effect; X-Delay-After-Ms: N sleeps N ms after it, before the
reply (to be killed with the effect done). PATCH is served as POST. Every response has a Content-Length; connections are
kept alive (HTTP/1.1); requests are served concurrently, one thread each.
"""

import argparse
import base64
import hashlib
import hmac
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit


def route_path(path):
    """The path as the service routes it: `/payments/`, `//payments`, `/%70ayments` and
    `/x/../payments` are `/payments`."""
    segments = []
    for s in unquote(path).split("/"):
        if s == "..":
            segments = segments[:-1]
        elif s not in ("", "."):
            segments.append(s)
    return "/" + "/".join(segments)


def b64url_decode(part):
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def verified_sub(header, secret):
    """The `sub` of an HS256 token under `secret` that has not expired, else None."""
    if secret is None or not header or not header.startswith("Bearer "):
        return None
    try:
        head, payload, sig = header[len("Bearer "):].split(".")
        if json.loads(b64url_decode(head)).get("alg") != "HS256":
            return None
        mac = hmac.new(secret, f"{head}.{payload}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(mac, b64url_decode(sig)):
            return None
        claims = json.loads(b64url_decode(payload))
        if not isinstance(claims.get("exp"), int) or claims["exp"] < time.time():
            return None
        sub = claims.get("sub")
        return sub if isinstance(sub, str) and sub else None
    except (ValueError, TypeError, AttributeError):
        return None


class Effects:
    """The effects file and its counter, one writer at a time."""

    def __init__(self, path):
        self.path = path
        self.lock = threading.Lock()
        try:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                self.lines = [line.rstrip("\n") for line in f]
        except FileNotFoundError:
            self.lines = []
        self.file = open(path, "a", encoding="utf-8")

    def perform(self, kind, *fields):
        """Appends one effect line and syncs it; returns its number n."""
        with self.lock:
            n = len(self.lines) + 1
            line = " ".join([kind, str(n)] + [str(f) for f in fields])
            self.file.write(line + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())
            self.lines.append(line)
            return n

    def line(self, n):
        with self.lock:
            if 1 <= n <= len(self.lines):
                return self.lines[n - 1]
            return None


def field(value):
    """A value as one whitespace-free field of an effect line."""
    text = str(value)
    return "".join("_" if c.isspace() else c for c in text) or "_"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes: without TCP_NODELAY, Nagle's algorithm holds
    # the body until the client's delayed ACK (40 ms on Linux) on a kept-alive connection.
    disable_nagle_algorithm = True

    def version_string(self):
        return "idemdb-test-upstream"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass  # quiet: the tests read the effects file, not a log

    # --- reading the request -------------------------------------------------------------

    def body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size_line = self.rfile.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(length) if length > 0 else b""

    def key(self):
        keys = self.headers.get_all("Idempotency-Key") or []
        return field(",".join(keys)) if keys else "-"

    def delay(self, name):
        try:
            ms = int(self.headers.get(name, "0"))
        except ValueError:
            ms = 0
        if ms > 0:
            time.sleep(ms / 1000)

    # --- answering -----------------------------------------------------------------------

    def reply(self, status, body, content_type="application/json", headers=()):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def problem(self, status, message):
        self.reply(status, json.dumps({"error": message}))

    # --- routes --------------------------------------------------------------------------

    def do_GET(self):
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if url.path == "/health":
            self.reply(200, "ok\n", "text/plain")
        elif len(parts) == 2 and parts[0] == "payments" and parts[1].isdigit():
            line = self.server.effects.line(int(parts[1]))
            if line is None:
                self.problem(404, "no such payment")
            else:
                self.reply(200, line + "\n", "text/plain")
        else:
            self.problem(404, "not found")

    def do_POST(self):
        url = urlsplit(self.path)
        url = url._replace(path=route_path(url.path))
        body = self.body()
        if url.path == "/orders":
            self.order(body)
        elif url.path == "/payments":
            self.payment(body)
        elif url.path == "/fail":
            self.reply(500, "upstream failed on purpose\n", "text/plain")
        elif url.path == "/flaky":
            self.flaky(body)
        elif url.path == "/big":
            self.big(url, body)
        else:
            self.problem(404, "not found")

    do_PATCH = do_POST  # the same routes: for the proxy's POST,PATCH default

    def payment(self, body):
        try:
            doc = json.loads(body)
            account, amount = doc["account"], doc["amount"]
        except (ValueError, KeyError, TypeError):
            self.problem(400, "expected a JSON body {\"account\": ..., \"amount\": ...}")
            return
        self.delay("X-Delay-Ms")
        n = self.server.effects.perform("payment", field(account), field(amount), self.key())
        self.delay("X-Delay-After-Ms")
        answer = {"id": n, "account": account, "amount": amount, "nonce": uuid.uuid4().hex}
        self.reply(201, json.dumps(answer), headers=[("Location", f"/payments/{n}")])

    def order(self, body):
        sub = verified_sub(self.headers.get("Authorization"), self.server.jwt_secret)
        if sub is None:
            self.problem(401, "the token does not verify")
            return
        n = self.server.effects.perform("order", field(sub), self.key())
        self.reply(201, json.dumps({"id": n, "sub": sub, "nonce": uuid.uuid4().hex}))

    def flaky(self, body):
        try:
            times = int(self.headers.get("X-Fail-Times", "0"))
        except ValueError:
            times = 0
        keys = self.headers.get_all("Idempotency-Key") or []
        who = ",".join(keys) if keys else "body:" + body.hex()
        with self.server.flaky_lock:
            calls = self.server.flaky_calls.get(who, 0) + 1
            self.server.flaky_calls[who] = calls
        if calls <= times:
            self.reply(503, f"flaky: call {calls} of {times} failing\n", "text/plain")
            return
        self.payment(body)

    def big(self, url, body):
        try:
            size = int(parse_qs(url.query).get("bytes", ["0"])[0])
        except ValueError:
            self.problem(400, "bytes=N expected")
            return
        self.delay("X-Delay-Ms")
        self.server.effects.perform("big", size, self.key())
        self.delay("X-Delay-After-Ms")
        head = uuid.uuid4().hex.encode()
        payload = (head + b"x" * max(0, size - len(head)))[:size]
        self.reply(201, payload, "application/octet-stream")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--effects", required=True)
    parser.add_argument("--jwt-secret")
    args = parser.parse_args()

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.allow_reuse_address = True
    # socketserver listens with a backlog of 5: 16 or 64 clients connecting at once would see
    # their SYNs dropped and retried a second later (a 1 s stall that is no part of the service).
    ThreadingHTTPServer.request_queue_size = 1024
    deadline = time.monotonic() + 20
    while True:
        try:
            server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
            break
        except OSError as e:
            # A restart on the port of a killed upstream: wait for the kernel to free it.
            if args.port == 0 or time.monotonic() > deadline:
                print(f"cannot listen on 127.0.0.1:{args.port}: {e}", file=sys.stderr)
                sys.exit(1)
            time.sleep(0.1)
    server.effects = Effects(args.effects)
    server.flaky_lock = threading.Lock()
    server.flaky_calls = {}
    server.jwt_secret = None
    if args.jwt_secret:
        with open(args.jwt_secret, "rb") as f:
            server.jwt_secret = f.read().rstrip(b"\r\n")
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
