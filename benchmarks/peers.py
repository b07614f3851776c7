"""specfleet beside what users would pick instead: every scenario x every policy.

The same simulated engines and seeds for every policy (`specfleet.operator.peers`):
specfleet's tuner (`decide`), static K=3 and K=7, SGLang's `--speculative-adaptive`,
TensorRT-LLM's acceptance gate (alone and with its `draft_len_schedule`), vLLM's
`num_speculative_tokens_per_batch_size` and, on dspark, vLLM's adaptive verification
(alone at K=7, and under specfleet's tuner, which then tunes its cap). Each cell is the
steady-state goodput over the best static K per phase (the bench-tuner's ratio), the
mean over seeds, with the lowest seed's in brackets; `--whole-run` uses every window
instead (learning and transitions included).

    .venv/bin/python benchmarks/peers.py --seeds 20
    .venv/bin/python benchmarks/peers.py --scenarios schedule/load-flip.yaml \
        --only restart/auto --whole-run --seeds 5     # issue 47's load flipping
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from specfleet.operator.peers import PEERS, Peer, adaptive_verification, hold, started_at_their_k
from specfleet.operator.simulate import Scenario, SimulationResult, load_scenarios, simulate

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"

Run = Callable[[Scenario, int], SimulationResult]


def _specfleet(scenario: Scenario, seed: int) -> SimulationResult:
    return simulate(scenario, seed)


def _specfleet_capped(scenario: Scenario, seed: int) -> SimulationResult:
    """The tuner with the engine's adaptive verification on: the K it sets is the cap."""
    draft = {"method": scenario.method, "adaptiveVerification": True}
    policy = {**scenario.policy, "draft": draft}
    capped = scenario.model_copy(update={"policy": policy})
    return simulate(capped, seed, engine_rule=adaptive_verification(capped))


def _peer_run(peer: Peer) -> Run:
    def run(scenario: Scenario, seed: int) -> SimulationResult:
        started = started_at_their_k(scenario)
        return simulate(started, seed, hold(peer.tokens), peer.rule(started))

    return run


def policies() -> list[tuple[str, Run, Callable[[Scenario], bool]]]:
    """(column, how to run it, where it applies)."""
    columns: list[tuple[str, Run, Callable[[Scenario], bool]]] = [
        ("specfleet", _specfleet, lambda s: True),
        ("specfleet + adaptive verification", _specfleet_capped, lambda s: s.method == "dspark"),
    ]
    for peer in PEERS:
        columns.append((peer.name, _peer_run(peer), peer.applies))
    return columns


def ratio(result: SimulationResult, whole_run: bool) -> float:
    if not whole_run:
        return result.steady_ratio
    best = result.goodput["unconstrained"]
    return result.goodput["achieved"] / best if best else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--whole-run", action="store_true", help="every window, not steady")
    parser.add_argument("--only", default="", help="scenarios whose name contains this")
    parser.add_argument(
        "--scenarios", default="*.yaml", help="files under scenarios/ (a glob): e.g. schedule/*"
    )
    args = parser.parse_args()
    started = time.monotonic()
    columns = policies()
    print("| scenario | best static K | " + " | ".join(name for name, _, _ in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    wins: dict[str, int] = {name: 0 for name, _, _ in columns}
    count = 0
    for path in sorted(SCENARIOS.glob(args.scenarios)):
        for scenario in load_scenarios(path):
            if args.only not in scenario.name:
                continue
            count += 1
            cells: list[str] = []
            means: dict[str, float] = {}
            best_k = ""
            for name, run, applies in columns:
                if not applies(scenario):
                    cells.append("-")
                    continue
                results = [run(scenario, seed) for seed in range(args.seeds)]
                ratios = [ratio(r, args.whole_run) for r in results]
                means[name] = sum(ratios) / len(ratios)
                cells.append(f"{means[name]:.3f} ({min(ratios):.3f})")
                best_k = "→".join(map(str, results[0].best_static_tokens))
            top = max(means.values())
            for name, value in means.items():
                if value >= top - 0.005:
                    wins[name] += 1
            print(f"| {scenario.name} | {best_k} | " + " | ".join(cells) + " |", flush=True)
    print(
        f"\n{count} scenarios x {args.seeds} seeds in {time.monotonic() - started:.0f}s; "
        "within 0.005 of the row's best: " + ", ".join(f"{name} {n}" for name, n in wins.items())
    )


if __name__ == "__main__":
    main()
