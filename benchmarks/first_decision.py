"""Time to the first judged window (the first the floor and the tuner can act on), by
requests in flight.

Windows grow until they hold `tuning.minDraftTokens` (up to `tuning.maxWindowAge`); with
`maxWindowAge` equal to the interval a window is cut every interval, as before. Runs the
code workload of scenarios/steady.yaml with the default policy both ways, on the
published-like cost (GPT-OSS-120B on a B200: 2.7 ms a step) and on a target ten times
slower (a dense 70B-class model: 27 ms a step), where one request in flight makes fewer
draft tokens a minute than a window needs.

    .venv/bin/python benchmarks/first_decision.py [--seeds 5]
"""

from __future__ import annotations

import argparse
import statistics
from datetime import datetime
from pathlib import Path

from specfleet.operator.api import SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.observations import Observation
from specfleet.operator.simulate import START, Scenario, load_scenario, simulate
from specfleet.operator.tuner import Decided, decide

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "steady.yaml"


SLOW = 10.0  # the slow target's step times, against the published-like cost


def first_times(scenario: Scenario, seed: int) -> tuple[float | None, int]:
    """Minutes to the first conclusive stable window, and conclusive windows in the first
    hour."""
    conclusive: list[float] = []

    def watch(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        decided = decide(spec, status, observation, now)
        minutes = (now - START).total_seconds() / 60
        if decided.status.acceptance.conclusive:
            conclusive.append(minutes)
        return decided

    simulate(scenario, seed, decider=watch)
    return (conclusive[0] if conclusive else None), sum(1 for m in conclusive if m <= 60)


def slower(scenario: Scenario, factor: float) -> Scenario:
    cost = scenario.engine.cost
    times = {
        name: getattr(cost, name) * factor
        for name in (
            "target_forward_ms",
            "draft_ms_per_token",
            "parallel_draft_ms",
            "parallel_draft_ms_per_token",
            "verify_ms_per_token",
        )
    }
    engine = scenario.engine.model_copy(update={"cost": cost.model_copy(update=times)})
    return scenario.model_copy(update={"engine": engine})


def cell(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "never"
    text = f"{statistics.median(found):.0f} min"
    return text if len(found) == len(values) else f"{text} ({len(values) - len(found)} never)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    print(
        "| target | requests in flight per pod | windows | first judged window "
        "| judged windows in the first hour |\n|---|---|---|---|---|"
    )
    for target, factor in (("published-like, 2.7 ms", 1.0), ("10x slower, 27 ms", SLOW)):
        for load in ("c1", "c8", "c32"):
            for label, age in (("growing (maxWindowAge 20m)", None), ("cut every 60s", "60s")):
                scenario = slower(load_scenario(SCENARIO, f"code/{load}/published"), factor)
                if age is not None:
                    scenario = scenario.with_policy({"tuning": {"maxWindowAge": age}})
                runs = [first_times(scenario, seed) for seed in range(args.seeds)]
                hourly = statistics.median(r[1] for r in runs)
                print(
                    f"| {target} | {load[1:]} | {label} | {cell([r[0] for r in runs])} "
                    f"| {hourly:.0f} |"
                )


if __name__ == "__main__":
    main()
