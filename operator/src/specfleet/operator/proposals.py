"""Proposals: the candidate K (or learned schedule) predicted to be the fastest that
clears the floor, proposed for a trial when it is at least minImprovement better; or
plain decoding, where it is predicted faster than what runs. A proposal is a value:
`tuner` starts what it proposes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specfleet.operator import exploration, hot_schedules, schedule, speed
from specfleet.operator.api import (
    ScheduledBand,
    ScheduleMode,
    StepTimeSample,
)
from specfleet.operator.outcomes import TrialStart
from specfleet.operator.prediction import (
    Prediction,
    conditional_for,
    plain,
    predict,
    predictions_at,
)
from specfleet.operator.rollback_metrics import floor_caps_k
from specfleet.operator.run import Run
from specfleet.operator.windows import Judged


@dataclass(frozen=True)
class Candidate:
    """A trial to start: K=tokens (0: plain decoding), or the learned schedule
    `schedule` (whose largest K is `tokens`), and why."""

    tokens: int
    schedule: list[ScheduledBand] | None
    message: str
    why: TrialStart = TrialStart.PREDICTED_GAIN


@dataclass(frozen=True)
class PlainPredicted:
    """Plain decoding predicted faster than what runs (`reason`): measured first where a
    trial can measure it; where none can, speculation stops on the prediction if `stop`
    (a K=0 band that was never told from plain decoding stops nothing)."""

    reason: str
    stop: bool


Proposal = Candidate | PlainPredicted


def propose(run: Run, judged: Judged) -> Proposal | None:
    """The best candidate K (or schedule) for a canary (or an in-place trial), if any."""
    mode = run.spec.schedule_in_effect.mode
    if mode is ScheduleMode.FIXED:
        return None  # the spec's schedule runs as written
    assert judged.window is not None
    conditional = conditional_for(judged.window, run.sp.good_acceptance)
    if schedule.learning(
        run.spec, run.sp.load, conditional, run.cost, scheduled=run.sp.schedule is not None
    ):
        return _propose_schedule(run, judged)
    return _propose_k(run, judged)


def _propose_schedule(run: Run, judged: Judged) -> Proposal | None:
    """The schedule that fits the load the stable pods saw, tried if it is predicted to
    serve at least minImprovement more tokens than what runs; or plain pods, measured
    first, where they beat both (a schedule's K=0 band pays the K=0 tax, they do not)."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    conditional = conditional_for(judged.window, run.sp.good_acceptance)
    running = sp.schedule or [ScheduledBand(tokens=sp.tokens)]
    parallel = hot_schedules.drafts_its_ceiling(spec, run.status)
    best = schedule.learn(spec, sp.load, conditional, run.cost, parallel=parallel)
    now_tokens = schedule.tokens_over(running, sp.load, conditional, run.cost, parallel=parallel)
    best_tokens = (
        schedule.tokens_over(best, sp.load, conditional, run.cost, parallel=parallel)
        if best
        else 0.0
    )
    plain_tokens = schedule.tokens_over(None, sp.load, conditional, run.cost)
    load = (
        f"across the last {len(sp.load)} intervals' load "
        f"(batch {min(sp.load):.1f} to {max(sp.load):.1f})"
    )
    batch = judged.window.batch_per_pod
    if judged.window.drafts == 0 and speed.matching(run.samples, 0, batch) is None:
        # A K=0 band runs here: its tax is told from plain decoding only once plain
        # decoding is measured at this load too (else the fit's guess at plain is in it).
        reason = f"a K=0 band runs at batch {batch:.1f}, where plain decoding was never measured"
        return PlainPredicted(reason, stop=False)
    if plain_tokens >= max(best_tokens, now_tokens * (1 + run.required_gain())):
        reason = (
            f"plain decoding is predicted {plain_tokens / now_tokens - 1:+.1%} tokens over "
            f"{schedule.describe(running)} {load}, a K=0 step costing "
            f"{run.cost.k0_tax:+.0%} over a plain one"
        )
        return PlainPredicted(reason, stop=True)
    if best is None or best == running or best == sp.rejected_schedule:
        return None
    if floor_caps_k(spec) and any(
        predict(conditional, k, 1.0, spec.rollback.metric, run.cost).metric < run.floor + run.margin
        for k in schedule.drafting_ks(best)
    ):
        return None
    gain = best_tokens / now_tokens - 1 if now_tokens > 0 else math.inf
    if gain < run.required_gain():
        return None
    candidate = None if schedule.is_flat(best) else best
    k = schedule.largest(best)
    message = (
        f"{schedule.describe(best)} predicted {gain:+.1%} tokens over "
        f"{schedule.describe(running)} {load}"
    )
    return Candidate(k, candidate, message)


def _propose_k(run: Run, judged: Judged) -> Proposal | None:
    """The best K at this window's load, tried if predicted minImprovement faster; else
    a K the fit is unsure of, explored if its interval allows that gain (exploration)."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None and sp.tokens is not None
    predicted = predictions_at(run.spec, judged.window, run.sp.good_acceptance, run.cost)
    current = predicted[sp.tokens]
    capped = floor_caps_k(spec)
    eligible = [
        p
        for k, p in predicted.items()
        if k != sp.tokens
        and k not in sp.rejected_tokens
        and (not capped or p.metric >= run.floor + run.margin)
    ]
    if not eligible:
        return None
    samples = run.samples
    batch = judged.window.batch_per_pod
    best = max(eligible, key=lambda p: p.goodput)
    gain = best.goodput / current.goodput - 1 if current.goodput > 0 else math.inf
    if gain < run.required_gain():
        # Adaptive verification predicts a cap (the best count under it), which one
        # step-time interval does not describe: such a draft is not explored.
        if current.goodput > 0 and not spec.draft.adaptive_verification:
            candidates = [*eligible, *_plain_to_explore(run, batch, current)]
            chosen = exploration.choose(run, candidates, current, batch)
            if chosen is not None:
                return Candidate(chosen.tokens, None, chosen.message, TrialStart.EXPLORE)
        return None
    posterior = speed.posterior(samples, run.drafting, run.now)
    interval = (
        exploration.predicted_gain(posterior, best, current, batch).describe()
        if math.isfinite(gain)
        else f"{gain:+.1%}"
    )
    message = (
        f"K={best.tokens} predicted {interval} goodput over K={sp.tokens} at batch "
        f"{batch:.1f}, {spec.rollback.metric.value} {best.metric:.3f}; "
        + _how_sure(samples, best.tokens, batch)
    )
    return Candidate(best.tokens, None, message)


def _plain_to_explore(run: Run, batch: float, current: Prediction) -> list[Prediction]:
    """Plain decoding as a candidate to explore where the choice to speculate is close:
    predicted within the required gain of the K in effect. Its interval is the widest
    (no K>=1 sample tells a draft's fixed cost from the target's), so by MIN_CHANCE alone
    it would be explored everywhere, also where drafting plainly pays. In place also on
    an engine the prior does not describe (speed.unlike_prior): there the prior's split
    of a step is no evidence, and the chance must repay the two restarts (of a measured
    startup). An engine like the prior keeps the split it measures as published."""
    candidate = plain(batch, run.cost)
    close = candidate.goodput >= current.goodput * (1 - run.required_gain())
    unlike = (
        run.trials_in_place
        and run.restart_cost() > 0
        and speed.unlike_prior(run.cost, run.drafting)
    )
    if not (close or unlike) or 0 in run.sp.rejected_tokens:
        return []
    return [candidate]


def _how_sure(samples: list[StepTimeSample], k: int, batch: float) -> str:
    """What the candidate's step time rests on: a sample at its K and batch, or an
    extrapolation from the Ks measured (or the prior alone), which the trial checks."""
    if speed.matching(samples, k, batch) is not None:
        return f"step time at K={k} measured"
    measured = sorted({s.tokens for s in samples})
    if not measured:
        return f"step time at K={k} from the prior alone (no K measured yet)"
    return f"step time at K={k} extrapolated from K={','.join(map(str, measured))}"
