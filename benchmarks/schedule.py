"""The learned K schedule against one K, on load that cycles between 1 and 32 requests in
flight every 20 minutes for six hours (scenarios/load-cycle.yaml, the published-like
cost, HumanEval-like acceptance), whole runs, learning included.

Two measures, because they weigh the loads differently:
- tokens/s per pod, summed over the run: a window at 32 in flight serves ~20x the
  tokens of one at 1, so this is nearly the high-load phases alone;
- speed per phase: each window's goodput over the best any static K gets in that
  window's phase, averaged (each phase counts alike: what a request at 1 in flight
  feels as much as one at 32).
Each against the best single K for the whole run (hindsight, per measure) and against
the best K per phase (hindsight). Also the tuner with schedules off (one K, tuned).

    .venv/bin/python benchmarks/schedule.py [--seeds 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specfleet.operator.simulate import SimulationResult, load_scenario, phases, simulate
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import goodput

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "schedule" / "load-cycle.yaml"


def per_phase_speed(result: SimulationResult, k: int | None) -> float:
    """Mean over windows of goodput / the phase's best static K's; k=None: achieved."""
    scenario = load_scenario(SCENARIO, "learned")
    cuts = phases(scenario)
    drafting = Drafting.PARALLEL  # the scenario's P-EAGLE
    ratios = []
    for record in result.records:
        phase = cuts[record.phase]
        value = (
            record.goodput
            if k is None
            else goodput(scenario.engine_cost, phase.acceptance, k, phase.concurrency, drafting)
        )
        ratios.append(value / record.best_static)
    return statistics.fmean(ratios)


def run(seed: int) -> dict[str, float]:
    learned = simulate(load_scenario(SCENARIO, "learned"), seed)
    one_k = simulate(load_scenario(SCENARIO, "one-k"), seed)
    spec_ks = range(0, 17)
    single_speed = max(per_phase_speed(learned, k) for k in spec_ks)
    return {
        "tokens_learned_over_single": learned.goodput["achieved"] / learned.goodput["single"],
        "tokens_learned_over_per_phase": learned.goodput["achieved"]
        / learned.goodput["unconstrained"],
        "tokens_one_k_over_single": one_k.goodput["achieved"] / one_k.goodput["single"],
        "speed_learned_over_single": per_phase_speed(learned, None) / single_speed,
        "speed_learned_over_per_phase": per_phase_speed(learned, None),
        "speed_one_k_over_single": per_phase_speed(one_k, None) / single_speed,
        "speed_one_k_over_per_phase": per_phase_speed(one_k, None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs = [run(seed) for seed in range(args.seeds)]
    print(f"{'ratio':<34} {'median':>7} {'min':>7} {'max':>7}   ({args.seeds} seeds)")
    summary = {}
    for key in runs[0]:
        values = [r[key] for r in runs]
        summary[key] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
        }
        print(f"{key:<34} {summary[key]['median']:>7.3f} {min(values):>7.3f} {max(values):>7.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"seeds": args.seeds, "ratios": summary}, indent=1))


if __name__ == "__main__":
    main()
