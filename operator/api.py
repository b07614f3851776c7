"""The SpeculativeModel API (specfleet.io/v1alpha1): the single source of truth.

The CRD YAML in crds/ and the chart, and the field tables in the docs, are generated
from these models (`specfleet crds`). Every cross-field rule is written twice on
purpose: as a pydantic validator (offline `specfleet validate`, the operator) and as
a CEL rule in `x-kubernetes-validations` (admission by the API server); a test
checks that both refuse the same manifests.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

# The runtime's config is the contract the operator renders; the API shares its
# vocabulary rather than keeping a second copy.
from specfleet.runtime.config import MAX_SPECULATIVE_TOKENS, Method

GROUP = "specfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeModel"
PLURAL = "speculativemodels"
SINGULAR = "speculativemodel"
SHORT_NAMES = ["specmodel", "specmodels"]

HISTORY_LIMIT = 20
# Pods left out of a window that status names, and the length of each message: status
# stays small whatever the pods serve and however many of them fail.
LEFT_OUT_LIMIT = 5
LEFT_OUT_MESSAGE_LIMIT = 200
OWNED_RUNTIME_FLAGS = ("--speculative-config", "--speculative_config")

# A Go-style duration with positive components, e.g. "30s", "5m", "1h30m".
DURATION_PATTERN = r"^([1-9][0-9]*(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([1-9][0-9]*)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"


def parse_duration(text: str) -> timedelta:
    """Seconds of a duration such as "1h30m"; raises ValueError naming the format."""
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not a positive duration such as '30s', '5m' or '1h30m'")
    seconds = sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return timedelta(seconds=seconds)


def _cel(rule: str, message: str, field_path: str | None = None) -> dict[str, str]:
    validation = {"rule": rule, "message": message}
    if field_path:
        validation["fieldPath"] = field_path
    return validation


def _schema_extra(**extra: Any) -> dict[str, Any]:
    return extra


Duration = Annotated[
    str,
    StringConstraints(pattern=DURATION_PATTERN, max_length=32),
    Field(description="A positive duration: digits and a unit (ms, s, m, h), e.g. '90s', '1h30m'."),
]
NonEmptyString = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Quantity = Annotated[
    str | int,
    Field(description="A Kubernetes resource quantity, e.g. '16Gi', 4, '500m'."),
]


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=False,
        validate_default=True,
    )


DraftMethod = Method  # peagle, eagle3, eagle, ngram, none


class TuningStrategy(StrEnum):
    CANARY = "Canary"
    IN_PLACE = "InPlace"


class RollbackMetric(StrEnum):
    DRAFT_ACCEPTANCE_RATE = "DraftAcceptanceRate"
    FIRST_POSITION_ACCEPTANCE = "FirstPositionAcceptance"
    RELATIVE_TO_BASELINE = "RelativeToBaseline"


class MetricsSource(StrEnum):
    PODS = "Pods"
    PROMETHEUS = "Prometheus"


class TargetModel(ApiModel):
    """The model being served (the verifier)."""

    name: NonEmptyString = Field(
        description="Hub name or local path of the target model, as `vllm serve` takes it."
    )
    served_name: NonEmptyString | None = Field(
        default=None, description="Name clients use in requests; defaults to `name`."
    )


class DraftModel(ApiModel):
    """The draft (speculator) and how it drafts."""

    model_config = ConfigDict(
        json_schema_extra=_schema_extra(
            **{
                "x-kubernetes-validations": [
                    _cel(
                        "!(self.method in ['peagle', 'eagle3', 'eagle']) || has(self.model)",
                        "draft.model is required unless draft.method is ngram or none",
                        ".model",
                    ),
                    _cel(
                        "self.promptLookupMin <= self.promptLookupMax",
                        "draft.promptLookupMin must be <= draft.promptLookupMax",
                        ".promptLookupMin",
                    ),
                ]
            }
        )
    )

    method: DraftMethod = Field(
        default=DraftMethod.PEAGLE,
        description=(
            "peagle: EAGLE-3 draft with parallel drafting (all K tokens in one pass); "
            "eagle3 / eagle: sequential drafting; ngram: prompt lookup, no draft model; "
            "none: plain decoding."
        ),
    )
    model: NonEmptyString | None = Field(
        default=None, description="Hub name or local path of the draft model."
    )
    tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        description="Draft tensor parallel size: 1 or the target's (vLLM's default).",
    )
    prompt_lookup_min: int = Field(default=1, ge=1, description="ngram: shortest match.")
    prompt_lookup_max: int = Field(default=4, ge=1, description="ngram: longest match.")

    @model_validator(mode="after")
    def _check(self) -> DraftModel:
        if self.method.uses_draft_model and self.model is None:
            raise ValueError(
                f"draft.model is required when draft.method is {self.method.value}"
                " (only ngram and none run without a draft model)"
            )
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("draft.promptLookupMin must be <= draft.promptLookupMax")
        return self


class Speculation(ApiModel):
    """K, the number of speculative tokens, and the range the tuner may move it in."""

    model_config = ConfigDict(
        json_schema_extra=_schema_extra(
            **{
                "x-kubernetes-validations": [
                    _cel(
                        "self.minTokens <= self.tokens && self.tokens <= self.maxTokens",
                        "speculation.tokens must be between speculation.minTokens and "
                        "speculation.maxTokens",
                        ".tokens",
                    ),
                ]
            }
        )
    )

    tokens: int = Field(
        default=3,
        ge=1,
        le=MAX_SPECULATIVE_TOKENS,
        description="K to start with (num_speculative_tokens).",
    )
    min_tokens: int = Field(
        default=1, ge=1, le=MAX_SPECULATIVE_TOKENS, description="Lowest K the tuner may choose."
    )
    max_tokens: int = Field(
        default=16,
        ge=1,
        le=MAX_SPECULATIVE_TOKENS,
        description=f"Highest K the tuner may choose (at most {MAX_SPECULATIVE_TOKENS}).",
    )

    @model_validator(mode="after")
    def _check(self) -> Speculation:
        if not self.min_tokens <= self.tokens <= self.max_tokens:
            raise ValueError(
                f"speculation.tokens ({self.tokens}) must be between speculation.minTokens "
                f"({self.min_tokens}) and speculation.maxTokens ({self.max_tokens})"
            )
        return self


class Tuning(ApiModel):
    """How K is tuned from the pods' acceptance metrics."""

    enabled: bool = Field(default=True, description="Tune K; when false K stays as given.")
    strategy: TuningStrategy = Field(
        default=TuningStrategy.CANARY,
        description="Canary: try a candidate K on one extra pod; InPlace: roll all pods.",
    )
    interval: Duration = Field(default="60s", description="Length of one metrics window.")
    min_draft_tokens: int = Field(
        default=20000,
        ge=1,
        description="Draft tokens a window needs to be conclusive.",
    )
    cooldown: Duration = Field(default="5m", description="Quiet time after any change of K.")
    canary_windows: int = Field(
        default=3, ge=1, description="Conclusive windows compared before promoting a canary."
    )
    min_improvement: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Relative goodput gain a candidate must show (hysteresis).",
    )
    acceptance_margin: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Margin above the floor a candidate's predicted acceptance must clear.",
    )
    canary_pending_timeout: Duration = Field(
        default="5m", description="A canary pod Pending this long switches to InPlace."
    )
    max_inconclusive_windows: int = Field(
        default=5, ge=1, description="Inconclusive windows in a row before MetricsAvailable=False."
    )


class Rollback(ApiModel):
    """When to give up on the K in effect."""

    min_acceptance: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="The acceptance floor: the lower confidence bound of `metric` must stay above.",
    )
    metric: RollbackMetric = Field(
        default=RollbackMetric.DRAFT_ACCEPTANCE_RATE,
        description=(
            "DraftAcceptanceRate: accepted / drafted tokens (vLLM's definition); "
            "FirstPositionAcceptance: acceptance of the first draft token; "
            "RelativeToBaseline: the window's rate over the rate measured at promotion."
        ),
    )
    failure_limit: int = Field(
        default=2, ge=1, description="Conclusive failing windows in a row before rolling back."
    )
    reprobe_after: Duration = Field(
        default="30m", description="Back-off before speculation is tried again once disabled."
    )


class SecretKeyRef(ApiModel):
    name: NonEmptyString = Field(description="Secret name in the model's namespace.")
    key: NonEmptyString = Field(default="token", description="Key holding the token.")


class EnvVar(ApiModel):
    """An environment variable for the runtime container (value or valueFrom)."""

    name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    value: str | None = None
    value_from: dict[str, Any] | None = Field(
        default=None, description="A core/v1 EnvVarSource, passed through unchanged."
    )


class Toleration(ApiModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Resources(ApiModel):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class Runtime(ApiModel):
    """The inference pods: image, GPUs and what the runtime passes on to vLLM."""

    model_config = ConfigDict(
        json_schema_extra=_schema_extra(
            **{
                "x-kubernetes-validations": [
                    _cel(
                        "self.gpus == 0 || self.tensorParallelSize <= self.gpus",
                        "runtime.tensorParallelSize must not exceed runtime.gpus",
                        ".tensorParallelSize",
                    ),
                    _cel(
                        "self.args.all(a, !a.startsWith('--speculative-config') && "
                        "!a.startsWith('--speculative_config'))",
                        "runtime.args may not set --speculative-config: the operator owns it",
                        ".args",
                    ),
                ]
            }
        )
    )

    image: NonEmptyString = Field(
        default="ghcr.io/specfleet/runtime:0.1.0",
        description="Runtime image (vLLM plus specfleet-runtime).",
    )
    gpus: int = Field(default=1, ge=0, le=64, description="nvidia.com/gpu per pod.")
    tensor_parallel_size: int = Field(default=1, ge=1, le=64, description="Target TP size.")
    args: Annotated[
        list[Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=64)
    ] = Field(default_factory=list, description="Extra `vllm serve` arguments.")
    env: list[EnvVar] = Field(default_factory=list, description="Extra environment.")
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port of the server.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    resources: Resources = Field(
        default_factory=Resources,
        description="CPU/memory; nvidia.com/gpu is set from `gpus`.",
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret with a hub token, exposed as HF_TOKEN."
    )

    @field_validator("args")
    @classmethod
    def _no_owned_flags(cls, args: list[str]) -> list[str]:
        for arg in args:
            if arg.startswith(OWNED_RUNTIME_FLAGS):
                raise ValueError(
                    f"runtime.args may not set {arg.split('=')[0]}: "
                    "the operator renders the speculative config"
                )
        return args

    @model_validator(mode="after")
    def _check(self) -> Runtime:
        if self.gpus and self.tensor_parallel_size > self.gpus:
            raise ValueError(
                f"runtime.tensorParallelSize ({self.tensor_parallel_size}) must not exceed "
                f"runtime.gpus ({self.gpus})"
            )
        return self


class PrometheusEndpoint(ApiModel):
    url: Annotated[str, StringConstraints(pattern=r"^https?://", max_length=1024)] = Field(
        description="Base URL of a Prometheus server, e.g. http://prometheus.monitoring:9090."
    )


class Metrics(ApiModel):
    """Where acceptance metrics come from."""

    model_config = ConfigDict(
        json_schema_extra=_schema_extra(
            **{
                "x-kubernetes-validations": [
                    _cel(
                        "self.source != 'Prometheus' || has(self.prometheus)",
                        "metrics.prometheus.url is required when metrics.source is Prometheus",
                        ".prometheus",
                    ),
                ]
            }
        )
    )

    source: MetricsSource = Field(
        default=MetricsSource.PODS,
        description="Pods: scrape each ready pod; Prometheus: query a server.",
    )
    prometheus: PrometheusEndpoint | None = None
    scrape_timeout: Duration = Field(default="5s", description="Timeout of one scrape or query.")

    @model_validator(mode="after")
    def _check(self) -> Metrics:
        if self.source is MetricsSource.PROMETHEUS and self.prometheus is None:
            raise ValueError("metrics.prometheus.url is required when metrics.source is Prometheus")
        return self


class SpeculativeModelSpec(ApiModel):
    """What the user (or Git) wants. The operator never writes it."""

    model: TargetModel
    draft: DraftModel
    speculation: Speculation = Field(default_factory=Speculation)
    tuning: Tuning = Field(default_factory=Tuning)
    rollback: Rollback = Field(default_factory=Rollback)
    replicas: int = Field(default=1, ge=1, le=1000, description="Stable pods.")
    runtime: Runtime = Field(default_factory=Runtime)
    metrics: Metrics = Field(default_factory=Metrics)


# ---------------------------------------------------------------------------- status


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


class Condition(ApiModel):
    type: ConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime
    observed_generation: int | None = None


class SpeculationState(ApiModel):
    """The K in effect and the tuner's memory of it."""

    tokens: int | None = Field(default=None, description="K in effect on the stable pods.")
    requested_tokens: int | None = Field(
        default=None,
        description="spec.speculation.tokens when K was last taken from the spec; "
        "a new value in the spec resets K to it.",
    )
    candidate_tokens: int | None = Field(default=None, description="K on the canary, if any.")
    last_known_good_tokens: int | None = None
    parallel_drafting: bool = False
    disabled: bool = Field(default=False, description="Speculation switched off by rollback.")
    disabled_reason: str | None = None
    reprobe_at: datetime | None = None
    strategy: TuningStrategy | None = Field(
        default=None, description="Strategy in effect (InPlace when no canary fits)."
    )
    changed_at: datetime | None = Field(default=None, description="Last change of K (cooldown).")
    canary_started_at: datetime | None = None
    baseline_acceptance: float | None = Field(
        default=None, description="Acceptance measured when the K in effect was promoted."
    )
    rejected_tokens: list[int] = Field(
        default_factory=list,
        description="Candidate Ks a canary or in-place trial rejected; not proposed again "
        "until rejectedUntil.",
    )
    rejected_until: datetime | None = None
    failing_windows: int = 0
    inconclusive_windows: int = 0
    windows: int = Field(default=0, description="Conclusive windows seen since the last change.")


class TrackTotals(ApiModel):
    """Sums over the conclusive windows of one track, for the canary comparison."""

    drafts: float = 0
    draft_tokens: float = 0
    accepted_tokens: float = 0
    generated_tokens: float = 0
    seconds: float = 0
    windows: int = 0


class CanaryComparison(ApiModel):
    """A running trial of a candidate K: a canary pod, or (InPlace) the stable pods themselves."""

    candidate_tokens: int
    in_place: bool = Field(
        default=False,
        description="InPlace trial: the stable K itself was changed; `stable` holds the "
        "windows measured before the change.",
    )
    previous_tokens: int | None = Field(
        default=None, description="InPlace: the K before the trial, restored on abort."
    )
    stable: TrackTotals = Field(default_factory=TrackTotals)
    canary: TrackTotals = Field(default_factory=TrackTotals)


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


class SpeculativeModelStatus(ApiModel):
    """What the operator observed and decided. Everything it needs to resume is here."""

    observed_generation: int | None = None
    phase: Phase = Phase.PENDING
    replicas: int = 0
    ready_replicas: int = 0
    speculation: SpeculationState = Field(default_factory=SpeculationState)
    canary: CanaryComparison | None = None
    acceptance: AcceptanceWindow = Field(default_factory=AcceptanceWindow)
    conditions: list[Condition] = Field(default_factory=list)
    history: Annotated[list[Decision], Field(max_length=HISTORY_LIMIT)] = Field(
        default_factory=list, description=f"The last {HISTORY_LIMIT} decisions, oldest first."
    )


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; the rest is kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: Annotated[str, StringConstraints(pattern=DNS_1035_LABEL)]
    namespace: str | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class SpeculativeModel(ApiModel):
    """A target model served by vLLM with a speculative draft, tuned by the operator."""

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["specfleet.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeModel"]
    metadata: ObjectMeta
    spec: SpeculativeModelSpec
    status: SpeculativeModelStatus = Field(default_factory=SpeculativeModelStatus)


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "K", "type": "integer", "jsonPath": ".status.speculation.tokens"},
    {"name": "Accept", "type": "number", "jsonPath": ".status.acceptance.rate"},
    {"name": "ALen", "type": "number", "jsonPath": ".status.acceptance.meanLength"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

ROOT_VALIDATIONS = [
    _cel(
        "self.metadata.name.matches('" + DNS_1035_LABEL + "')",
        "metadata.name must be a DNS-1035 label (lower case, at most 63 characters, "
        "starting with a letter): it names the model's Service",
    ),
]


def validation_errors(manifest: Any) -> list[str]:
    """Why a manifest is not a valid SpeculativeModel, one `field.path: reason` a line."""
    from pydantic import ValidationError

    if not isinstance(manifest, dict):
        return [f"(document): expected a mapping, got {type(manifest).__name__}"]
    try:
        SpeculativeModel.model_validate(manifest)
    except ValidationError as error:
        return [_describe(e) for e in error.errors()]
    return []


def _describe(error: Any) -> str:
    path = ".".join(str(part) for part in error["loc"]) or "(document)"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field"
    return f"{path}: {message}"
