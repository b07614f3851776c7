"""Changes of the serving K that the measurements do not support (issue 47's bench-tuner
bars): an exploration promoted on luck, and speculation switched off on one noisy window.

Each seed below failed its bar before: idle-hour's explorations of K=8 and K=9, which
gain 1.6% and 1.5% over K=6 where 3% is needed, were promoted on a lower bound of +3.6%
and +3.1% (two stable changes within the hour); chat traffic just under the floor was
disabled on one window's prediction of -1.5% against plain decoding, which a canary had
measured 4.2% slower 22 minutes before."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from specfleet.operator.simulate import Scenario, load_scenario, simulate
from specfleet.operator.trial_stats import ONE_SIDED_95, ONE_SIDED_97_5

SCENARIOS = Path(__file__).parent.parent / "scenarios"


def _switching(scenario: Scenario, switching: str) -> Scenario:
    """The scenario with pods that take K as `switching` says (speculation.switching)."""
    return scenario.with_policy({"speculation": {"switching": switching}})


@pytest.mark.parametrize("seed", [3, 9])
def test_an_exploration_that_gains_less_than_needed_is_not_promoted(seed: int) -> None:
    """On pods that restart for each K; hot pods need no +3% to repay restarts (below)."""
    result = simulate(_switching(load_scenario(SCENARIOS / "idle-hour.yaml"), "Restart"), seed)
    decisions = result.decisions
    explored = [d for d in decisions if d["reason"] == "Explore"]
    promoted = [
        after["message"]
        for before, after in itertools.pairwise(decisions)
        if before["reason"] == "Explore" and after["kind"] == "Promote"
    ]
    assert explored, "the scenario explores after the idle hour"
    assert promoted == []
    assert result.max_k_changes_per_hour <= 1
    assert result.steady_ratio >= 0.95


@pytest.mark.parametrize("seed", [3, 9])
def test_hot_pods_promote_only_what_gains_and_never_go_back(seed: int) -> None:
    """The same explorations on hot pods: a K that truly gains 1.6% may be promoted (no
    restart to repay), but no promotion is undone and the run keeps its steady ratio."""
    result = simulate(_switching(load_scenario(SCENARIOS / "idle-hour.yaml"), "Hot"), seed)
    served = [r.tokens for r in result.records if not r.alternating]
    ks = [k for k, _ in itertools.groupby(served)]
    assert len(ks) == len(set(ks)), ks  # never back to a K it left
    assert result.steady_ratio >= 0.95


def test_the_exploration_bound_is_wider_at_every_window_count() -> None:
    """Two explorations share one 5% chance of a false promotion: each quantile is at
    least the 95% one's, and both tend to the normal's."""
    for dof in (1, 2, 3, 5, 10, 30, 100):
        assert ONE_SIDED_97_5.quantile(dof) > ONE_SIDED_95.quantile(dof)
    assert ONE_SIDED_97_5.quantile(1000) == pytest.approx(1.96)
    assert ONE_SIDED_95.quantile(1000) == pytest.approx(1.6449)


def test_one_noisy_window_under_the_floor_does_not_switch_speculation_off() -> None:
    scenario = load_scenario(SCENARIOS / "steady.yaml", "chat/c1/expensive")
    result = simulate(scenario, 2)
    assert result.wrong_disables == 0, [d["message"] for d in result.decisions]
    assert not [d for d in result.decisions if d["kind"] == "Disable"]


@pytest.mark.parametrize("seed", [10, 17, 19])
def test_a_stale_draft_with_plain_decoding_never_measured_goes_plain_at_once(seed: int) -> None:
    """Its small predicted loss (-1.2%) is the fit's guess at plain decoding's step, not
    one window's noise: it measured -47%, and plain decoding comes within failureLimit +
    1 windows of the drift, without a canary first."""
    result = simulate(load_scenario(SCENARIOS / "stale-draft.yaml", "c8/expensive"), seed)
    delays = result.drift_to_plain
    assert delays and all(d is not None and d <= 3 for d in delays), delays
