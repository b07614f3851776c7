"""`specfleet-runtime drain --port P --seconds N`: the serving container's preStop hook.

Kubernetes runs it when the pod starts terminating, before vLLM gets SIGTERM: the pod is
already out of the Service's endpoints, but load balancers and kube-proxy learn it a
moment later, and the requests vLLM holds would be cut by SIGTERM. So it waits a few
seconds for the endpoints to propagate, then while vLLM's /metrics counts requests
running or waiting, for at most N seconds (the operator passes the pod's
terminationGracePeriodSeconds less the time vLLM needs to stop). It always exits 0: a
failing hook would only delay the stop with an event.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence

from prometheus_client.parser import text_string_to_metric_families

from specfleet.runtime.config import loopback_url

# vLLM's gauges of the requests it holds.
IN_FLIGHT = ("vllm:num_requests_running", "vllm:num_requests_waiting")
# How long endpoints take to reach kube-proxy and load balancers after the pod is marked
# terminating: requests may still arrive meanwhile, and are served.
PROPAGATION_SECONDS = 5.0
POLL_SECONDS = 1.0
FETCH_TIMEOUT_SECONDS = 2.0


def in_flight(page: str) -> float:
    """The requests vLLM holds, by its /metrics page (0 when it exports no such gauge)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name in IN_FLIGHT
    )


def drain(
    fetch: Callable[[], str | None],
    budget: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Wait for the endpoints to propagate, then until no request is in flight or
    `budget` seconds have passed; what ended the wait, in words. `fetch` returns the
    engine's /metrics page, or None when it does not answer."""
    start = clock()
    sleep(min(PROPAGATION_SECONDS, budget))
    while True:
        page = fetch()
        if page is None:
            return "the engine does not answer"
        held = in_flight(page)
        if held == 0:
            return "no request in flight"
        if clock() - start + POLL_SECONDS > budget:
            return f"{budget:g}s spent with {held:g} requests in flight"
        sleep(POLL_SECONDS)


def _fetcher(url: str) -> Callable[[], str | None]:
    def fetch() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_SECONDS) as response:
                return str(response.read().decode())
        except (OSError, ValueError):
            return None

    return fetch


def main(args: Sequence[str], env: Mapping[str, str]) -> int:
    parser = argparse.ArgumentParser(prog="specfleet-runtime drain")
    parser.add_argument("--port", type=int, required=True, help="vLLM's HTTP port")
    parser.add_argument(
        "--seconds", type=float, required=True, help="the longest wait for requests in flight"
    )
    options = parser.parse_args(list(args))
    # vLLM listens on every address of the pod (config.listen_host), the loopback too.
    url = loopback_url(env, options.port, "/metrics")
    outcome = drain(_fetcher(url), max(0.0, options.seconds))
    print(f"specfleet-runtime: drain: {outcome}", file=sys.stderr)
    return 0
