"""Scrape fan-out: one evaluation cycle over 100, 500 and 1,000 metrics endpoints.

    .venv/bin/python benchmarks/scrape_fanout.py [--counts 100,500,1000] [--cycles 5] [--json F]

A child process serves a vLLM-format /metrics page on N loopback addresses
(127.240.x.y:8000, one aiohttp process, one listener per address), with counters that
advance with the wall clock so every window is conclusive; one more address answers
only after 60 s (the slow endpoint). This process then measures, per N and cycle:

- `scrape()`: the operator's own `specfleet.operator.metrics.scrape` over the N targets
  (concurrency 64 as in metrics.py, the default scrapeTimeout of 5 s): wall time and
  this process' CPU time;
- `evaluate`: the operator's evaluation cycle as `Fleet.run` drives it: N models of one
  pod each, `Evaluator.evaluate` for all of them at once (scrape, parse, windows and the
  tuner's `decide`);
- `scrape() + slow`: the N targets plus the slow one; when each target's sample landed,
  to show the slow endpoint costs its own timeout and delays nobody else.

The page is vLLM-sized by default (`--page vllm`: the sim's spec-decode series plus the
histograms and gauges a vLLM 0.33 server exports, about 40 KB); `--page sim` serves the
sim engine's own 5.6 KB page. Medians over `--cycles` cycles after a warm-up cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PORT = 8000
SLOW_IP = "127.240.255.254"
SLOW_SECONDS = 60.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def address(index: int) -> str:
    """The index-th endpoint's address: 127.240.0.1 onwards (loopback, where no pod of
    the test cluster has its address)."""
    n = index + 1
    return f"127.240.{(n >> 8) & 255}.{n & 255}"


# ------------------------------------------------------------------------------ the page

SPEC_COUNTERS = {  # per second, per pod: K=3 P-EAGLE at acceptance ~0.8
    "vllm:spec_decode_num_drafts_total": 400.0,
    "vllm:spec_decode_num_draft_tokens_total": 1200.0,
    "vllm:spec_decode_num_accepted_tokens_total": 970.0,
    "vllm:generation_tokens_total": 1370.0,
    "vllm:prompt_tokens_total": 1500.0,
}
PER_POSITION = (370.0, 330.0, 270.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                   50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
               5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
HISTOGRAMS = {  # vLLM 0.33's request histograms: name -> buckets
    "vllm:e2e_request_latency_seconds": LATENCY_BUCKETS,
    "vllm:request_queue_time_seconds": LATENCY_BUCKETS,
    "vllm:request_inference_time_seconds": LATENCY_BUCKETS,
    "vllm:request_prefill_time_seconds": LATENCY_BUCKETS,
    "vllm:request_decode_time_seconds": LATENCY_BUCKETS,
    "vllm:time_to_first_token_seconds": ITL_BUCKETS,
    "vllm:inter_token_latency_seconds": ITL_BUCKETS,
    "vllm:time_per_output_token_seconds": ITL_BUCKETS,
    "vllm:request_prompt_tokens": TOKEN_BUCKETS,
    "vllm:request_generation_tokens": TOKEN_BUCKETS,
    "vllm:request_params_n": (1, 2, 5, 10, 20),
    "vllm:request_params_max_tokens": TOKEN_BUCKETS,
    "vllm:iteration_tokens_total": TOKEN_BUCKETS,
}
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
          "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total",
          "vllm:prefix_cache_hits_total")  # fmt: skip


def render_page(kind: str, seconds: float) -> bytes:
    """The /metrics page `seconds` after start: counters grow linearly with time."""
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    lines: list[str] = []
    for name, rate in SPEC_COUNTERS.items():
        base = name.removesuffix("_total")
        lines += [f"# HELP {base} counter", f"# TYPE {base} counter"]
        lines.append(f"{name}{{{labels}}} {rate * seconds}")
    base = "vllm:spec_decode_num_accepted_tokens_per_pos"
    lines += [f"# HELP {base} counter", f"# TYPE {base} counter"]
    for position, rate in enumerate(PER_POSITION):
        lines.append(f'{base}_total{{{labels},position="{position}"}} {rate * seconds}')
    for name in GAUGES[:2]:
        lines += [f"# HELP {name} gauge", f"# TYPE {name} gauge", f"{name}{{{labels}}} 8.0"]
    if kind == "vllm":
        for name in GAUGES[2:]:
            lines += [f"# HELP {name} gauge", f"# TYPE {name} gauge", f"{name}{{{labels}}} 1.0"]
        for name, buckets in HISTOGRAMS.items():
            lines += [f"# HELP {name} histogram", f"# TYPE {name} histogram"]
            count = 10.0 * seconds
            for i, bound in enumerate(buckets):
                share = count * (i + 1) / (len(buckets) + 1)
                lines.append(f'{name}_bucket{{{labels},le="{float(bound)}"}} {share}')
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')
            lines.append(f"{name}_count{{{labels}}} {count}")
            lines.append(f"{name}_sum{{{labels}}} {count * 0.37}")
        for gc in range(3):  # prometheus_client's default collectors, as vLLM exports them
            lines.append(f'python_gc_objects_collected_total{{generation="{gc}"}} {gc * 100.0}')
        for name in ("process_virtual_memory_bytes", "process_resident_memory_bytes",
                     "process_cpu_seconds_total", "process_open_fds"):  # fmt: skip
            lines.append(f"{name} 1.0")
    return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------------------- the server


async def serve(count: int, kind: str) -> None:
    from aiohttp import web

    started = time.monotonic()
    cache: dict[str, Any] = {"at": -1.0, "body": b""}

    async def metrics(request: web.Request) -> web.Response:
        now = time.monotonic()
        if now - cache["at"] > 0.2:  # re-render at most 5 times a second
            cache["at"], cache["body"] = now, render_page(kind, 1000.0 + now - started)
        return web.Response(body=cache["body"], content_type="text/plain")

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW_SECONDS)
        return await metrics(request)

    fast_app, slow_app = web.Application(), web.Application()
    fast_app.router.add_get("/metrics", metrics)
    slow_app.router.add_get("/metrics", slow)
    runners = []
    for app, hosts in ((fast_app, [address(i) for i in range(count)]), (slow_app, [SLOW_IP])):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        for host in hosts:
            await web.TCPSite(runner, host, PORT, backlog=1024).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------------------- the client


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def models_and_pods(count: int) -> list[tuple[Any, Any]]:
    """N SpeculativeModels (the P-EAGLE example, tuning on) with one ready pod each."""
    from e2e.models import sim_model
    from specfleet.operator import render
    from specfleet.operator.api import SpeculativeModel
    from specfleet.operator.status import ObservedChildren
    from specfleet.operator.tuner import sync_with_spec

    result = []
    for i in range(count):
        manifest = sim_model(f"m{i}", tuning={"interval": "1s", "minDraftTokens": 100})
        manifest["metadata"].update(namespace="bench", uid=f"uid-{i}", generation=1)
        model = SpeculativeModel.model_validate(manifest)
        synced = sync_with_spec(model.spec, model.status, datetime.now(UTC)).status
        model = model.model_copy(update={"status": synced})
        stable = render.manifests(model)[0]  # the pods carry its template's annotations
        pod = {
            "metadata": {
                "name": f"m{i}-pod",
                "labels": stable["spec"]["template"]["metadata"]["labels"],
                "annotations": stable["spec"]["template"]["metadata"]["annotations"],
            },
            "status": {
                "phase": "Running",
                "podIP": address(i),
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        result.append((model, ObservedChildren(stable=None, canary=None, pods=[pod])))
    return result


async def measure(count: int, cycles: int, server_pid: int) -> dict[str, Any]:
    from specfleet.operator.evaluation import Evaluator
    from specfleet.operator.metrics import SCRAPE_CONCURRENCY, scrape
    from specfleet.operator.observations import ScrapeTarget

    timeout = 5.0  # spec.metrics.scrapeTimeout's default
    targets = [
        ScrapeTarget(f"pod-{i}", "stable", f"http://{address(i)}:{PORT}/metrics")
        for i in range(count)
    ]
    slow = ScrapeTarget("slow", "stable", f"http://{SLOW_IP}:{PORT}/metrics")
    fleet = models_and_pods(count)
    evaluator = Evaluator()

    async def scrape_cycle() -> dict[str, float]:
        samples = await scrape("bench", targets, timeout, SCRAPE_CONCURRENCY)
        failed = sum(s.counters is None for s in samples)
        if failed:
            raise RuntimeError(f"{failed} of {count} scrapes failed: {samples[0].error}")
        return {}

    async def evaluate_cycle() -> dict[str, float]:
        now = datetime.now(UTC)
        decided = await asyncio.gather(
            *(evaluator.evaluate(model, children, now) for model, children in fleet)
        )
        for i, ((model, children), d) in enumerate(zip(fleet, decided, strict=True)):
            fleet[i] = (model.model_copy(update={"status": d.status}), children)
        inconclusive = sum(any(a.kind == "Inconclusive" for a in d.actions) for d in decided)
        return {"inconclusive": inconclusive}

    async def slow_cycle() -> dict[str, float]:
        started = time.time()
        samples = await scrape("bench", [*targets, slow], timeout, SCRAPE_CONCURRENCY)
        fast = [s.at - started for s in samples if s.pod != "slow"]
        if any(s.counters is None for s in samples if s.pod != "slow"):
            raise RuntimeError("a fast endpoint failed next to the slow one")
        slow_sample = next(s for s in samples if s.pod == "slow")
        return {
            "rest_done_s": max(fast),
            "slow_done_s": slow_sample.at - started,
            "slow_error": 0.0 if slow_sample.counters is None else 1.0,
        }

    result: dict[str, Any] = {"count": count}
    for name, cycle in (
        ("scrape", scrape_cycle),
        ("evaluate", evaluate_cycle),
        ("scrape_slow", slow_cycle),
    ):
        await cycle()  # warm-up; for `evaluate`, the baseline scrape of each pod
        runs = []
        for _ in range(cycles):
            await asyncio.sleep(1.0)  # counters advance between windows
            cpu, server_cpu, wall = time.process_time(), cpu_of(server_pid), time.monotonic()
            extra = await cycle()
            runs.append(
                {
                    "wall_s": time.monotonic() - wall,
                    "cpu_s": time.process_time() - cpu,
                    "server_cpu_s": cpu_of(server_pid) - server_cpu,
                    **extra,
                }
            )
        result[name] = {
            "runs": runs,
            **{
                key: statistics.median(r[key] for r in runs)
                for key in runs[0]
                if key != "slow_error"
            },
        }
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def start_server(count: int, kind: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(count), "--page", kind],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "ready":
        process.kill()
        raise RuntimeError("the metrics servers did not start")
    return process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="100,500,1000")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--page", choices=("vllm", "sim"), default="vllm")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.serve is not None:
        asyncio.run(serve(args.serve, args.page))
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # for e2e.models
    results = []
    for count in (int(c) for c in args.counts.split(",")):
        server = start_server(count, args.page)
        try:
            page = urllib.request.urlopen(f"http://{address(0)}:{PORT}/metrics").read()
            result = asyncio.run(asyncio.wait_for(measure(count, args.cycles, server.pid), 600))
            result["page_bytes"] = len(page)
        finally:
            server.terminate()
            server.wait(timeout=10)
        results.append(result)
        s, e, w = result["scrape"], result["evaluate"], result["scrape_slow"]
        print(
            f"N={count}: scrape {s['wall_s']:.2f} s (cpu {s['cpu_s']:.2f} s, server "
            f"{s['server_cpu_s']:.2f} s); evaluate {e['wall_s']:.2f} s (cpu {e['cpu_s']:.2f} s, "
            f"inconclusive {e['inconclusive']:.0f}); with slow endpoint: rest done at "
            f"{w['rest_done_s']:.2f} s, slow given up at {w['slow_done_s']:.2f} s; "
            f"page {len(page)} B; peak RSS {result['rss_mb']:.0f} MB",
            flush=True,
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"page": args.page, "results": results}, indent=2))


if __name__ == "__main__":
    main()
