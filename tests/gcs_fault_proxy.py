"""A small HTTP/1.1 proxy in front of fake-gcs-server that injects the faults a real network has.

Tests queue faults with ``inject``; each applies to the next ``count`` requests whose
``"METHOD /path?query"`` contains ``match``:

- ``status``: answer with that HTTP status (503, 429, 403, ...) without forwarding;
- ``drop_request``: read ``after_bytes`` of the body, then close the connection (the server never
  sees the request: a connection that died in the middle of an upload);
- ``drop_response``: forward the request, then close the connection instead of answering (the
  request took effect, the client never hears it);
- ``cut_response``: forward, answer with the headers and ``after_bytes`` of the body, then reset
  the connection (a download cut in the middle).

While the upstream server is down (killed), connections are closed without an answer. ``log``
records ``(method, path, outcome)`` for every request, for the test to inspect.
"""

from __future__ import annotations

import http.client
import socket
import socketserver
import threading
from dataclasses import dataclass

MAX_HEADER_LINES = 100


@dataclass
class Fault:
    kind: str
    count: int
    match: str = ""
    status: int = 503
    after_bytes: int = 0


class FaultProxy:
    def __init__(self, upstream_port: int, port: int):
        self.upstream_port = upstream_port
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while proxy._serve_one(self.rfile, self.connection):
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def inject(self, kind: str, count: int = 1, match: str = "", **options) -> Fault:
        assert kind in ("status", "drop_request", "drop_response", "cut_response"), kind
        fault = Fault(kind, count, match, **options)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def outcomes(self, match: str = "") -> list[str]:
        with self.lock:
            return [o for m, p, o in self.log if match in f"{m} {p}"]

    # -- one request -------------------------------------------------------------------------
    def _take_fault(self, line: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.count > 0 and fault.match in line:
                    fault.count -= 1
                    return fault
        return None

    def _record(self, method: str, path: str, outcome: str) -> None:
        with self.lock:
            self.log.append((method, path, outcome))

    def _serve_one(self, rfile, conn: socket.socket) -> bool:
        """Proxy one request; False when the client connection is finished."""
        request_line = rfile.readline(65537).decode("latin-1").strip()
        if not request_line:
            return False
        method, path, _ = request_line.split(" ", 2)
        headers: list[tuple[str, str]] = []
        for _ in range(MAX_HEADER_LINES):
            raw = rfile.readline(65537).decode("latin-1")
            if raw in ("\r\n", "\n", ""):
                break
            name, value = raw.split(":", 1)
            headers.append((name.strip(), value.strip()))
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        fault = self._take_fault(f"{method} {path}")
        if fault and fault.kind == "drop_request":
            rfile.read(min(fault.after_bytes, length))
            self._record(method, path, "dropped request")
            _abort(conn)
            return False
        body = rfile.read(length) if length else b""
        if fault and fault.kind == "status":
            self._record(method, path, f"injected {fault.status}")
            payload = (
                f'{{"error": {{"code": {fault.status}, "message": "injected fault"}}}}'
            ).encode()
            conn.sendall(
                f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload
            )
            return True
        try:
            status, reason, out_headers, out_body = self._forward(method, path, headers, body)
        except OSError:
            self._record(method, path, "upstream down")
            _abort(conn)
            return False
        if fault and fault.kind == "drop_response":
            self._record(method, path, f"dropped response {status}")
            _abort(conn)
            return False
        head = f"HTTP/1.1 {status} {reason}\r\n"
        for name, value in out_headers:
            if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                head += f"{name}: {value}\r\n"
        head += f"Content-Length: {len(out_body)}\r\n\r\n"
        if fault and fault.kind == "cut_response":
            self._record(method, path, f"cut response {status}")
            conn.sendall(head.encode("latin-1") + out_body[: fault.after_bytes])
            _abort(conn)
            return False
        self._record(method, path, str(status))
        conn.sendall(head.encode("latin-1") + out_body)
        return True

    def _forward(self, method, path, headers, body):
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        try:
            upstream.connect()  # OSError here: the server is down
            upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in ("connection", "content-length"):
                    upstream.putheader(name, value)
            upstream.putheader("Content-Length", str(len(body)))
            try:
                upstream.endheaders(body)
            except OSError:
                pass  # the server answered early (e.g. 404 for an unknown upload) and closed
            response = upstream.getresponse()
            return response.status, response.reason, response.getheaders(), response.read()
        finally:
            upstream.close()


def _abort(conn: socket.socket) -> None:
    """Close with a reset, as a crashed peer does."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()
    except OSError:
        pass
