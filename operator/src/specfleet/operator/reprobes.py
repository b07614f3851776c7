"""Re-probes: while speculation is off, when to try it again (after a back-off that
doubles with each failed re-probe, or when the fitted cost predicts a gain at today's
load), and switching it back on."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from specfleet.operator import exploration, hot_schedules, schedule, speed
from specfleet.operator.api import (
    LastKnownGood,
    Rejected,
    Reprobing,
    ScheduledBand,
)
from specfleet.operator.prediction import (
    Prediction,
    fastest_and_plain,
    plain,
    predict_ks,
    remembered,
)
from specfleet.operator.rollback_metrics import floor_caps_k
from specfleet.operator.run import SWITCH_HORIZON, Run
from specfleet.operator.windows import Judged

# Each re-probe that ends disabled again doubles the next back-off, this many times at most.
MAX_REPROBE_DOUBLINGS = 4
# A re-probe holds (the back-off starts over) once speculation has stayed on this long
# after it, about how long a settled K holds (run.SWITCH_HORIZON): one switched off
# again sooner was a reversal, and the next back-off doubles.
REPROBE_HOLD = SWITCH_HORIZON


def next_reprobe(run: Run, failed: int) -> datetime:
    """reprobeAfter from now, doubled for each of the `failed` re-probes in a row."""
    doublings = min(failed, MAX_REPROBE_DOUBLINGS)
    return run.now + run.spec.rollback.reprobe_after.length * (1 << doublings)


@dataclass(frozen=True)
class Reprobe:
    """A re-probe that is due: speculation tried again at K=tokens, and why."""

    tokens: int
    why: str  # BackoffElapsed or PredictedGain
    cause: str  # the words: the back-off (doubled how often) or a predicted gain


def due(run: Run, stable: Judged) -> Reprobe | None:
    """Whether to try speculation again, never on an idle fleet: after the back-off at
    the requested K (spec.speculation.tokens), or as soon as the fitted cost says the
    acceptance measured before a StopSpeculation would pay at the batch plain decoding
    runs now, at the K it predicts best."""
    sp, spec, off = run.sp, run.spec, run.sp.off
    assert off is not None
    window = stable.window
    if window is None or window.generation_tokens <= 0:
        return None  # an idle fleet measures nothing: the re-probe waits for traffic
    k, why = recovered_k(run, window.batch_per_pod), "BackoffElapsed"
    cooled = (
        sp.since_change.at is None or run.now - sp.since_change.at >= spec.tuning.cooldown.length
    )
    # After a re-probe that measured no gain, the prediction waits out the back-off too.
    backed_off = off.failed_reprobes == 0 or run.now >= off.reprobe_at
    if off.acceptance and speed.measured(window) and cooled and backed_off:
        best, plain_goodput = fastest_and_plain(
            spec, off.acceptance, window.batch_per_pod, run.cost
        )
        if (
            _predicted_to_pay(run, best, plain_goodput, window.batch_per_pod)
            and _pays_lately(run, off.acceptance)
            and _pays_over_load(run, off.acceptance)
        ):
            k, why = best.tokens, "PredictedGain"
    if why == "BackoffElapsed" and run.now < off.reprobe_at:
        return None
    if why == "BackoffElapsed" and off.acceptance and speed.measured(window):
        return None  # stopped for speed: the prediction above decides, not the clock
    failed = off.failed_reprobes
    waited = f" (back-off doubled {failed} times)" if failed else ""
    cause = "the back-off" + waited if why == "BackoffElapsed" else "a predicted gain"
    return Reprobe(k, why, cause)


def _pays_lately(run: Run, acceptance: list[float]) -> bool:
    """Whether a K is predicted to pay at the batch of each of the last
    rollback.failureLimit windows with traffic (status.speculation.load), not at this
    one alone: as a rollback, one window (one lull in load that flips) is not evidence
    enough to start a re-probe."""
    recent = run.sp.load[-run.spec.rollback.failure_limit :]
    for batch in recent:
        best, plain_goodput = fastest_and_plain(run.spec, acceptance, batch, run.cost)
        if best.goodput < plain_goodput * (1 + run.required_gain()):
            return False
    return True


def _pays_over_load(run: Run, acceptance: list[float]) -> bool:
    """Where the tuner decides for the load history (schedule.learning), a re-probe's
    prediction must hold over that load too, by the tokens at stake: a K that pays at 1
    in flight half the time, where plain decoding wins at 32 the other half, does not."""
    sp = run.sp
    if not schedule.learning(
        run.spec, sp.load, acceptance, run.cost, scheduled=sp.schedule is not None
    ):
        return True
    parallel = hot_schedules.drafts_its_ceiling(run.spec, run.status)
    best = schedule.learn(run.spec, sp.load, acceptance, run.cost, parallel=parallel)
    plain_tokens = schedule.tokens_over(None, sp.load, acceptance, run.cost)
    return best is not None and schedule.tokens_over(
        best, sp.load, acceptance, run.cost, parallel=parallel
    ) >= plain_tokens * (1 + run.required_gain())


def _predicted_to_pay(run: Run, best: Prediction, plain_goodput: float, batch: float) -> bool:
    """Whether K=best is predicted to gain the required gain over the plain decoding that
    runs. On a canary the re-probe is a trial that measures it first. In place it
    switches the serving pods on the prediction alone: before the back-off has passed
    the gain's lower bound must clear it (measured plain decoding and one K do not tell
    a draft's fixed cost from dear verification, and on that split a K never run can
    look faster than plain decoding where it is slower); after it, the prediction does,
    as the back-off bounds how often a wrong one restarts the pods (the samples of Ks
    age out, and the bound alone would then never let speculation back on). The
    posterior is fitted only for that bound."""
    assert run.sp.off is not None
    if not run.trials_in_place or run.now >= run.sp.off.reprobe_at:
        return best.goodput >= plain_goodput * (1 + run.required_gain())
    posterior = speed.posterior(run.samples, run.drafting, run.now)
    gain = exploration.predicted_gain(posterior, best, plain(batch, run.cost), batch)
    return gain.low >= run.required_gain()


def recovered_k(run: Run, batch: float) -> int:
    """The K a re-probe after the back-off tries: the best the fitted cost predicts at
    today's batch for the acceptance last measured above the floor (what a recovered
    draft does again), among the Ks predicted to clear floor + margin where the floor
    caps K; the requested K when no window cleared the floor yet (or tuning is off).
    Not minTokens: K=1 of
    a parallel drafter is barely faster than plain decoding, so a recovered draft tried
    there would find no gain and stay off."""
    spec, good = run.spec, run.sp.good_acceptance
    if not good or not spec.tuning.enabled:  # untuned, the K asked for is the K run
        return spec.speculation.tokens
    predicted = [
        p
        for p in predict_ks(spec, good, batch, run.cost).values()
        if not floor_caps_k(spec) or p.metric >= run.floor + run.margin
    ]
    if not predicted:
        return spec.speculation.tokens
    return max(predicted, key=lambda p: p.goodput).tokens


def reenable(run: Run, k: int) -> None:
    """Speculation back on at K=k after a re-probe (in place, or its canary promoted),
    not yet held: switched off again before it has held for REPROBE_HOLD, it counts as
    a failed re-probe and the next back-off doubles. A canary's promotion is no proof
    that it lasts: load that flips turned StopSpeculation -> re-probe -> Promote ->
    StopSpeculation every half hour, the back-off never growing (issue 47)."""
    off = run.sp.off
    assert off is not None
    failed = off.failed_reprobes
    enable(run, k)
    run.sp.reprobing = Reprobing(since=run.now, failed_reprobes=failed)


def held(reprobing: Reprobing | None, now: datetime) -> bool:
    """Whether a re-probe (`status.speculation.reprobing`) has held: REPROBE_HOLD since
    it switched speculation on (and the floor's passing windows, counted by the caller)."""
    return reprobing is not None and now - reprobing.since >= REPROBE_HOLD


def enable(run: Run, k: int) -> None:
    """Speculation on at K=k, which becomes the last known good K."""
    sp = run.sp
    sp.off = None
    sp.inconclusive_windows = 0
    good = sp.last_known_good.schedule if sp.last_known_good else None
    if sp.schedule is not None:  # K=k was tried: no band drafts more than it
        sp.schedule = good = schedule.capped(sp.schedule, k)
    sp.last_known_good = LastKnownGood(tokens=k, schedule=good)
    run.changed(k)


def remember_rejected(
    run: Run, *, tokens: Iterable[int] = (), schedule: list[ScheduledBand] | None = None
) -> None:
    """Add Ks (or replace the schedule) that are not proposed again for reprobeAfter."""
    before = run.sp.rejected
    run.sp.rejected = Rejected(
        tokens=sorted({*(before.tokens if before else ()), *tokens}),
        schedule=schedule if schedule is not None else before.schedule if before else None,
        until=run.now + run.spec.rollback.reprobe_after.length,
    )


def with_acceptance(known: list[float] | None, measured: list[float]) -> list[float] | None:
    """The conditional acceptance per position to remember: `measured` at one K, and the
    deeper positions as a deeper K last measured them (prediction.with_deeper)."""
    if not measured:
        return known
    return [round(c, 4) for c in remembered(measured, known)]
