"""Reading acceptance metrics (the I/O of an evaluation): vLLM's /metrics pages scraped
from the pods, or Prometheus queried, into `observations.PodSample`s. Cutting them
into windows is `observations`' job, judging them `stats` and `tuner`'s.
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar, cast
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from prometheus_client.parser import text_fd_to_metric_families

from specfleet.operator.api import (
    MAX_SCRAPE_TIMEOUT_SECONDS,
    LeftOutReason,
    Metrics,
    MetricsSource,
)
from specfleet.operator.children import TRACKS, Track
from specfleet.operator.observations import (
    MAX_SERIES,
    SERIES_READ,
    BadMetrics,
    PodError,
    PodSample,
    ScrapeTarget,
    SourceUnavailable,
    SpecDecodeCounters,
    counters_from_series,
    cut,
    series_name,
)
from specfleet.operator.turns import Turns

# What one pod's page may cost, whatever it serves. A vLLM page is 100-200 KB per engine,
# mostly histograms; the series read here are a few KB of it.
MAX_BODY_BYTES = 8 * 2**20
MAX_LINE_BYTES = 64 * 2**10  # held while a line arrives over several chunks
MAX_KEPT_BYTES = 2**20
READ_CHUNK = 64 * 2**10
# What one sample line may carry, checked as the page arrives, before anything parses it
# (Prometheus' label_limit and label_value_length_limit): vLLM's lines carry 2 to 4 labels
# of a few dozen characters. prometheus_client's parser spends about 0.5 us of CPU on each
# character of a label value and more on each escape: a page of escaped values within the
# other caps cost 0.65 s.
MAX_LABELS = 32
MAX_LABEL_VALUE_BYTES = 1024  # as served, escapes included
# The CPU one page's parsing may take, in the parser's thread (a real vLLM page: about
# 1.2 ms): checked after each line, which the caps above keep to a few milliseconds.
PARSE_CPU_SECONDS = 0.05
# One model's Prometheus answer: about 15 KB of JSON per pod and engine.
MAX_PROMETHEUS_BYTES = 32 * 2**20
# What status may say of a failed request. The tenant chooses the address (a pod's port,
# a Prometheus URL) and reads status: quoting the answer or the socket's error would hand
# them what the operator's pod can reach, so the words are fixed and a refused connection,
# a timeout and a name that does not resolve read alike.
UNREACHABLE = "unreachable"
NOT_A_QUERY_RESULT = "not a query result"

T = TypeVar("T")
# The pods one model's scrape reads at once.
SCRAPE_CONCURRENCY = 64


@dataclass(frozen=True)
class Outbound:
    """What the platform team lets a model's spec make the operator's pod fetch: the
    longest wait (spec.metrics.scrapeTimeout is the tenant's, up to 5 minutes) and the
    Prometheus URLs it may query (none listed: any the CRD admits but those at a loopback,
    link-local or metadata address; a listed one may be at a loopback address)."""

    max_timeout: float = MAX_SCRAPE_TIMEOUT_SECONDS
    prometheus_urls: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        urls = frozenset(url.rstrip("/") for url in self.prometheus_urls)
        object.__setattr__(self, "prometheus_urls", urls)

    def timeout(self, metrics: Metrics) -> float:
        asked = metrics.scrape_timeout.length.total_seconds()
        return min(asked, self.max_timeout)

    def listed(self, url: str) -> bool:
        """The install names `url`: it may be the operator's own pod (a loopback address,
        e.g. a Prometheus proxy beside it), which no model may name otherwise."""
        return url.rstrip("/") in self.prometheus_urls

    def refused(self, url: str) -> str | None:
        """Why the operator will not query `url`, or None."""
        if not self.prometheus_urls or self.listed(url):
            return None
        # The allowed URLs last: a long list is what a message cut short loses.
        return (
            f"Prometheus at {url}: not allowed by the operator (the chart's "
            "evaluation.allowedPrometheusUrls); set metrics.prometheus.url to one of "
            + ", ".join(sorted(self.prometheus_urls))
        )


class Unanswered(ValueError):
    """A Prometheus answer that is not a query result, in fixed words (see UNREACHABLE)."""


# Cloud metadata services (instance credentials): link-local, and AWS's IPv6 address.
_METADATA = ipaddress.ip_address("fd00:ec2::254")
# What status says of a Prometheus URL at such an address, or at a name resolving to one.
REFUSED_ADDRESS = "a loopback, link-local or metadata address, which the operator does not query"


class RefusedAddress(Exception):
    """A Prometheus URL at an address the operator does not query (`refused_address`).
    Not an OSError: aiohttp would make that an unreachable host."""


def refused_address(host: str, loopback_allowed: bool = False) -> bool:
    """`host` is an address no Prometheus a model names may have: the operator's own pod
    (loopback, or the unspecified address, which connects there; `loopback_allowed` where
    the install lists the URL), link-local (169.254.169.254, where clouds hand out the
    node's credentials) or a metadata service's."""
    try:
        address = ipaddress.ip_address(host.split("%")[0])  # less an IPv6 zone
    except ValueError:
        return False  # a name: judged by what it resolves to
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return not loopback_allowed
    return address.is_link_local or address == _METADATA


class CheckedResolver(AbstractResolver):
    """Resolves as aiohttp does, refusing a name that resolves to a refused address:
    checked on the addresses the connection then uses, so a name cannot change between
    the check and the connect."""

    def __init__(self, loopback_allowed: bool = False) -> None:
        self._resolver = aiohttp.DefaultResolver()
        self._loopback_allowed = loopback_allowed

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        if any(refused_address(r["host"], self._loopback_allowed) for r in found):
            raise RefusedAddress(REFUSED_ADDRESS)
        return found

    async def close(self) -> None:
        await self._resolver.close()


# The metric name a line is about: a sample's name, or the name in `# TYPE` / `# HELP`.
_LINE_NAME = re.compile(rb"[ \t]*(?:#[ \t]+(?:TYPE|HELP)[ \t]+)?([a-zA-Z_:][a-zA-Z0-9_:]*)")


class PageParser:
    """The one thread pages are parsed in, never the event loop: a page the caps admit can
    still cost up to PARSE_CPU_SECONDS, and on the loop that stalls every reconcile, watch
    and the liveness endpoint. One thread, since the parser is pure Python and a second
    would only take the GIL from the loop more often. Namespaces take turns (`Turns`):
    one tenant's 64 hostile pods cost 64 budgets, about 3 s, a round, and another
    namespace's page waits for one of them."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: Turns[tuple[Callable[[], Any], Future[Any]]] = Turns()
        self._thread: threading.Thread | None = None

    def submit(self, namespace: str, work: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        with self._changed:
            self._waiting.add(namespace, (work, future))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="specfleet-page-parser", daemon=True
                )
                self._thread.start()
            self._changed.notify()
        return future

    def _next(self) -> tuple[Callable[[], Any], Future[Any]]:
        """The next page to parse, marked running; a page whose scrape gave up waiting is
        dropped."""
        with self._changed:
            while True:
                taken = self._waiting.take(lambda page: page[1].set_running_or_notify_cancel())
                if taken is not None:
                    return taken
                self._changed.wait()

    def _serve(self) -> None:
        while True:
            work, future = self._next()
            try:
                future.set_result(work())
            except BaseException as error:  # handed to the scrape waiting for it
                future.set_exception(error)


PAGE_PARSER = PageParser()


def check_labels(line: bytes) -> None:
    """Refuse a sample line with more than MAX_LABELS labels or a label value over
    MAX_LABEL_VALUE_BYTES, in time linear in the line and without parsing it: escapes
    (a backslash and the character it escapes) are masked at their length, so the quotes
    left delimit the values."""
    if line.lstrip().startswith(b"#"):
        return  # HELP and TYPE carry no labels
    masked = line.replace(b"\\\\", b"\0\0").replace(b'\\"', b"\0\0")
    values = masked.split(b'"')[1::2]
    if len(values) > MAX_LABELS:
        raise BadMetrics(LeftOutReason.TOO_LARGE, f"a line has over {MAX_LABELS} labels")
    if any(len(value) > MAX_LABEL_VALUE_BYTES for value in values):
        raise BadMetrics(
            LeftOutReason.TOO_LARGE, f"a label value is over {MAX_LABEL_VALUE_BYTES} bytes"
        )


def _budgeted_lines(text: str, budget: float) -> Iterator[str]:
    """`text` line by line, refused once the thread reading it has spent `budget` seconds
    of CPU since the first line."""
    started = time.thread_time()
    for line in io.StringIO(text):
        if time.thread_time() - started > budget:
            raise BadMetrics(
                LeftOutReason.TOO_LARGE, f"the page took over {budget * 1000:g} ms of CPU to parse"
            )
        yield line


class PageReader:
    """Reads a /metrics page as it arrives, keeping only the lines about the series read
    here: whatever a pod serves, a reading holds at most a chunk, a line being received
    and MAX_KEPT_BYTES, and stops at MAX_BODY_BYTES or MAX_SERIES lines kept, or at a
    line over the label caps (check_labels). `counters` parses what was kept, within
    PARSE_CPU_SECONDS; `parse` does so in the parser's thread, off the event loop.

    A vLLM page is mostly histograms never used here; parsing all of it cost about 8 ms
    of CPU per pod. Lines of other series are skipped unparsed, so a malformed one
    cannot hide the rest."""

    def __init__(self) -> None:
        self._received = 0
        self._partial = b""
        self._kept: list[bytes] = []
        self._kept_bytes = 0

    def feed(self, chunk: bytes) -> None:
        self._received += len(chunk)
        if self._received > MAX_BODY_BYTES:
            raise BadMetrics(
                LeftOutReason.TOO_LARGE, f"the page is over {MAX_BODY_BYTES // 2**20} MiB"
            )
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            raise BadMetrics(
                LeftOutReason.TOO_LARGE, f"a line is over {MAX_LINE_BYTES // 2**10} KiB"
            )
        for line in lines:
            self._keep(line)

    def _keep(self, line: bytes) -> None:
        match = _LINE_NAME.match(line)
        if match is None or series_name(match.group(1).decode()) is None:
            return
        check_labels(line)
        self._kept.append(line)
        self._kept_bytes += len(line) + 1
        if len(self._kept) > MAX_SERIES or self._kept_bytes > MAX_KEPT_BYTES:
            raise BadMetrics(
                LeftOutReason.TOO_LARGE,
                f"more than {MAX_SERIES} lines or {MAX_KEPT_BYTES // 2**20} MiB of vLLM series",
            )

    def counters(self) -> SpecDecodeCounters:
        """The page's counters; BadMetrics on garbage, NaN, or no vLLM series."""
        self._keep(self._partial)  # a last line without a newline
        self._partial = b""
        try:
            text = b"\n".join(self._kept).decode() + "\n"
            series = [
                (sample.name, sample.labels, float(sample.value))
                for family in text_fd_to_metric_families(
                    # It only iterates over its lines.
                    cast(TextIO, _budgeted_lines(text, PARSE_CPU_SECONDS))
                )
                for sample in family.samples
            ]
        except BadMetrics:
            raise  # over the CPU budget
        except ValueError:  # UnicodeDecodeError is one too; its words quote the page
            raise BadMetrics(LeftOutReason.UNPARSEABLE, "not Prometheus text") from None
        if not any(name.startswith("vllm:") for name, _, _ in series):
            raise BadMetrics(LeftOutReason.NO_VLLM_METRICS, "no vLLM metrics on the page")
        return counters_from_series(series)

    async def parse(self, namespace: str) -> SpecDecodeCounters:
        """`counters`, in the parser's thread, in `namespace`'s turn (PageParser): the event
        loop waits for it, never runs it."""
        return await asyncio.wrap_future(PAGE_PARSER.submit(namespace, self.counters))


def parse_vllm_metrics(text: str) -> SpecDecodeCounters:
    """Counters from a whole vLLM /metrics page (see PageReader)."""
    reader = PageReader()
    for start in range(0, len(text), READ_CHUNK):
        reader.feed(text[start : start + READ_CHUNK].encode())
    return reader.counters()


def _http_status(status: int) -> str:
    return f"HTTP {status}"  # not the reason phrase: the server chose it


async def _read_page(
    session: aiohttp.ClientSession, namespace: str, url: str, timeout: float
) -> SpecDecodeCounters:
    # The total timeout covers the body too: a page trickling in is cut at `timeout`.
    # A redirect is not followed: a pod's 302 would aim the operator at any address.
    async with session.get(
        url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False
    ) as response:
        if response.status != 200:
            raise BadMetrics(LeftOutReason.HTTP_STATUS, _http_status(response.status))
        reader = PageReader()
        async for chunk in response.content.iter_chunked(READ_CHUNK):
            reader.feed(chunk)
    return await reader.parse(namespace)


async def _scrape_one(
    session: aiohttp.ClientSession,
    namespace: str,
    target: ScrapeTarget,
    timeout: float,
    semaphore: asyncio.Semaphore,
) -> PodSample:
    async with semaphore:
        try:
            counters = await _read_page(session, namespace, target.url, timeout)
            return PodSample(target.pod, target.track, time.time(), counters)
        except BadMetrics as error:
            problem = error.error()
        except TimeoutError:
            problem = PodError(LeftOutReason.TIMEOUT, f"no whole answer within {timeout:g}s")
        except aiohttp.ClientError:
            problem = PodError(LeftOutReason.UNREACHABLE, UNREACHABLE)
        return PodSample(target.pod, target.track, time.time(), None, problem)


async def scrape(
    namespace: str, targets: Sequence[ScrapeTarget], timeout: float, concurrency: int
) -> list[PodSample]:
    """Scrape every target (pods in `namespace`) at most `concurrency` at a time; a failure
    stays with its pod."""
    semaphore = asyncio.Semaphore(max(1, concurrency))
    async with aiohttp.ClientSession() as session:
        return list(
            await asyncio.gather(
                *(_scrape_one(session, namespace, t, timeout, semaphore) for t in targets)
            )
        )


def _promql_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def prometheus_query(namespace: str, model: str) -> str:
    """PromQL selecting every series the windows need for one model's pods."""
    names = "|".join(SERIES_READ)
    return (
        f'{{__name__=~"({names})(_total)?",'
        f"namespace={_promql_string(namespace)},model={_promql_string(model)}}}"
    )


def samples_from_prometheus(payload: Mapping[str, Any], at: float) -> list[PodSample]:
    """PodSamples from an instant-query response (one per pod with a stable/canary track)."""
    data = payload.get("data")
    if (
        payload.get("status") != "success"
        or not isinstance(data, dict)
        or data.get("resultType") != "vector"
    ):
        raise Unanswered(NOT_A_QUERY_RESULT)
    by_pod: dict[tuple[str, str], list[tuple[str, Mapping[str, str], float]]] = {}
    try:
        for item in data.get("result", []):
            labels: dict[str, str] = item["metric"]
            key = (labels.get("pod", ""), labels.get("track", ""))
            value = float(item["value"][1])
            by_pod.setdefault(key, []).append((labels["__name__"], labels, value))
    except (KeyError, IndexError, TypeError, AttributeError, ValueError):
        raise Unanswered(NOT_A_QUERY_RESULT) from None
    samples = []
    for (pod, track), series in sorted(by_pod.items()):
        if not pod or track not in TRACKS:
            continue  # not one of ours: no pod label or an unknown track
        track_: Track = "stable" if track == "stable" else "canary"
        try:
            samples.append(PodSample(pod, track_, at, counters_from_series(series)))
        except BadMetrics as error:
            samples.append(PodSample(pod, track_, at, None, error.error()))
    return samples


async def query_prometheus(
    url: str, namespace: str, model: str, timeout: float, loopback_allowed: bool = False
) -> list[PodSample]:
    """Current counters of a model's pods from Prometheus' HTTP API (instant query).

    Raises SourceUnavailable when the server cannot answer (unreachable, timed out, an
    answer that is not a query result) or is at a refused address (`refused_address`,
    never connected to): then no pod has data, and the window is inconclusive. Its
    message is one of a few fixed words (see UNREACHABLE), never the answer: no redirect
    is followed and no other status's body is read.
    """
    endpoint = url.rstrip("/") + "/api/v1/query"
    try:
        # An address literal is never resolved: checked here.
        if refused_address(urlsplit(url).hostname or "", loopback_allowed):
            raise RefusedAddress(REFUSED_ADDRESS)
        connector = aiohttp.TCPConnector(resolver=CheckedResolver(loopback_allowed))
        async with (
            aiohttp.ClientSession(connector=connector) as session,
            session.get(
                endpoint,
                params={"query": prometheus_query(namespace, model)},
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=False,
            ) as response,
        ):
            if response.status != 200:
                raise Unanswered(_http_status(response.status))
            body = bytearray()
            async for chunk in response.content.iter_chunked(READ_CHUNK):
                body += chunk
                if len(body) > MAX_PROMETHEUS_BYTES:
                    raise Unanswered(f"the answer is over {MAX_PROMETHEUS_BYTES // 2**20} MiB")
        try:
            payload = json.loads(body)
        except ValueError:
            raise Unanswered(NOT_A_QUERY_RESULT) from None
        if not isinstance(payload, dict):
            raise Unanswered(NOT_A_QUERY_RESULT)
        return samples_from_prometheus(payload, time.time())
    except RefusedAddress:
        raise SourceUnavailable(cut(f"Prometheus at {url}: {REFUSED_ADDRESS}")) from None
    except (TimeoutError, aiohttp.ClientError):
        raise SourceUnavailable(cut(f"Prometheus at {url}: {UNREACHABLE}")) from None
    except Unanswered as error:
        raise SourceUnavailable(cut(f"Prometheus at {url}: {error}")) from None


def fetch(
    namespace: str,
    model: str,
    metrics: Metrics,
    targets: Sequence[ScrapeTarget],
    outbound: Outbound,
) -> Coroutine[Any, Any, list[PodSample]] | None:
    """The request that reads a model's counters, as its `spec.metrics` asks within what
    `outbound` allows: a Prometheus query, or a scrape of `targets`; None while there is
    no pod to scrape. Raises SourceUnavailable for a Prometheus URL the install does not
    allow, which is never queried."""
    timeout = outbound.timeout(metrics)
    if metrics.source is MetricsSource.PROMETHEUS and metrics.prometheus:
        url = metrics.prometheus.url
        refused = outbound.refused(url)
        if refused is not None:
            raise SourceUnavailable(cut(refused))
        listed = outbound.listed(url)
        return query_prometheus(url, namespace, model, timeout, loopback_allowed=listed)
    if not targets:
        return None
    return scrape(namespace, targets, timeout, SCRAPE_CONCURRENCY)
