"""Engine-cost sweep: the tuner on published-like acceptance under engine costs unlike its
prior, each scenario's steady-state goodput over the best static K (not a bench bar: the
cases it found are shipped as scenarios/engine-costs.yaml, which `make bench-tuner` holds).

Workloads math, code, chat (the published profiles) and a stronger one ([0.92, 0.85]) x
1, 8 and 32 requests in flight x 7 engine costs = 84 scenarios, 3 hours each, the default
policy from K=3. Prints one line per scenario and how many runs end below 0.95.

    .venv/bin/python benchmarks/engine_costs.py --seeds 2 [--only /c8/]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from specfleet.operator.simulate import expand, simulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.tuner import MIN_RATIO  # noqa: E402  (bar (a) of `make bench-tuner`)

WORKLOADS = {
    "math": [0.895, 0.715],
    "code": [0.831, 0.664],
    "chat": [0.74, 0.591],
    "strong": [0.92, 0.85],
}
# StepCost fields over the calibrated defaults (the tuner's prior).
COSTS: dict[str, dict[str, Any]] = {
    "published": {},
    "dear-verify": {"compute_bound_tokens": 8, "verify_ms_per_token": 0.3},
    "wide-knee": {"compute_bound_tokens": 128},
    "cheap-pass": {"parallel_draft_ms": 0.6},
    "dear-pass": {"parallel_draft_ms": 4.0},
    "steep-draft": {"parallel_draft_ms_per_token": 0.4},
    "flat-verify": {"verify_ms_per_token": 0.02},
}
SWEEP: dict[str, Any] = {
    "name": "engine-costs-sweep",
    "duration": "3h",
    "replicas": 2,
    "method": "peagle",
    "settle": "45m",
    "engine": {"noise": 0.02, "step_noise": 0.02},
    "policy": {
        "speculation": {"tokens": 3, "minTokens": 1, "maxTokens": 16},
        "tuning": {"minImprovement": 0.03},
    },
    "variants": {
        "workload": {name: {"engine": {"acceptance": a}} for name, a in WORKLOADS.items()},
        "concurrency": {f"c{c}": {"concurrency": c} for c in (1, 8, 32)},
        "cost": {name: {"engine": {"cost": c}} if c else {} for name, c in COSTS.items()},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--only", default="", help="run the scenarios whose name contains this")
    args = parser.parse_args()
    started = time.monotonic()
    ratios: list[float] = []
    for scenario in expand(SWEEP):
        if args.only not in scenario.name:
            continue
        results = [simulate(scenario, seed) for seed in range(args.seeds)]
        mine = [r.steady_ratio for r in results]
        ratios += mine
        finals = [r.records[-1].tokens for r in results]
        print(
            f"{scenario.name:44s} best static K {results[0].best_static_tokens} "
            f"min {min(mine):.3f} mean {statistics.mean(mine):.3f} "
            f"below {sum(x < MIN_RATIO for x in mine)} final K {finals}",
            flush=True,
        )
    below = sum(x < MIN_RATIO for x in ratios)
    print(
        f"{below} of {len(ratios)} runs below {MIN_RATIO} of the best static K; "
        f"min {min(ratios):.3f}, mean {statistics.mean(ratios):.3f}; "
        f"{time.monotonic() - started:.0f}s"
    )


if __name__ == "__main__":
    main()
