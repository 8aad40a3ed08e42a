"""The outside world of the egress tests, run inside the network namespace
the test creates (never on the host's network): web servers under test
host names, with their own CA, and the DNS server shellgate's egress proxy
asks. A fixture, not a product part.

Servers (all record each request, one JSON line in --log):
  203.0.113.10  :80 :443 :8080   "a"        (*.allowed.test, api.secret.test, ...)
  203.0.113.20  :80 :443         "other"    (other.test)
  127.0.0.1     :80 :443         "internal" (must never be reached from a container)
(203.0.113.0/24 and 198.51.100.0/24 are TEST-NETs, which no container may
reach: the tests' servers name 203.0.113.0/24 in egress_private_exceptions.)
DNS on 198.51.100.53:53; `bench.test` answers 198.18.0.10, a benchmarking
address nothing listens on (refused before any connection). `rebind.test` answers 203.0.113.10 the first time
and 127.0.0.1 after: a rebinding attack between check and connect.

GET /redirect?to=URL answers 302 to URL; GET /reset-big promises 8 MiB,
sends 5 MiB and resets the connection (SO_LINGER 0); anything else answers
200 with a JSON echo of the request (its headers and body included, as
httpbin does), framed as the path asks: /chunked (in small chunks), /gzip
(gzip-encoded whatever the request accepts), /large (more than 1 MiB, the
echo last), /close (no length: until the connection closes), /b64 (the echo
in base64), /reflect-header (the Authorization header echoed in a response
header), /range (honours a `Range: bytes=first-last` request header over
the echo with a 206, as a file server does), /reflect/SCHEME (the
Authorization header's token alone, as `token=...`, written as SCHEME says:
upper, percent (every byte `%XX`), percent-some, json-u (every character
`\\uXXXX`), mixed (percent, `\\u`, HTML and plain by turns), html, utf16le,
base32; chunked 5 bytes a chunk). Request bodies may be chunked. A WebSocket handshake (to any path)
gets its 101 and then every byte echoed back, raw. `notlisted.test` is a
second virtual host on the same address as `a.allowed.test`: its requests
are logged with their Host like every other.
"""

import argparse
import base64
import gzip
import hashlib
import json
import re
import socket
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

A_RECORDS = {
    "allowed.test": "203.0.113.10",
    "a.allowed.test": "203.0.113.10",
    "b.allowed.test": "203.0.113.10",
    "deep.a.allowed.test": "203.0.113.10",
    "evilallowed.test": "203.0.113.10",
    "allowed.test.evil.test": "203.0.113.10",
    "notlisted.test": "203.0.113.10",
    "api.secret.test": "203.0.113.10",
    "other.test": "203.0.113.20",
    "loop.test": "127.0.0.1",
    "private.test": "10.0.0.1",
    "metadata.test": "169.254.169.254",
    "bench.test": "198.18.0.10",
}
AAAA_RECORDS = {
    "v6loop.test": "::1",
    "mapped.test": "::ffff:127.0.0.1",
}
REBIND_FIRST, REBIND_THEN = "203.0.113.10", "127.0.0.1"

log_lock = threading.Lock()


def record(path, entry):
    with log_lock, open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")


def make_handler(tag, log_path):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def read_body(self):
            if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
                data = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return data
                    data += self.rfile.read(size)
                    self.rfile.readline()
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def websocket(self):
            key = self.headers.get("Sec-WebSocket-Key", "")
            accept = base64.b64encode(hashlib.sha1(
                (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            record(log_path, {"server": tag, "port": self.server.server_address[1], "method": "WEBSOCKET",
                              "host": self.headers.get("Host"), "path": self.path})
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            while True:
                data = self.connection.recv(65536)
                if not data:
                    break
                self.connection.sendall(data)
            self.close_connection = True

        def answer(self):
            if (self.headers.get("Upgrade") or "").lower() == "websocket":
                return self.websocket()
            body = self.read_body().decode("utf-8", "replace")
            url = urlparse(self.path)
            entry = {
                "server": tag,
                "port": self.server.server_address[1],
                "method": self.command,
                "host": self.headers.get("Host"),
                "path": self.path,
                "authorization": self.headers.get("Authorization"),
                "accept_encoding": self.headers.get("Accept-Encoding"),
                "transfer_encoding": self.headers.get("Transfer-Encoding"),
                "range": self.headers.get("Range"),
                "body": body,
            }
            record(log_path, entry)
            if url.path == "/reset-big":
                self.send_response(200)
                self.send_header("Content-Length", str(8 << 20))
                self.end_headers()
                try:
                    for _ in range(80):
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    pass
                # A reset, not a close: unsent data is dropped, RST sent.
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
                self.close_connection = True
                return
            if url.path == "/redirect":
                to = parse_qs(url.query).get("to", ["/"])[0]
                self.send_response(302)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "/reflect/" in url.path:
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                data = b"token=" + reflected(token, url.path.rsplit("/", 1)[-1]) + b"\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for at in range(0, len(data), 5):
                    piece = data[at : at + 5]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
                return
            echo = dict(entry, headers=dict(self.headers.items()))
            data = json.dumps(echo).encode()
            kind = url.path.rsplit("/", 1)[-1]
            if kind == "b64":
                data = base64.b64encode(data)
            elif kind == "large":
                data = b" " * (1536 * 1024) + data
            elif kind == "gzip":
                data = gzip.compress(data)
            ranged = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range") or "")
            if kind == "range" and ranged:
                first, last = int(ranged.group(1)), int(ranged.group(2))
                piece = data[first : last + 1]
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {first}-{first + len(piece) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(piece)))
                self.end_headers()
                self.wfile.write(piece)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if kind == "gzip":
                self.send_header("Content-Encoding", "gzip")
            if kind == "reflect-header":
                self.send_header("X-Reflect", self.headers.get("Authorization") or "")
            if kind == "chunked":
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for at in range(0, len(data), 7):
                    piece = data[at : at + 7]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                self.wfile.write(b"0\r\n\r\n")
                return
            if kind == "close":
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True
                return
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_HEAD = answer

    return Handler


def reflected(token, scheme):
    """`token` as a reflecting server might write it back."""
    raw = token.encode()
    if scheme == "upper":
        return raw.upper()
    if scheme == "percent":
        return b"".join(b"%%%02X" % b for b in raw)
    if scheme == "percent-some":
        return b"".join(b"%%%02x" % b if i % 2 else bytes([b]) for i, b in enumerate(raw))
    if scheme == "json-u":
        return b"".join(b"\\u%04x" % b for b in raw)
    if scheme == "mixed":
        forms = [lambda b: b"%%%02X" % b, lambda b: b"\\u%04X" % b, lambda b: b"&#%d;" % b, lambda b: bytes([b])]
        return b"".join(forms[i % 4](b) for i, b in enumerate(raw))
    if scheme == "html":
        return b"".join(b"&#x%x;" % b for b in raw)
    if scheme == "utf16le":
        return token.encode("utf-16-le")
    if scheme == "base32":
        return base64.b32encode(raw).rstrip(b"=")
    raise ValueError(scheme)


def serve(address, port, tag, log_path, tls=None):
    server = ThreadingHTTPServer((address, port), make_handler(tag, log_path))
    server.daemon_threads = True
    if tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def dns_server(address, log_path):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((address, 53))
    rebinds = 0
    while True:
        packet, peer = sock.recvfrom(1500)
        if len(packet) < 12:
            continue
        ident = packet[:2]
        at, labels = 12, []
        while packet[at]:
            length = packet[at]
            labels.append(packet[at + 1 : at + 1 + length].decode())
            at += 1 + length
        qtype = struct.unpack("!H", packet[at + 1 : at + 3])[0]
        question = packet[12 : at + 5]
        name = ".".join(labels).lower()
        answers = []
        if qtype == 1:
            if name == "rebind.test":
                answers = [REBIND_FIRST if rebinds == 0 else REBIND_THEN]
                rebinds += 1
            elif name in A_RECORDS:
                answers = [A_RECORDS[name]]
        elif qtype == 28 and name in AAAA_RECORDS:
            answers = [AAAA_RECORDS[name]]
        known = name in A_RECORDS or name in AAAA_RECORDS or name == "rebind.test"
        record(log_path, {"server": "dns", "name": name, "qtype": qtype, "answers": answers})
        rcode = 0 if known else 3
        reply = ident + struct.pack("!HHHHH", 0x8180 | rcode, 1, len(answers), 0, 0) + question
        for value in answers:
            family = socket.AF_INET if qtype == 1 else socket.AF_INET6
            data = socket.inet_pton(family, value)
            reply += b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, 5, len(data)) + data
        sock.sendto(reply, peer)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    tls = (args.cert, args.key)
    serve("203.0.113.10", 80, "a", args.log)
    serve("203.0.113.10", 443, "a", args.log, tls)
    serve("203.0.113.10", 8080, "a", args.log)
    serve("203.0.113.20", 80, "other", args.log)
    serve("203.0.113.20", 443, "other", args.log, tls)
    serve("127.0.0.1", 80, "internal", args.log)
    serve("127.0.0.1", 443, "internal", args.log, tls)
    threading.Thread(target=dns_server, args=("198.51.100.53", args.log), daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin


if __name__ == "__main__":
    main()
