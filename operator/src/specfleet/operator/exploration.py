"""Exploration: trying a K the step-cost fit is unsure of, within a budget.

The fit (`speed`) extrapolates to Ks it has no sample at, and a wrong extrapolation is
never corrected if the tuner only tries what the fit already favours: a knee placed
wrong keeps a deep K looking slow (or plain decoding looking slow) for good. So every
prediction carries the fit's 90% interval (`speed.Posterior.interval`), and when no K is
predicted to gain what a change needs, a K not measured at this batch whose interval
still allows that gain is tried as an ordinary trial (a canary, or in place where the
rules allow it): promoted only on a measured gain, and either way its step times join
the fit, which is then sure there. Exploration stops by itself once the Ks in doubt are
measured; `EXPLORATION_BUDGET` bounds it in any case."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.operator import speed
from specfleet.operator.outcomes import ActionKind, TrialStart
from specfleet.operator.prediction import Prediction, k_words
from specfleet.operator.run import Run

# Exploratory trials whose lesson stands (see `explorations`), counted from
# status.history.
EXPLORATION_BUDGET = 2
# Plain decoding apart: its interval is the widest (the fit cannot tell a draft's fixed
# cost from the target's without it), so on a shared budget it would crowd out every K.
PLAIN_EXPLORATION_BUDGET = 1
# A K is explored when the posterior gives it at least this chance of the required gain:
# the optimistic end of its 90% interval clears it.
MIN_CHANCE = speed.INTERVAL_QUANTILE


@dataclass(frozen=True)
class Gain:
    """A predicted goodput gain over the K that runs, with its 90% interval (from the
    step-time interval: the K that runs is measured, its own spread is small)."""

    value: float
    low: float
    high: float

    def describe(self) -> str:
        return f"{self.value:+.1%} (90% interval {self.low:+.1%} to {self.high:+.1%})"


def predicted_gain(
    posterior: speed.Posterior, candidate: Prediction, current: Prediction, batch: float
) -> Gain:
    """The candidate's goodput gain over the current K, with its interval."""
    interval = posterior.interval(candidate.tokens, batch)
    now = current.goodput
    per_ms = candidate.goodput * interval.ms  # goodput x step time: tokens per ms of step
    return Gain(
        candidate.goodput / now - 1,
        per_ms / interval.high / now - 1,
        per_ms / interval.low / now - 1,
    )


def explorations(run: Run, plain: bool) -> int:
    """Exploratory trials of plain decoding (or of Ks) in status.history whose lesson
    stands: started within speed.MAX_AGE, or later where a step-time sample at the K it
    explored is still kept (samples stop ageing while the engine measures as they say:
    `speed.confirms`). So the budget comes back when what the explorations measured has
    gone, not on a clock: a day with nothing changing explores in its first hour and
    never again."""
    kept = {s.tokens for s in run.samples}
    return sum(
        1
        for entry in run.status.history
        if entry.action in (ActionKind.START_CANARY, ActionKind.START_IN_PLACE)
        and entry.reason.startswith(f"{TrialStart.EXPLORE}:")
        and (entry.to_tokens == 0) == plain
        and (run.now - entry.time < speed.MAX_AGE or entry.to_tokens in kept)
    )


def _budget(plain: bool) -> int:
    return PLAIN_EXPLORATION_BUDGET if plain else EXPLORATION_BUDGET


def _chance_needed(run: Run, gained: float, loss: float = 0.0) -> float:
    """The chance of the required gain an exploration needs: MIN_CHANCE on a canary; in
    place, where one that fails restarts the serving pods twice (there and back) and
    serves at the predicted `loss` meanwhile, enough that what it gains when it gains
    (`gained`) repays that: P x gained >= (1 - P) x Run.failed_exploration_cost."""
    if not run.trials_in_place:
        return MIN_CHANCE
    failing = run.failed_exploration_cost(loss)
    return max(MIN_CHANCE, failing / (gained + failing))


def _gain_when_gained(
    posterior: speed.Posterior,
    candidate: Prediction,
    step: float,
    current: Prediction,
    batch: float,
    chance: float,
) -> float:
    """The candidate's gain over the current K in the middle of the outcomes where it
    gains the required gain (the step time at half their chance): a K the fit is all but
    sure of gains about the required gain there, plain decoding with a draft cost never
    measured may gain far more. `step`: the step time the candidate's goodput rests on."""
    typical = posterior.quantile(candidate.tokens, batch, chance / 2)
    typical = max(typical, step * speed.MIN_PRIOR_SCALE)
    return candidate.goodput * step / (typical * current.goodput) - 1


def _cannot_gain(candidate: Prediction, current: Prediction, required: float) -> bool:
    """A deeper K than the one that runs whose acceptance length is not `required` longer
    cannot gain it, whatever the fit's interval says: drafting and verifying more tokens
    never makes a step faster, so its step is at least the measured one of the K that
    runs. (A broken draft, first position 0.12, explored K=16 on a 90% interval of -92% to
    +795%: its acceptance length was 1.14 against 1.13.)"""
    deeper = candidate.tokens > current.tokens >= 1
    return deeper and candidate.mean_length < current.mean_length * (1 + required)


@dataclass(frozen=True)
class Exploration:
    tokens: int
    chance: float  # that it gains the required gain
    message: str


def choose(
    run: Run,
    eligible: list[Prediction],
    current: Prediction,
    batch: float,
) -> Exploration | None:
    """The K to explore (0: plain decoding): among the eligible Ks with no step-time
    sample at this batch and budget left, the one most likely to gain the required gain,
    if that chance is enough (see `_chance_needed`); else None."""
    samples = run.samples
    if not samples:  # no step times: a trial could not measure what is in doubt
        return None
    used = {plain: explorations(run, plain) for plain in (False, True)}
    required = run.required_gain()
    unmeasured = [
        p
        for p in eligible
        if used[p.tokens == 0] < _budget(p.tokens == 0)
        and speed.matching(samples, p.tokens, batch) is None
        and not _cannot_gain(p, current, required)
    ]
    if not unmeasured:  # each measured here: the fit is sure of them, nothing to learn
        return None
    posterior = speed.posterior(samples, run.drafting, run.now)
    best: tuple[float, Prediction] | None = None
    for candidate in unmeasured:
        # Gaining `required` needs a step time of at most this long.
        step = speed.step_ms(run.cost, candidate.tokens, batch)
        needed = candidate.goodput * step / (current.goodput * (1 + required))
        chance = posterior.chance_at_most(candidate.tokens, batch, needed)
        if chance <= 0 or (best is not None and chance <= best[0]):
            continue
        # Plain decoding, whose interval is the widest, by what it gains when it gains; a
        # K by the required gain (near the samples its interval is narrow).
        gained = (
            _gain_when_gained(posterior, candidate, step, current, batch, chance)
            if candidate.tokens == 0
            else required
        )
        loss = max(0.0, 1 - candidate.goodput / current.goodput)
        if chance >= _chance_needed(run, max(gained, required), loss):
            best = (chance, candidate)
    if best is None:
        return None
    chance, candidate = best
    gain = predicted_gain(posterior, candidate, current, batch)
    plain = candidate.tokens == 0
    message = (
        f"{k_words(candidate.tokens)} is not measured at batch {batch:.1f}: predicted "
        f"{gain.describe()} goodput over K={current.tokens}, {chance:.0%} likely to gain the "
        f"{required:+.1%} needed; exploration {used[plain] + 1} of {_budget(plain)} "
        f"{'of plain decoding ' if plain else ''}per "
        f"{speed.MAX_AGE.total_seconds() / 3600:.0f}h"
    )
    return Exploration(candidate.tokens, chance, message)
