"""Loopback stand-ins for an API server that misbehaves, on real sockets, for the tests of
the operator's request policy and benchmarks/api_faults.py: one whose accept queue is
full until it is opened, one that keeps a Lease and answers its writes late."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml


def status(code: int, reason: str) -> dict[str, Any]:
    """An API server's error body (kind Status)."""
    return {"kind": "Status", "code": code, "reason": reason}


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet handler that answers JSON, as the API server does."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def kubeconfig(url: str, path: Path) -> Path:
    """A kubeconfig naming `url` as the API server: what `kube.api_client` loads."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": url}}],
        "users": [{"name": "local", "user": {"token": "t"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def fill_accept_queue(address: tuple[str, int]) -> list[socket.socket]:
    """Connect to the listener at `address` until a connect times out: its accept queue
    is full, and Linux drops the SYNs of every connect after (which retransmit after 1 s,
    3 s, ...) until it accepts. The connections that fill it."""
    fillers: list[socket.socket] = []
    while True:
        filler = socket.socket()
        filler.settimeout(0.2)
        try:
            filler.connect(address)
        except OSError:  # timed out: the queue is full
            filler.close()
            return fillers
        fillers.append(filler)


class FullAcceptQueue:
    """A listener whose accept queue is full (fill_accept_queue) until `open()`; then it
    accepts everything and records when each request's first bytes arrived
    (time.monotonic()) and its request line."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.arrived: list[tuple[float, bytes]] = []
        self.held = fill_accept_queue(self.listener.getsockname())

    def open(self) -> None:
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        connection.settimeout(30)
        with contextlib.suppress(OSError):
            data = connection.recv(65536)
            if data:
                self.arrived.append((time.monotonic(), data.split(b"\r\n")[0]))

    def close(self) -> None:
        self.listener.close()
        for held in self.held:
            held.close()


class LateLease:
    """One coordination.k8s.io/v1 Lease behind a loopback HTTP server, with the API
    server's optimistic concurrency (409 on a stale resourceVersion, answered at once). A
    write is committed at once and answered `delay` seconds later; `writes` lists each
    write's method and status code."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")

    def _commit(self, method: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            stored = None if self.lease is None else str(self.version)
            sent = body["metadata"].get("resourceVersion") if method == "PUT" else None
            if (method == "POST") != (self.lease is None) or sent != stored:
                self.writes.append((method, 409))
                return 409, status(409, "Conflict")
            self.version += 1
            self.lease = {**body, "metadata": {**body["metadata"]}}
            self.lease["metadata"]["resourceVersion"] = str(self.version)
            self.writes.append((method, 200))
            return 200, self.lease

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(JsonHandler):
            def do_GET(self) -> None:
                lease = owner.lease
                if lease is None:
                    self._answer(404, status(404, "NotFound"))
                else:
                    self._answer(200, lease)

            def _write(self) -> None:
                length = int(self.headers["Content-Length"])
                code, answer = owner._commit(self.command, json.loads(self.rfile.read(length)))
                if code == 200:
                    time.sleep(owner.delay)
                with contextlib.suppress(OSError):  # the client may have given up
                    self._answer(code, answer)

            do_PUT = _write
            do_POST = _write

        return Handler

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
