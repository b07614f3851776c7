"""Each K of a hot schedule learned from the pods' step statistics (issue 47, item 2).

Hot pods export their decode steps by batch-size bucket and K (specfleet-runtime's step
statistics), so a window of a schedule that ran several Ks still teaches the step-cost
fit each of them (`speed.by_k`). This runs every hot variant of the scenarios twice per
seed: as shipped, and with the tallies taken out of every window the tuner sees (what it
learned before: nothing from such a window). The engines' cost is the scenario's, never
shown to the tuner, and the prior is wrong for the engines of scenarios/schedule/k0-tax.yaml
(a K=0 band dearer than the prior says) and for scenarios/engine-costs.yaml's slow draft.

Per variant, over seeds (min / median / max): the fit's samples, those measured in a
schedule's windows, the fit's mean relative error of step time at the (K, batch) points
the stable pods ran in the run's last hour, and tokens over the best single static
choice.

    .venv/bin/python benchmarks/step_tallies.py [--seeds 3] [--scenarios 'schedule/*.yaml']
"""

from __future__ import annotations

import argparse
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from specfleet.operator import speed
from specfleet.operator.api import SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.observations import Observation
from specfleet.operator.simulate import Scenario, load_scenarios, scenario_spec, simulate
from specfleet.operator.tuner import Decided, decide
from specfleet.runtime.sim_model import step_seconds

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@dataclass(frozen=True)
class Run:
    samples: int
    from_schedules: int
    error: float | None
    ratio: float


def _without_tallies(observation: Observation) -> Observation:
    stable = observation.stable
    return replace(observation, stable=None if stable is None else replace(stable, step_tallies=()))


def run(scenario: Scenario, seed: int, tallies: bool) -> Run:
    last: list[SpeculativeModelStatus] = []
    start: list[datetime] = []
    served: set[tuple[int, int]] = set()  # (K, batch) of the schedule's windows
    end = scenario.duration

    def decider(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        window = observation.stable
        if window is not None and window.step_tallies:
            late = (now - start[0]).total_seconds() >= end - 3600
            for m in speed.by_k(window):
                if late:
                    served.add((m.tokens, round(m.batch)))
        if not start:
            start.append(now)
        decided = decide(
            spec, status, observation if tallies else _without_tallies(observation), now
        )
        last[:] = [decided.status]
        return decided

    result = simulate(scenario, seed, decider=decider)
    cost = last[0].step_cost if last else None
    samples = cost.samples if cost else []
    drafting = scenario_spec(scenario).draft.method.runtime.drafting
    truth = scenario.engine_cost
    errors = [
        abs(speed.step_ms(cost.fitted, k, b) / (1000 * step_seconds(truth, k, b, drafting)) - 1)
        for k, b in sorted(served)
        if cost is not None
    ]
    return Run(
        samples=len(samples),
        from_schedules=len(served),
        error=statistics.mean(errors) if errors else None,
        ratio=result.goodput["achieved"] / result.goodput["single"],
    )


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def _one(item: tuple[Path, int, int, bool]) -> tuple[str, bool, Run]:
    path, index, seed, tallies = item
    scenario = load_scenarios(path)[index]
    return scenario.name, tallies, run(scenario, seed, tallies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scenarios", default="schedule/*.yaml")
    args = parser.parse_args()
    items = [
        (path, index, seed, tallies)
        for path in sorted(SCENARIOS.glob(args.scenarios))
        for index, scenario in enumerate(load_scenarios(path))
        if scenario_spec(scenario).speculation.switching.value == "Hot"
        for seed in range(args.seeds)
        for tallies in (True, False)
    ]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        results = list(pool.map(_one, items))
    print(
        "| variant | step statistics | fit samples | (K, batch) points timed by K in the "
        "last hour | fit error there | over best single |"
    )
    print("|---|---|---|---|---|---|")
    for name in dict.fromkeys(name for name, _, _ in results):
        for tallies in (True, False):
            runs = [r for n, t, r in results if n == name and t == tallies]
            errors = [r.error for r in runs if r.error is not None]
            print(
                f"| {name} | {'read' if tallies else 'ignored'} "
                f"| {spread([float(r.samples) for r in runs])} "
                f"| {spread([float(r.from_schedules) for r in runs])} "
                f"| {spread(errors)} | {spread([r.ratio for r in runs])} |"
            )


if __name__ == "__main__":
    main()
