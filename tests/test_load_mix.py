"""Load that moves inside every window (issue 47, item 6): the simulator runs each window
as slices of load, and an interleaved trial pairs its sides' windows by the load they
served averaged over their time, from the pods' step statistics, not by their mean batch
per step, which depends on the K that ran them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from specfleet.operator import speed
from specfleet.operator.observations import StepTally, TrackWindow
from specfleet.operator.simulate import LoadStep, Scenario, load_scenario, phases, simulate

LOAD_MIX = Path(__file__).parent.parent / "scenarios" / "schedule" / "load-mix.yaml"


def test_a_load_step_is_a_concurrency_or_a_mix_whose_shares_sum_to_one() -> None:
    assert LoadStep(after=0, mix={1: 0.5, 32: 0.5}).mix == {1: 0.5, 32: 0.5}
    for bad, words in (
        ({"after": 0}, "one of them"),
        ({"after": 0, "concurrency": 1, "mix": {1: 1.0}}, "one of them"),
        ({"after": 0, "mix": {1: 0.5, 32: 0.4}}, "sum to 1"),
        ({"after": 0, "mix": {0: 0.5, 32: 0.5}}, "concurrencies >= 1"),
    ):
        with pytest.raises(ValidationError, match=words):
            LoadStep.model_validate(bad)


def test_a_mix_is_sliced_per_pod_and_one_load_is_no_mix() -> None:
    scenario = Scenario(
        name="mix",
        duration=600,
        replicas=2,
        load=[LoadStep(after=0, mix={2: 0.25, 64: 0.75}), LoadStep(after=300, mix={8: 1.0})],
        scale=[],
    )
    mixed, single = phases(scenario)
    assert mixed.mix == ((2, 0.25), (64, 0.75)) and mixed.concurrency == 48  # 48.5, rounded
    assert [(share, p.concurrency) for share, p in mixed.slices()] == [(0.25, 2), (0.75, 64)]
    assert single.mix == () and single.concurrency == 8
    assert [(share, p.concurrency) for share, p in single.slices()] == [(1.0, 8)]


def test_a_one_load_mix_simulates_as_that_concurrency() -> None:
    constant = load_scenario(LOAD_MIX, "c2-c8/hot/auto").model_copy(
        update={"load": [], "concurrency": 8, "duration": 1800}
    )
    as_mix = constant.model_copy(update={"load": [LoadStep(after=0, mix={8: 1.0})]})
    assert simulate(as_mix, 1).to_json() == simulate(constant, 1).to_json()


def test_a_windows_load_is_averaged_over_its_time_from_the_step_tallies() -> None:
    """Half the time at 1 in flight, half at 32: K=5 takes fewer steps at 32 than K=3 does
    (each is slower there), so the per-step means differ while the load is the same."""

    def window(k: int, step_ms_at_32: float) -> TrackWindow:
        at_1 = StepTally(1, k, 30 / 0.004, 30.0)
        at_32 = StepTally(32, k, 30 / (step_ms_at_32 / 1000), 30.0)
        steps = at_1.steps + at_32.steps
        return TrackWindow(
            seconds=60,
            pod_seconds=60,
            running_requests=16,
            pods=1,
            decode_steps=at_1.steps + 32 * at_32.steps,
            engine_steps=steps,
            step_tallies=(at_1, at_32),
        )

    k3, k5 = window(3, 13.0), window(5, 25.0)
    assert k3.batch_per_pod / k5.batch_per_pod > speed.BATCH_BUCKET  # never matched before
    assert speed.time_load(k3) == speed.time_load(k5) == pytest.approx((1 + 24.5) / 2)
    # One bucket, or no tallies: the per-step mean, as before.
    only = TrackWindow(
        seconds=60, pod_seconds=60, running_requests=5, pods=1, decode_steps=500, engine_steps=100
    )
    assert speed.time_load(only) == 5.0


@pytest.mark.parametrize("seed", range(3))
def test_an_interleaved_trial_under_load_moving_inside_its_windows_is_judged(seed: int) -> None:
    """Before, its windows never paired (mean batch 6.9 against 8.7): the trial of K=5
    ran 191 windows unjudged and the run served 0.58 of plain decoding."""
    result = simulate(load_scenario(LOAD_MIX, "c1-c32/hot/auto"), seed)
    ended = next(d for d in result.decisions if d["kind"] in ("Promote", "Abort"))
    assert ended["reason"] != "CanaryInconclusive", ended
    assert ended["window"] <= 12, ended
    assert result.goodput["achieved"] / result.goodput["single"] >= 0.9
