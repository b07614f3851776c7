"""The operator's API requests: each carries a timeout, on the client and for the API
server, and is tried once, so that no write can be in flight past the leader election's
margin."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import kube_config

from specfleet.operator.kube import Cluster, always, api_client, client_for
from tests.api_servers import FullAcceptQueue, kubeconfig

TIMEOUT = 0.5


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


def calls(cluster: Cluster) -> list[tuple[str, Callable[[], Any]]]:
    manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": "team", "name": "llama"},
        "spec": {},
    }
    involved = {"apiVersion": "v1", "name": "llama", "namespace": "team", "uid": "u"}
    return [
        ("apply", lambda: cluster.apply(manifest)),
        ("patch_status", lambda: cluster.patch_status("team", "llama", {}, "1")),
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
    api = client_for(client.Configuration(host=url), "test")
    cluster = Cluster(api, "test", always, timeout=TIMEOUT)
    for name, request in calls(cluster):
        outcome: list[BaseException | None] = []

        def run(request: Callable[[], Any] = request, outcome: list[Any] = outcome) -> None:
            try:
                request()
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert not worker.is_alive(), f"{name} waited for an answer for 30 s"
        assert outcome and outcome[0] is not None, name
        assert "timed out" in str(outcome[0]).lower(), (name, outcome[0])
    assert len(received) == len(calls(cluster))
    for request_line in received:
        assert b"timeout=1s" in request_line.split(b"\r\n")[0], request_line[:200]


@pytest.mark.parametrize("write", ["apply", "patch_status", "post_event"])
def test_no_write_reaches_a_slow_accepting_api_server_after_the_fence_closes(
    write: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server's accept queue is full when the write leaves (the fence open), the
    fence closes 0.25 s later, the queue opens at 0.75 s. The write times out once and is
    not sent again: nothing reaches the server (urllib3's own retries sent it at ~1 s)."""
    server = FullAcceptQueue()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(
        kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig(server.url, tmp_path / "k"))
    )
    started = time.monotonic()
    fence = started + 0.25
    cluster = Cluster(api_client("test"), "test", lambda: time.monotonic() < fence, TIMEOUT)
    request = dict(calls(cluster))[write]
    opener = threading.Timer(0.75, server.open)
    opener.start()
    try:
        with pytest.raises(Exception, match=r"(?i)timed out"):
            request()
        time.sleep(2.5 - (time.monotonic() - started))  # past 3 more tries' worth
        after_fence = [round(at - fence, 2) for at, _ in server.arrived if at > fence]
        assert after_fence == []
    finally:
        opener.cancel()
        server.close()
