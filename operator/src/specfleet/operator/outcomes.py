"""The vocabulary of decisions, defined once: what a decision did (ActionKind), what a
window's judging found (WindowVerdict) and how a trial ended (TrialOutcome). Their values
are the words in Events, history, conditions and metric labels."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from specfleet.operator.observations import PROMETHEUS_UNAVAILABLE


class ActionKind(StrEnum):
    """What a decision did: the Event reason, the history entry's action, a metric label."""

    START_CANARY = "StartCanary"
    START_IN_PLACE = "StartInPlace"
    IN_PLACE_FALLBACK = "InPlaceFallback"
    PROMOTE = "Promote"
    ABORT = "Abort"
    ROLLBACK = "Rollback"
    STEP_DOWN = "StepDown"
    DISABLE = "Disable"
    REPROBE = "Reprobe"
    KEEP_FASTEST = "KeepFastest"
    STOP_SPECULATION = "StopSpeculation"
    ACCEPTANCE_RECOVERED = "AcceptanceRecovered"
    SPEC_CHANGED = "SpecChanged"
    CLAMP = "Clamp"
    INCONCLUSIVE = "Inconclusive"
    METRICS_UNAVAILABLE = "MetricsUnavailable"
    SPECULATION_MISSING = "SpeculationMissing"
    # A config change (draft model, method, image, vLLM args): config_trials.py.
    START_CONFIG_TRIAL = "StartConfigTrial"
    SWITCH_CONFIG_IN_PLACE = "SwitchConfigInPlace"
    PROMOTE_CONFIG = "PromoteConfig"
    REJECT_CONFIG = "RejectConfig"
    ADOPT_CONFIG = "AdoptConfig"
    CANCEL_CONFIG_TRIAL = "CancelConfigTrial"


# The decisions that move K down or switch speculation off because of the floor.
ROLLBACK_ACTIONS = frozenset({ActionKind.ROLLBACK, ActionKind.STEP_DOWN, ActionKind.DISABLE})


# Every decision the floor causes: a rollback, or keeping the fastest K under it.
FLOOR_ACTIONS = ROLLBACK_ACTIONS | {ActionKind.KEEP_FASTEST}


@dataclass(frozen=True)
class Action:
    """One thing worth an Event and a metric."""

    kind: str  # an ActionKind, or the reason of a Degraded condition (fleet.py)
    reason: str
    message: str
    warning: bool = False


class WindowVerdict(StrEnum):
    """What judging a window found: conclusive, or why not (status.acceptance.reason, the
    MetricsAvailable condition's reason)."""

    CONCLUSIVE = "Conclusive"
    NO_DATA = "NoData"
    NOT_A_NUMBER = "NotANumber"
    NO_TRAFFIC = "NoTraffic"
    NO_DRAFTS = "NoDrafts"
    TOO_FEW_DRAFT_TOKENS = "TooFewDraftTokens"
    NO_PER_POSITION_DATA = "NoPerPositionData"
    PROMETHEUS_UNAVAILABLE = PROMETHEUS_UNAVAILABLE
    # Not gaps in the metrics: a window that has not collected minDraftTokens yet, and
    # traffic without drafts where the schedule drafts nothing at this load.
    COLLECTING = "Collecting"
    NOT_DRAFTING = "NotDrafting"
    # Step times far from the engine's own at this K and batch: a slow minute, not a
    # measurement of K (held out of the fit, the floor and every trial).
    PERTURBED = "Perturbed"
    SPECULATION_DISABLED = "SpeculationDisabled"


# Windows that say nothing at all: not added to what a track has collected.
EMPTY_WINDOWS = frozenset(
    {WindowVerdict.NO_DATA, WindowVerdict.NOT_A_NUMBER, WindowVerdict.NO_TRAFFIC}
)


class TrialStart(StrEnum):
    """Why a trial of a K started (the reason of its StartCanary or StartInPlace)."""

    # The fit predicts the candidate gains what a change needs.
    PREDICTED_GAIN = "PredictedGain"
    # The fit is unsure of the candidate (not measured at this load) and its interval
    # allows the gain: exploration.py.
    EXPLORE = "Explore"
    # The fit predicts plain decoding (K=0) faster than every K: plain.py measures it.
    PLAIN_PREDICTED = "PlainPredicted"


class TrialOutcome(StrEnum):
    """Why a trial ended: its verdict when judged, or what cut it short (the reason of
    its Promote or Abort)."""

    GOODPUT_GAIN = "GoodputGain"
    NO_GAIN = "NoGain"
    BELOW_FLOOR = "BelowFloor"
    BELOW_MARGIN = "BelowMargin"
    NO_STEP_TIMES = "NoStepTimes"
    CANARY_INCONCLUSIVE = "CanaryInconclusive"
    CANARY_PENDING = "CanaryPending"
    TUNING_DISABLED = "TuningDisabled"
    OUTSIDE_RANGE = "OutsideRange"
    STABLE_ROLLING_BACK = "StableRollingBack"
    FLEET_SCALED = "FleetScaled"
    CONFIG_CHANGED = "ConfigChanged"
    TIMEOUT = "Timeout"
    RUNTIME_FAILED = "RuntimeFailed"
