"""Tuner benchmark: every shipped scenario x 20 seeds through `specfleet simulate`'s engine.

Checks the issue's bars and prints a Markdown table (``--markdown``) for docs/benchmarks.md:
steady-state goodput >= 0.95 of the oracle in every scenario and seed; ahead of every
static baseline in the drift and load-surge scenarios; no false rollbacks in the stable
scenarios; rollback within failureLimit + 1 windows in every drift seed.
Exit status 1 when a bar is missed.

    .venv/bin/python benchmarks/tuner.py --seeds 20 --markdown
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specfleet.operator.simulate import (
    SimulationResult,
    load_scenario,
    scenario_spec,
    simulate,
)

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
ADAPTIVE = ("drift", "load-surge")  # must beat every static K
STABLE = ("high-acceptance-code", "low-acceptance-chat", "noisy-stable", "load-surge")
MIN_RATIO = 0.95


def run(seeds: int) -> tuple[list[str], list[str]]:
    """Table rows and the bars missed."""
    rows: list[str] = []
    missed: list[str] = []
    for path in sorted(SCENARIOS.glob("*.yaml")):
        scenario = load_scenario(path)
        limit = scenario_spec(scenario).rollback.failure_limit
        results: list[SimulationResult] = [simulate(scenario, seed) for seed in range(seeds)]
        ratios = [r.steady_ratio for r in results]

        def mean(key: str, rs: list[SimulationResult] = results) -> float:
            return sum(r.steady_goodput[key] for r in rs) / len(rs)

        ahead = sum(
            1
            for r in results
            if all(r.steady_goodput["achieved"] > r.steady_goodput[k] for k in ("k3", "k5", "none"))
        )
        false_rollbacks = sum(r.false_rollbacks for r in results)
        delays = [d for r in results for d in r.drift_to_rollback]
        worst_delay = (
            "-"
            if not delays
            else "never"
            if any(d is None for d in delays)
            else str(max(d for d in delays if d))
        )
        rows.append(
            f"| {scenario.name} | {min(ratios):.3f} | {sum(ratios) / len(ratios):.3f} "
            f"| {mean('achieved'):.0f} | {mean('oracle'):.0f} | {mean('unconstrained'):.0f} "
            f"| {mean('k3'):.0f} | {mean('k5'):.0f} | {mean('none'):.0f} "
            f"| {ahead}/{seeds} | {sum(r.rollbacks for r in results)} | {false_rollbacks} "
            f"| {worst_delay} |"
        )
        if min(ratios) < MIN_RATIO:
            missed.append(f"{scenario.name}: steady-state ratio {min(ratios):.3f} < {MIN_RATIO}")
        if scenario.name in ADAPTIVE and ahead < seeds:
            missed.append(f"{scenario.name}: behind a static baseline in {seeds - ahead} seeds")
        if scenario.name in STABLE and false_rollbacks:
            missed.append(f"{scenario.name}: {false_rollbacks} false rollbacks")
        if scenario.name == "drift" and (
            len(delays) < seeds or any(d is None or d > limit + 1 for d in delays)
        ):
            missed.append(f"drift: rollback later than failureLimit + 1 = {limit + 1} windows")
    return rows, missed


HEADER = (
    "| scenario | min ratio | mean ratio | tuner | oracle | oracle, no floor | K=3 | K=5 "
    "| no spec | ahead of static | rollbacks | false | drift→rollback (max windows) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--markdown", action="store_true", help="print only the table")
    args = parser.parse_args()
    rows, missed = run(args.seeds)
    print(HEADER)
    print("\n".join(rows))
    if not args.markdown:
        print("\nbars missed:" if missed else "\nevery bar met")
    for line in missed:
        print(f"  {line}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
