"""What a tenant's spec can make the operator's pod fetch, and what of it reaches status
(which the tenant reads): no redirect followed, no answer quoted, failures in fixed words,
Prometheus URLs only as the platform team allows, waits only as long as it allows."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import time
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import ValidationError

from specfleet.operator.api import ConditionType, SpeculativeModel
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.metrics import (
    REFUSED_ADDRESS,
    CheckedResolver,
    Outbound,
    RefusedAddress,
    query_prometheus,
    refused_address,
    scrape,
)
from specfleet.operator.observations import ScrapeTarget, SourceUnavailable
from specfleet.operator.status import ObservedChildren
from tests.hostile_servers import SECRET, redirector, secret_holder, serving, tarpit
from tests.test_chart import container, render, rendered
from tests.test_evaluation import T0, _free_port, _model, _pod


def _available(model: SpeculativeModel) -> str:
    condition = next(
        c for c in model.status.conditions if c.type is ConditionType.METRICS_AVAILABLE
    )
    return condition.message


def _on_prometheus(manifest: dict[str, Any], url: str, timeout: str = "2s") -> SpeculativeModel:
    manifest["spec"]["metrics"] = {
        "source": "Prometheus",
        "prometheus": {"url": url},
        "scrapeTimeout": timeout,
    }
    return _model(manifest, tokens=3)


async def _evaluated(
    model: SpeculativeModel, children: ObservedChildren, evaluator: Evaluator | None = None
) -> SpeculativeModel:
    decided = await (evaluator or Evaluator()).evaluate(model, children, T0)
    return model.model_copy(update={"status": decided.status})


def _listing(*urls: str, max_timeout: float = 30) -> Evaluator:
    """An operator whose install lists `urls`: the local servers here are at loopback
    addresses, which only a listed URL may be."""
    return Evaluator(Outbound(max_timeout, frozenset(urls)))


def test_a_pods_redirect_is_not_followed(peagle_manifest: dict[str, Any]) -> None:
    """A pod whose /metrics 302s to a loopback port holding a secret: the operator does
    not go there, and status says only that the pod answered 302."""
    port = _free_port("127.0.0.3")  # the pod "pod" is at 127.0.0.3
    peagle_manifest["spec"]["runtime"]["port"] = port
    model = _model(peagle_manifest, tokens=3)
    children = ObservedChildren(pods=[_pod("pod", model, "stable")])

    async def main() -> tuple[SpeculativeModel, list[str]]:
        async with (
            secret_holder() as (secret_url, asked),
            redirector(f"{secret_url}/latest/meta-data", "127.0.0.3", port),
        ):
            return await _evaluated(model, children), asked

    evaluated, asked = asyncio.run(main())
    assert asked == []
    assert SECRET not in evaluated.status.model_dump_json()
    left_out = evaluated.status.acceptance.pods_left_out or []
    assert [(p.pod, p.reason, p.message) for p in left_out] == [("pod", "HttpStatus", "HTTP 302")]


def test_what_a_pod_answers_is_not_quoted() -> None:
    """A pod's reason phrase, its garbage and its socket errors come back in fixed words."""

    async def main() -> dict[str, str]:
        async def garbage(_: web.Request) -> web.Response:
            return web.Response(text=f"vllm:spec_decode_num_drafts_total{{{SECRET}\n")

        app = web.Application()
        app.router.add_get("/garbage", garbage)
        async with serving(app) as pod, secret_holder() as (holder, _):
            targets = [
                ScrapeTarget("refusing", "stable", f"{holder}/metrics"),
                ScrapeTarget("garbage", "stable", f"{pod}/garbage"),
                ScrapeTarget("closed", "stable", f"http://127.0.0.1:{_free_port('127.0.0.1')}/"),
            ]
            samples = await scrape("tenant", targets, timeout=2, concurrency=4)
        return {s.pod: s.error.message for s in samples if s.error is not None}

    assert asyncio.run(main()) == {
        "refusing": "HTTP 403",
        "garbage": "not Prometheus text",
        "closed": "unreachable",
    }


@pytest.mark.parametrize(
    "answer", ["error-json", "error-status", "redirect", "not-a-vector", "malformed-series"]
)
def test_what_prometheus_answers_is_not_quoted(
    peagle_manifest: dict[str, Any], answer: str
) -> None:
    """Whatever the server at the tenant's URL answers, status says only that it was not
    a query result, or its status code; a redirect is not followed."""
    answers: dict[str, tuple[int, dict[str, Any]]] = {
        "error-json": (200, {"status": "error", "error": SECRET}),
        "error-status": (400, {"status": "error", "error": SECRET}),
        "not-a-vector": (200, {"status": "success", "data": {"resultType": SECRET}}),
        "malformed-series": (
            200,
            {"status": "success", "data": {"resultType": "vector", "result": [{SECRET: 1}]}},
        ),
    }
    expected = {
        "error-json": "not a query result",
        "error-status": "HTTP 400",
        "redirect": "HTTP 302",
        "not-a-vector": "not a query result",
        "malformed-series": "not a query result",
    }

    async def main() -> tuple[SpeculativeModel, str, list[str]]:
        async def query(_: web.Request) -> web.Response:
            status, body = answers[answer]
            return web.json_response(body, status=status)

        app = web.Application()
        app.router.add_get("/api/v1/query", query)
        async with (
            secret_holder() as (secret_url, asked),
            redirector(secret_url) as redirecting,
            serving(app) as answering,
        ):
            url = redirecting if answer == "redirect" else answering
            model = _on_prometheus(peagle_manifest, url)
            return await _evaluated(model, ObservedChildren(), _listing(url)), url, asked

    evaluated, url, asked = asyncio.run(main())
    assert asked == []
    assert SECRET not in evaluated.status.model_dump_json()
    assert f"(PrometheusUnavailable: Prometheus at {url}: {expected[answer]})" in _available(
        evaluated
    )


def test_refused_timed_out_and_unresolved_read_alike(peagle_manifest: dict[str, Any]) -> None:
    """The operator is no port scanner for a tenant: a closed port, a port that never
    answers and a name that does not resolve are all just unreachable."""

    async def main() -> list[tuple[str, str]]:
        async with tarpit() as (slow, _):
            urls = [
                f"http://127.0.0.1:{_free_port('127.0.0.1')}",
                slow,
                "http://no-such-host.invalid:9090",
            ]
            evaluator = _listing(*urls, max_timeout=1)
            return [
                (
                    url,
                    _available(
                        await _evaluated(
                            _on_prometheus(peagle_manifest, url), ObservedChildren(), evaluator
                        )
                    ),
                )
                for url in urls
            ]

    for url, message in asyncio.run(main()):
        assert f"(PrometheusUnavailable: Prometheus at {url}: unreachable)" in message


@pytest.mark.parametrize(
    "url",
    [
        "http://user:password@prometheus.monitoring:9090",
        "http://prometheus.monitoring:9090/api/v1/query?query=up&x=",
        "http://prometheus.monitoring:9090/#x",
        "file:///etc/passwd",
        "http://",
    ],
)
def test_a_prometheus_url_with_credentials_query_or_fragment_is_refused(
    peagle_manifest: dict[str, Any], url: str
) -> None:
    with pytest.raises(ValidationError, match=r"metrics\.prometheus\.url"):
        _on_prometheus(peagle_manifest, url)


def test_a_prometheus_url_may_have_a_path(peagle_manifest: dict[str, Any]) -> None:
    model = _on_prometheus(peagle_manifest, "https://thanos.monitoring:9090/prometheus/")
    assert model.spec.metrics.prometheus is not None


def test_only_allowed_prometheus_urls_are_queried(peagle_manifest: dict[str, Any]) -> None:
    """With an allowlist, another URL is never fetched, and status says why and how to fix
    it; an allowed one is queried (a trailing / aside)."""

    async def main() -> tuple[SpeculativeModel, SpeculativeModel, list[str], list[str]]:
        async with secret_holder() as (other, other_asked), secret_holder() as (ours, asked):
            evaluator = Evaluator(Outbound(prometheus_urls=frozenset([ours + "/"])))
            refused = _on_prometheus(peagle_manifest, other)
            allowed = _on_prometheus(peagle_manifest, ours)
            return (
                await _evaluated(refused, ObservedChildren(), evaluator),
                await _evaluated(allowed, ObservedChildren(), evaluator),
                other_asked,
                asked,
            )

    refused, allowed, other_asked, asked = asyncio.run(main())
    assert other_asked == [] and len(asked) == 1
    message = _available(refused)
    assert "not allowed by the operator" in message
    assert "evaluation.allowedPrometheusUrls" in message
    assert ": HTTP 403)" in _available(allowed)


def test_the_operator_caps_a_tenants_scrape_timeout(peagle_manifest: dict[str, Any]) -> None:
    """A model asking for 5 minutes against a tarpit waits the operator's ceiling."""

    async def main() -> tuple[SpeculativeModel, float]:
        async with tarpit() as (slow, _):
            model = _on_prometheus(peagle_manifest, slow, timeout="5m")
            started = time.monotonic()
            evaluated = await _evaluated(model, ObservedChildren(), _listing(slow, max_timeout=1))
            return evaluated, time.monotonic() - started

    evaluated, waited = asyncio.run(main())
    assert waited < 3
    assert ": unreachable)" in _available(evaluated)


def test_the_chart_passes_the_platform_teams_limits_to_the_operator() -> None:
    allowed = ["http://prometheus.monitoring:9090", "https://thanos.monitoring/prometheus"]
    documents = rendered(
        set_json=[
            f"evaluation.allowedPrometheusUrls={json.dumps(allowed)}",
            "evaluation.maxScrapeTimeout=12",
        ]
    )
    args = container(documents)["args"]
    flags = list(itertools.pairwise(args))
    assert ("--max-scrape-timeout", "12") in flags
    assert [value for flag, value in flags if flag == "--prometheus-url"] == allowed


def test_the_chart_refuses_a_prometheus_url_the_crd_would() -> None:
    result = render(
        set_json=['evaluation.allowedPrometheusUrls=["http://prometheus:9090/?x="]'], check=False
    )
    assert result.returncode != 0 and "allowedPrometheusUrls" in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254",
        "http://169.254.169.254/latest/meta-data",
        "http://[::ffff:169.254.169.254]:80",
        "http://[fe80::1%25eth0]:9090",
        "http://[fd00:ec2::254]",
    ],
)
def test_a_metadata_address_is_never_connected_to(url: str) -> None:
    started = time.monotonic()
    with pytest.raises(SourceUnavailable, match=f": {REFUSED_ADDRESS}$"):
        asyncio.run(query_prometheus(url, "ns", "m", timeout=10, loopback_allowed=True))
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0.0.0.0", "[::ffff:127.0.0.1]"])
def test_the_operators_own_pod_is_never_queried(peagle_manifest: dict[str, Any], host: str) -> None:
    """A real server on 127.0.0.1 (in a pod, the operator's own: its health and metrics
    ports, a sidecar) is never connected to at a loopback address, the unspecified
    address (which connects there) or a name resolving to one (`localhost`, through the
    real resolver), unless the install lists the URL; status says why in fixed words."""

    async def main() -> tuple[list[str], list[str], list[str], list[str]]:
        async with secret_holder() as (url, asked):
            tenants = _on_prometheus(peagle_manifest, url.replace("127.0.0.1", host))
            refused = _available(await _evaluated(tenants, ObservedChildren()))
            unlisted = await _evaluated(tenants, ObservedChildren(), _listing("http://other"))
            before = list(asked)
            listed = _available(
                await _evaluated(
                    tenants, ObservedChildren(), _listing(url.replace("127.0.0.1", host))
                )
            )
            return before, [refused, _available(unlisted)], [listed], asked

    before, refusals, listed, asked = asyncio.run(main())
    assert before == []
    assert f": {REFUSED_ADDRESS})" in refusals[0], refusals
    assert "not allowed by the operator" in refusals[1], refusals
    assert ": HTTP 403)" in listed[0] and len(asked) == 1, (listed, asked)


def test_a_name_resolving_to_a_metadata_address_is_refused() -> None:
    class Metadata(AbstractResolver):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [
                {
                    "hostname": host,
                    "host": "169.254.169.254",
                    "port": port,
                    "family": family,
                    "proto": 0,
                    "flags": 0,
                }
            ]

        async def close(self) -> None:
            pass

    async def main() -> None:
        resolver = CheckedResolver(loopback_allowed=True)
        resolver._resolver = Metadata()  # type: ignore[assignment]
        await resolver.resolve("metadata.google.internal", 80)

    with pytest.raises(RefusedAddress, match=REFUSED_ADDRESS):
        asyncio.run(main())
    assert not refused_address("10.0.0.1") and not refused_address("prometheus.monitoring")
    assert refused_address("::1") and not refused_address("::1", loopback_allowed=True)
