"""The operator's API requests: each carries a timeout, on the client and for the API
server, and is tried once, so that no write can be in flight past the leader election's
margin."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
from kubernetes.config import kube_config

from specfleet.operator.kube import PAGE, Cluster, Credentials, Page, always, api_client
from tests.api_servers import FullAcceptQueue, kubeconfig

TIMEOUT = 0.5
T = TypeVar("T")


def cluster_at(
    url: str, may_write: Callable[[], bool] = always, timeout: float = TIMEOUT
) -> Cluster:
    """The fleet's requests to the server at `url`, without TLS or a token."""
    return Cluster(Credentials(url, False, lambda: None), "test", may_write, timeout)


def ask(cluster: Cluster, request: Callable[[], Awaitable[T]]) -> T:
    """One request on a loop of its own (at most 30 s), the cluster's connections closed
    after it: they belong to that loop."""

    async def once() -> T:
        try:
            return await asyncio.wait_for(request(), timeout=30)
        finally:
            await cluster.close()

    return asyncio.run(once())


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server that reads each request and never answers it."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            held.append(connection)
            received.append(connection.recv(65536))

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", received
    listener.close()
    for connection in held:
        connection.close()


def calls(cluster: Cluster) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "team", "name": "llama"},
        "spec": {},
    }
    involved = {"apiVersion": "v1", "name": "llama", "namespace": "team", "uid": "u"}
    return [
        ("apply", lambda: cluster.apply(manifest)),
        ("replace_status", lambda: cluster.replace_status("team", "llama", {}, "1")),
        ("post_event", lambda: cluster.post_event(involved, "X", "R", "m", False)),
        ("get_model", lambda: cluster.get_model("team", "llama")),
        ("get_child", lambda: cluster.get_child("Service", "team", "llama")),
        ("list_models", lambda: cluster.list_models("team")),
        ("list_children", lambda: cluster.list_children("Pod", "team", "a=b")),
    ]


def test_every_request_gives_up_when_the_api_server_does_not_answer(
    silent_server: tuple[str, list[bytes]],
) -> None:
    url, received = silent_server
    cluster = cluster_at(url)
    for name, request in calls(cluster):
        with pytest.raises(TimeoutError, match=r"timed out") as raised:
            ask(cluster, request)
        assert "no answer in 0.5 s" in str(raised.value), (name, raised.value)
    assert len(received) == len(calls(cluster))
    for request_line in received:
        assert b"timeout=1s" in request_line.split(b"\r\n")[0], request_line[:200]


@pytest.mark.parametrize("write", ["apply", "replace_status", "post_event"])
def test_no_write_reaches_a_slow_accepting_api_server_after_the_fence_closes(
    write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server's accept queue is full when the write leaves (the fence open), the
    fence closes 0.25 s later, the queue opens at 0.75 s. The write times out once and is
    not sent again: nothing reaches the server (urllib3's own retries sent it at ~1 s).
    The clock starts at the fence's first check, so a slow machine cannot close the fence
    before the write leaves."""
    server = FullAcceptQueue()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(
        kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig(server.url, tmp_path / "k"))
    )
    opener = threading.Timer(0.75, server.open)
    checks: list[float] = []

    def holds_lease() -> bool:
        if not checks:
            opener.start()
        checks.append(time.monotonic())
        return checks[-1] < checks[0] + 0.25

    cluster = Cluster(
        Credentials.of(api_client("test").configuration), "test", holds_lease, TIMEOUT
    )
    request = dict(calls(cluster))[write]
    try:
        with pytest.raises(TimeoutError, match=r"timed out"):
            ask(cluster, request)
        time.sleep(max(0.0, 2.5 - (time.monotonic() - checks[0])))  # past 3 more tries
        fence = checks[0] + 0.25
        after_fence = [round(at - fence, 2) for at, _ in server.arrived if at > fence]
        assert after_fence == []
    finally:
        opener.cancel()
        server.close()


@pytest.fixture
def answering_server() -> Iterator[str]:
    """A loopback HTTP server that answers every request: 404 for names ending in
    "missing", else 200 with an empty object or listing."""
    import http.server
    import json

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            code = 404 if path.endswith("missing") else 200
            body = json.dumps(
                {"kind": "Status"}
                if code == 404
                else {"kind": "List", "metadata": {"resourceVersion": "1"}, "items": []}
            ).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PATCH = do_POST = do_PUT = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def requests_counted() -> dict[tuple[str, str, str], float]:
    from prometheus_client import REGISTRY

    return {
        (s.labels["verb"], s.labels["resource"], s.labels["code"]): s.value
        for metric in REGISTRY.collect()
        if metric.name == "specfleet_api_requests"
        for s in metric.samples
        if s.name.endswith("_total")
    }


def test_every_request_is_counted_by_verb_resource_and_code(answering_server: str) -> None:
    """The operator's own count of what it asks of the API server: what the scale
    benchmark divides by the number of models."""
    cluster = cluster_at(answering_server, timeout=2.0)
    before = requests_counted()
    for _, request in calls(cluster):
        ask(cluster, request)
    assert ask(cluster, lambda: cluster.get_child("Deployment", "team", "missing")) is None
    after = requests_counted()
    grown = {
        key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key)
    }
    assert grown == {
        ("APPLY", "services", "200"): 1,
        ("PUT", "speculativemodels/status", "200"): 1,
        ("POST", "events", "200"): 1,
        ("GET", "speculativemodels", "200"): 1,
        ("GET", "services", "200"): 1,
        ("LIST", "speculativemodels", "200"): 1,
        ("LIST", "pods", "200"): 1,
        ("GET", "deployments", "404"): 1,
    }


def test_a_request_with_no_answer_is_counted_with_code_0(
    silent_server: tuple[str, list[bytes]],
) -> None:
    url, _ = silent_server
    cluster = cluster_at(url)
    before = requests_counted().get(("GET", "speculativemodels", "0"), 0.0)
    with pytest.raises(TimeoutError, match=r"timed out"):
        ask(cluster, lambda: cluster.get_model("team", "llama"))
    assert requests_counted()[("GET", "speculativemodels", "0")] == before + 1


@pytest.mark.parametrize("status", [404, 403])
def test_a_child_kind_the_cluster_does_not_serve_lists_as_none(
    monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """LeaderWorkerSet's CRD may not be installed: its listing (404) holds nothing, and
    the fleet's resync goes on; any other refusal is still an error."""
    from kubernetes.client.rest import ApiException

    cluster = cluster_at("http://127.0.0.1:9")

    async def refused(path: str, selector: str | None, start: str) -> Page:
        raise ApiException(status=status)

    monkeypatch.setattr(cluster, "_list", refused)
    listing = partial(cluster.list_children, "LeaderWorkerSet", "team", "x")
    if status == 404:
        assert ask(cluster, listing) == Page([], "", "")
    else:
        with pytest.raises(ApiException):
            ask(cluster, listing)


def test_a_listing_is_asked_for_a_page_at_a_time() -> None:
    """Each page asks for PAGE objects, the next one where the last left off; every
    page carries the listing's version, and the last no continue token."""
    asked: list[dict[str, list[str]]] = []
    pages = {
        "": {"metadata": {"resourceVersion": "7", "continue": "c1"}, "items": [{"metadata": {}}]},
        "c1": {"metadata": {"resourceVersion": "7"}, "items": [{"metadata": {}}]},
    }

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            asked.append(query)
            body = json.dumps({"kind": "PodList", **pages[query.get("continue", [""])[0]]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cluster = cluster_at(url, timeout=2.0)
        first = ask(cluster, partial(cluster.list_children, "Pod", "team", "a=b"))
        assert first == Page([{"kind": "Pod", "metadata": {}}], "7", "c1")
        last = ask(cluster, partial(cluster.list_children, "Pod", "team", "a=b", first.next))
        assert (last.version, last.next) == ("7", "")
    finally:
        server.shutdown()
    assert [q["limit"] for q in asked] == [[str(PAGE)], [str(PAGE)]]
    assert [q.get("continue") for q in asked] == [None, ["c1"]]
    assert [q["labelSelector"] for q in asked] == [["a=b"], ["a=b"]]
