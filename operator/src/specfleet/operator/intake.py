"""What one observation teaches before anything is decided on it: whether the stable
window is held as perturbed, the step times it adds to the fitted cost, the stable
window judged, and what status says of it (acceptance, load, SpeculationActive).
`take_in` returns the stable window judged, or None for a window held as perturbed, and
tuner.decide decides on it."""

from __future__ import annotations

from datetime import timedelta

from specfleet.operator import speed
from specfleet.operator.api import ConditionType, OffReason
from specfleet.operator.conditions import condition_status
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.outcomes import ActionKind, WindowVerdict
from specfleet.operator.run import Run
from specfleet.operator.windows import (
    Judged,
    judge_collected,
    judge_plain,
    metrics_condition,
    record_acceptance,
    record_load,
)


def take_in(run: Run, observation: Observation) -> Judged | None:
    """The stable window judged, with what it teaches recorded in status; None when it is
    held as perturbed (a slow stretch says nothing about K: recorded, not learnt from
    nor judged)."""
    held = _perturbed(run, observation)
    if held is not None:
        record_acceptance(run, held, observation)
        _speculation_condition(run, observation)
        metrics_condition(run, held)
        return None
    _learn_speed(run, observation)
    stable = _judge_stable(run, observation)
    record_acceptance(run, stable, observation)
    record_load(run, observation)
    _speculation_condition(run, observation)
    return stable


def _perturbed(run: Run, observation: Observation) -> Judged | None:
    """The stable window held as perturbed (its step time far from the engine's at this
    K and batch), or None. Past speed.PERTURBED_LIMIT windows in a row the engine itself
    changed: the samples go and the fit starts over from what the pods measure now."""
    sp, cost, window = run.sp, run.status.step_cost, observation.stable
    flat = sp.decoding_plainly or sp.schedule is None
    why = speed.perturbation(cost, sp.stable_k, window) if flat else None
    if why is None or cost is None:
        return None
    if cost.perturbed_windows + 1 >= speed.PERTURBED_LIMIT:
        run.status.step_cost = None
        return None
    run.status.step_cost = cost.model_copy(update={"perturbed_windows": cost.perturbed_windows + 1})
    return Judged(window, False, WindowVerdict.PERTURBED, detail=why)


def _learn_speed(run: Run, observation: Observation) -> None:
    """Feed this interval's step times to the fitted cost: the stable track's at the K it
    ran for the whole window (not one that straddles a change of K), the canary's at its
    candidate."""
    sp, window = run.sp, observation.stable
    # A track under a schedule ran several Ks in one window: no single K to learn it at,
    # unless it drafted in none of its steps (all in a K=0 band: the K=0 tax) or its pods
    # timed their steps by K.
    flat = sp.decoding_plainly or sp.schedule is None
    settled = window is not None and (
        sp.since_change.at is None
        or run.now - timedelta(seconds=window.seconds) >= sp.since_change.at
    )
    if settled and flat:
        _learn_at(run, sp.stable_k, window)
    elif settled and window is not None and window.drafts == 0:
        run.status.step_cost = speed.record_k0_band(run.status.step_cost, window, run.drafting)
    elif settled and window is not None:
        # Where the pods time their steps by K (hot pods), each K of the schedule.
        run.status.step_cost = speed.record_by_k(
            run.status.step_cost, window, run.now, run.drafting
        )
    trial = sp.trial
    if trial is not None and not trial.in_place and trial.schedule is None:
        # The canary pod is created for its candidate: its windows are all at that K.
        _learn_at(run, trial.tokens, observation.canary)


def _learn_at(run: Run, tokens: int, window: TrackWindow | None) -> None:
    """Add a window's step time at K=tokens to the fitted cost."""
    if window is None:
        return
    if run.spec.draft.adaptive_verification and window.drafts > 0:
        # K is a cap: the step's verification is the count verified, the most of the
        # step; keyed by it the fit reads verification right.
        tokens = round(window.draft_tokens / window.drafts)
    run.status.step_cost = speed.record(run.status.step_cost, tokens, window, run.now, run.drafting)


def _judge_stable(run: Run, observation: Observation) -> Judged:
    sp = run.sp
    if observation.prometheus_error is not None:
        unavailable = WindowVerdict.PROMETHEUS_UNAVAILABLE
        return Judged(None, False, unavailable, detail=observation.prometheus_error)
    if sp.measuring_plain:
        return judge_plain(run.spec, observation.stable)
    running = None if sp.off is not None else sp.schedule
    judged, collecting = judge_collected(
        run.spec,
        run.now,
        run.collected("stable"),
        observation.stable,
        sp.stable_k,
        sp.since_change.baseline_acceptance,
        running,
    )
    run.keep_collecting("stable", collecting)
    return judged


def _speculation_condition(run: Run, observation: Observation) -> None:
    sp = run.sp
    if sp.off is not None:
        reason = OffReason.NO_K_PAYS if sp.plain_decoding_chosen else "Disabled"
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", reason, sp.off.message)
    elif sp.measuring_plain:
        assert sp.trial is not None and sp.trial.in_place is not None
        before = sp.trial.in_place.previous_tokens
        message = f"an in-place trial measures plain decoding against K={before}"
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", "PlainDecodingTrial", message)
    elif observation.speculation_missing:
        was = condition_status(run.status.conditions, ConditionType.SPECULATION_ACTIVE)
        message = (
            "pods serve requests but export no vllm:spec_decode_* counters: "
            "the draft is not running"
        )
        run.condition(ConditionType.SPECULATION_ACTIVE, "False", "NotExported", message)
        if was != "False":
            run.act(
                ActionKind.SPECULATION_MISSING, "NotExported", message, warning=True, record=False
            )
    elif observation.stable is not None and observation.stable.drafts > 0:
        run.condition(
            ConditionType.SPECULATION_ACTIVE, "True", "Drafting", f"drafting K={sp.tokens}"
        )
