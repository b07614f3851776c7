"""Faults of the control plane for the e2e tests: the API server killed and started again,
etcd compacted (so that a watch resuming from an older resourceVersion gets 410 Gone),
and a TCP proxy between the operator and the API server that can turn bad: pass bytes
through, delay them, blackhole them (connections stay open, nothing arrives either way),
reset every connection and refuse new ones, or reset every connection and accept no new
one (its accept queue full: a connect hangs until it times out). TLS passes through
untouched (the API server's certificate names 127.0.0.1, where the proxy listens too).
And an HTTPS proxy that reads each request, to answer one kind of request late after the
API server has committed it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import struct
import threading
import time
import urllib.request
from enum import Enum
from pathlib import Path

import yaml
from aiohttp import ClientSession, TCPConnector, web

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


def _through(admin: Path, into: Path, port: int) -> Path:
    """A copy of kubeconfig `admin`, written to `into`, whose clusters are reached on
    127.0.0.1:`port` (a proxy in front of the API server)."""
    config = yaml.safe_load(admin.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{port}"
    into.write_text(yaml.safe_dump(config))
    return into


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
            # Under the lock with the snapshot: a connection `_accept` is still joining
            # up is either in the snapshot or sees the new mode, never neither.
            self.mode, self.delay = mode, delay
            if mode is Mode.SLOW_ACCEPT:
                self.accepting.clear()
            doomed = list(self.open) if mode in (Mode.RESET, Mode.SLOW_ACCEPT) else []
            if doomed:
                self.open.clear()
        for connection in doomed:
            _reset(connection)
        if mode is Mode.SLOW_ACCEPT:
            self.fillers += fill_accept_queue(("127.0.0.1", self.port))
        else:
            for filler in self.fillers:
                filler.close()
            self.fillers.clear()
            self.accepting.set()

    def kubeconfig(self, admin: Path, into: Path) -> Path:
        """A copy of `admin` that reaches the API server through this proxy."""
        return _through(admin, into, self.port)

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
                # The mode may have changed while the upstream connection was made.
                cut = self._cutting()
                if not cut:
                    self.open += [client, server]
            if cut:
                _reset(client)
                _reset(server)
                continue
            for source, target in ((client, server), (server, client)):
                threading.Thread(
                    target=self._pump, args=(source, target), name="proxy-pump", daemon=True
                ).start()

    def _cutting(self) -> bool:
        """New connections are reset (RESET) or left in the accept queue (SLOW_ACCEPT)."""
        return self.mode is Mode.RESET or not self.accepting.is_set()

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


# Headers of one hop (RFC 9110 7.6.1) and the framing aiohttp sets itself.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


class LateAnswers:
    """An HTTPS proxy in front of the API server: it presents the API server's own
    certificate (the test PKI's, which names 127.0.0.1), forwards each request as the
    kubeconfig's user, user agent and all, and streams the answers back (watches too).
    Requests whose method and path match `answer_late` are sent on at once, so the API
    server commits them, and answered `delay` seconds later: an answer lost in a slow
    network, which a TCP proxy cannot single out inside TLS."""

    def __init__(self, admin: Path) -> None:
        config = yaml.safe_load(admin.read_text())
        user = config["users"][0]["user"]
        ca = config["clusters"][0]["cluster"]["certificate-authority"]
        self.upstream = config["clusters"][0]["cluster"]["server"]
        self.to_server = ssl.create_default_context(cafile=ca)
        self.to_server.load_cert_chain(user["client-certificate"], user["client-key"])
        pki = Path(ca).parent
        self.to_clients = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.to_clients.load_cert_chain(pki / "apiserver.crt", pki / "apiserver.key")
        self.late: tuple[str, re.Pattern[str], float] | None = None
        self.answered_late: list[tuple[float, int]] = []  # (monotonic, status) each
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None

    def answer_late(self, method: str, path: str, delay: float) -> None:
        """From now on, answer `method` requests whose path matches `path` (a regular
        expression) `delay` seconds after the API server did."""
        self.late = (method, re.compile(path), delay)

    def answer_at_once(self) -> None:
        self.late = None

    def kubeconfig(self, admin: Path, into: Path) -> Path:
        """A copy of `admin` that reaches the API server through this proxy."""
        return _through(admin, into, self.port)

    def start(self) -> LateAnswers:
        threading.Thread(
            target=self._loop.run_until_complete, args=(self._serve(),), daemon=True
        ).start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("the HTTPS proxy did not start in 30 s")
        return self

    def stop(self) -> None:
        if self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        async with ClientSession(
            connector=TCPConnector(ssl=self.to_server), auto_decompress=False
        ) as session:
            app = web.Application(client_max_size=64 * 1024 * 1024)

            async def forward(request: web.Request) -> web.StreamResponse:
                return await self._forward(session, request)

            app.router.add_route("*", "/{path:.*}", forward)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.to_clients)
            await site.start()
            self.port = runner.addresses[0][1]
            self._ready.set()
            await self._stopped.wait()
            await runner.cleanup()

    async def _forward(self, session: ClientSession, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        late = self.late
        async with session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            allow_redirects=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        ) as answer:
            kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
            if late and late[0] == request.method and late[1].search(request.path):
                content = await answer.read()  # committed on the server
                await asyncio.sleep(late[2])
                self.answered_late.append((time.monotonic(), answer.status))
                return web.Response(status=answer.status, body=content, headers=kept)
            response = web.StreamResponse(status=answer.status, headers=kept)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
