"""The tuner on load that flips every 5 minutes (scenarios/schedule/load-flip.yaml):
tokens over the whole run against the best single static choice (one K, or plain
decoding, for the whole run, in hindsight) and against the best static K per phase,
for every variant (load 1<->32 or 2<->8 in flight, K changes by Restart or Hot, one K,
a learned schedule or Auto, 0 or 120 s startups), over seeds: min / median / max.
`--scenario` runs another file the same way (scenarios/schedule/k0-tax.yaml: a K=0
band dearer than the prior says).

    .venv/bin/python benchmarks/load_flip.py [--seeds 5] [--json FILE] [--scenario FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from specfleet.operator.simulate import Scenario, load_scenarios, simulate

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "schedule" / "load-flip.yaml"


def ratios(scenario: Scenario, seed: int) -> tuple[float, float]:
    """(achieved / best single static choice, achieved / best static K per phase)."""
    goodput = simulate(scenario, seed).goodput
    return goodput["achieved"] / goodput["single"], goodput["achieved"] / goodput["unconstrained"]


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--scenario", type=Path, default=SCENARIO)
    args = parser.parse_args()
    scenarios = load_scenarios(args.scenario)
    runs = [(s, seed) for s in scenarios for seed in range(args.seeds)]
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        results = list(pool.map(ratios, *zip(*runs, strict=True)))
    by_variant: dict[str, list[tuple[float, float]]] = {}
    for (scenario, _), result in zip(runs, results, strict=True):
        by_variant.setdefault(scenario.name.partition("@")[2], []).append(result)
    print(f"| variant | over the best single choice (min / median / max of {args.seeds} seeds) "
          "| over the best K per phase |")  # fmt: skip
    print("|---|---|---|")
    for variant, pairs in by_variant.items():
        single, per_phase = [p[0] for p in pairs], [p[1] for p in pairs]
        print(f"| {variant} | {spread(single)} | {spread(per_phase)} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(by_variant, indent=1))


if __name__ == "__main__":
    main()
