"""K by batch size: vLLM's `num_speculative_tokens_per_batch_size`, as the operator
learns, renders and judges it.

A schedule is a list of bands: batch sizes up to `upToBatch` (from the band before, or 1)
run K=`tokens`; the last band has no edge and takes every larger batch. K=0 in a band
means no drafting there (where no K pays, e.g. at a large batch). It uses at most two Ks
above 0 (stats.drafts_reaching says why).

Learning one (`learn`) is a pure function of the load the stable pods saw (decoding
requests per engine step, one sample per window), the measured acceptance per position
and the fitted step cost: each band gets the K that serves the most tokens over the load
samples in it (a window at 32 in flight has 32 times the tokens at stake of one at 1),
and without bands in the spec one edge is placed where the samples split best. A K=0
band is not plain decoding: the engine was started to speculate and pays the K=0 tax
(`speed.step_ms`), so plain pods (`tokens_over(None, ...)`) are weighed apart. A
parallel drafter (P-EAGLE) drafts every slot of its engine's ceiling, the schedule's
largest K, at each step of every band: a deep K in one band costs the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from specfleet.operator import speed
from specfleet.operator.api import (
    MAX_BATCH,
    MAX_SCHEDULE_KS,
    FittedStepCost,
    ScheduledBand,
    ScheduleMode,
    SpeculativeModelSpec,
)
from specfleet.operator.stats import mean_length
from specfleet.runtime.config import BatchScheduleEntry

Bands = list[ScheduledBand]  # a schedule as the status holds it

# Fewer samples than this and a learned schedule waits (one K is tuned meanwhile).
MIN_LOAD_SAMPLES = 4


def _size(batch: float) -> int:
    """A (mean) batch size as the whole batch a band holds."""
    return max(1, round(batch))


def k_at(schedule: Sequence[ScheduledBand], batch: float) -> int:
    """K at a (mean) batch size: the band holding it."""
    size = _size(batch)
    for band in schedule:
        if band.up_to_batch is None or size <= band.up_to_batch:
            return band.tokens
    return schedule[-1].tokens


def largest(schedule: Sequence[ScheduledBand]) -> int:
    """num_speculative_tokens for a schedule: vLLM sizes the drafter for the largest K."""
    return max(band.tokens for band in schedule)


def drafting_ks(schedule: Sequence[ScheduledBand]) -> tuple[int, ...]:
    """The Ks above 0 it drafts with, ascending."""
    return tuple(sorted({band.tokens for band in schedule if band.tokens > 0}))


def is_flat(schedule: Sequence[ScheduledBand]) -> bool:
    return len({band.tokens for band in schedule}) == 1


def entries(schedule: Sequence[ScheduledBand]) -> tuple[BatchScheduleEntry, ...]:
    """The runtime's `--batch-schedule` entries (vLLM's inclusive ranges from 1); the
    open last band ends at MAX_BATCH, which vLLM clips to its max_num_seqs."""
    result, start = [], 1
    for band in schedule:
        end = band.up_to_batch or max(start, MAX_BATCH)
        result.append(BatchScheduleEntry(start=start, end=end, k=band.tokens))
        start = end + 1
    return tuple(result)


def describe(schedule: Sequence[ScheduledBand]) -> str:
    """E.g. 'K=5 up to batch 4, K=0 above'."""
    parts = []
    for band in schedule:
        where = f"up to batch {band.up_to_batch}" if band.up_to_batch else "above"
        parts.append(f"K={band.tokens} {where}" if len(schedule) > 1 else f"K={band.tokens}")
    return ", ".join(parts)


def learning(
    spec: SpeculativeModelSpec,
    load: Sequence[float],
    conditional: Sequence[float],
    cost: FittedStepCost,
    *,
    scheduled: bool,
) -> bool:
    """Whether the tuner decides for the load history (a learned schedule, with enough
    samples of it), not for the load of the moment (one K): mode Learned; mode Auto
    while the lightest and the heaviest load seen have different best choices, or a
    schedule runs (`scheduled`: what replaces it is learned, one K or plain pods)."""
    mode = spec.schedule_in_effect.mode
    if len(load) < MIN_LOAD_SAMPLES or not spec.tuning.enabled or not spec.draft.method.tuned:
        return False
    if mode is ScheduleMode.LEARNED:
        return True
    if mode is not ScheduleMode.AUTO:
        return False
    low, high = (_best_at(spec, batch, conditional, cost) for batch in (min(load), max(load)))
    return scheduled or low != high


def _best_at(
    spec: SpeculativeModelSpec, batch: float, conditional: Sequence[float], cost: FittedStepCost
) -> int:
    """The K that serves the most tokens at this batch (0: plain pods)."""
    choices: list[int] = [0, *range(spec.speculation.min_tokens, spec.speculation.max_tokens + 1)]
    speeds = [pod_speed(conditional, k, batch, cost, configured=k > 0) for k in choices]
    return choices[speeds.index(max(speeds))]


def fixed(spec: SpeculativeModelSpec) -> Bands | None:
    """The schedule a spec writes out (mode Fixed), else None."""
    written = spec.schedule_in_effect
    if written.mode is not ScheduleMode.FIXED:
        return None
    return [ScheduledBand(up_to_batch=b.up_to_batch, tokens=b.tokens or 0) for b in written.bands]


def request_speed(
    conditional: Sequence[float],
    k: int,
    batch: float,
    cost: FittedStepCost,
    *,
    configured: bool = True,
    slots: int | None = None,
) -> float:
    """Tokens per millisecond one decoding request gets at K=k and this batch; K=0 on an
    engine started to speculate (`configured`, a schedule's band) pays the K=0 tax, on
    plain pods it does not. `slots`: what a drafting step drafts (a parallel drafter's
    ceiling; None: k)."""
    step = speed.step_ms(cost, k, max(1.0, batch), slots if k else None, configured=configured)
    return mean_length(conditional, k) / step


def pod_speed(
    conditional: Sequence[float],
    k: int,
    batch: float,
    cost: FittedStepCost,
    configured: bool,
    slots: int | None = None,
) -> float:
    """Tokens per millisecond a pod serves at K=k and this batch: what is at stake in a
    window is its requests' tokens, so a window at 32 in flight weighs 32 at 1."""
    speed_of_one = request_speed(conditional, k, batch, cost, configured=configured, slots=slots)
    return max(1.0, batch) * speed_of_one


def slots(schedule: Sequence[ScheduledBand], parallel: bool) -> int | None:
    """What each drafting step of pods restarted with `schedule` drafts: a parallel
    drafter every slot of its engine's ceiling, the schedule's largest K (vLLM sizes them
    by num_speculative_tokens); None: each step its own K."""
    return largest(schedule) if parallel and schedule else None


def tokens_over(
    schedule: Sequence[ScheduledBand] | None,
    load: Sequence[float],
    conditional: Sequence[float],
    cost: FittedStepCost,
    *,
    parallel: bool = False,
) -> float:
    """A pod's mean tokens per millisecond over the load samples (each a window's
    batch) under a schedule; None: plain pods (no draft loaded, no K=0 tax). `parallel`:
    the method drafts in one pass over its ceiling's slots."""
    if not load:
        return 0.0
    drafted = slots(schedule or [], parallel)
    return sum(
        pod_speed(
            conditional, k_at(schedule, b) if schedule else 0, b, cost, bool(schedule), drafted
        )
        for b in load
    ) / len(load)


Layout = list[tuple[int | None, list[int]]]  # (edge, Ks allowed) per band


def _spec_layout(spec: SpeculativeModelSpec) -> Layout:
    """The bands a Learned spec fixes, with the Ks each may take; [] when the tuner
    places the edge. A band may choose 0 (no drafting) unless its minTokens says not."""
    speculation = spec.speculation

    def allowed(low: int | None, high: int | None) -> list[int]:
        top = speculation.max_tokens if high is None else high
        bottom = speculation.min_tokens if low is None else max(low, 1)
        return ([0] if not low else []) + list(range(bottom, top + 1))

    return [
        (band.up_to_batch, allowed(band.min_tokens, band.max_tokens))
        for band in spec.schedule_in_effect.bands
    ]


def learn(
    spec: SpeculativeModelSpec,
    load: Sequence[float],
    conditional: Sequence[float],
    cost: FittedStepCost,
    *,
    parallel: bool = False,
) -> Bands | None:
    """The schedule that serves the most tokens over `load`, or None when it would draft
    nowhere (plain decoding everywhere is the tuner's StopSpeculation). `parallel` as in
    `tokens_over`."""
    if not load:
        return None
    everything = [0, *range(spec.speculation.min_tokens, spec.speculation.max_tokens + 1)]
    layouts = [_spec_layout(spec)]
    placed = not layouts[0]  # no bands in the spec: the tuner places the edge
    if placed:
        sizes = sorted({_size(b) for b in load})
        # One K everywhere, or one edge between two load levels.
        layouts = [[(None, everything)]]
        layouts += [[(edge, everything), (None, everything)] for edge in sizes[:-1]]
    # A parallel drafter's every band pays the ceiling: schedules are scored per ceiling,
    # each exact for those whose largest K it is.
    ceilings: list[int | None] = [k for k in everything if k] if parallel else [None]
    best: tuple[float, Bands] | None = None
    for ceiling in ceilings:
        allowed = [k for k in everything if ceiling is None or k <= ceiling]
        table = {
            k: [pod_speed(conditional, k, b, cost, True, ceiling) for b in load] for k in allowed
        }
        for layout in layouts:
            kept = [(edge, [k for k in ks if k in table]) for edge, ks in layout]
            scored = _best_ks(kept, load, table)
            if scored is not None and (best is None or scored[0] > best[0] + 1e-12):
                best = scored
    if best is None or not drafting_ks(best[1]):
        return None
    learned = _merged(best[1])
    if placed and len(learned) == 2:
        learned = _break_even(learned, load, conditional, cost, slots(learned, parallel))
    return learned


def _break_even(
    learned: Bands,
    load: Sequence[float],
    conditional: Sequence[float],
    cost: FittedStepCost,
    drafted: int | None,
) -> Bands:
    """Move the edge to where the fitted cost says the upper band's K starts to win: the
    load samples fix only which side each measured load is on, not where between them
    the switch belongs (loads not seen yet fall there)."""
    low, high = learned
    assert low.up_to_batch is not None
    above = min(_size(b) for b in load if _size(b) > low.up_to_batch)
    edge = low.up_to_batch
    for batch in range(low.up_to_batch, min(above, low.up_to_batch + 1024)):
        if request_speed(conditional, low.tokens, batch, cost, slots=drafted) >= request_speed(
            conditional, high.tokens, batch, cost, slots=drafted
        ):
            edge = batch
        else:
            break
    return [ScheduledBand(up_to_batch=edge, tokens=low.tokens), high]


def _best_ks(
    layout: Layout, load: Sequence[float], table: dict[int, list[float]]
) -> tuple[float, Bands] | None:
    """K per band for one layout of edges, with at most MAX_SCHEDULE_KS Ks above 0, and
    its summed speed. A band no load sample fell in keeps its neighbour's K."""
    members: list[list[int]] = [[] for _ in layout]
    for index, batch in enumerate(load):
        size = _size(batch)
        band = next(i for i, (edge, _) in enumerate(layout) if edge is None or size <= edge)
        members[band].append(index)

    def score(band: int, k: int) -> float:
        return sum(table[k][i] for i in members[band])

    def choose(allowed_pair: Sequence[int] | None) -> tuple[float, list[int | None]] | None:
        ks: list[int | None] = []
        total = 0.0
        for band, (_, allowed) in enumerate(layout):
            usable = [k for k in allowed if allowed_pair is None or k == 0 or k in allowed_pair]
            if not usable:
                return None
            if not members[band]:
                ks.append(None)
                continue
            k = max(usable, key=lambda k: (score(band, k), -k))
            total += score(band, k)
            ks.append(k)
        return total, ks

    options = [choose(None)]
    free = options[0]
    if free is None or len({k for k in free[1] if k}) > MAX_SCHEDULE_KS:
        drafting = sorted({k for _, allowed in layout for k in allowed if k > 0})
        pairs = itertools.combinations_with_replacement(drafting, MAX_SCHEDULE_KS)
        options = [choose(pair) for pair in pairs]
    found = [o for o in options if o is not None and len({k for k in o[1] if k}) <= MAX_SCHEDULE_KS]
    if not found:
        return None
    total, ks = max(found, key=lambda o: o[0])
    filled = _fill_unseen(ks, layout)
    return total, [
        ScheduledBand(up_to_batch=edge, tokens=k)
        for (edge, _), k in zip(layout, filled, strict=True)
    ]


def _fill_unseen(ks: list[int | None], layout: Layout) -> list[int]:
    """Bands without load samples take the K of the nearest band below (else above) that
    had some, if their bounds allow it, else their smallest allowed K."""
    seen = [k for k in ks if k is not None]
    filled: list[int] = []
    for i, k in enumerate(ks):
        if k is None:
            below = [x for x in ks[:i] if x is not None]
            neighbour = below[-1] if below else (seen[0] if seen else 0)
            allowed = layout[i][1]
            k = neighbour if neighbour in allowed else min(allowed)
        filled.append(k)
    return filled


def _merged(schedule: Bands) -> Bands:
    """Neighbouring bands with one K as one band."""
    merged: Bands = []
    for band in schedule:
        if merged and merged[-1].tokens == band.tokens:
            merged[-1] = ScheduledBand(up_to_batch=band.up_to_batch, tokens=band.tokens)
        else:
            merged.append(band)
    return merged


def capped(schedule: Bands, k: int) -> Bands:
    """The schedule with no band above K=k: what a re-probe proved at K=k may run, and
    the pods' --num-speculative-tokens (k) bounds every band."""
    return _merged([band.model_copy(update={"tokens": min(band.tokens, k)}) for band in schedule])
