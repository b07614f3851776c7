"""Step time learned from what the pods measure: the cost side of every goodput prediction.

The tuner must predict goodput at Ks it has not run, so it needs the engine step time at
any (K, batch). vLLM reports the step time it ran at (inter-token latency: one per
request per step) and the batch it carried; those measurements are kept per (K, batch)
in status and a step-time model is fitted to them by ridge regression towards a prior:

    step ms = targetForwardMs + draftMs [K > 0] + draftMsPerToken * K
              + verifyMsPerToken * max(0, batch * (K + 1) - computeBoundTokens)

(the form of `decoding.PublishedStepCost`: flat while the verify pass is memory-bound,
linear past `computeBoundTokens`). The prior is `PRIOR`, the published P-EAGLE figures
(`specfleet.runtime.decoding`; the simulated engine defaults to them too), moved to the
speed the pods measure: a 40 ms target is not a 2.7 ms one with 37 ms unexplained, so
the prior's target forward takes the time the pods measure beyond the prior's (see
`_scaled`) and every spread around the prior scales with it. With no measurement the fit
is the prior, and each measured (K, batch) pulls the fit to itself while the prior keeps
the directions no measurement constrains (a K never run, a batch never seen) where they
were.

Robust to a bad stretch: a sample's weight halves every `HALF_LIFE` whatever K runs (a
K not run for hours says little about the engine now, and goes after `MAX_AGE`); the
loss is Huber's (a sample far off the others pulls linearly, not quadratically); and a
window whose step time jumps far from the sample at its own K and batch (`perturbation`)
is held out of the fit until it has lasted `PERTURBED_LIMIT` windows (then the engine
has changed, and the fit starts over from it).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property, lru_cache

from specfleet.operator.api import (
    FittedStepCost,
    Placement,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    StepCostStatus,
    StepTimeSample,
)
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.stats import Z_ONE_SIDED_95
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import PUBLISHED_STEP_COST
from specfleet.runtime.hot_schedule import batch_bucket, bucket_middle

# The step cost the tuner predicts with before any pod has measured one (see
# PUBLISHED_STEP_COST); each measurement pulls the fit away from it.
PRIOR = PUBLISHED_STEP_COST
MAX_SAMPLES = 24
# A sample averages its windows with equal weight until it holds this many; past that new
# windows replace old ones gradually, so a changed engine (new hardware, a new vLLM) is
# followed within a few windows.
WINDOW_WEIGHT_CAP = 4
# Engine steps a window needs before its step time counts: a few steps say little.
MIN_ENGINE_STEPS = 50
# No engine step takes under a microsecond: counters that say so are not step times (and
# would round to 0 ms in status).
MIN_STEP_MS = 1e-3
# Nor over a minute (a window of one stuck step says nothing about K).
MAX_STEP_MS = 60_000.0
# Windows at batches within this factor of a sample's batch are averaged into it.
BATCH_BUCKET = 2**0.25
# How far one window's mean step time is trusted: per-window jitter of real engines.
STEP_TIME_PRECISION = 0.03
# Prior spread of each coefficient, as a share of the prior's target forward time.
PRIOR_SPREAD = (1.0, 0.5, 0.1, 0.05)
# The knee is searched over powers of two from 1 to 65536 tokens; each octave away from
# the prior's costs as much as a coefficient this many spreads squared from its prior, so
# the prior's knee stands until measurements on both sides of another one show it.
KNEE_RANGE = (1, 2**16)
KNEE_PENALTY = 0.1
# A sample's weight halves every HALF_LIFE since it was last measured, at every K; past
# MAX_AGE it is dropped, so an hour-old slow minute is not in status three hours later.
HALF_LIFE = timedelta(hours=1)
MAX_AGE = timedelta(hours=6)
# The measured scale's floor, as a share of the prior's target forward (a tiny model on
# a fast GPU): the spreads never shrink to nothing.
MIN_PRIOR_SCALE = 0.1
# Huber's loss: residuals beyond this many STEP_TIME_PRECISIONs weigh linearly.
HUBER_LIMIT = 2.0
HUBER_ROUNDS = 2
# A predicted step time's interval runs between these quantiles of the fit's posterior
# (5% and 95%: a 90% interval, each side one-sided 95%).
INTERVAL_QUANTILE = 0.05
# A window at a sample's K and batch whose step time is beyond this factor of the
# sample's (either way) is perturbed: a noisy neighbour, a throttled GPU, not the engine.
PERTURBED_FACTOR = 1.5
# Perturbed windows in a row after which the change is the engine's own (new hardware,
# a new vLLM): the samples are dropped and the fit starts over from what it measures.
PERTURBED_LIMIT = 15


def prior(drafting: Drafting) -> FittedStepCost:
    """The built-in cost for a drafting style, in the fitted form."""
    per_token = {
        Drafting.PARALLEL: PRIOR.parallel_draft_ms_per_token,
        Drafting.SEQUENTIAL: PRIOR.draft_ms_per_token,
        Drafting.LOOKUP: 0.0,
    }
    return FittedStepCost(
        target_forward_ms=PRIOR.target_forward_ms,
        draft_ms=PRIOR.parallel_draft_ms if drafting is Drafting.PARALLEL else 0.0,
        draft_ms_per_token=per_token[drafting],
        verify_ms_per_token=PRIOR.verify_ms_per_token,
        compute_bound_tokens=PRIOR.compute_bound_tokens,
    )


def unlike_prior(cost: FittedStepCost, drafting: Drafting) -> bool:
    """Whether the fitted target forward is beyond the prior's own 90% interval for it
    (PRIOR_SPREAD of its target either side): an engine the published prior does not
    describe (real vLLM's CPU build, 23 ms where the prior says 2.7), whose split of a
    step between target and draft the prior then says nothing about either."""
    centre = prior(drafting).target_forward_ms
    return abs(cost.target_forward_ms - centre) > Z_ONE_SIDED_95 * PRIOR_SPREAD[0] * centre


def step_ms(
    cost: FittedStepCost,
    k: int,
    batch: float,
    drafted: int | None = None,
    *,
    configured: bool = False,
) -> float:
    """Predicted step time at K=k (0: plain decoding) with `batch` decoding requests, each
    drafting `drafted` (default k: more where the engine verifies below what it drafts);
    `configured`: on an engine started to speculate, where K=0 is a schedule's band and
    pays its tax."""
    if k == 0 and configured:
        return step_ms(cost, 0, batch) * (1.0 + cost.k0_tax)
    verified = max(batch, 1.0) * (k + 1)
    drafted = k if drafted is None else drafted
    return (
        cost.target_forward_ms
        + (cost.draft_ms + cost.draft_ms_per_token * drafted if drafted > 0 else 0.0)
        + cost.verify_ms_per_token * max(0.0, verified - cost.compute_bound_tokens)
    )


def _features(k: int, batch: float, knee: float, drafted: int | None = None) -> list[float]:
    drafted = k if drafted is None else drafted
    verified = max(0.0, max(batch, 1.0) * (k + 1) - knee)
    return [1.0, 1.0 if drafted > 0 else 0.0, float(drafted), verified]


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting: the system is 4x4 and well posed (the
    prior makes it positive definite). Plain loops: a simulated day solves it some 30,000
    times (the same operations in the same order as sum() and max(key=) would do)."""
    n = len(vector)
    a = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = col
        for r in range(col + 1, n):
            if abs(a[r][col]) > abs(a[pivot][col]):
                pivot = r
        a[col], a[pivot] = a[pivot], a[col]
        top = a[col]
        for row in range(col + 1, n):
            below = a[row]
            factor = below[col] / top[col]
            for j in range(col, n + 1):
                below[j] -= factor * top[j]
    solution = [0.0] * n
    for row in reversed(range(n)):
        equation = a[row]
        rest = 0.0
        for j in range(row + 1, n):
            rest += equation[j] * solution[j]
        solution[row] = (equation[n] - rest) / equation[row]
    return solution


def _scaled(base: FittedStepCost, samples: Sequence[StepTimeSample]) -> FittedStepCost:
    """The prior at the measured speed: the target forward takes the time the prior
    leaves unexplained at no verified token, and every spread around the prior scales
    with it. That time is the intercept of a Theil-Sen line (medians: one slow window
    does not move it) through the unexplained times against the tokens verified per
    step, so time that grows with verified tokens (dear verification) is left to the
    verify term, and time that does not (a slow target) moves the target's centre.
    Drafting and verifying keep the prior's costs until the fit moves them."""
    points = [
        (max(s.batch, 1.0) * (s.tokens + 1), s.step_ms - step_ms(base, s.tokens, s.batch))
        for s in samples
    ]
    slopes = [(v - u) / (y - x) for (x, u), (y, v) in itertools.combinations(points, 2) if y != x]
    slope = statistics.median(slopes) if slopes else 0.0
    shift = statistics.median(u - slope * x for x, u in points)
    if slope > 0:  # verification dearer than the prior's explains it: not a faster target
        shift = max(0.0, shift)
    target = base.target_forward_ms + shift
    if not math.isfinite(target) or target < base.target_forward_ms * MIN_PRIOR_SCALE:
        target = base.target_forward_ms * MIN_PRIOR_SCALE
    return base.model_copy(update={"target_forward_ms": target})


def _weights(samples: Sequence[StepTimeSample], now: datetime) -> list[float]:
    """Each sample's weight: its windows (capped), halved every HALF_LIFE of age."""
    return [
        min(s.windows, WINDOW_WEIGHT_CAP) * 0.5 ** (max(0.0, (now - s.measured_at) / HALF_LIFE))
        for s in samples
    ]


@dataclass(frozen=True)
class _KneeFit:
    """The fit at one knee: coefficients, the objective they reach (the knee's penalty
    included), and the system's matrix with the coefficients left free (not pinned at 0)."""

    knee: int
    theta: list[float]
    objective: float
    matrix: list[list[float]]
    free: list[bool]

    @cached_property
    def covariance(self) -> list[list[float]]:
        """The coefficients' posterior covariance (ms^2; 0 for one pinned at 0): the
        inverse of the ridge regression's matrix. Only intervals need it."""
        unit = [[1.0 if i == j else 0.0 for i in range(4)] for j in range(4)]
        columns = [_solve(self.matrix, column) for column in unit]
        return [
            [columns[j][i] if self.free[i] and self.free[j] else 0.0 for j in range(4)]
            for i in range(4)
        ]


def _fit_at_knee(
    samples: Sequence[StepTimeSample], base: FittedStepCost, knee: int, weights: list[float]
) -> _KneeFit:
    """Coefficients >= 0 minimising weighted relative squared error plus the prior's
    pull, and the objective they reach (the ridge regression's Gaussian posterior)."""
    centre = [base.target_forward_ms, base.draft_ms, base.draft_ms_per_token]
    centre.append(base.verify_ms_per_token)
    spread = [s * base.target_forward_ms for s in PRIOR_SPREAD]
    rows = [
        (_features(s.tokens, s.batch, knee), s.step_ms, weight)
        for s, weight in zip(samples, weights, strict=True)
    ]
    # The system with every coefficient free; each one pinned at zero leaves it.
    full_matrix = [[0.0] * 4 for _ in range(4)]
    full_vector = [0.0] * 4
    for x, y, weight in rows:
        w = weight / (y * STEP_TIME_PRECISION) ** 2
        x0, x1, x2, x3 = x
        for i in range(4):
            wx = w * x[i]
            full_vector[i] += wx * y
            row = full_matrix[i]
            row[0] += wx * x0
            row[1] += wx * x1
            row[2] += wx * x2
            row[3] += wx * x3
    for i in range(4):
        full_matrix[i][i] += 1 / spread[i] ** 2
        full_vector[i] += centre[i] / spread[i] ** 2
    free = [True] * 4
    while True:
        matrix = [row.copy() for row in full_matrix]
        vector = full_vector.copy()
        for i in range(4):
            if not free[i]:  # pinned at zero: drop it from the system
                matrix[i] = [1.0 if j == i else 0.0 for j in range(4)]
                vector[i] = 0.0
                for j in range(4):
                    if j != i:
                        matrix[j][i] = 0.0
        theta = _solve(matrix, vector)
        negative = [i for i in range(4) if free[i] and theta[i] < 0]
        if not negative:
            break
        free[min(negative, key=lambda i: theta[i])] = False
    theta = [max(0.0, t) for t in theta]
    t0, t1, t2, t3 = theta
    objective = sum(
        weight
        * ((y - (x[0] * t0 + x[1] * t1 + x[2] * t2 + x[3] * t3)) / (y * STEP_TIME_PRECISION)) ** 2
        for x, y, weight in rows
    ) + sum(((t - c) / s) ** 2 for t, c, s in zip(theta, centre, spread, strict=True))
    objective += KNEE_PENALTY * (math.log2(knee) - math.log2(base.compute_bound_tokens)) ** 2
    return _KneeFit(knee, theta, objective, matrix, free)


def _knee_fits(
    samples: Sequence[StepTimeSample], base: FittedStepCost, weights: list[float]
) -> list[_KneeFit]:
    low, high = (int(math.log2(end)) for end in KNEE_RANGE)
    return [_fit_at_knee(samples, base, 2**octave, weights) for octave in range(low, high + 1)]


def _predicted(fitted: _KneeFit, k: int, batch: float, drafted: int | None = None) -> float:
    x = _features(k, batch, fitted.knee, drafted)
    return sum(a * b for a, b in zip(x, fitted.theta, strict=True))


@dataclass(frozen=True)
class StepInterval:
    """A predicted step time (the fit's) and the range it is sure of: the 5% and 95%
    quantiles of the fit's posterior, every knee weighted by how well it fits."""

    ms: float
    low: float
    high: float


@dataclass(frozen=True)
class Posterior:
    """What the samples say about the step cost: the fit, and how sure it is anywhere."""

    fitted: FittedStepCost
    knees: list[_KneeFit]

    def _parts(self, k: int, batch: float, drafted: int | None) -> list[tuple[float, float, float]]:
        """The posterior at (K, batch) as a mixture: per knee, its weight (how well it
        fits, relative to the best knee's), mean and standard deviation in ms."""
        best = min(f.objective for f in self.knees)
        parts = []
        for fitted in self.knees:
            x = _features(k, batch, fitted.knee, drafted)
            # x' C x and x . theta in plain loops (an evaluation's proposals ask for
            # hundreds), summed in the order sum() would.
            variance = 0.0
            for x_i, row in zip(x, fitted.covariance, strict=True):
                for c_ij, x_j in zip(row, x, strict=True):
                    variance += x_i * c_ij * x_j
            mean = 0.0
            for x_i, theta_i in zip(x, fitted.theta, strict=True):
                mean += x_i * theta_i
            weight = math.exp(-0.5 * (fitted.objective - best))
            parts.append((weight, mean, math.sqrt(max(0.0, variance))))
        return parts

    def chance_at_most(self, k: int, batch: float, ms: float, drafted: int | None = None) -> float:
        """How likely the step time at (K, batch) is at most `ms`, by the posterior (the
        prior alone: 1 if its prediction is, else 0)."""
        if not self.knees:
            return 1.0 if step_ms(self.fitted, k, batch, drafted) <= ms else 0.0
        return _chance_at_most(self._parts(k, batch, drafted), ms)

    def interval(self, k: int, batch: float, drafted: int | None = None) -> StepInterval:
        """The fit's step time at (K, batch) and its 90% interval: narrow near the
        samples, wide where no sample constrains the terms (a K never run, a knee the
        samples do not place). It always contains the fit's own prediction."""
        ms = step_ms(self.fitted, k, batch, drafted)
        if not self.knees:  # the prior alone: nothing measured says how sure it is
            return StepInterval(ms, ms, ms)
        low = max(self.quantile(k, batch, INTERVAL_QUANTILE, drafted), ms * MIN_PRIOR_SCALE)
        high = self.quantile(k, batch, 1 - INTERVAL_QUANTILE, drafted)
        return StepInterval(ms, min(low, ms), max(high, ms))

    def quantile(self, k: int, batch: float, q: float, drafted: int | None = None) -> float:
        """The step time at (K, batch) the posterior gives a chance `q` of being under
        (the prior alone: its prediction)."""
        if not self.knees:
            return step_ms(self.fitted, k, batch, drafted)
        parts = self._parts(k, batch, drafted)
        lo = min(m - 10 * sd for _, m, sd in parts)
        hi = max(m + 10 * sd for _, m, sd in parts)
        for _ in range(50):  # bisection on the mixture's distribution
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if _chance_at_most(parts, mid) < q else (lo, mid)
        return (lo + hi) / 2


def _chance_at_most(parts: list[tuple[float, float, float]], ms: float) -> float:
    """How likely a mixture of normals (weight, mean, standard deviation) is at most `ms`."""
    total = sum(w for w, _, _ in parts)
    return (
        sum(
            w * (0.5 * (1 + math.erf((ms - m) / (sd * math.sqrt(2)))) if sd else float(ms >= m))
            for w, m, sd in parts
        )
        / total
    )


def posterior(
    samples: Sequence[StepTimeSample], drafting: Drafting, now: datetime | None = None
) -> Posterior:
    """The step-time model closest to the samples, pulled towards the prior scaled to
    them (samples weigh by age, from `now`, else the newest sample, and by Huber's
    loss), with every knee's fit for the intervals."""
    if not samples:
        return Posterior(prior(drafting), [])
    key = tuple(tuple(vars(s).values()) for s in samples)  # every field, as declared
    return _posterior(_Samples(key, tuple(samples)), drafting, now)


@dataclass(frozen=True)
class _Samples:
    """Samples as a cache key: equal where every field of every sample is."""

    key: tuple[tuple[object, ...], ...]
    samples: tuple[StepTimeSample, ...] = field(compare=False)


# One evaluation fits the same samples at the same time up to three times (recording a
# window, then exploring, proposing or re-probing): the fit is most of its CPU.
@lru_cache(maxsize=64)
def _posterior(measured: _Samples, drafting: Drafting, now: datetime | None) -> Posterior:
    samples = measured.samples
    base = _scaled(prior(drafting), samples)
    now = now or max(s.measured_at for s in samples)
    aged = _weights(samples, now)
    weights = aged
    for _ in range(HUBER_ROUNDS):
        knees = _knee_fits(samples, base, weights)
        best = min(knees, key=lambda f: f.objective)
        residuals = [
            abs(_predicted(best, s.tokens, s.batch) - s.step_ms) / (s.step_ms * STEP_TIME_PRECISION)
            for s in samples
        ]
        weights = [
            w * min(1.0, HUBER_LIMIT / r) if r > 0 else w
            for w, r in zip(aged, residuals, strict=True)
        ]
    target, draft, per_token, verify = best.theta
    fitted = FittedStepCost(
        target_forward_ms=round(max(target, 1e-3), 4),
        draft_ms=round(draft, 4),
        draft_ms_per_token=round(per_token, 4),
        verify_ms_per_token=round(verify, 5),
        compute_bound_tokens=best.knee,
    )
    return Posterior(fitted, knees)


def fit(
    samples: Sequence[StepTimeSample], drafting: Drafting, now: datetime | None = None
) -> FittedStepCost:
    """The step-time model closest to the samples (see `posterior`)."""
    return posterior(samples, drafting, now).fitted


def relative_error(cost: FittedStepCost, samples: Sequence[StepTimeSample]) -> float | None:
    if not samples:
        return None
    squares = [((step_ms(cost, s.tokens, s.batch) - s.step_ms) / s.step_ms) ** 2 for s in samples]
    return round(math.sqrt(sum(squares) / len(squares)), 4)


def measured(window: TrackWindow | None) -> tuple[float, float] | None:
    """(step ms, batch) of a window, or None when it carries too few timed steps."""
    if window is None or window.engine_steps < MIN_ENGINE_STEPS:
        return None
    seconds = window.step_seconds
    if seconds is None or not MIN_STEP_MS <= seconds * 1000.0 <= MAX_STEP_MS:
        return None
    return seconds * 1000.0, window.batch_per_pod


def matching(samples: Sequence[StepTimeSample], k: int, batch: float) -> int | None:
    """The sample at K=k whose batch is within a bucket of `batch`."""
    return next(
        (
            i
            for i, s in enumerate(samples)
            if s.tokens == k and max(s.batch, batch) <= min(s.batch, batch) * BATCH_BUCKET
        ),
        None,
    )


def perturbation(status: StepCostStatus | None, k: int, window: TrackWindow | None) -> str | None:
    """Why a window's step time is not the engine's (None: it is, or nothing says it is
    not): beyond PERTURBED_FACTOR of a sample measured at the same K and batch over
    more than one window."""
    point = measured(window)
    if status is None or point is None:
        return None
    ms, batch = point
    match = matching(status.samples, k, batch)
    if match is None or status.samples[match].windows < 2:
        return None
    usual = status.samples[match].step_ms
    if usual / PERTURBED_FACTOR <= ms <= usual * PERTURBED_FACTOR:
        return None
    return (
        f"step time {ms:.3g} ms at K={k}, batch {batch:.1f} is {ms / usual:.2f}x the "
        f"{usual:.3g} ms measured there; held out of the fit and of every judgement"
    )


def confirms(sample: StepTimeSample, ms: float) -> bool:
    """Whether a window's step time `ms` at a sample's K and batch says the engine is the
    one the sample measured: within HUBER_LIMIT window precisions of a sample of more
    than one window."""
    limit = HUBER_LIMIT * STEP_TIME_PRECISION
    return sample.windows >= 2 and abs(ms / sample.step_ms - 1.0) <= limit


def _refreshed(
    samples: list[StepTimeSample], batch: float, now: datetime, fitted: FittedStepCost
) -> list[StepTimeSample]:
    """Samples at `batch` that the fit explains, every K, measured as of `now`: a window
    that confirms the engine at this load (`confirms`) is evidence that nothing changed,
    so what the other Ks measured here still holds and does not age (a quiet day would
    otherwise re-learn it with a canary every few hours as its samples aged out).
    Samples at other batches age on (nothing measured there says the engine is the same
    at that load), and so does a sample the fit does not explain (a slow stretch a canary
    measured): it still goes after MAX_AGE."""
    limit = HUBER_LIMIT * STEP_TIME_PRECISION
    return [
        s.model_copy(update={"measured_at": now})
        if max(s.batch, batch) <= min(s.batch, batch) * BATCH_BUCKET
        and abs(step_ms(fitted, s.tokens, s.batch) / s.step_ms - 1.0) <= limit
        else s
        for s in samples
    ]


@dataclass(frozen=True)
class StepMeasurement:
    """A step time measured at K=tokens and a batch, over `steps` decoding steps."""

    tokens: int
    ms: float
    batch: float
    steps: float


def record(
    status: StepCostStatus | None,
    k: int,
    window: TrackWindow | None,
    now: datetime,
    drafting: Drafting,
) -> StepCostStatus:
    """Status with a window's step time at K=k added (if it has one), samples past
    MAX_AGE dropped and the fit redone."""
    point = measured(window)
    found = (
        [StepMeasurement(k, point[0], point[1], window.decode_steps)]
        if point is not None and window is not None
        else []
    )
    return _recorded(status, found, now, drafting)


def time_load(window: TrackWindow) -> float:
    """The window's requests in flight per pod averaged over its time, from the step
    tallies where the pods export them (each bucket's seconds at its middle batch; one
    bucket: the window's own batch). Not its mean over steps: when load moves inside a
    window, a K slower at high load takes fewer steps there, so the per-step mean of a
    window depends on the K that ran it, and two sides of a trial at the same load would
    never match. Without tallies: the per-step mean (one load all along: the same)."""
    tallies = [t for t in window.step_tallies if t.steps > 0 and t.seconds > 0]
    seconds = sum(t.seconds for t in tallies)
    if len({t.batch for t in tallies}) < 2 or seconds <= 0:
        return window.batch_per_pod
    return sum(t.seconds * bucket_middle(t.batch) for t in tallies) / seconds


def by_k(window: TrackWindow | None) -> list[StepMeasurement]:
    """The step time at each K of a window that ran several (a schedule on hot pods), from
    its step tallies: each K's decode steps at each batch bucket, a bucket's batch its
    middle (the window's own batch when every step was in that bucket). The tallies time
    the engine's step; the window's inter-token latency, what the fit is made of, also
    holds what the engine does between steps: each K's time is scaled by the window's
    ratio of the two. A K=0 band is the tax's (`record_k0_band`)."""
    if window is None or window.step_seconds is None or not window.step_tallies:
        return []
    tallies = [t for t in window.step_tallies if t.steps > 0 and t.seconds > 0]
    buckets = {t.batch for t in tallies}

    def batch(bound: int) -> float:
        mean = window.batch_per_pod
        if len(buckets) == 1 and mean > 0 and batch_bucket(math.ceil(mean)) == str(bound):
            return mean
        return bucket_middle(bound)

    weighted = sum(t.steps * batch(t.batch) for t in tallies)
    if weighted <= 0:
        return []
    engine = sum(t.seconds * batch(t.batch) for t in tallies) / weighted
    scale = window.step_seconds / engine
    found = [
        StepMeasurement(
            t.k, t.seconds / t.steps * scale * 1000.0, batch(t.batch), t.steps * batch(t.batch)
        )
        for t in tallies
        if t.k > 0 and t.steps >= MIN_ENGINE_STEPS
    ]
    return [m for m in found if MIN_STEP_MS <= m.ms <= MAX_STEP_MS]


def record_by_k(
    status: StepCostStatus | None, window: TrackWindow | None, now: datetime, drafting: Drafting
) -> StepCostStatus | None:
    """Status with each K's step time in a window that ran several (`by_k`) added."""
    found = by_k(window)
    return _recorded(status, found, now, drafting) if found else status


def _recorded(
    status: StepCostStatus | None,
    found: Sequence[StepMeasurement],
    now: datetime,
    drafting: Drafting,
) -> StepCostStatus:
    samples = [s for s in status.samples if now - s.measured_at <= MAX_AGE] if status else []
    for m in found:
        match = matching(samples, m.tokens, m.batch)
        if match is None:
            samples.append(
                StepTimeSample(
                    tokens=m.tokens,
                    batch=round(m.batch, 3),
                    step_ms=round(m.ms, 4),
                    steps=m.steps,
                    windows=1,
                    measured_at=now,
                )
            )
        else:
            old = samples[match]
            if status is not None and confirms(old, m.ms):
                samples = _refreshed(samples, m.batch, now, status.fitted)
            weight = min(old.windows, WINDOW_WEIGHT_CAP - 1)
            samples[match] = StepTimeSample(
                tokens=m.tokens,
                batch=round((old.batch * weight + m.batch) / (weight + 1), 3),
                step_ms=round((old.step_ms * weight + m.ms) / (weight + 1), 4),
                steps=old.steps + m.steps,
                windows=old.windows + 1,
                measured_at=now,
            )
    if found:
        # The least recently measured go first: they say least about the engine now.
        samples = sorted(samples, key=lambda s: s.measured_at)[-MAX_SAMPLES:]
        samples.sort(key=lambda s: (s.tokens, s.batch))
    elif status is not None and len(samples) == len(status.samples):
        return status
    cost = fit(samples, drafting, now)
    if status is not None:  # the K=0 band's tax is measured apart from the fit
        cost = cost.model_copy(update={"k0_tax": status.fitted.k0_tax})
    return StepCostStatus(
        fitted=cost,
        samples=samples,
        relative_error=relative_error(cost, samples),
        k0_tax_windows=status.k0_tax_windows if status is not None else 0,
    )


def record_k0_band(
    status: StepCostStatus | None, window: TrackWindow | None, drafting: Drafting
) -> StepCostStatus | None:
    """Status with a window of a schedule's K=0 band (an engine started to speculate, no
    step drafting) added to the K=0 tax: its step time over the fit's plain step at that
    batch, averaged over the windows (the most recent weigh most past a few). The
    prior's figure goes at the first measurement: on vLLM's CPU build the band runs at
    a fraction of plain decoding's speed, far from what vLLM published for GPUs."""
    point = measured(window)
    if point is None:
        return status
    ms, batch = point
    current = status or StepCostStatus(fitted=prior(drafting))
    observed = max(0.0, ms / step_ms(current.fitted, 0, batch) - 1.0)
    weight = min(current.k0_tax_windows, WINDOW_WEIGHT_CAP - 1)
    tax = (current.fitted.k0_tax * weight + observed) / (weight + 1)
    return current.model_copy(
        update={
            "fitted": current.fitted.model_copy(update={"k0_tax": round(tax, 4)}),
            "k0_tax_windows": current.k0_tax_windows + 1,
        }
    )


@dataclass(frozen=True)
class Learnt:
    """What one observation teaches of the step cost."""

    cost: StepCostStatus | None
    # Why the stable window is held as perturbed (its step time far from the engine's at
    # its K and batch: neither learnt from nor judged); None: its step times were learnt.
    perturbed: str | None


def learn(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    drafting: Drafting,
) -> Learnt:
    """The step cost after an observation: its windows' step times added, or the stable
    window held as perturbed. Past PERTURBED_LIMIT windows in a row held the engine itself
    changed: the samples go and the fit starts over from what the pods measure now."""
    sp, cost = status.speculation, status.step_cost
    # A track under a schedule ran several Ks in one window: no single K to hold its step
    # time against or to learn it at (but see `_learnt_from`).
    flat = sp.decoding_plainly or sp.schedule is None
    why = perturbation(cost, sp.stable_k, observation.stable) if flat else None
    if why is not None and cost is not None:
        if cost.perturbed_windows + 1 < PERTURBED_LIMIT:
            counted = cost.model_copy(update={"perturbed_windows": cost.perturbed_windows + 1})
            return Learnt(counted, why)
        cost = None
    return Learnt(_learnt_from(spec, status, cost, flat, observation, now, drafting), None)


def _learnt_from(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    cost: StepCostStatus | None,
    flat: bool,
    observation: Observation,
    now: datetime,
    drafting: Drafting,
) -> StepCostStatus | None:
    """The step cost with this interval's step times: the stable track's at the K it ran
    for the whole window (not one that straddles a change of K), the canary's at its
    candidate. Not `flat` (the stable track ran a schedule), its window is learnt only
    where it drafted in none of its steps (all in a K=0 band: the K=0 tax) or its pods
    timed their steps by K."""
    sp, window = status.speculation, observation.stable
    settled = window is not None and (
        sp.since_change.at is None or now - timedelta(seconds=window.seconds) >= sp.since_change.at
    )
    adaptive = bool(spec.draft.adaptive_verification)
    if settled and flat:
        cost = _record_at(cost, sp.stable_k, window, now, drafting, adaptive)
    elif settled and window is not None and window.drafts == 0:
        cost = record_k0_band(cost, window, drafting)
    elif settled and window is not None:
        # Where the pods time their steps by K (hot pods), each K of the schedule.
        cost = record_by_k(cost, window, now, drafting)
    trial = sp.trial
    if trial is not None and trial.placement is Placement.CANARY and trial.schedule is None:
        # The canary pod is created for its candidate: its windows are all at that K.
        cost = _record_at(cost, trial.tokens, observation.canary, now, drafting, adaptive)
    return cost


def _record_at(
    cost: StepCostStatus | None,
    tokens: int,
    window: TrackWindow | None,
    now: datetime,
    drafting: Drafting,
    adaptive: bool,
) -> StepCostStatus | None:
    """The step cost with a window's step time at K=tokens added; `adaptive`: K is a cap
    (adaptive verification), and the step's verification is the count verified, the most
    of the step: keyed by it the fit reads verification right."""
    if window is None:
        return cost
    if adaptive and window.drafts > 0:
        tokens = round(window.draft_tokens / window.drafts)
    return record(cost, tokens, window, now, drafting)


def cost_in(status: StepCostStatus | None, drafting: Drafting) -> FittedStepCost:
    """The cost to predict with: the fit, or the prior before any measurement."""
    return status.fitted if status is not None else prior(drafting)
