"""The shape of the default step cost: speedup over plain decoding per K, batch and drafting.

`StepCost()`'s defaults are calibrated so that P-EAGLE (parallel drafting) reproduces the
shape vLLM PR 32887 published for GPT-OSS-120B on one B200, measured on MT-Bench: best K
about 7 at batch 1 (1.52x over no speculation, 1.12x over the best EAGLE-3 K) and about 3
at batch 8 (1.34x, 1.07x). The tuner takes these defaults as its prior;
tests/test_step_cost_calibration.py holds them to that shape. Prints the Markdown tables of
docs/tuning.md:

    .venv/bin/python benchmarks/step_cost_shape.py
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import mean_acceptance_length
from specfleet.runtime.sim_model import StepCost, goodput

BATCHES = (1, 8, 32)
MAX_K = 16
SHOWN_K = range(11)
PUBLISHED_AT_K = 5  # the K the acceptance lengths were measured at

# amazon/gpt-oss-120b-p-eagle's mean acceptance lengths at K=5 (vllm bench serve, 2048
# output tokens), and MT-Bench's first-position acceptance.
PUBLISHED_LENGTH = {"math": 3.55, "code": 3.15, "chat": 2.68}
CHAT_FIRST_POSITION = 0.74
# The profile the defaults are calibrated against: the PR measured its speedups on
# MT-Bench, so the chat profile is the acceptance those speedups were seen at.
CALIBRATION_PROFILE = "chat"


@dataclass(frozen=True)
class Published:
    """PR 32887's P-EAGLE result at one batch size."""

    best_k: int
    speedup: float  # over no speculation
    over_sequential: float  # best P-EAGLE K over best EAGLE-3 K


PUBLISHED_SHAPE = {1: Published(7, 1.52, 1.12), 8: Published(3, 1.34, 1.07)}


def _solve(increasing: Callable[[float], float], target: float) -> float:
    """x in [0, 1] with increasing(x) == target, by bisection."""
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if increasing(middle) < target else (low, middle)
    return round((low + high) / 2, 3)


def published_profiles() -> dict[str, list[float]]:
    """Conditional acceptance [first position, every later one] per workload.

    Two numbers per profile: the first position and one conditional rate for the rest,
    which is what the published per-position tables of EAGLE drafts look like (a first
    position clearly above a nearly flat tail). Chat: the published first position, the
    tail solved from the acceptance length. Math and code publish no first position, so
    they keep chat's tail / first ratio and solve the first position from their length.
    """
    chat_length = PUBLISHED_LENGTH["chat"]
    chat_tail = _solve(
        lambda p: mean_acceptance_length([CHAT_FIRST_POSITION, p], PUBLISHED_AT_K), chat_length
    )
    ratio = chat_tail / CHAT_FIRST_POSITION
    profiles = {"chat": [CHAT_FIRST_POSITION, chat_tail]}
    for name in ("math", "code"):
        first = _solve(
            lambda a: mean_acceptance_length([a, ratio * a], PUBLISHED_AT_K),
            PUBLISHED_LENGTH[name],
        )
        profiles[name] = [first, round(ratio * first, 3)]
    return profiles


@dataclass(frozen=True)
class BatchShape:
    """Speedup over plain decoding at every K from 0 to MAX_K, both ways of drafting."""

    parallel: list[float]
    sequential: list[float]

    @property
    def best_k(self) -> int:
        return max(range(len(self.parallel)), key=lambda k: self.parallel[k])

    @property
    def best_sequential_k(self) -> int:
        return max(range(len(self.sequential)), key=lambda k: self.sequential[k])

    @property
    def speedup(self) -> float:
        return self.parallel[self.best_k]

    @property
    def over_sequential(self) -> float:
        return self.speedup / self.sequential[self.best_sequential_k]


def batch_shape(cost: StepCost, conditional: Sequence[float], batch: int) -> BatchShape:
    plain = goodput(cost, conditional, 0, batch, drafting=Drafting.PARALLEL)
    return BatchShape(
        [goodput(cost, conditional, k, batch, Drafting.PARALLEL) / plain for k in range(MAX_K + 1)],
        [
            goodput(cost, conditional, k, batch, Drafting.SEQUENTIAL) / plain
            for k in range(MAX_K + 1)
        ],
    )


def markdown(cost: StepCost) -> str:
    profiles = published_profiles()
    lines = [
        "| workload | conditional acceptance | ALen at K=5 (published) | "
        + " | ".join(f"best K, speedup at batch {b}" for b in BATCHES)
        + " |",
        "|---|---|---|" + "---|" * len(BATCHES),
    ]
    for name, conditional in profiles.items():
        shapes = [batch_shape(cost, conditional, b) for b in BATCHES]
        lines.append(
            f"| {name} | {conditional} "
            f"| {mean_acceptance_length(conditional, PUBLISHED_AT_K):.2f} "
            f"({PUBLISHED_LENGTH[name]}) | "
            + " | ".join(f"{s.best_k}, {s.speedup:.2f}x" for s in shapes)
            + " |"
        )
    conditional = profiles[CALIBRATION_PROFILE]
    lines += [
        "",
        f"Speedup over plain decoding, {CALIBRATION_PROFILE} profile (P-EAGLE / EAGLE-3):",
        "",
        "| batch | "
        + " | ".join(f"K={k}" for k in SHOWN_K)
        + " | best P-EAGLE over best EAGLE-3 |",
        "|---|" + "---|" * (len(SHOWN_K) + 1),
    ]
    for batch in BATCHES:
        shape = batch_shape(cost, conditional, batch)
        cells = [f"{shape.parallel[k]:.2f} / {shape.sequential[k]:.2f}" for k in SHOWN_K]
        lines.append(
            f"| {batch} | "
            + " | ".join(cells)
            + f" | {shape.over_sequential:.2f} (K={shape.best_k} vs K={shape.best_sequential_k}) |"
        )
    return "\n".join(lines)


def main() -> None:
    cost = StepCost()
    print(f"StepCost() = {cost.model_dump()}\n")
    print(markdown(cost))


if __name__ == "__main__":
    main()
