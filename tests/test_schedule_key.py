"""The hot-schedule key the operator keeps in a Secret of its own namespace (the chart's
default, hotSchedules.keySecret empty): created once, read by every replica after, and a
refusal said in words. A loopback stand-in for the API server's Secret endpoints; the
chart's replicas do it on the real control plane in e2e/test_leader_election.py."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from specfleet.operator import kube, schedule_key
from tests.api_servers import JsonHandler, status

PATH = "/api/v1/namespaces/ops/secrets"


class Secrets:
    """What the stand-in stores, and a hook run before a create is answered."""

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.before_create: Callable[[], None] = lambda: None
        self.refuse: int | None = None


@contextlib.contextmanager
def api_server(secrets: Secrets) -> Iterator[Any]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            secrets.requests.append(("GET", path))
            if secrets.refuse is not None:
                return self._answer(secrets.refuse, status(secrets.refuse, "Forbidden"))
            name = path.rsplit("/", 1)[1]
            if name not in secrets.stored:
                return self._answer(404, status(404, "NotFound"))
            self._answer(200, secrets.stored[name])

        def do_POST(self) -> None:
            secrets.requests.append(("POST", self.path.split("?")[0]))
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            secrets.before_create()
            name = body["metadata"]["name"]
            if name in secrets.stored:
                return self._answer(409, status(409, "AlreadyExists"))
            secrets.stored[name] = body
            self._answer(201, body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield kube.client_for(configuration, "test")
    finally:
        server.shutdown()


def _secret(key: bytes) -> dict[str, Any]:
    return {"metadata": {"name": "k"}, "data": {"key": base64.b64encode(key).decode()}}


def test_the_first_start_creates_the_key_and_the_next_reads_the_same() -> None:
    secrets = Secrets()
    with api_server(secrets) as api:
        first = schedule_key.ensure(api, "ops", "k")
        again = schedule_key.ensure(api, "ops", "k")
    assert first == again and len(first) == 2 * schedule_key.KEY_BYTES
    assert [m for m, _ in secrets.requests] == ["GET", "POST", "GET"]
    assert secrets.stored["k"]["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "specfleet"
    }


def test_a_replica_that_loses_the_race_to_create_reads_the_winners_key() -> None:
    secrets = Secrets()

    def another_replica_first() -> None:
        secrets.stored.setdefault("k", _secret(b"the-other-replicas-key\n"))

    secrets.before_create = another_replica_first
    with api_server(secrets) as api:
        assert schedule_key.ensure(api, "ops", "k") == b"the-other-replicas-key"


@pytest.mark.parametrize(
    ("stored", "refuse", "said"),
    [
        (_secret(b"  \n"), None, "Secret ops/k has no 'key' (or it is empty)"),
        ({"metadata": {"name": "k"}, "data": {}}, None, "Secret ops/k has no 'key'"),
        (None, 403, "cannot read Secret ops/k: HTTP 403"),
    ],
    ids=["empty-key", "no-key", "forbidden"],
)
def test_an_unusable_secret_or_a_refusal_is_said_in_words(
    stored: dict[str, Any] | None, refuse: int | None, said: str
) -> None:
    secrets = Secrets()
    secrets.refuse = refuse
    if stored is not None:
        secrets.stored["k"] = stored
    with api_server(secrets) as api, pytest.raises(schedule_key.ScheduleKeyError) as error:
        schedule_key.ensure(api, "ops", "k")
    assert said in str(error.value)
    assert ("POST", PATH) not in secrets.requests  # a key it cannot read is never replaced


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["--schedule-key-file", "/dev/null", "--schedule-key-secret", "ops/k"],
            "--schedule-key-file and --schedule-key-secret: give one",
        ),
        (["--schedule-key-file", "/dev/null"], "--schedule-key-file: /dev/null is empty"),
    ],
    ids=["both", "empty-file"],
)
def test_the_operator_refuses_a_key_it_cannot_use_before_it_starts(
    args: list[str], said: str
) -> None:
    from typer.testing import CliRunner

    from specfleet.operator.cli import app

    result = CliRunner().invoke(app, ["operator", *args])
    assert result.exit_code == 2
    assert said in result.output
