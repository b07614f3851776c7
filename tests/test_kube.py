"""The operator's API requests: each carries a timeout, on the client and for the API
server, so that no write can be in flight past the leader election's margin."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from specfleet.operator.kube import Cluster, always

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
    configuration = client.Configuration(host=url)
    configuration.retries = 0
    cluster = Cluster(client.ApiClient(configuration), "test", always, timeout=TIMEOUT)
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
