"""The SpeculativeModel's status: what the operator observed and decided, all it
needs to resume. A body an earlier version wrote is read by old_status.py."""

from __future__ import annotations

from datetime import datetime
from enum import Enum, StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from specfleet.operator.api.common import (
    HISTORY_LIMIT,
    LEFT_OUT_LIMIT,
    LEFT_OUT_MESSAGE_LIMIT,
    ApiModel,
    Lax,
)
from specfleet.operator.api.old_status import (
    BOOLEAN,
    FLAT_COUNTERS,
    INTEGER,
    NUMBER,
    NUMBERS,
    OBJECT,
    OBJECTS,
    STRING,
    TRACK_TOTALS_FLAT_COUNTERS,
    config_trial_in_place_from_flat,
    drafting_from_parallel,
    old_fields,
    open_window_from_flat,
    rejected_from_flat,
    since_change_from_flat,
    states_from_flat,
    track_totals_from_flat,
    trial_from_flat,
)
from specfleet.operator.api.spec import (
    DraftMethod,
    DraftModel,
    Runtime,
    Schedule,
    TargetModel,
    TuningStrategy,
)
from specfleet.operator.counts import Counts
from specfleet.runtime.config import MAX_SPECULATIVE_TOKENS, Drafting


class Phase(StrEnum):
    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    CANARY = "Canary"
    DEGRADED = "Degraded"


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SPECULATION_ACTIVE = "SpeculationActive"
    METRICS_AVAILABLE = "MetricsAvailable"
    ACCEPTANCE_BELOW_FLOOR = "AcceptanceBelowFloor"
    CONFIG_REJECTED = "ConfigRejected"


class Condition(ApiModel):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


class ScheduledBand(ApiModel):
    """Batch sizes up to upToBatch (from the band before) run K=tokens."""

    up_to_batch: int | None = Field(default=None, description="None: every larger batch.")
    tokens: int


class PairSpread(ApiModel):
    """How far matched pairs' log gains spread within a load bucket, pooled over the
    interleaved trials so far: the pods' noise from one window to the next, which sets
    the smallest gain such a trial can prove."""

    squares: float = Field(description="Sum of the pairs' squared deviations within buckets.")
    dof: int = Field(ge=1, description="Their degrees of freedom (pairs less buckets).")


class Rejected(ApiModel):
    """Candidates the tuner does not propose again before `until`."""

    tokens: list[int] = Field(
        default_factory=list, description="Ks a trial rejected, or a rollback ruled out."
    )
    schedule: list[ScheduledBand] | None = Field(
        default=None, description="A schedule whose trial or rollout failed."
    )
    until: datetime


class TrackTotals(ApiModel):
    """Sums over the conclusive windows of one track, for the canary comparison."""

    model_config = ConfigDict(
        json_schema_extra=old_fields(
            **dict.fromkeys([*TRACK_TOTALS_FLAT_COUNTERS, "acceptedFirst"], NUMBER)
        )
    )

    counts: Counts = Field(
        default_factory=Counts, description="vLLM's counters summed over the windows."
    )
    timed: Counts = Field(
        default_factory=Counts,
        description="The same over the windows with step times (their decode counters "
        "are the ones compared).",
    )
    seconds: float = Field(default=0, description="Pod-seconds of the windows.")
    windows: int = 0
    timed_windows: int = Field(default=0, description="Windows with step times.")
    step_seconds_sum: float = Field(default=0, description="Sum of the windows' step times.")
    step_seconds_squares: float = Field(
        default=0, description="Sum of their squares: the spread of step time across windows."
    )
    token_seconds_sum: float = Field(
        default=0,
        description="Sum of the windows' decode seconds per token (step time over the "
        "tokens a request got per step): the spread of speed across windows, acceptance's "
        "included.",
    )
    token_seconds_squares: float = Field(default=0, description="Sum of their squares.")

    @model_validator(mode="before")
    @classmethod
    def _from_flat_counters(cls, data: Any) -> Any:
        return track_totals_from_flat(data)

    @property
    def accepted_first(self) -> float:
        return sum(self.counts.accepted_per_position[:1])


# Why speculation is off: the reason of the Disable or StopSpeculation that switched it
# off. (A comment: an enum's docstring would become a description in the CRD schema.)
class OffReason(StrEnum):
    NO_K_CLEARS_FLOOR = "NoKClearsFloor"
    NO_K_PAYS = "NoKPays"


class Off(ApiModel):
    """Speculation switched off: the stable pods decode plainly until a re-probe."""

    reason: OffReason = Field(
        description="NoKClearsFloor: the floor ruled out every K (a Disable); NoKPays: "
        "plain decoding measured faster than every K (a StopSpeculation)."
    )
    message: str = Field(description="What was measured, in words.")
    acceptance: list[float] | None = Field(
        default=None,
        description="NoKPays only: conditional acceptance per position when plain decoding "
        "was chosen; with the fitted cost it says when speculation would pay again (e.g. "
        "when the load falls).",
    )
    reprobe_at: datetime = Field(description="When speculation is tried again at the latest.")
    failed_reprobes: int = Field(
        default=0,
        ge=0,
        description="Re-probes that ended off again in a row; each doubles the next back-off.",
    )

    @model_validator(mode="after")
    def _acceptance_only_when_no_k_pays(self) -> Off:
        if (self.acceptance is not None) != (self.reason is OffReason.NO_K_PAYS):
            raise ValueError("acceptance is set when, and only when, the reason is NoKPays")
        return self


class Reprobing(ApiModel):
    """Speculation re-enabled in place by a re-probe, not yet proven: switched off again
    now, it is a failed re-probe."""

    since: datetime
    failed_reprobes: int = Field(
        default=0, ge=0, description="Re-probes that ended off again in a row before this one."
    )


class HotSchedule(ApiModel):
    """The schedule handed to the running stable pods (speculation.switching Hot)."""

    generation: int = Field(
        ge=1,
        description="Raised with each new schedule; a pod answers with the generation in "
        "force, and its windows count only once it runs this one.",
    )
    schedule: list[ScheduledBand] = Field(
        description="K by batch size the stable pods run (one band: one K for every batch)."
    )
    fallback: str | None = Field(
        default=None,
        description="Why a pod could not take it (K changes restart the pods again); "
        "none: they take it hot.",
    )


# A K the operator wrote into status and renders into the pods: in vLLM's range (0: plain
# decoding), so an edited status is refused with its field, not when the pods render.
StatusK = Annotated[int, Field(ge=0, le=MAX_SPECULATIVE_TOKENS)]


class LastKnownGood(ApiModel):
    """What a rollback returns to first."""

    tokens: StatusK = Field(description="The last K that held (a schedule's smallest drafting K).")
    schedule: list[ScheduledBand] | None = Field(
        default=None, description="The last schedule that held; none: one K."
    )


class SinceChange(ApiModel):
    """What the tuner has seen of the K in effect since it last changed: replaced whole on
    a change, so that no memory of one K is carried over to the next."""

    at: datetime | None = Field(
        default=None,
        description="When K last changed (cooldown runs from it); none: the spec's K, which "
        "needs no cooldown before tuning starts.",
    )
    windows: int = Field(default=0, description="Conclusive windows seen since.")
    failing_windows: int = Field(
        default=0,
        description="Conclusive windows in a row whose rollback metric's lower bound is "
        "below the floor; rollback.failureLimit of them roll back.",
    )
    plain_faster_windows: int = Field(
        default=0,
        description="Conclusive windows in a row in which plain decoding was predicted "
        "faster than every K; StopSpeculation needs rollback.failureLimit of them.",
    )
    baseline_acceptance: float | None = Field(
        default=None, description="Acceptance measured when the K in effect was promoted."
    )


class MatchedPair(ApiModel):
    """One window of an interleaved trial's candidate and one of what ran before it, at a
    matched load: what the candidate gained there, and the tokens at stake."""

    load: float = Field(
        description="Requests in flight per pod over the previous side's window, averaged "
        "over its time."
    )
    gain: float = Field(
        description="The candidate's per-request decode speed over the previous side's, "
        "less 1 (the candidate moved to the previous side's batch by the fitted step cost)."
    )
    tokens: float = Field(
        description="Tokens the previous side's window decoded: the pair's weight, so a "
        "window at 32 in flight counts for what it serves, not as one at 1."
    )


class InPlace(ApiModel):
    """A trial on the stable pods themselves: their windows before it are its baseline."""

    previous_tokens: StatusK = Field(description="The K before the trial, restored on abort.")
    previous_schedule: list[ScheduledBand] | None = Field(
        default=None, description="The schedule before the trial, restored on abort."
    )
    switched: bool = Field(
        default=False,
        description="The stable pods run the candidate; before, they run the previous K "
        "while its baseline windows are measured (not the window that proposed it: that one "
        "was chosen for looking bad).",
    )
    interleaved: bool = Field(
        default=False,
        description="The stable pods take K hot: candidate and previous alternate, one "
        "measured window each, compared in pairs at matched batch; no baseline first, no "
        "restart.",
    )
    unpaired: TrackTotals | None = Field(
        default=None,
        description="Interleaved: the last window measured, waiting for the other side's "
        "next one at a matched batch (else it is dropped).",
    )
    unpaired_load: float | None = Field(
        default=None,
        description="The unpaired window's requests in flight per pod, averaged over its "
        "time: what a pair is matched by.",
    )
    pairs: list[MatchedPair] | None = Field(
        default=None,
        description="Interleaved: each pair's gain at its load; the trial is judged on "
        "their mean weighted by tokens, its bounds from their spread (load left out).",
    )


class Placement(Enum):
    """Where a trial's candidate runs, and so which windows are its own."""

    CANARY = "canary"  # a canary pod beside the stable pods
    BEFORE = "before"  # in place: the stable pods measure what runs, before the switch
    AFTER = "after"  # in place: the stable pods run the candidate, after the switch
    # In place on pods that take K hot: the stable pods run both sides, turn by turn.
    INTERLEAVED = "interleaved"


class TrialRecord(ApiModel):
    """What every trial holds, whatever it tries: the K it runs, where (on the stable pods
    themselves, or a canary pod), since when, and the windows of both sides. The trial
    engine (trial_engine.advance) reads and counts it the same way for every kind."""

    tokens: StatusK = Field(
        description="K the candidate runs: a K trial's candidate (a schedule's largest; 0: "
        "plain decoding, measured before speculation stops), a config trial's the stable "
        "pods' K, so that it compares the configs and not two Ks."
    )
    schedule: list[ScheduledBand] | None = Field(
        default=None,
        description="K by batch size the candidate runs, if a schedule (a config trial's on "
        "a canary: the stable pods' when it started).",
    )
    started_at: datetime
    in_place: InPlace | None = Field(
        default=None,
        description="On the stable pods themselves (a config trial's K and schedule before "
        "are those at the switch); none: on a canary pod.",
    )
    stable: TrackTotals = Field(
        default_factory=TrackTotals,
        description="The windows it is compared with (in place: those before the switch).",
    )
    canary: TrackTotals = Field(default_factory=TrackTotals, description="The candidate's windows.")

    @property
    def plain(self) -> bool:
        """The candidate decodes plainly (K=0): a K trial of whether to stop speculating
        (a config trial never runs one)."""
        return self.tokens == 0

    @property
    def placement(self) -> Placement:
        """Where the candidate runs now."""
        if self.in_place is None:
            return Placement.CANARY
        if self.in_place.interleaved:
            return Placement.INTERLEAVED
        return Placement.AFTER if self.in_place.switched else Placement.BEFORE

    @property
    def stable_runs_candidate(self) -> bool:
        """The stable pods run the candidate now: after an in-place switch, or in an
        interleaved trial's candidate turns (the turn is `in_place.switched`)."""
        return self.in_place is not None and self.in_place.switched


class Trial(TrialRecord):
    """A running trial of a candidate K or schedule: on a canary pod, or in place."""

    stable_replicas: int = Field(
        description="spec.replicas when the trial started: a trial whose fleet is scaled "
        "ends unjudged (FleetScaled), its windows no longer at matched load."
    )
    explores: bool = Field(
        default=False,
        description="An exploration (started for Explore): one of the few Ks the fit does "
        "not favour tried in a row, so its gain is held to a one-sided 97.5% bound, the "
        "exploration budget sharing one 5% chance of a false promotion.",
    )


class SpeculationState(ApiModel):
    """The K in effect and the tuner's memory of it, each state an object while it holds."""

    model_config = ConfigDict(
        json_schema_extra=old_fields(
            rejectedTokens=NUMBERS,
            rejectedSchedule=OBJECTS,
            rejectedUntil=STRING,
            disabled=BOOLEAN,
            disabledReason=STRING,
            disabledAcceptance=NUMBERS,
            reprobeAt=STRING,
            failedReprobes=INTEGER,
            reprobedAt=STRING,
            lastKnownGoodTokens=INTEGER,
            lastKnownGoodSchedule=OBJECTS,
            candidateTokens=INTEGER,
            candidateSchedule=OBJECTS,
            canaryStartedAt=STRING,
            changedAt=STRING,
            windows=INTEGER,
            failingWindows=INTEGER,
            plainFasterWindows=INTEGER,
            baselineAcceptance=NUMBER,
        )
    )

    tokens: StatusK | None = Field(default=None, description="K in effect on the stable pods.")
    requested_tokens: int | None = Field(
        default=None,
        description="spec.speculation.tokens when K was last taken from the spec; "
        "a new value in the spec resets K to it.",
    )
    last_known_good: LastKnownGood | None = Field(
        default=None, description="What a rollback returns to first."
    )
    drafting: Annotated[Drafting, Lax] | None = Field(
        default=None, description="The drafting style the step cost was measured for."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_older_shapes(cls, data: Any) -> Any:
        data = drafting_from_parallel(data)
        data = rejected_from_flat(data)
        data = since_change_from_flat(data)
        return states_from_flat(
            data, no_k_clears_floor=OffReason.NO_K_CLEARS_FLOOR, no_k_pays=OffReason.NO_K_PAYS
        )

    trial: Trial | None = Field(
        default=None, description="A candidate K or schedule on trial; none: no trial runs."
    )
    off: Off | None = Field(
        default=None,
        description="Speculation switched off (plain decoding) and why; none: it is on.",
    )
    reprobing: Reprobing | None = Field(
        default=None,
        description="Speculation back on by a re-probe not yet proven; none: no re-probe is "
        "pending (it held, or none was made).",
    )
    strategy: TuningStrategy | None = Field(
        default=None, description="Strategy in effect (InPlace when no canary fits)."
    )
    since_change: SinceChange = Field(
        default_factory=SinceChange,
        description="What the tuner has seen of the K in effect since it last changed.",
    )
    rejected: Rejected | None = Field(
        default=None,
        description="What a trial or a rollback rejected, not proposed again before its "
        "`until`; none: nothing is.",
    )
    hot_schedule: HotSchedule | None = Field(
        default=None,
        description="The schedule handed to the running stable pods with "
        "spec.speculation.switching Hot; none: K changes restart them.",
    )
    pair_spread: PairSpread | None = Field(
        default=None,
        description="The spread interleaved trials' matched pairs measured; none: no such "
        "trial has ended (a change is then held to minImprovement).",
    )

    @property
    def rejected_tokens(self) -> list[int]:
        return self.rejected.tokens if self.rejected else []

    @property
    def rejected_schedule(self) -> list[ScheduledBand] | None:
        return self.rejected.schedule if self.rejected else None

    inconclusive_windows: int = 0

    good_acceptance: list[float] | None = Field(
        default=None,
        description="Conditional acceptance per position as last measured above the floor: "
        "the last such window at one K, and past its positions the deeper ones a deeper K "
        "(stable or canary) measured. A re-probe after a Disable tries the K it and the "
        "fitted cost predict best, where a recovered draft pays; predictions of a K deeper "
        "than the window's take its lower deeper positions. Cleared when a new config is "
        "adopted.",
    )

    @model_validator(mode="after")
    def _off_or_reprobing(self) -> SpeculationState:
        if self.off is not None and self.reprobing is not None:
            raise ValueError("speculation is off or back on by a re-probe, not both")
        return self

    @property
    def measuring_plain(self) -> bool:
        """An in-place trial of plain decoding runs on the stable pods (after its switch)."""
        trial = self.trial
        return trial is not None and trial.plain and trial.stable_runs_candidate

    @property
    def decoding_plainly(self) -> bool:
        """The stable pods decode plainly: speculation is off, or measured against."""
        return self.off is not None or self.measuring_plain

    @property
    def stable_k(self) -> int:
        """K the stable pods run (0: plain decoding)."""
        return 0 if self.decoding_plainly or self.tokens is None else self.tokens

    @property
    def plain_decoding_chosen(self) -> bool:
        """Off because no K pays at this load, not because the draft failed: the model
        runs as it should."""
        return self.off is not None and self.off.reason is OffReason.NO_K_PAYS

    @property
    def failed_reprobes(self) -> int:
        """Re-probes that ended off again in a row (each doubles the next back-off)."""
        state = self.off or self.reprobing
        return state.failed_reprobes if state else 0

    schedule: list[ScheduledBand] | None = Field(
        default=None,
        description="K by batch size on the stable pods (tokens is its largest K); none: K "
        "at every load.",
    )
    requested_schedule: Schedule | None = Field(
        default=None,
        description="spec.speculation.schedule as last seen (a change resets); mode Off "
        "with runtime.parallelism.data above 1 (one K).",
    )
    load: list[float] = Field(
        default_factory=list,
        description="Decoding requests per engine step of the latest stable windows (the "
        "load profile a learned schedule is fitted to).",
    )


class OpenWindow(ApiModel):
    """A window still collecting minDraftTokens: counts summed over its intervals."""

    model_config = ConfigDict(
        json_schema_extra=old_fields(
            **dict.fromkeys(FLAT_COUNTERS, NUMBER), acceptedPerPosition=NUMBERS
        )
    )

    since: datetime
    tokens: int = Field(description="K the track ran while it was collected.")
    counts: Counts = Field(default_factory=Counts, description="vLLM's counters so far.")
    seconds: float = 0
    pod_seconds: float = 0
    pods: int = 0
    running_requests: float = 0
    waiting_requests: float = 0

    @model_validator(mode="before")
    @classmethod
    def _from_flat_counters(cls, data: Any) -> Any:
        return open_window_from_flat(data)


class OpenWindows(ApiModel):
    stable: OpenWindow | None = None
    canary: OpenWindow | None = None


class StepTimeSample(ApiModel):
    """Measured step time at one K and batch: the mean over recent windows."""

    tokens: int = Field(description="K (0: plain decoding).")
    batch: float = Field(description="Decoding requests per engine step.")
    step_ms: float = Field(description="Mean engine step time a decoding request saw.")
    steps: float = Field(description="Inter-token latencies it rests on, all windows.")
    windows: int = Field(description="Windows averaged; the oldest fade past a few.")
    measured_at: datetime


# A K=0 step of an engine started to speculate (a schedule's K=0 band) over a plain step,
# until the pods measure it: the draft still runs over each step's new tokens. vLLM
# measured +6.6% at 2 requests and +21.6% at 189 (vllm-project/vllm issue 49548).
K0_TAX_PRIOR = 0.08


class FittedStepCost(ApiModel):
    """step ms = targetForwardMs + draftMs (K > 0) + draftMsPerToken * K
    + verifyMsPerToken * max(0, batch * (K + 1) - computeBoundTokens); a K=0 step of an
    engine started to speculate takes (1 + k0Tax) times a plain one."""

    target_forward_ms: float
    draft_ms: float
    draft_ms_per_token: float
    verify_ms_per_token: float
    compute_bound_tokens: int
    k0_tax: float = Field(
        default=K0_TAX_PRIOR,
        description="A schedule's K=0 step over a plain step, less 1: measured on the "
        "stable pods' K=0 band, else vLLM's published figure.",
    )


class StepCostStatus(ApiModel):
    """The step-time model the tuner predicts goodput with, learned from the pods."""

    fitted: FittedStepCost
    samples: list[StepTimeSample] = Field(
        default_factory=list, description="Measurements the fit rests on (none: the prior)."
    )
    relative_error: float | None = Field(
        default=None, description="RMS relative error of the fit over the samples."
    )
    perturbed_windows: int = Field(
        default=0,
        description="Windows in a row held out as perturbed: a step time far from the one "
        "measured at the same K and batch (status.acceptance.reason Perturbed).",
    )
    k0_tax_windows: int = Field(
        default=0, description="Windows of a K=0 band that fitted.k0Tax rests on (0: the prior)."
    )


class PodsConfig(ApiModel):
    """The spec's fields a model's pods are rendered from, K and replicas aside: the
    target model, the draft and the runtime (image, args, pod settings, injection...)."""

    model: TargetModel
    draft: DraftModel
    runtime: Runtime


# The spec's own fields, as the API server checked them in spec: status does not
# describe them again (their schema, CEL rules and defaults are spec's).
_SPEC_FIELDS: dict[str, Any] = {
    "type": "object",
    "x-kubernetes-preserve-unknown-fields": True,
    "nullable": True,
}


class RunningConfig(ApiModel):
    """The part of the spec a config change is named by, as the stable pods run it, and
    the rest of what their pods are rendered from: enough to render them, whole, while
    the spec already says the next one. Frozen: a config is replaced whole, never changed
    in place, so a working copy of status shares it (`run.working_copy`)."""

    model_config = ConfigDict(frozen=True)

    hash: str = Field(description="Names the config: a hash of the fields below but pods.")
    method: DraftMethod
    draft_model: str | None = None
    image: str
    args: list[str] = Field(default_factory=list)
    pods: Annotated[PodsConfig | None, WithJsonSchema(_SPEC_FIELDS)] = Field(
        default=None,
        description="spec.model, spec.draft and spec.runtime as they were when this config "
        "last ran: while a new config is on trial or rejected, the stable pods are rendered "
        "from them whole, never from a mix of two commits. Absent from a trial's config (the "
        "canary runs the spec), and from a status written before issue 41.",
    )

    @model_validator(mode="after")
    def _within_the_spec_s_rules(self) -> RunningConfig:
        """The stable pods (and a trial's canary) are rendered from this, not from the
        spec: whoever may patch status must not run an image or arguments that
        spec.runtime refuses (an operator-owned flag, an older speculative flag, too
        many or too long arguments, an empty image), judged with the rest of the runtime
        they run with (`pods`; a status from before it: the arguments alone). Read as an
        invalid spec is."""
        runtime: dict[str, Any] = {"args": self.args}
        if self.pods is not None:
            pods = self.pods.runtime
            if self.args == pods.args and self.image == pods.image:
                # The runtime they run is `pods.runtime` as it stands, which was read as a
                # Runtime already: judged again, it would only cost every reconcile a
                # second validation of it.
                return self
            runtime = pods.model_dump(by_alias=True, mode="json") | runtime
            runtime["image"] = self.image
        elif not self.image:
            raise ValueError("breaks spec.runtime's rules: image: an empty image")
        try:
            Runtime.model_validate(runtime)
        except ValidationError as error:
            raise ValueError(
                "breaks spec.runtime's rules: "
                + "; ".join(
                    (f"{'.'.join(map(str, e['loc']))}: " if e["loc"] else "") + e["msg"]
                    for e in error.errors()
                )
            ) from None
        return self


class ConfigTrial(TrialRecord):
    """A new config on trial against the running one."""

    model_config = ConfigDict(
        json_schema_extra=old_fields(
            switched=BOOLEAN, previousTokens=INTEGER, previousSchedule=OBJECTS
        )
    )

    config: RunningConfig = Field(description="The config on trial (the spec's).")

    @model_validator(mode="before")
    @classmethod
    def _from_older_shapes(cls, data: Any) -> Any:
        return config_trial_in_place_from_flat(data)


class ConfigRejection(ApiModel):
    """A config a trial held back; its hash is not tried again until the spec changes."""

    hash: str
    reason: str
    message: str
    at: datetime


class ConfigState(ApiModel):
    """Progressive delivery of config changes (docs/rollouts.md)."""

    running: RunningConfig = Field(description="The last good config: what the stable pods run.")
    trial: ConfigTrial | None = None
    rejected: ConfigRejection | None = None


class LeftOutReason(StrEnum):
    """Why an evaluation left a pod's metrics out (a specfleet_scrape_errors_total label)."""

    UNREACHABLE = "Unreachable"
    TIMEOUT = "Timeout"
    HTTP_STATUS = "HttpStatus"
    TOO_LARGE = "TooLarge"
    UNPARSEABLE = "Unparseable"
    NO_VLLM_METRICS = "NoVllmMetrics"
    IMPOSSIBLE_COUNTERS = "ImpossibleCounters"
    INCONSISTENT_COUNTERS = "InconsistentCounters"
    SCHEDULE_NOT_IN_FORCE = "ScheduleNotInForce"


class PodLeftOut(ApiModel):
    """A pod whose metrics the last evaluation could not use."""

    pod: str = Field(description="Pod name.")
    reason: LeftOutReason
    message: Annotated[str, StringConstraints(max_length=LEFT_OUT_MESSAGE_LIMIT)] = Field(
        description="What was wrong, in words."
    )


class AcceptanceWindow(ApiModel):
    """The last metrics window of the stable track."""

    rate: float | None = Field(default=None, description="Draft acceptance rate (vLLM's).")
    judged: float | None = Field(
        default=None,
        description="The rollback metric (spec.rollback.metric) in the last window: the "
        "figure the floor judges, shown as ACCEPT.",
    )
    lower_bound: float | None = Field(
        default=None, description="Lower confidence bound of the rollback metric."
    )
    mean_length: float | None = Field(default=None, description="Mean acceptance length.")
    per_position: list[float] = Field(default_factory=list)
    draft_tokens: int = 0
    goodput: float | None = Field(default=None, description="Generated tokens per second.")
    window_seconds: float | None = None
    conclusive: bool = False
    reason: str | None = Field(default=None, description="Why the window is inconclusive.")
    measured_at: datetime | None = None
    # Absent rather than empty: a schema default would make an operator older than the
    # CRD see its status differ on every tick (test_crd says how).
    pods_left_out: Annotated[list[PodLeftOut], Field(max_length=LEFT_OUT_LIMIT)] | None = Field(
        default=None,
        description=f"Pods whose metrics the last evaluation left out, and why (the first "
        f"{LEFT_OUT_LIMIT} by name).",
    )
    more_pods_left_out: int | None = Field(
        default=None, description="Pods left out beyond those listed."
    )


class Decision(ApiModel):
    time: datetime
    action: str = Field(description="StartCanary, Promote, Abort, Rollback, StepDown, Disable…")
    from_tokens: int | None = None
    to_tokens: int | None = None
    reason: str
    acceptance: float | None = None
    goodput: float | None = None


class Capacity(ApiModel):
    """The GPUs a model takes at peak, from its spec (`capacity.capacity`)."""

    resource: str = Field(
        description="The accelerator's extended resource (runtime.accelerator), or the "
        "ResourceClaimTemplate the GPUs are claimed from."
    )
    per_replica: int = Field(description="runtime.gpus x nodesPerReplica: one pod, or one group.")
    pods_per_replica: int = Field(description="Pods a replica: nodesPerReplica.")
    stable: int = Field(description="Stable replicas: spec.replicas.")
    surge: int = Field(description="Replicas a rollout adds while the old ones serve.")
    canary: int = Field(description="1 where a trial may run on a canary replica.")
    peak: int = Field(
        description="GPUs at peak: perReplica x (stable + surge + canary), a rollout of the "
        "stable replicas while a canary runs."
    )


class SpeculativeModelStatus(ApiModel):
    """What the operator observed and decided. Everything it needs to resume is here."""

    model_config = ConfigDict(json_schema_extra=old_fields(canary=OBJECT))

    @model_validator(mode="before")
    @classmethod
    def _from_flat_trial(cls, data: Any) -> Any:
        return trial_from_flat(data)

    observed_generation: int | None = None
    phase: Phase = Phase.PENDING
    replicas: int = Field(
        default=0, description="Stable pods that exist (the scale subresource's status)."
    )
    ready_replicas: int = Field(default=0, description="Ready pods, the canary's included.")
    selector: str | None = Field(
        default=None,
        description="Label selector of the stable pods, for the scale subresource (HPA, KEDA).",
    )
    speculation: SpeculationState = Field(default_factory=SpeculationState)
    acceptance: AcceptanceWindow = Field(default_factory=AcceptanceWindow)
    open_windows: OpenWindows | None = Field(
        default=None, description="Windows still collecting draft tokens."
    )
    step_cost: StepCostStatus | None = None
    config: ConfigState | None = Field(
        default=None, description="The config the stable pods run, and a trial of a new one."
    )
    startup_seconds: float | None = Field(
        default=None,
        description="Median seconds from each pod's latest start (its creation, or its "
        "container's restart) to that start's first Ready, readiness flaps ignored: what a "
        "restart (a K change rolls the pods) costs.",
    )
    capacity: Capacity | None = Field(
        default=None,
        description="The GPUs the model takes at peak, as `specfleet validate` prints it: what "
        "a quota or a node pool must hold for it.",
    )
    conditions: list[Condition] = Field(default_factory=list)
    history: Annotated[list[Decision], Field(max_length=HISTORY_LIMIT)] = Field(
        default_factory=list, description=f"The last {HISTORY_LIMIT} decisions, oldest first."
    )

    @property
    def canary_run(self) -> tuple[int, list[ScheduledBand] | None] | None:
        """The K and schedule the canary pod runs: a trial's candidate, or a config
        trial's K on a canary; None: no canary pod."""
        trial = self.speculation.trial
        if trial is not None and trial.placement is Placement.CANARY:
            return trial.tokens, trial.schedule
        config = self.config.trial if self.config is not None else None
        if config is not None and config.placement is Placement.CANARY:
            return config.tokens, config.schedule
        return None
