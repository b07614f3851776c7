"""What one observation teaches before anything is decided on it: whether the stable
window is held as perturbed, the step times it adds to the fitted cost, the stable
window judged, and what status says of it (acceptance, load, SpeculationActive).
`take_in` returns all of it as one value (`Intake`), changing nothing; tuner.decide
writes it into status and decides on the stable window judged."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from specfleet.operator import speed
from specfleet.operator.api import (
    AcceptanceWindow,
    ConditionType,
    OffReason,
    OpenWindow,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    StepCostStatus,
)
from specfleet.operator.conditions import ConditionChange, condition_status
from specfleet.operator.observations import Observation
from specfleet.operator.outcomes import Action, ActionKind, WindowVerdict
from specfleet.operator.windows import Judged, acceptance_window, judge_stable, with_load
from specfleet.runtime.config import Drafting


@dataclass(frozen=True)
class Intake:
    """What one observation teaches, to be written into status before deciding."""

    # The stable window judged; None when it is held as perturbed (a slow stretch says
    # nothing about K: recorded, neither learnt from nor judged).
    stable: Judged | None
    recorded: Judged  # the window status.acceptance shows: the stable one, or the held one
    step_cost: StepCostStatus | None
    # What the stable track collects on after this window (status.openWindows.stable;
    # None: nothing), where the window was judged on it (`open_window_changed`); else
    # (held, plain decoding measured, no answer) what it collected stays as it was.
    open_window: OpenWindow | None
    open_window_changed: bool
    acceptance: AcceptanceWindow
    load: list[float]
    speculation_active: ConditionChange | None
    actions: tuple[Action, ...]


def take_in(
    spec: SpeculativeModelSpec,
    status: SpeculativeModelStatus,
    observation: Observation,
    now: datetime,
    drafting: Drafting,
) -> Intake:
    """The observation taken in: the stable window judged (None: held as perturbed) and
    what status says of it after."""
    sp = status.speculation
    speculation_active, actions = _speculation_active(status, observation)
    learnt = speed.learn(spec, status, observation, now, drafting)
    stable: Judged | None = None
    open_window, open_window_changed = None, False
    if learnt.perturbed is None:
        stable, open_window, open_window_changed = judge_stable(spec, status, observation, now)
        recorded = stable
    else:  # a slow stretch says nothing about K: recorded, neither learnt from nor judged
        recorded = Judged(
            observation.stable, False, WindowVerdict.PERTURBED, detail=learnt.perturbed
        )
    return Intake(
        stable=stable,
        recorded=recorded,
        step_cost=learnt.cost,
        open_window=open_window,
        open_window_changed=open_window_changed,
        acceptance=acceptance_window(spec, sp, recorded, observation, now),
        load=sp.load if stable is None else with_load(sp.load, observation),
        speculation_active=speculation_active,
        actions=actions,
    )


def _speculation_active(
    status: SpeculativeModelStatus, observation: Observation
) -> tuple[ConditionChange | None, tuple[Action, ...]]:
    """SpeculationActive as this observation shows it (None: left as it is), and the
    warning when the pods stop exporting their drafts' counters."""
    sp = status.speculation
    if sp.off is not None:
        reason = OffReason.NO_K_PAYS if sp.plain_decoding_chosen else "Disabled"
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "False", reason, sp.off.message
        ), ()
    if sp.measuring_plain:
        assert sp.trial is not None and sp.trial.in_place is not None
        before = sp.trial.in_place.previous_tokens
        message = f"an in-place trial measures plain decoding against K={before}"
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "False", "PlainDecodingTrial", message
        ), ()
    if observation.speculation_missing:
        message = (
            "pods serve requests but export no vllm:spec_decode_* counters: "
            "the draft is not running"
        )
        missing = ConditionChange(ConditionType.SPECULATION_ACTIVE, "False", "NotExported", message)
        if condition_status(status.conditions, ConditionType.SPECULATION_ACTIVE) == "False":
            return missing, ()
        return missing, (Action(ActionKind.SPECULATION_MISSING, "NotExported", message, True),)
    if observation.stable is not None and observation.stable.drafts > 0:
        return ConditionChange(
            ConditionType.SPECULATION_ACTIVE, "True", "Drafting", f"drafting K={sp.tokens}"
        ), ()
    return None, ()
