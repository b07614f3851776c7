"""Tuner benchmark: every shipped scenario (each variant) x N seeds through `specfleet simulate`.

Bars, checked in every scenario and every seed (exit status 1 when one is missed):
  (a) steady-state goodput >= 0.95 of the best static K's, no floor (K=0 included);
  (b) plain decoding within failureLimit + 1 windows of every drift after which speculation
      no longer pays, and speculation never switched off where it still pays;
  (c) at most one stable-K change in any hour of steady state;
  (d) no false rollback: none while speculation at the stable K still pays and its
      first-position acceptance clears the floor;
  (e) a config change (a new draft head) is decided as the scenario expects within its
      `within` windows: a better head promoted, a worse one rejected with the stable pods
      never serving it.
Prints a Markdown table (``--markdown``: only the table) for docs/benchmarks.md.

    .venv/bin/python benchmarks/tuner.py --seeds 20 --markdown
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from specfleet.operator.simulate import (
    Scenario,
    SimulationResult,
    load_scenarios,
    scenario_spec,
    simulate,
)

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
MIN_RATIO = 0.95
MAX_K_CHANGES_PER_HOUR = 1
BARS = "abcde"


@dataclass(frozen=True)
class Row:
    """One scenario over every seed: the table's row and the bars it missed."""

    cells: list[str]
    missed: dict[str, str]  # bar -> why


def _worst_delay(delays: list[int | None]) -> str:
    if not delays:
        return "-"
    if any(d is None for d in delays):
        return f"never in {sum(d is None for d in delays)}"
    return str(max(d for d in delays if d is not None))


def _config_cell(scenario: Scenario, results: list[SimulationResult]) -> str:
    """The config change's outcomes and the most windows one took (`-`: none)."""
    if scenario.config_change is None:
        return "-"
    outcomes = sorted({r.config_outcome or "undecided" for r in results})
    after = [r.config_decided_after for r in results if r.config_decided_after is not None]
    return "/".join(outcomes) + (f" ({max(after)})" if after else "")


def evaluate(scenario: Scenario, results: list[SimulationResult]) -> Row:
    seeds = len(results)
    limit = scenario_spec(scenario).rollback.failure_limit
    ratios = [r.steady_ratio for r in results]
    delays = [d for r in results for d in r.drift_to_plain]
    late = [d for d in delays if d is None or d > limit + 1]
    wrong = sum(r.wrong_disables for r in results)
    flapping = [r.max_k_changes_per_hour for r in results]
    false = sum(r.false_rollbacks for r in results)

    def mean(key: str) -> float:
        return sum(r.steady_goodput[key] for r in results) / seeds

    missed: dict[str, str] = {}
    below = sum(ratio < MIN_RATIO for ratio in ratios)
    if below:
        missed["a"] = f"goodput ratio {min(ratios):.3f} < {MIN_RATIO} in {below}/{seeds} seeds"
    if late or wrong:
        missed["b"] = ", ".join(
            why
            for why in (
                f"plain decoding later than {limit + 1} windows ({len(late)}/{len(delays)})"
                if late
                else "",
                f"{wrong} disables where speculation paid" if wrong else "",
            )
            if why
        )
    if max(flapping) > MAX_K_CHANGES_PER_HOUR:
        worse = sum(f > MAX_K_CHANGES_PER_HOUR for f in flapping)
        missed["c"] = f"{max(flapping)} K changes in an hour ({worse}/{seeds} seeds)"
    if false:
        missed["d"] = f"{false} false rollbacks"
    change = scenario.config_change
    if change is not None:
        wrong_outcome = [r.config_outcome for r in results if r.config_outcome != change.expect]
        late_decisions = [
            r.config_decided_after
            for r in results
            if r.config_decided_after is None or r.config_decided_after > change.within
        ]
        served = sum(r.new_head_on_stable_before_promotion for r in results)
        why = [
            f"{len(wrong_outcome)} seeds decided {set(wrong_outcome)}, not {change.expect}"
            if wrong_outcome
            else "",
            f"{len(late_decisions)} seeds later than {change.within} windows"
            if late_decisions
            else "",
            f"stable pods ran the new head unpromoted for {served} windows" if served else "",
        ]
        if any(why):
            missed["e"] = ", ".join(w for w in why if w)
    best = results[0].best_static_tokens  # the same in every seed: no randomness in it
    cells = [
        scenario.name,
        "→".join(map(str, best)),
        f"{min(ratios):.3f}",
        f"{sum(ratios) / seeds:.3f}",
        f"{mean('achieved'):.0f}",
        f"{mean('unconstrained'):.0f}",
        f"{mean('none'):.0f}",
        str(sum(r.rollbacks for r in results)),
        str(false),
        str(wrong),
        _worst_delay(delays),
        str(max(flapping)),
        _config_cell(scenario, results),
        "".join(bar for bar in BARS if bar in missed) or "-",
    ]
    return Row(cells, missed)


HEADER = (
    "| scenario | best static K | min ratio | mean ratio | tuner | best static | no spec "
    "| rollbacks | false rollbacks | wrong disables | drift→plain (max windows) "
    "| max K changes/h | config change (max windows) | bars missed |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def _row(scenario: Scenario, seeds: int) -> Row:
    return evaluate(scenario, [simulate(scenario, seed) for seed in range(seeds)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--markdown", action="store_true", help="print only the table")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="scenarios run side by side"
    )
    args = parser.parse_args()
    started = time.monotonic()
    scenarios = [s for path in sorted(SCENARIOS.glob("*.yaml")) for s in load_scenarios(path)]
    # Each scenario is pure CPU and independent of the others: one process per core.
    with ProcessPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(_row, scenarios, [args.seeds] * len(scenarios)))
    print(HEADER)
    print("\n".join("| " + " | ".join(row.cells) + " |" for row in rows))
    missed = [(row.cells[0], bar, why) for row in rows for bar, why in sorted(row.missed.items())]
    if not args.markdown:
        counts = {bar: sum(1 for _, b, _ in missed if b == bar) for bar in BARS}
        print(
            f"\n{len(rows)} scenarios x {args.seeds} seeds in {time.monotonic() - started:.0f}s; "
            + (
                "scenarios missing bar " + ", ".join(f"({bar}): {counts[bar]}" for bar in BARS)
                if missed
                else "every bar met"
            )
        )
    for name, bar, why in missed:
        print(f"  {name}: ({bar}) {why}", file=sys.stderr)
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
