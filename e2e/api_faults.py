"""Faults of the control plane for the e2e tests: the API server killed and started again,
etcd compacted (so that a watch resuming from an older resourceVersion gets 410 Gone),
and a TCP proxy between the operator and the API server that can turn bad: pass bytes
through, delay them, blackhole them (connections stay open, nothing arrives either way),
reset every connection and refuse new ones, or reset every connection and accept no new
one (its accept queue full: a connect hangs until it times out). TLS passes through
untouched (the API server's certificate names 127.0.0.1, where the proxy listens too)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import struct
import threading
import time
import urllib.request
from enum import Enum
from pathlib import Path

import yaml

from e2e import cluster, podnet
from tests.api_servers import fill_accept_queue

CHUNK = 65536


def restart_api_server() -> None:
    """SIGKILL the API server and start it again: every watch breaks, and the new
    server's watch cache begins at the current revision."""
    apiserver = next(
        c for c in cluster.components(cluster.build_binaries()) if c.name == "kube-apiserver"
    )
    pid = apiserver.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    time.sleep(3)
    cluster.up()  # starts only what is missing: the API server


def _etcd(path: str, body: dict[str, object]) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ETCD_PORT}{path}",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        answer: dict[str, object] = json.loads(reply.read())
    return answer


def compact_etcd() -> int:
    """Compact etcd's history up to now (its JSON gateway): no watch can resume from a
    revision before this one. Returns the revision."""
    header = _etcd("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]
    assert isinstance(header, dict)
    revision = int(header["revision"])
    _etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


class Mode(Enum):
    PASS = "pass"
    DELAY = "delay"
    BLACKHOLE = "blackhole"
    RESET = "reset"
    SLOW_ACCEPT = "slow-accept"


def _reset(connection: socket.socket) -> None:
    """Close with an RST (SO_LINGER 0), as a dropped NAT entry or a restarted peer does."""
    with contextlib.suppress(OSError):
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        connection.shutdown(socket.SHUT_RD)  # wakes a pump blocked reading it
    with contextlib.suppress(OSError):
        connection.close()


class TcpProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream = (str(podnet.HOST_ADDRESS), upstream_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.mode = Mode.PASS
        self.delay = 0.0
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.closed = False
        self.accepting = threading.Event()  # cleared: SLOW_ACCEPT
        self.accepting.set()
        self.fillers: list[socket.socket] = []  # what fills the accept queue

    def start(self) -> TcpProxy:
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()
        return self

    def stop(self) -> None:
        self.closed = True
        self.set(Mode.RESET)
        with contextlib.suppress(OSError):
            self.listener.close()

    def set(self, mode: Mode, delay: float = 0.0) -> None:
        with self.lock:
            self.mode, self.delay = mode, delay
            doomed = list(self.open) if mode in (Mode.RESET, Mode.SLOW_ACCEPT) else []
            if doomed:
                self.open.clear()
        for connection in doomed:
            _reset(connection)
        if mode is Mode.SLOW_ACCEPT:
            self.accepting.clear()
            self.fillers += fill_accept_queue(("127.0.0.1", self.port))
        else:
            for filler in self.fillers:
                filler.close()
            self.fillers.clear()
            self.accepting.set()

    def kubeconfig(self, admin: Path, into: Path) -> Path:
        """A copy of `admin` that reaches the API server through this proxy."""
        config = yaml.safe_load(admin.read_text())
        for entry in config["clusters"]:
            entry["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        into.write_text(yaml.safe_dump(config))
        return into

    def _accept(self) -> None:
        while not self.closed:
            self.accepting.wait()
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting.is_set():  # accepted as the queue was being filled
                self.fillers.append(client)
                continue
            if self.mode is Mode.RESET:
                _reset(client)
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                _reset(client)
                continue
            server.settimeout(None)
            with self.lock:
                self.open += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, target), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        while True:
            try:
                data = source.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                return
            mode, delay = self.mode, self.delay
            if mode is Mode.BLACKHOLE:
                continue  # lost on the way; the connection looks alive
            if mode is Mode.DELAY:
                time.sleep(delay)
            try:
                target.sendall(data)
            except OSError:
                return
