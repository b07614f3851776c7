"""The README quickstart's model (examples/llama-peagle.yaml) is a policy docs/tuning.md
recommends: simulated on published-like traffic with its own speculation, tuning and
rollback settings, it never steps down or rolls back while the draft fits, and settles
near the best static K."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.step_cost_shape import published_profiles
from specfleet.operator.api import RollbackMetric
from specfleet.operator.outcomes import ROLLBACK_ACTIONS
from specfleet.operator.simulate import Scenario, SimulationResult, simulate

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama-peagle.yaml"
PROFILES = published_profiles()


def quickstart_scenario(workload: str, concurrency: int, **rollback: Any) -> Scenario:
    spec = yaml.safe_load(EXAMPLE.read_text())["spec"]
    policy = {key: spec[key] for key in ("speculation", "tuning", "rollback")}
    policy["rollback"] = {**policy["rollback"], **rollback}
    return Scenario.model_validate(
        {
            "name": f"quickstart@{workload}/c{concurrency}",
            "duration": "3h",
            "replicas": spec["replicas"],
            "method": spec["draft"]["method"],
            "concurrency": concurrency,
            "settle": "45m",
            "engine": {"acceptance": PROFILES[workload], "noise": 0.02, "step_noise": 0.02},
            "policy": policy,
        }
    )


def rollbacks(result: SimulationResult) -> list[str]:
    return [d["message"] for d in result.decisions if d["kind"] in ROLLBACK_ACTIONS]


def test_the_quickstart_judges_block_acceptance() -> None:
    rollback = yaml.safe_load(EXAMPLE.read_text())["spec"]["rollback"]
    assert rollback["metric"] == RollbackMetric.FIRST_POSITION_ACCEPTANCE


@pytest.mark.parametrize("concurrency", [1, 8, 32])
@pytest.mark.parametrize("workload", ["code", "math"])
def test_the_quickstart_never_steps_down_on_published_like_traffic(
    workload: str, concurrency: int
) -> None:
    result = simulate(quickstart_scenario(workload, concurrency), seed=0)
    assert rollbacks(result) == []
    assert result.false_rollbacks == 0
    assert result.steady_ratio >= 0.95, result.to_json()


@pytest.mark.parametrize("concurrency", [1, 8])
def test_on_chat_traffic_the_quickstart_keeps_the_fastest_k(concurrency: int) -> None:
    """Chat's block acceptance (0.74) sits just under the default floor: the fastest K
    stays (flagged by AcceptanceBelowFloor), it is not stepped down."""
    result = simulate(quickstart_scenario("chat", concurrency), seed=0)
    assert rollbacks(result) == []
    assert result.steady_ratio >= 0.95, result.to_json()


def test_the_floor_on_draft_acceptance_rate_would_step_down() -> None:
    """Why the quickstart does not judge DraftAcceptanceRate: at 0.75 it caps K on code
    traffic, so K=3 is stepped down although K=3 is the fastest."""
    scenario = quickstart_scenario("code", 8, metric=RollbackMetric.DRAFT_ACCEPTANCE_RATE.value)
    result = simulate(scenario, seed=0)
    assert rollbacks(result), result.decisions
    assert result.false_rollbacks > 0
