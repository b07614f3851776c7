"""The ceiling's KV cost (issue 47, item 6): vLLM reserves every running request's
lookahead, num_speculative_tokens slots, beside its context in the KV cache, so an engine
started with a ceiling pays it every step, whatever K it schedules."""

from __future__ import annotations

from pathlib import Path

from specfleet.operator.simulate import load_scenario, simulate
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_engine import SimEngine, SimRequest
from specfleet.runtime.sim_model import Load, SimProfile

KV_CEILING = Path(__file__).parent.parent / "scenarios" / "schedule" / "kv-ceiling.yaml"
# 8 requests of 512 tokens with 44 slots to spare.
TIGHT = SimProfile(kv_cache_tokens=4140, context_tokens=512, load=Load(requests_per_second=0))


def test_the_kv_cache_holds_fewer_requests_the_higher_the_ceiling() -> None:
    assert [TIGHT.capacity(ceiling) for ceiling in (0, 3, 5, 6, 16)] == [8, 8, 8, 7, 7]
    assert SimProfile().capacity(16) == SimProfile().max_num_seqs  # unbounded: never the limit
    assert SimProfile(kv_cache_tokens=100, context_tokens=512).capacity(0) == 1


def test_the_simulated_engine_runs_what_its_ceiling_leaves_room_for() -> None:
    for ceiling, running in ((3, 8), (16, 7)):
        engine = SimEngine(TIGHT, ceiling, lambda _: 1, Drafting.PARALLEL, seed=0)
        for _ in range(8):
            engine.submit(SimRequest(prompt_tokens=16, output_tokens=10_000))
        engine.advance(1.0)
        assert (len(engine.running), len(engine.waiting)) == (running, 8 - running)


def test_hot_pods_pay_their_ceiling_where_the_kv_cache_is_the_limit() -> None:
    """The same K=3 all along (tuning off), started hot with a ceiling of 16 or 4: at 8 in
    flight the ceiling of 16 runs 7 requests, so it serves less."""
    served = {}
    for ceiling in ("max16", "max4"):
        scenario = load_scenario(KV_CEILING, f"hot/{ceiling}")
        policy = {**scenario.policy, "tuning": {"enabled": False}}
        result = simulate(scenario.model_copy(update={"policy": policy}), 0)
        served[ceiling] = result.goodput["achieved"]
    assert served["max16"] < 0.97 * served["max4"], served
