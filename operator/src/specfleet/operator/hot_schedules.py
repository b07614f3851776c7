"""Hot schedules: the K (or per-batch schedule) the stable pods run, handed to their
running engines between two steps instead of restarting them (spec.speculation.switching
Hot, or Auto where the engine can; the runtime's --hot-schedule). Pure: what to hand them
and under which generation; `evaluation` does the HTTP, `render` starts the pods with the
ceiling.

A pod reports the generation in force on its /metrics page; its windows count only at
the generation status asks for (observations.WindowTracker cuts a window at each change),
so acceptance and step times are never pooled across two schedules.
"""

from __future__ import annotations

import hashlib
import hmac

from specfleet.operator.api import (
    HotSchedule,
    KSwitching,
    ScheduledBand,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)

# The fallback while the operator has no key to derive the pods' credential from.
NO_KEY = (
    "the operator has no schedule key (--schedule-key-file or --schedule-key-secret): it "
    "cannot give the pods a credential"
)


def wanted(spec: SpeculativeModelSpec) -> bool:
    """The spec asks for hot changes, with a method whose K the engine schedules: Hot, or
    Auto (the default) where a hot pod costs no more a step than one started at its K.
    vLLM keeps a per-batch schedule only on one data-parallel rank, and a parallel drafter
    drafts every slot of its ceiling (maxTokens) at every K, which the tuner does not
    weigh: Auto restarts those."""
    switching = spec.speculation.switching
    method = spec.draft.method
    if switching is KSwitching.AUTO:
        return (
            method.tuned
            and not method.runtime.parallel_drafting
            and spec.runtime.parallelism.data == 1
        )
    return switching is KSwitching.HOT and method.tuned


def in_effect(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> bool:
    """The stable pods start with the ceiling and take K hot: wanted, not fallen back,
    and speculating (plain decoding is another pod template: no draft loaded)."""
    hot = status.speculation.hot_schedule
    return (
        wanted(spec)
        and not (hot is not None and hot.fallback is not None)
        and not status.speculation.decoding_plainly
    )


def drafts_its_ceiling(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> bool:
    """Pods restarted with each schedule whose drafter drafts every slot of the engine's
    ceiling, the schedule's largest K (schedule.tokens_over's `parallel`). Hot parallel
    drafters pay maxTokens' slots at every K alike, which no prediction weighs yet."""
    return spec.draft.method.runtime.parallel_drafting and not in_effect(spec, status)


def stable_schedule(
    status: SpeculativeModelStatus, spec: SpeculativeModelSpec
) -> list[ScheduledBand]:
    """What the stable pods should run: the schedule in effect, else one K for every batch."""
    sp = status.speculation
    if sp.schedule:
        return list(sp.schedule)
    return [ScheduledBand(tokens=sp.tokens or spec.speculation.tokens)]


def planned(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> HotSchedule | None:
    """status.speculation.hotSchedule after a decision: a new generation when the stable
    pods' schedule changed; a fallback is kept (and with it the restart path) until the
    spec stops asking for hot changes."""
    hot = status.speculation.hot_schedule
    if not wanted(spec):
        return None
    if hot is not None and hot.fallback is not None:
        return hot
    if status.speculation.decoding_plainly:
        return hot  # the pods restart as plain pods; the schedule waits for them to draft
    schedule = stable_schedule(status, spec)
    if hot is not None and hot.schedule == schedule:
        return hot
    return HotSchedule(generation=(hot.generation if hot else 0) + 1, schedule=schedule)


def fell_back(status: SpeculativeModelStatus, reason: str) -> SpeculativeModelStatus:
    """Status once a stable pod refused hot changes: K changes restart the pods again."""
    hot = status.speculation.hot_schedule
    if hot is None or hot.fallback is not None:
        return status
    return _with_fallback(status, hot, reason)


def keyed(
    spec: SpeculativeModelSpec, status: SpeculativeModelStatus, has_key: bool
) -> SpeculativeModelStatus:
    """Status as an operator with or without a schedule key sees it: fallen back while it
    has none (no credential to give the pods), back on once it has one."""
    hot = status.speculation.hot_schedule
    if not has_key and in_effect(spec, status):
        return fell_back(status, NO_KEY)
    if has_key and hot is not None and hot.fallback == NO_KEY:
        return _with_fallback(status, hot, None)
    return status


def _with_fallback(
    status: SpeculativeModelStatus, hot: HotSchedule, fallback: str | None
) -> SpeculativeModelStatus:
    speculation = status.speculation.model_copy(
        update={"hot_schedule": hot.model_copy(update={"fallback": fallback})}
    )
    return status.model_copy(update={"speculation": speculation})


def credential(key: bytes, namespace: str, name: str, uid: str | None) -> str:
    """The bearer credential a model's pods accept: derived from the operator's key and
    the model's identity, so only the operator can compute it and no two models (nor a
    model re-created under the same name) share one."""
    message = f"{namespace}/{name}/{uid}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()
