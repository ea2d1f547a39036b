"""A small HTTP/1.1 proxy in front of fake-gcs-server that injects the faults a real network has.

Tests queue faults with ``inject``; each applies to the next ``count`` requests whose
``"METHOD /path?query"`` contains ``match`` (after letting ``skip`` of them through):

- ``status``: answer with that HTTP status (503, 429, 403, ...) without forwarding;
- ``drop_request``: read ``after_bytes`` of the body, then close the connection (the server never
  sees the request: a connection that died in the middle of an upload);
- ``drop_response``: forward the request, then close the connection instead of answering (the
  request took effect, the client never hears it);
- ``cut_response``: forward, answer with the headers and ``after_bytes`` of the body, then reset
  the connection (a download cut in the middle);
- ``corrupt``: flip the request body's byte at ``after_bytes`` (modulo its length), then forward
  (a byte corrupted on the way to the service).

Resumable-upload status queries (an empty ``PUT``/``POST`` with ``Content-Range: bytes */...``)
on a session started through the proxy are answered by the proxy as real GCS answers them:
``308`` with ``Range`` for what upstream acknowledged, or the final ``200`` once it finished.
fake-gcs-server instead finalizes the object with the bytes it has (fsouza/fake-gcs-server#2354),
so forwarding them would make every resume test corrupt its blob. While upstream is down, the
proxy forgets its sessions (a restarted server has lost them): queries then reach upstream (404).
``forwarded`` records every request upstream received (``Forwarded``: method, path, headers,
body size and its first 8 KiB).

While the upstream server is down (killed), connections are closed without an answer. ``log``
records ``(method, path, outcome)`` for every request, for the test to inspect.
"""

from __future__ import annotations

import http.client
import json
import socket
import socketserver
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

MAX_HEADER_LINES = 100


@dataclass
class Fault:
    kind: str
    count: int
    match: str = ""
    status: int = 503
    after_bytes: int = 0
    message: str = "injected fault"
    skip: int = 0


@dataclass
class Forwarded:
    method: str
    path: str
    headers: dict[str, str]
    size: int
    head: bytes


@dataclass
class Session:
    """What upstream acknowledged of one resumable upload session."""

    held: int = 0
    final: tuple[int, list[tuple[str, str]], bytes] | None = None


class FaultProxy:
    def __init__(self, upstream_port: int, port: int):
        self.upstream_port = upstream_port
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.faults: list[Fault] = []
        self.log: list[tuple[str, str, str]] = []
        self.forwarded: list[Forwarded] = []
        self.sessions: dict[str, Session] = {}
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
        assert kind in ("status", "drop_request", "drop_response", "cut_response", "corrupt"), kind
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

    def forwarded_bytes(self, match: str = "") -> int:
        """Request body bytes upstream received on requests matching ``match``."""
        with self.lock:
            return sum(f.size for f in self.forwarded if match in f"{f.method} {f.path}")

    # -- one request -------------------------------------------------------------------------
    def _take_fault(self, line: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.count > 0 and fault.match in line:
                    if fault.skip > 0:
                        fault.skip -= 1
                        continue
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
            payload = json.dumps({"error": {"code": fault.status, "message": fault.message}}).encode()
            conn.sendall(
                f"HTTP/1.1 {fault.status} Injected\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload
            )
            return True
        if fault and fault.kind == "corrupt" and body:
            at = fault.after_bytes % len(body)
            body = body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1 :]
        answer = self._status_query(method, path, headers, body)
        if answer is not None:
            status, reason, out_headers, out_body = answer
            self._record(method, path, f"status query {status}")
            conn.sendall(_head(status, reason, out_headers, out_body) + out_body)
            return True
        try:
            status, reason, out_headers, out_body = self._forward(method, path, headers, body)
        except OSError:
            self._record(method, path, "upstream down")
            with self.lock:
                self.sessions.clear()  # a restarted server has lost them
            _abort(conn)
            return False
        self._track_session(method, path, status, out_headers, out_body)
        with self.lock:
            self.forwarded.append(Forwarded(method, path, dict(headers), len(body), body[:8192]))
        if fault and fault.kind == "drop_response":
            self._record(method, path, f"dropped response {status}")
            _abort(conn)
            return False
        head = _head(status, reason, out_headers, out_body)
        if fault and fault.kind == "cut_response":
            self._record(method, path, f"cut response {status}")
            conn.sendall(head + out_body[: fault.after_bytes])
            _abort(conn)
            return False
        self._record(method, path, str(status))
        conn.sendall(head + out_body)
        return True

    # -- resumable sessions --------------------------------------------------------------------
    def _status_query(self, method, path, headers, body):
        """The answer to a status query on a known session, or None to forward the request."""
        content_range = next((v for k, v in headers if k.lower() == "content-range"), "")
        upload_id = _upload_id(path)
        if body or upload_id is None or not content_range.startswith("bytes */"):
            return None
        with self.lock:
            session = self.sessions.get(upload_id)
            if session is None:
                return None
            if session.final is not None:
                status, out_headers, out_body = session.final
                return status, "OK", out_headers, out_body
            if content_range == f"bytes */{session.held}":
                return None  # every byte is in: a finalization, which upstream does right
            held = [("Range", f"bytes=0-{session.held - 1}")] if session.held else []
            return 308, "Resume Incomplete", held, b""

    def _track_session(self, method, path, status, out_headers, out_body) -> None:
        location = next((v for k, v in out_headers if k.lower() == "location"), "")
        with self.lock:
            if "uploadType=resumable" in path and status == 200 and _upload_id(location):
                self.sessions[_upload_id(location)] = Session()
            session = self.sessions.get(_upload_id(path) or "")
            if session is None:
                return
            if status == 308:
                held = next((v for k, v in out_headers if k.lower() == "range"), "")
                session.held = int(held.rsplit("-", 1)[1]) + 1 if held else 0
            elif status in (200, 201):
                session.final = (status, list(out_headers), out_body)

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


def _head(status: int, reason: str, headers, body: bytes) -> bytes:
    head = f"HTTP/1.1 {status} {reason}\r\n"
    for name, value in headers:
        if name.lower() not in ("transfer-encoding", "content-length", "connection"):
            head += f"{name}: {value}\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1")


def _upload_id(path: str) -> str | None:
    query = parse_qs(urlsplit(path).query)
    return query["upload_id"][0] if "upload_id" in query else None


def _abort(conn: socket.socket) -> None:
    """Close with a reset, as a crashed peer does."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        conn.close()
    except OSError:
        pass
