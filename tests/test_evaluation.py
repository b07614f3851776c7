"""Which pods an evaluation reads: ready pods running the configuration status asks for."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from specfleet.operator import render, track_plan
from specfleet.operator.api import (
    ConditionType,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.children import Track
from specfleet.operator.configs import config_of
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.metrics import Outbound, scrape
from specfleet.operator.observations import CanaryPending, ScrapeTarget
from specfleet.operator.pod_reading import (
    CurrentPods,
    canary_pending,
    current_pods,
    runtime_failures,
    scrape_targets,
)
from specfleet.operator.status import ObservedChildren
from specfleet.operator.track_plan import TrackPlans, plan
from tests.test_runtime_sim_server import PEAGLE, sim

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _model(manifest: dict[str, Any], tokens: int, candidate: int | None = None) -> SpeculativeModel:
    """A model whose stable pods run K=tokens, and a canary K=candidate (a trial)."""
    body = {**manifest, "metadata": {**manifest["metadata"], "namespace": "ns", "uid": "u"}}
    trial = {"tokens": candidate, "startedAt": "2026-01-01T00:00:00Z", "stableReplicas": 1}
    speculation = {"tokens": tokens, **({"trial": trial} if candidate is not None else {})}
    body["status"] = {"speculation": speculation}
    return SpeculativeModel.model_validate(body)


def _scrape_errors(model: SpeculativeModel, reason: str) -> float:
    labels = {"namespace": "ns", "model": model.metadata.name, "reason": reason}
    return REGISTRY.get_sample_value("specfleet_scrape_errors_total", labels) or 0.0


def _pod(name: str, model: SpeculativeModel, track: Track, **status: Any) -> dict[str, Any]:
    template = render.deployment(model, track)["spec"]["template"]
    return {
        "metadata": {
            "name": name,
            "labels": template["metadata"]["labels"],
            "annotations": template["metadata"]["annotations"],
        },
        "status": {
            "podIP": f"127.0.0.{len(name)}",
            "conditions": [{"type": "Ready", "status": "True"}],
            **status,
        },
    }


def _current(model: SpeculativeModel, children: ObservedChildren) -> CurrentPods:
    return current_pods(children, plan(model.spec, model.status))


def _targets(model: SpeculativeModel, children: ObservedChildren) -> list[ScrapeTarget]:
    plans = plan(model.spec, model.status)
    return scrape_targets(plans, current_pods(children, plans))


def test_pods_of_an_older_k_are_not_read(peagle_manifest: dict[str, Any]) -> None:
    peagle_manifest["spec"]["speculation"]["switching"] = "Restart"  # a new K, a new pod
    before = _model(peagle_manifest, tokens=3)
    after = _model(peagle_manifest, tokens=1)
    pods = [_pod("old", before, "stable"), _pod("new-pod", after, "stable")]
    targets = _targets(after, ObservedChildren(pods=pods))
    assert [t.pod for t in targets] == ["new-pod"]
    assert targets[0].url == "http://127.0.0.7:8000/metrics"
    assert targets[0].track == "stable"


def test_unready_and_terminating_pods_are_not_read(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3)
    unready = _pod("a", model, "stable", conditions=[{"type": "Ready", "status": "False"}])
    leaving = _pod("b", model, "stable")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:00Z"
    gone = ObservedChildren(pods=[unready, leaving])
    assert _targets(model, gone) == []


def test_canary_pods_are_read_as_canary(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3, candidate=5)
    canary = ObservedChildren(pods=[_pod("c", model, "canary")])
    targets = _targets(model, canary)
    assert [(t.pod, t.track) for t in targets] == [("c", "canary")]


def test_an_unschedulable_canary_reports_since_when(peagle_manifest: dict[str, Any]) -> None:
    model = _model(peagle_manifest, tokens=3, candidate=5)
    pending = _pod(
        "c",
        model,
        "canary",
        phase="Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": SCHEDULER_SAYS,
            }
        ],
    )
    pending["metadata"]["creationTimestamp"] = "2026-11-29T12:00:00Z"
    said = CanaryPending(1795953600.0, SCHEDULER_SAYS)
    assert canary_pending(ObservedChildren(pods=[pending])) == said
    assert canary_pending(ObservedChildren(pods=[_pod("s", model, "stable")])) is None


SCHEDULER_SAYS = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def test_a_failed_runtime_is_reported_for_the_track_whose_config_it_runs(
    peagle_manifest: dict[str, Any],
) -> None:
    model = _model(peagle_manifest, tokens=3, candidate=3)
    exited = {
        "containerStatuses": [
            {
                "ready": False,
                "state": {"terminated": {"exitCode": 1, "message": "draft vocab 32000 != 128256"}},
            }
        ]
    }
    failed = _pod("c", model, "canary", **exited)
    assert runtime_failures(_current(model, ObservedChildren(pods=[failed]))) == {
        "canary": "pod c: draft vocab 32000 != 128256 (exit code 1)"
    }
    # A pod of a config the track no longer runs (an older K) is not the track's failure.
    older = _model(peagle_manifest, tokens=3, candidate=5)
    assert runtime_failures(_current(older, ObservedChildren(pods=[failed]))) == {}


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def test_a_pod_left_out_is_named_in_status_and_counted(peagle_manifest: dict[str, Any]) -> None:
    """Two real sims, one serving a position no engine drafts: the other one's counters
    still make the window, and status says which pod was left out and why."""
    hostile = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000"} 1\n'
    port = _free_port("127.0.0.3")  # the pods "bad" and "good" are at 127.0.0.3 and .4
    peagle_manifest["spec"]["runtime"]["port"] = port
    # Restart: a hot pod is read only once it reports its schedule's generation.
    peagle_manifest["spec"]["speculation"]["switching"] = "Restart"
    model = _model(peagle_manifest, tokens=3)
    children = ObservedChildren(pods=[_pod("bad", model, "stable"), _pod("good", model, "stable")])
    before = _scrape_errors(model, "ImpossibleCounters")

    async def main() -> SpeculativeModel:
        async with (
            sim(PEAGLE, host="127.0.0.3", port=port) as (bad, _),
            sim(PEAGLE, host="127.0.0.4", port=port),
            aiohttp.ClientSession() as session,
        ):
            async with session.post(bad + "/admin/metrics", json={"text": hostile}):
                pass
            evaluator, evaluated = Evaluator(), model
            for window in range(2):
                await asyncio.sleep(0.3)
                decided = await evaluator.evaluate(
                    evaluated, children, T0 + timedelta(minutes=window)
                )
                evaluated = evaluated.model_copy(update={"status": decided.status})
            return evaluated

    window = asyncio.run(main()).status.acceptance
    listed = window.pods_left_out or []
    assert [(p.pod, p.reason) for p in listed] == [("bad", "ImpossibleCounters")]
    assert "position 1000000" in listed[0].message
    assert window.draft_tokens > 0 and len(window.per_position) == 3  # the good pod's window
    assert _scrape_errors(model, "ImpossibleCounters") == before + 2


def test_an_evaluation_works_out_what_each_track_runs_once(
    peagle_manifest: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pods it reads, the K it reads them at and the tuner's drafting style all go by
    one track plan, worked out once an evaluation."""
    planned: list[SpeculativeModelStatus] = []

    def counted(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> TrackPlans:
        planned.append(status)
        return plan(spec, status)

    monkeypatch.setattr(track_plan, "plan", counted)
    model = _model(peagle_manifest, tokens=3)
    decided = asyncio.run(Evaluator().evaluate(model, ObservedChildren(), T0))
    assert decided.status.acceptance.measured_at == T0  # it did evaluate
    assert planned == [model.status]


@pytest.mark.parametrize("answer", ["unreachable", "html"])
def test_prometheus_that_cannot_answer_makes_an_inconclusive_window(
    peagle_manifest: dict[str, Any], answer: str
) -> None:
    async def main() -> SpeculativeModel:
        async def bad_gateway(_: web.Request) -> web.Response:
            return web.Response(status=502, text="<html>502 Bad Gateway</html>")

        app = web.Application()
        app.router.add_get("/api/v1/query", bad_gateway)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1] if answer == "html" else _free_port("127.0.0.1")
        peagle_manifest["spec"]["metrics"] = {
            "source": "Prometheus",
            "prometheus": {"url": f"http://127.0.0.1:{port}"},
            "scrapeTimeout": "2s",
        }
        model = _model(peagle_manifest, tokens=3)
        try:
            listed = Outbound(prometheus_urls=frozenset([f"http://127.0.0.1:{port}"]))
            decided = await Evaluator(listed).evaluate(model, ObservedChildren(), T0)
        finally:
            await runner.cleanup()
        return model.model_copy(update={"status": decided.status})

    before = _scrape_errors(_model(peagle_manifest, tokens=3), "PrometheusUnavailable")
    model = asyncio.run(main())
    assert model.status.acceptance.reason == "PrometheusUnavailable"
    available = next(
        c for c in model.status.conditions if c.type is ConditionType.METRICS_AVAILABLE
    )
    assert available.reason == "PrometheusUnavailable"
    assert "127.0.0.1" in available.message
    assert _scrape_errors(model, "PrometheusUnavailable") == before + 1


def test_an_ipv6_pod_is_scraped_at_its_bracketed_address(peagle_manifest: dict[str, Any]) -> None:
    """On an IPv6 cluster every pod IP has colons: unbracketed, the URL's host ended at
    the first one and every scrape was Unreachable (issue 42)."""
    from tests.hostile_servers import serving
    from tests.test_metrics import page

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=page(100, [80, 60, 30], generation=500))

    app = web.Application()
    app.router.add_get("/metrics", metrics)

    async def main() -> list[Any]:
        async with serving(app, "::1") as url:
            manifest = {**peagle_manifest, "spec": {**peagle_manifest["spec"]}}
            port = int(url.rsplit(":", 1)[1])
            manifest["spec"]["runtime"] = {**manifest["spec"]["runtime"], "port": port}
            model = _model(manifest, tokens=3)
            pod = _pod("v6", model, "stable", podIP="::1")
            targets = _targets(model, ObservedChildren(pods=[pod]))
            assert [t.url for t in targets] == [f"http://[::1]:{port}/metrics"]
            return await scrape("tenant", targets, timeout=5, concurrency=1)

    (sample,) = asyncio.run(main())
    assert sample.error is None and sample.counters is not None
    assert sample.counters.drafts == 100


def test_stable_pods_of_a_running_config_that_takes_no_k_hot_are_read(
    peagle_manifest: dict[str, Any],
) -> None:
    """Switching Hot, the spec's method takes K hot (P-EAGLE) while the stable pods still
    run the last good config, suffix decoding, rendered without --hot-schedule: their
    windows count, with no schedule generation. The evaluation asked the spec's method
    whether they take K hot, and left every stable pod out until the new config was
    promoted (the track plan answers for the config they run)."""
    port = _free_port("127.0.0.5")  # the stable pod "suffix" is at 127.0.0.6
    peagle_manifest["spec"]["runtime"]["port"] = port
    peagle_manifest["spec"]["speculation"]["switching"] = "Hot"
    model = _model(peagle_manifest, tokens=3)
    suffix = config_of(
        SpeculativeModelSpec.model_validate(
            {
                **peagle_manifest["spec"],
                "draft": {"method": "suffix"},
                "speculation": {"tokens": 3, "minTokens": 3, "maxTokens": 3},
            }
        )
    )
    hot = {"generation": 1, "schedule": [{"tokens": 3}]}
    status = {
        "speculation": {"tokens": 3, "hotSchedule": hot},
        "config": {"running": suffix.model_dump(by_alias=True, exclude_none=True)},
    }
    model = model.model_copy(update={"status": SpeculativeModelStatus.model_validate(status)})
    stable = plan(model.spec, model.status).stable
    assert stable.spec.draft.method == "suffix" and not stable.hot
    children = ObservedChildren(pods=[_pod("suffix", model, "stable")])

    async def main() -> SpeculativeModel:
        async with sim(PEAGLE, host="127.0.0.6", port=port):
            evaluator, evaluated = Evaluator(), model
            for window in range(2):
                await asyncio.sleep(0.3)
                decided = await evaluator.evaluate(
                    evaluated, children, T0 + timedelta(minutes=window)
                )
                evaluated = evaluated.model_copy(update={"status": decided.status})
            return evaluated

    window = asyncio.run(main()).status.acceptance
    assert not window.pods_left_out
    assert window.draft_tokens > 0
