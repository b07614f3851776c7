"""How often the goodput gain's lower bound covers the true gain, over varying profiles.

Many simulated trials with a known true gain: each window of each track draws its
conditional acceptance around the profile (`sim_model.jitter`: the traffic mix varies
window to window, as `engine.noise` does in the simulator), then its drafts' accepted
lengths as a prefix, and a step time with multiplicative noise; every trial is bounded
by `trial_stats.goodput_gain` as the tuner bounds one. Reports, per case, the share of
trials whose one-sided 95% lower bound is at or under the true gain (nominal 0.95), and
the share a true gain of +1.1% would promote at minImprovement 3% (false promotions).

    .venv/bin/python benchmarks/gain_coverage.py [--trials 1000] [--seed 0]

Deterministic for a seed. tests/test_gain_coverage.py holds the bound to it.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.step_cost_shape import published_profiles
from specfleet.operator import speed
from specfleet.operator.api import TrackTotals
from specfleet.operator.observations import TrackWindow
from specfleet.operator.trial_stats import goodput_gain, totals_add
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import cumulative_acceptance, mean_acceptance_length
from specfleet.runtime.sim_model import jitter

DRAFTS = 400  # drafts a window (one request per pod: a few hundred a minute)
MIN_IMPROVEMENT = 0.03
BEFORE_K, AFTER_K, BEFORE_MS = 3, 6, 5.0


@dataclass(frozen=True)
class Case:
    name: str
    profile: str
    acceptance_noise: float  # std-dev of each conditional rate, per track and window
    step_noise: float  # std-dev of the multiplicative step-time jitter, per window
    windows: tuple[int, int]  # stable, canary


CASES = (
    Case("calm", "code", 0.0, 0.02, (3, 3)),
    Case("step-noise", "code", 0.0, 0.08, (3, 9)),
    Case("acceptance-noise", "code", 0.03, 0.0, (3, 3)),
    Case("both", "code", 0.03, 0.03, (3, 3)),
    Case("both-chat", "chat", 0.03, 0.03, (3, 9)),
    Case("both-math", "math", 0.02, 0.05, (9, 9)),
    Case("sim-defaults", "code", 0.02, 0.02, (3, 3)),
)


def _window(
    rng: random.Random, profile: Sequence[float], k: int, step_ms: float, case: Case
) -> TrackWindow:
    rates = jitter(rng, profile, case.acceptance_noise)
    reach = [1.0, *cumulative_acceptance(rates, k)]  # P(accepted >= j)
    weights = [reach[j] - (reach[j + 1] if j < k else 0.0) for j in range(k + 1)]
    accepted = rng.choices(range(k + 1), weights, k=DRAFTS)
    step = step_ms / 1000.0 * max(0.2, rng.gauss(1.0, case.step_noise))
    return window_of(accepted, k, step)


def window_of(accepted: Sequence[int], k: int, step: float) -> TrackWindow:
    """One pod's window of DRAFTS drafts at K=k, one request in flight: the tokens each
    draft had accepted (a prefix), each step taking `step` seconds."""
    per_position = tuple(float(sum(1 for a in accepted if a > j)) for j in range(k))
    return TrackWindow(
        drafts=DRAFTS,
        draft_tokens=DRAFTS * k,
        accepted_tokens=float(sum(accepted)),
        accepted_per_position=per_position,
        generation_tokens=DRAFTS + float(sum(accepted)),
        seconds=60,
        pod_seconds=60,
        pods=1,
        running_requests=1,
        decode_steps=DRAFTS,
        engine_steps=DRAFTS,
        decode_seconds=DRAFTS * step,
    )


def _mean_length(rng: random.Random, profile: Sequence[float], k: int, noise: float) -> float:
    """The expected acceptance length over the window-to-window jitter (Monte Carlo)."""
    draws = 4000 if noise > 0 else 1
    return sum(mean_acceptance_length(jitter(rng, profile, noise), k) for _ in range(draws)) / draws


@dataclass(frozen=True)
class Result:
    case: Case
    coverage: float
    false_promotions: float


def run_case(case: Case, trials: int, seed: int) -> Result:
    """Coverage at a true gain near +8% (after_ms set from it), and false promotions at a
    true gain of +1.1%, both over `trials` seeded trials."""
    rng = random.Random(seed)
    profile = published_profiles()[case.profile]
    cost = speed.prior(Drafting.PARALLEL)
    before_len = _mean_length(rng, profile, BEFORE_K, case.acceptance_noise)
    after_len = _mean_length(rng, profile, AFTER_K, case.acceptance_noise)

    def trial(after_ms: float) -> float:
        before, after = TrackTotals(), TrackTotals()
        for _ in range(case.windows[0]):
            before = totals_add(before, _window(rng, profile, BEFORE_K, BEFORE_MS, case))
        for _ in range(case.windows[1]):
            after = totals_add(after, _window(rng, profile, AFTER_K, after_ms, case))
        gain, _ = goodput_gain(before, BEFORE_K, after, AFTER_K, 1.0, cost)
        return gain.low

    def after_ms_for(gain: float) -> float:
        return after_len * BEFORE_MS / (before_len * (1 + gain))

    covering_ms, small_ms = after_ms_for(0.08), after_ms_for(0.011)
    covered = sum(trial(covering_ms) <= 0.08 for _ in range(trials))
    promoted = sum(trial(small_ms) >= MIN_IMPROVEMENT for _ in range(trials))
    return Result(case, covered / trials, promoted / trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        "| case | profile | acceptance noise | step noise | windows | coverage | false promotions |"
    )
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        r = run_case(case, args.trials, args.seed)
        print(
            f"| {case.name} | {case.profile} | {case.acceptance_noise} | {case.step_noise} | "
            f"{case.windows[0]}+{case.windows[1]} | {r.coverage:.3f} | {r.false_promotions:.3f} |"
        )


if __name__ == "__main__":
    main()
