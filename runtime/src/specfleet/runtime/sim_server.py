"""The simulated engine's HTTP server: vLLM's surface, counters from `SimEngine`.

Time advances in fixed ticks of simulated time (the profile's `tick`), as many as the
wall clock has covered, so a seeded run gives the same counts at the same tick however
the host schedules the process. Real requests join the engine's queue and are answered
at the end of the tick in which their last token is generated.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import yaml
from aiohttp import web
from prometheus_client import PROCESS_COLLECTOR, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from specfleet.runtime.config import RuntimeConfig
from specfleet.runtime.hot_schedule import (
    PATH as SCHEDULE_PATH,
)
from specfleet.runtime.hot_schedule import (
    Schedule,
    ScheduleRefused,
    ScheduleState,
    authorize,
    parse_schedule,
    requested_generation,
    requested_schedule,
)
from specfleet.runtime.sim_engine import Histogram, SimEngine, SimRequest
from specfleet.runtime.sim_model import Load, SimProfile

DEFAULT_HOST = "0.0.0.0"  # vLLM's default: every interface
DEFAULT_PORT = 8000
DEFAULT_MAX_TOKENS = 16  # vLLM's default for /v1/completions
MAX_NUM_SEQS = 256  # vLLM's default: the end of a one-K schedule's band
MAX_CATCH_UP_TICKS = 50  # after a long stall, skip ahead rather than burn the CPU
GARBAGE = "vllm:spec_decode_num_drafts_total{{{ this is not \x00 prometheus text\n"
_WORDS = ("the", "draft", "proposes", "tokens", "and", "the", "target", "verifies", "them")


class SimServer:
    """The sim's state beside the engine: names, fault switches, the tick clock."""

    def __init__(self, config: RuntimeConfig, profile: SimProfile) -> None:
        self.config = config
        self.served_name = config.name_served
        k_max = (config.num_speculative_tokens or 0) if config.method.speculates else 0
        # With --hot-schedule the operator hands the engine new schedules between steps
        # (as specfleet's vLLM plugin does): K up to the ceiling, k_max.
        self.schedule: ScheduleState | None = None
        if config.hot_schedule and k_max:
            startup = [[e.start, e.end, e.k] for e in config.startup_schedule]
            self.schedule = ScheduleState(parse_schedule(startup, k_max))
        self.engine = SimEngine(
            profile,
            k_max=k_max,
            k_for_batch=config.k_for_batch if self.schedule is None else self.k_scheduled,
            drafting=config.method.drafting,
            seed=config.seed,
        )
        self.created = time.time()
        # A page /metrics serves verbatim instead of the engine's counters (fault tests).
        self.metrics_text: str | None = None
        self.metrics_delay = 0.0
        self._request_ids = itertools.count(1)
        self._ticks_done = 0
        self._started = time.monotonic()

    def k_scheduled(self, batch: int) -> int:
        """K at a batch size under the hot schedule in force (a gap or the tail keeps the
        band before's K, as vLLM's lookup does)."""
        assert self.schedule is not None
        k = 0
        for start, end, band_k in self.schedule.schedule:
            if start > batch:
                break
            k = band_k
            if batch <= end:
                break
        return k

    def schedule_report(self) -> dict[str, Any]:
        """What GET /specfleet/schedule answers, as the vLLM plugin's report does."""
        if self.schedule is None:
            reason = "the engine started without --hot-schedule: K changes need a restart"
            return {"hot": False, "reason": reason, "ceiling": self.engine.k_max}
        bands = self.schedule.schedule
        return {
            "hot": True,
            "reason": None,
            "ceiling": self.engine.k_max,
            "maxNumSeqs": MAX_NUM_SEQS,
            "generation": self.schedule.generation,
            "schedule": [list(band) for band in bands],
            "ks": sorted({k for _, _, k in bands}),
        }

    def set_schedule(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """POST /specfleet/schedule: the report with `changed`, or its refusal."""
        if self.schedule is None:
            return {**self.schedule_report(), "refused": True}, 409
        try:
            generation = requested_generation(body)
            schedule: Schedule = requested_schedule(body, self.engine.k_max, MAX_NUM_SEQS)
            changed = self.schedule.decide(generation, schedule)
        except ScheduleRefused as error:
            refused = {**self.schedule_report(), "refused": True, "reason": str(error)}
            return refused, error.status
        if changed:
            self.catch_up()  # the ticks before the change ran at the old schedule
            self.schedule.schedule, self.schedule.generation = schedule, generation
            self.schedule.applied_at = time.time()
        return {**self.schedule_report(), "refused": False, "changed": changed}, 200

    def catch_up(self) -> None:
        """Advance the engine by the whole ticks the wall clock has covered."""
        tick = self.engine.profile.tick
        due = int((time.monotonic() - self._started) / tick) - self._ticks_done
        if due > MAX_CATCH_UP_TICKS:
            self._ticks_done += due - MAX_CATCH_UP_TICKS
            due = MAX_CATCH_UP_TICKS
        for _ in range(due):
            self.engine.advance(tick)
            self._ticks_done += 1

    async def run_clock(self) -> None:
        while True:
            self.catch_up()
            tick = self.engine.profile.tick
            next_at = self._started + (self._ticks_done + 1) * tick
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    def next_request_id(self) -> int:
        return next(self._request_ids)


SERVER_KEY = web.AppKey("server", SimServer)


class VllmMetrics:
    """A prometheus-client collector that reads the engine's counters at scrape time."""

    def __init__(self, server: SimServer) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        server = self.server
        engine, counters = server.engine, server.engine.counters
        labels = ["model_name", "engine"]
        values = [server.served_name, "0"]
        created = server.created

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            family = CounterMetricFamily(name, doc, labels=labels)
            family.add_metric(values, value, created=created)
            return family

        def histogram(name: str, doc: str, state: Histogram) -> HistogramMetricFamily:
            family = HistogramMetricFamily(name, doc, labels=labels)
            cumulative, buckets = 0, []
            for bound, count in zip(
                [*state.bounds, float("inf")], state.bucket_counts, strict=True
            ):
                cumulative += count
                buckets.append((_bucket_label(bound), cumulative))
            family.add_metric(values, buckets, state.sum)
            return family

        if server.config.method.speculates:
            yield counter(
                "vllm:spec_decode_num_drafts",
                "Number of spec decoding drafts.",
                counters.num_drafts,
            )
            yield counter(
                "vllm:spec_decode_num_draft_tokens",
                "Number of draft tokens.",
                counters.num_draft_tokens,
            )
            yield counter(
                "vllm:spec_decode_num_accepted_tokens",
                "Number of accepted tokens.",
                counters.num_accepted_tokens,
            )
            per_position = CounterMetricFamily(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                labels=[*labels, "position"],
            )
            for position, count in enumerate(counters.accepted_per_position):
                per_position.add_metric([*values, str(position)], count, created=created)
            yield per_position
        yield counter(
            "vllm:generation_tokens", "Number of generation tokens processed.",
            counters.generation_tokens,
        )  # fmt: skip
        yield counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", counters.prompt_tokens
        )
        running = GaugeMetricFamily(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            labels=labels,
        )  # fmt: skip
        running.add_metric(values, len(engine.running))
        yield running
        waiting = GaugeMetricFamily(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            labels=labels,
        )  # fmt: skip
        waiting.add_metric(values, len(engine.waiting))
        yield waiting
        yield histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            counters.inter_token_latency,
        )
        yield histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            counters.iteration_tokens,
        )
        if server.schedule is not None:
            generation = GaugeMetricFamily(
                "specfleet:schedule_generation",
                "The hot schedule's generation in force (0: the startup schedule).",
            )
            generation.add_metric([], server.schedule.generation)
            yield generation
            applied = GaugeMetricFamily(
                "specfleet:schedule_applied_timestamp_seconds",
                "When the hot schedule's generation in force took effect (Unix seconds).",
            )
            applied.add_metric([], server.schedule.applied_at)
            yield applied


def _bucket_label(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def _error(status: int, message: str, kind: str = "BadRequestError") -> web.Response:
    # vLLM's OpenAI-style error body.
    return web.json_response(
        {"error": {"message": message, "type": kind, "param": None, "code": status}},
        status=status,
    )


async def _body(request: web.Request) -> Any:
    """A JSON or YAML request body (YAML is a superset of JSON); empty is None."""
    text = await request.text()
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise web.HTTPBadRequest(text=f"body is neither JSON nor YAML: {error}") from None


def _count_tokens(prompt: Any) -> int:
    if isinstance(prompt, str):
        return max(1, len(prompt.split()))
    if isinstance(prompt, list):
        return max(1, sum(_count_tokens(p) if isinstance(p, str) else 1 for p in prompt))
    return 1


def _text(request_id: int, tokens: int) -> str:
    return " ".join(_WORDS[(request_id + i) % len(_WORDS)] for i in range(tokens))


async def _generate(
    request: web.Request, prompt_tokens: int, body: dict[str, Any]
) -> tuple[SimServer, int, int] | web.Response:
    server = request.app[SERVER_KEY]
    model = body.get("model")
    if model is not None and model != server.served_name:
        return _error(404, f"The model `{model}` does not exist.", "NotFoundError")
    if body.get("stream"):
        return _error(400, "the simulated engine does not stream; send stream: false")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return _error(400, "max_tokens must be a positive integer")
    loop = asyncio.get_running_loop()
    finished: asyncio.Future[SimRequest] = loop.create_future()

    def on_done(done: SimRequest) -> None:
        if not finished.done():
            finished.set_result(done)

    server.engine.submit(
        SimRequest(prompt_tokens=prompt_tokens, output_tokens=max_tokens, on_done=on_done)
    )
    await finished
    return server, server.next_request_id(), max_tokens


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


async def completions(request: web.Request) -> web.Response:
    body = await _body(request)
    if not isinstance(body, dict) or "prompt" not in body:
        return _error(400, "body must be a JSON object with a prompt")
    prompt_tokens = _count_tokens(body["prompt"])
    outcome = await _generate(request, prompt_tokens, body)
    if isinstance(outcome, web.Response):
        return outcome
    server, request_id, tokens = outcome
    return web.json_response(
        {
            "id": f"cmpl-sim-{request_id}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": server.served_name,
            "choices": [
                {"index": 0, "text": _text(request_id, tokens), "logprobs": None,
                 "finish_reason": "length", "stop_reason": None}
            ],
            "usage": _usage(prompt_tokens, tokens),
        }
    )  # fmt: skip


async def chat_completions(request: web.Request) -> web.Response:
    body = await _body(request)
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return _error(400, "body must be a JSON object with a non-empty messages list")
    prompt_tokens = sum(
        _count_tokens(m.get("content", "")) for m in messages if isinstance(m, dict)
    )
    outcome = await _generate(request, prompt_tokens, body)
    if isinstance(outcome, web.Response):
        return outcome
    server, request_id, tokens = outcome
    return web.json_response(
        {
            "id": f"chatcmpl-sim-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": server.served_name,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": _text(request_id, tokens)},
                 "logprobs": None, "finish_reason": "length", "stop_reason": None}
            ],
            "usage": _usage(prompt_tokens, tokens),
        }
    )  # fmt: skip


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def models(request: web.Request) -> web.Response:
    server = request.app[SERVER_KEY]
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"id": server.served_name, "object": "model", "created": int(server.created),
                 "owned_by": "vllm", "root": server.config.model, "parent": None}
            ],
        }
    )  # fmt: skip


async def metrics(request: web.Request) -> web.Response:
    server = request.app[SERVER_KEY]
    delay = server.metrics_delay
    if "delay" in request.query:
        try:
            delay = float(request.query["delay"])
        except ValueError:
            return _error(400, "delay must be a number of seconds")
    if delay > 0:
        await asyncio.sleep(delay)
    if server.metrics_text is not None:
        return web.Response(text=server.metrics_text, content_type="text/plain")
    server.catch_up()  # a scrape sees every tick the wall clock has covered
    return web.Response(body=metrics_page(server), headers={"Content-Type": CONTENT_TYPE_LATEST})


def metrics_page(server: SimServer) -> bytes:
    """The /metrics page of the engine's counters as they are now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmMetrics(server))
    # vLLM serves prometheus_client's default registry, whose process collector exports
    # process_start_time_seconds: the operator's evidence that a pod restarted.
    registry.register(PROCESS_COLLECTOR)
    return bytes(generate_latest(registry))


def _merged(base: SimProfile, update: dict[str, Any]) -> SimProfile:
    data = base.model_dump()
    data["drift"] = []  # a posted profile's drift replaces the old one, timed from now
    data.update(update)
    return SimProfile.model_validate(data)


async def admin_profile(request: web.Request) -> web.Response:
    """A new profile, in effect now: the keys sent replace the current ones."""
    server = request.app[SERVER_KEY]
    body = await _body(request)
    if isinstance(body, list):
        body = {"acceptance": body}  # shorthand: just the conditional rates
    if not isinstance(body, dict):
        return _error(400, "body must be a profile mapping or a list of acceptance rates")
    try:
        profile = _merged(server.engine.profile, body)
    except ValidationError as error:
        return _error(400, str(error).replace("\n", " "))
    server.catch_up()
    server.engine.set_profile(profile)
    return web.json_response(profile.model_dump())


async def admin_load(request: web.Request) -> web.Response:
    """A new offered load, in effect now: the keys sent replace the current ones."""
    server = request.app[SERVER_KEY]
    body = await _body(request)
    if not isinstance(body, dict):
        return _error(400, "body must be a mapping such as {requests_per_second: 5}")
    try:
        load = Load.model_validate({**server.engine.load_now().model_dump(), **body})
    except ValidationError as error:
        return _error(400, str(error).replace("\n", " "))
    server.catch_up()
    server.engine.set_load(load)
    return web.json_response(load.model_dump())


def _switch(body: Any, key: str, default: Any) -> Any:
    return body.get(key, default) if isinstance(body, dict) else default


async def admin_garbage(request: web.Request) -> web.Response:
    """/metrics serves unparseable text while enabled (body {enabled: false} ends it)."""
    server = request.app[SERVER_KEY]
    enabled = _switch(await _body(request), "enabled", True)
    if not isinstance(enabled, bool):
        return _error(400, "enabled must be true or false")
    server.metrics_text = GARBAGE if enabled else None
    return web.json_response({"garbage": enabled})


async def admin_metrics(request: web.Request) -> web.Response:
    """/metrics serves the posted page verbatim (body {text: null} ends it): the hostile
    pages a broken exporter or a proxy could serve, for fault tests."""
    server = request.app[SERVER_KEY]
    text = _switch(await _body(request), "text", None)
    if text is not None and not isinstance(text, str):
        return _error(400, "text must be the page to serve, or null")
    server.metrics_text = text
    return web.json_response({"metrics_text": text})


async def admin_slow(request: web.Request) -> web.Response:
    """/metrics answers after this many seconds (body {seconds: 0} ends it)."""
    server = request.app[SERVER_KEY]
    seconds = _switch(await _body(request), "seconds", 30.0)
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        return _error(400, "seconds must be a non-negative number")
    server.metrics_delay = float(seconds)
    return web.json_response({"metrics_delay_seconds": server.metrics_delay})


async def admin_state(request: web.Request) -> web.Response:
    """What the sim is doing now: for tests, demos and debugging."""
    server = request.app[SERVER_KEY]
    server.catch_up()
    engine = server.engine
    return web.json_response(
        {
            "elapsed_seconds": engine.elapsed,
            "acceptance": engine.acceptance_now(),
            "load": engine.load_now().model_dump(),
            "running": len(engine.running),
            "waiting": len(engine.waiting),
            "garbage": server.metrics_text == GARBAGE,
            "metrics_text": server.metrics_text,
            "metrics_delay_seconds": server.metrics_delay,
            "counters": dataclasses.asdict(engine.counters),
        }
    )


async def schedule(request: web.Request) -> web.Response:
    """GET/POST /specfleet/schedule, for the operator's credential alone (as the vLLM
    plugin's endpoint: hot_schedule.authorize)."""
    server = request.app[SERVER_KEY]
    denied = authorize(request.headers.get("Authorization"))
    if denied is not None:
        status, reason = denied
        return web.json_response({"reason": reason}, status=status)
    if request.method == "GET":
        return web.json_response(server.schedule_report())
    body = await _body(request)
    if not isinstance(body, dict):
        return web.json_response({"reason": "the body is not a JSON object"}, status=400)
    answer, status = server.set_schedule(body)
    return web.json_response(answer, status=status)


def build_app(server: SimServer) -> web.Application:
    app = web.Application()
    app[SERVER_KEY] = server
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/admin/profile", admin_profile)
    app.router.add_post("/admin/load", admin_load)
    app.router.add_post("/admin/garbage", admin_garbage)
    app.router.add_post("/admin/metrics", admin_metrics)
    app.router.add_post("/admin/slow", admin_slow)
    app.router.add_get("/admin/state", admin_state)
    app.router.add_route("GET", SCHEDULE_PATH, schedule)
    app.router.add_route("POST", SCHEDULE_PATH, schedule)

    async def clock(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(server.run_clock())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(clock)
    return app


async def serve(config: RuntimeConfig, profile: SimProfile) -> None:
    """Serve until SIGTERM or SIGINT (a pod's graceful stop), then close cleanly."""
    server = SimServer(config, profile)
    runner = web.AppRunner(build_app(server), access_log=None)
    await runner.setup()
    host, port = config.host or DEFAULT_HOST, config.port or DEFAULT_PORT
    await web.TCPSite(runner, host, port).start()
    print(
        f"specfleet sim engine: serving {server.served_name} on {host}:{port} "
        f"(method {config.method}, K {server.engine.k_max}, seed {config.seed})",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
