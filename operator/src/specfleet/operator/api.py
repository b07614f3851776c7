"""The SpeculativeModel API (specfleet.io/v1alpha1): the single source of truth.

The CRD YAML in crds/ and the chart, and the field tables in the docs, are generated
from these models (`specfleet crds`). Each cross-field rule is one `Rule` (rules.py),
declared on its model: its CEL rule goes into the CRD's `x-kubernetes-validations`
(admission by the API server), its Python check runs in pydantic (offline `specfleet
validate`, the operator), both with one message, and its refusals are the tests'
invalid manifests (`RULES` lists them all).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from specfleet.operator.counts import Counts
from specfleet.operator.durations import Duration, parse_duration
from specfleet.operator.rules import DELETE, CheckedAnnotation, Refusal, Rule, RuledModel

# The runtime's config is the contract the operator renders; the API shares its
# vocabulary rather than keeping a second copy.
from specfleet.runtime.config import (
    ENV_POD_IP,
    MAX_SPECULATIVE_TOKENS,
    Drafting,
    DraftSampleMethod,
    Method,
    RejectionSampleMethod,
)
from specfleet.runtime.vllm_args import (
    OLDER_SPECULATIVE_FLAGS,
    OLDER_SPECULATIVE_PATTERN,
    OWNED_ARG_PATTERNS,
    OWNED_FLAGS,
    older_speculative_flag,
    owned_flag,
)

GROUP = "specfleet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "SpeculativeModel"
PLURAL = "speculativemodels"
SINGULAR = "speculativemodel"
SHORT_NAMES = ["specmodel", "specmodels"]

HISTORY_LIMIT = 20
# The CEL rule over runtime.args runs a regex on every arg, so its cost grows with the
# list's and each arg's maximum length: these keep its worst case under the API
# server's per-call limit, so no admissible object can fail on cost instead of the rule.
MAX_ARGS = 64
MAX_ARG_LENGTH = 1024
# Pods left out of a window that status names, and the length of each message: status
# stays small whatever the pods serve and however many of them fail.
LEFT_OUT_LIMIT = 5
LEFT_OUT_MESSAGE_LIMIT = 200

DNS_1035_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_DNS_1035_WORDS = (
    "a DNS-1035 label (lower case, at most 63 characters, starting with a letter): it "
    "names the model's Service"
)
# What Kubernetes checks in the children: env names (printable ASCII but '='), resource
# quantities (apimachinery's format, without a sign: requests and limits can't be
# negative), label keys (an optional DNS subdomain prefix and a name) and values.
ENV_NAME_PATTERN = r"^[ -<>-~]+$"
# Bounds the cost of the rules that compare quantities at admission.
QUANTITY_MAX_LENGTH = 64
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_LABEL_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_DNS_1123_SUBDOMAIN = "[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
LABEL_KEY_PATTERN = f"^({_DNS_1123_SUBDOMAIN}/)?{_LABEL_NAME}$"
LABEL_KEY_PREFIX_MAX = 253
LABEL_VALUE_PATTERN = f"^({_LABEL_NAME})?$"
NODE_SELECTOR_MAX = 64


@dataclass(frozen=True)
class Matching(CheckedAnnotation):
    """A string the API server checks with a schema pattern (anchored at both ends).
    Pydantic checks the same pattern but says what it means, not the regex."""

    pattern: str
    meaning: str

    def check(self, text: str) -> str:
        if not re.fullmatch(self.pattern, text):
            raise ValueError(f"must be {self.meaning}")
        return text

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema


def _quantity(value: str | int) -> str | int:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if len(value) > QUANTITY_MAX_LENGTH:
        raise ValueError(f"must be at most {QUANTITY_MAX_LENGTH} characters")
    return _QUANTITY.check(value)


_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}


def quantity_value(quantity: str | int) -> Decimal:
    """The amount a Kubernetes quantity (QUANTITY_PATTERN) stands for, exactly: what the
    API server compares requests and limits by. Here rather than the kubernetes client's
    parser, which the decision core does not load."""
    text = str(quantity).lstrip("+")
    if text[-2:] in _BINARY_SUFFIXES:
        return Decimal(text[:-2]) * Decimal(1024) ** _BINARY_SUFFIXES[text[-2:]]
    if re.search(r"[eE][-+]?[0-9.]+$", text):
        return Decimal(text)  # a decimal exponent: Decimal reads it as it is
    suffix = text[-1:] if text[-1:] in _DECIMAL_SUFFIXES else ""
    return Decimal(text[: len(text) - len(suffix)]).scaleb(_DECIMAL_SUFFIXES[suffix])


def _is_label_key(key: str) -> bool:
    prefix = key.rpartition("/")[0]
    return bool(re.fullmatch(LABEL_KEY_PATTERN, key)) and len(prefix) <= LABEL_KEY_PREFIX_MAX


_QUANTITY = Matching(
    QUANTITY_PATTERN,
    "a Kubernetes quantity such as '16Gi', '500m' or 4 (a number, not negative, with an "
    "optional suffix)",
)
_LABEL_KEY_WORDS = (
    "a name of at most 63 letters, digits, '-', '_' or '.', starting and ending with a "
    "letter or digit, with an optional DNS subdomain prefix and '/' (e.g. "
    "'nvidia.com/gpu.product')"
)


def _label_key(key: str) -> str:
    if not _is_label_key(key):
        raise ValueError(f"must be a label key: {_LABEL_KEY_WORDS}")
    return key


def _annotation_key(key: str) -> str:
    # The API server checks an annotation's key in lower case.
    if not _is_label_key(key.lower()):
        raise ValueError(f"must be an annotation key: {_LABEL_KEY_WORDS}")
    return key


LabelKey = Annotated[str, AfterValidator(_label_key)]
AnnotationKey = Annotated[str, AfterValidator(_annotation_key)]
NonEmptyString = Annotated[str, StringConstraints(min_length=1, max_length=512)]
Quantity = Annotated[
    str | int,
    AfterValidator(_quantity),
    Field(
        description="A Kubernetes resource quantity, e.g. '16Gi', 4, '500m'.",
        json_schema_extra={
            "pattern": QUANTITY_PATTERN,
            "minimum": 0,
            "maxLength": QUANTITY_MAX_LENGTH,
        },
    ),
]
LabelValue = Annotated[
    str,
    StringConstraints(max_length=63),
    Matching(
        LABEL_VALUE_PATTERN,
        "a label value: empty, or at most 63 letters, digits, '-', '_' or '.', starting "
        "and ending with a letter or digit",
    ),
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


class SpecModel(ApiModel, RuledModel):
    """Base of the spec's models: types as strict as the OpenAPI schema, so "2" is not
    an integer and "0.8" not a number offline either (an integer is still a number).
    Enum fields opt out with `Lax`: strict pydantic wants enum instances, not values."""

    model_config = ConfigDict(strict=True)


Lax = Strict(False)


# The runtime's methods (Method), as the CRD's enum. (A comment, not a docstring: an
# enum's docstring would become a description in the CRD schema.)
class DraftMethod(StrEnum):
    PEAGLE = Method.PEAGLE.value
    EAGLE3 = Method.EAGLE3.value
    EAGLE = Method.EAGLE.value
    MTP = Method.MTP.value
    DRAFT_MODEL = Method.DRAFT_MODEL.value
    DFLASH = Method.DFLASH.value
    DSPARK = Method.DSPARK.value
    NGRAM = Method.NGRAM.value
    NGRAM_GPU = Method.NGRAM_GPU.value
    SUFFIX = Method.SUFFIX.value
    NONE = Method.NONE.value

    @property
    def runtime(self) -> Method:
        return Method(self.value)

    @property
    def parallel_drafting(self) -> bool:
        return self.runtime.parallel_drafting

    @property
    def tuned(self) -> bool:
        return self.runtime.tuned


def _methods(test: Callable[[Method], bool]) -> list[str]:
    return [m.value for m in Method if test(m)]


def _cel_list(values: list[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _words(values: list[str]) -> str:
    return ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else values[0]


NEEDS_DRAFT_MODEL = _methods(lambda m: m.needs_draft_model)
TAKES_DRAFT_MODEL = _methods(lambda m: m.takes_draft_model)
LEARNED_DRAFT = _methods(lambda m: m.learned_draft)
NO_DRAFT_MODEL = _methods(lambda m: not m.takes_draft_model)


class TuningStrategy(StrEnum):
    CANARY = "Canary"
    IN_PLACE = "InPlace"


class KSwitching(StrEnum):
    """How the stable pods take a new K or schedule."""

    AUTO = "Auto"  # Hot where a hot pod costs what one started at its K does, else Restart
    RESTART = "Restart"  # a new pod template: every method, every engine
    HOT = "Hot"  # handed to the running engine between two steps (the runtime's plugin)


class RolloutStrategy(StrEnum):
    CANARY = "Canary"
    IN_PLACE = "InPlace"
    IMMEDIATE = "Immediate"


class RollbackMetric(StrEnum):
    DRAFT_ACCEPTANCE_RATE = "DraftAcceptanceRate"
    FIRST_POSITION_ACCEPTANCE = "FirstPositionAcceptance"
    RELATIVE_TO_BASELINE = "RelativeToBaseline"


class BelowFloorPolicy(StrEnum):
    KEEP_FASTEST = "KeepFastest"
    DISABLE = "Disable"


class MetricsSource(StrEnum):
    PODS = "Pods"
    PROMETHEUS = "Prometheus"


class TargetModel(SpecModel):
    """The model being served (the verifier)."""

    name: NonEmptyString = Field(
        description="Hub name or local path of the target model, as `vllm serve` takes it."
    )
    served_name: NonEmptyString | None = Field(
        default=None, description="Name clients use in requests; defaults to `name`."
    )


class SuffixDecoding(SpecModel):
    """Suffix decoding's knobs (vLLM's suffix_decoding_*); vLLM's defaults when unset."""

    max_tree_depth: int | None = Field(
        default=None, ge=1, description="Depth of the suffix trees (vLLM: 24)."
    )
    max_cached_requests: int | None = Field(
        default=None,
        ge=0,
        description="Requests kept in the global suffix tree; 0 turns it off (vLLM: 10000).",
    )
    max_spec_factor: float | None = Field(
        default=None,
        ge=0,
        description="Draft at most this many tokens per token of matched prefix (vLLM: 1.0).",
    )
    min_token_prob: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Draft only tokens at least this likely by the tree's counts (vLLM: 0.1).",
    )


class DraftModel(SpecModel):
    """The draft (speculator) and how it drafts and is verified."""

    rules: ClassVar[tuple[Rule[DraftModel], ...]] = (
        Rule(
            f"!(self.method in {_cel_list(NEEDS_DRAFT_MODEL)}) || has(self.model)",
            f"draft.model is required when draft.method is {_words(NEEDS_DRAFT_MODEL)}",
            lambda d: d.model is not None or not d.method.runtime.needs_draft_model,
            ".model",
            refusals=(
                Refusal("draft-missing", {"spec.draft.model": DELETE}),
                Refusal(
                    "eagle3-without-draft",
                    {"spec.draft.method": "eagle3", "spec.draft.model": DELETE},
                ),
                Refusal(
                    "dflash-without-draft-model",
                    {"spec.draft.method": "dflash", "spec.draft.model": DELETE},
                ),
                Refusal(
                    "draft-model-method-without-draft-model",
                    {"spec.draft.method": "draft_model", "spec.draft.model": DELETE},
                ),
            ),
        ),
        Rule(
            f"!has(self.model) || self.method in {_cel_list(TAKES_DRAFT_MODEL)}",
            f"draft.model is not used by draft.method {_words(NO_DRAFT_MODEL)}: remove it",
            lambda d: d.model is None or d.method.runtime.takes_draft_model,
            ".model",
            refusals=(
                Refusal("ngram-with-draft-model", {"spec.draft.method": "ngram"}),
                Refusal("suffix-with-draft-model", {"spec.draft.method": "suffix"}),
            ),
        ),
        Rule(
            f"!has(self.sampleMethod) || self.method in {_cel_list(LEARNED_DRAFT)}",
            "draft.sampleMethod needs a draft network (draft.method "
            f"{_words(LEARNED_DRAFT)}); lookups have no distribution to sample",
            lambda d: d.sample_method is None or d.method.runtime.learned_draft,
            ".sampleMethod",
            refusals=(
                Refusal(
                    "sample-method-on-a-lookup",
                    {
                        "spec.draft.method": "ngram",
                        "spec.draft.model": DELETE,
                        "spec.draft.sampleMethod": "probabilistic",
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.rejectionSampleMethod) || self.method != 'none'",
            "draft.rejectionSampleMethod needs speculation (draft.method is none)",
            lambda d: d.rejection_sample_method is None or d.method.runtime.speculates,
            ".rejectionSampleMethod",
            refusals=(
                Refusal(
                    "rejection-on-plain-decoding",
                    {
                        "spec.draft.method": "none",
                        "spec.draft.model": DELETE,
                        "spec.draft.rejectionSampleMethod": "block",
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.adaptiveVerification) || !self.adaptiveVerification "
            "|| self.method == 'dspark'",
            "draft.adaptiveVerification applies to draft.method dspark only",
            lambda d: not d.adaptive_verification or d.method.runtime is Method.DSPARK,
            ".adaptiveVerification",
            found=lambda d: f"method {d.method.value}",
            refusals=(
                Refusal(
                    "adaptive-verification-on-peagle",
                    {"spec.draft.adaptiveVerification": True},
                ),
            ),
        ),
        Rule(
            "!has(self.suffix) || self.method == 'suffix'",
            "draft.suffix applies to draft.method suffix only",
            lambda d: d.suffix is None or d.method.runtime is Method.SUFFIX,
            ".suffix",
            refusals=(
                Refusal("suffix-knobs-on-eagle3", {"spec.draft.suffix": {"maxTreeDepth": 8}}),
            ),
        ),
        Rule(
            "self.promptLookupMin <= self.promptLookupMax",
            "draft.promptLookupMin must be <= draft.promptLookupMax",
            lambda d: d.prompt_lookup_min <= d.prompt_lookup_max,
            ".promptLookupMin",
            found=lambda d: f"{d.prompt_lookup_min} > {d.prompt_lookup_max}",
            refusals=(
                Refusal(
                    "ngram-lookup-inverted",
                    {
                        "spec.draft.method": "ngram",
                        "spec.draft.model": DELETE,
                        "spec.draft.promptLookupMin": 6,
                        "spec.draft.promptLookupMax": 2,
                    },
                ),
            ),
        ),
    )

    method: Annotated[DraftMethod, Lax] = Field(
        default=DraftMethod.PEAGLE,
        description=(
            "peagle: an EAGLE-3 head drafting all K tokens in one pass; eagle3 / eagle: "
            "sequential drafting; mtp: the target's own multi-token-prediction layers; "
            "draft_model: a small LM of the target's vocabulary; dflash: a block-diffusion "
            "draft (one pass); dspark: parallel drafting with confidence-scheduled "
            "verification (K is its upper bound); ngram / ngram_gpu: prompt lookup; suffix: "
            "suffix-tree decoding, its draft length adapting per step (not tuned); none: "
            "plain decoding."
        ),
    )
    model: NonEmptyString | None = Field(
        default=None,
        description=(
            "Hub name or local path of the draft: required by peagle, eagle3, eagle, "
            "draft_model and dflash; for mtp and dspark only when the heads are a separate "
            "checkpoint (otherwise they ship inside the target)."
        ),
    )
    tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        description="Draft tensor parallel size: 1 or the target's (vLLM's default).",
    )
    sample_method: Annotated[DraftSampleMethod, Lax] | None = Field(
        default=None,
        description=(
            "How the draft picks tokens: greedy (argmax; vLLM's default) or probabilistic "
            "(sampled, verified against its probabilities: higher acceptance at temperature "
            "> 0). Draft networks only."
        ),
    )
    rejection_sample_method: Annotated[RejectionSampleMethod, Lax] | None = Field(
        default=None,
        description=(
            "How vLLM verifies drafts: standard (its default), block (jointly; model runner "
            "v2) or fly (deferred over a window; needs K >= 2, not on vLLM's CPU build)."
        ),
    )
    adaptive_verification: bool | None = Field(
        default=None,
        description=(
            "dspark only: vLLM's adaptive verification (enable_adaptive_verification). The "
            "engine drafts K and verifies, per step, as many drafts as pay for their "
            "verification; K (speculation.tokens, tuned) is then its cap."
        ),
    )
    prompt_lookup_min: int = Field(default=1, ge=1, description="ngram: shortest match.")
    prompt_lookup_max: int = Field(default=4, ge=1, description="ngram: longest match.")
    suffix: SuffixDecoding | None = Field(default=None, description="suffix: its knobs.")


class ScheduleMode(StrEnum):
    OFF = "Off"
    AUTO = "Auto"
    LEARNED = "Learned"
    FIXED = "Fixed"


# vLLM counts drafts and draft tokens, not drafts per K: with two K values above 0 those
# two counts tell how many drafts each made (so acceptance per position stays
# measurable), with three they cannot (stats.drafts_reaching).
MAX_SCHEDULE_KS = 2
MAX_SCHEDULE_BANDS = 8
MAX_BATCH = 65536


class ScheduleBand(SpecModel):
    """Batch sizes from the band before's upToBatch + 1 (1 for the first) to upToBatch."""

    rules: ClassVar[tuple[Rule[ScheduleBand], ...]] = (
        Rule(
            "!has(self.minTokens) || !has(self.maxTokens) || self.minTokens <= self.maxTokens",
            "schedule band minTokens must not exceed its maxTokens",
            lambda b: b.min_tokens is None or b.max_tokens is None or b.min_tokens <= b.max_tokens,
            ".minTokens",
            found=lambda b: f"{b.min_tokens} > {b.max_tokens}",
            refusals=(
                Refusal(
                    "schedule-band-min-above-max",
                    {
                        "spec.speculation.schedule": {
                            "mode": "Learned",
                            "bands": [{"minTokens": 5, "maxTokens": 3}],
                        }
                    },
                ),
            ),
        ),
    )

    up_to_batch: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BATCH,
        description="Largest batch size of the band; the last band has none (every larger one).",
    )
    tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SPECULATIVE_TOKENS,
        description="Fixed: K at these batch sizes (0: no drafting).",
    )
    min_tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SPECULATIVE_TOKENS,
        description="Learned: lowest K the tuner may choose here (0 lets it stop drafting).",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SPECULATIVE_TOKENS,
        description="Learned: highest K the tuner may choose here.",
    )


_FIXED_KS = "self.bands.filter(b, has(b.tokens) && b.tokens > 0).map(b, b.tokens)"
# CEL has no set: "any three of them hold at most two values" is MAX_SCHEDULE_KS == 2.
assert MAX_SCHEDULE_KS == 2, "the CEL rule below counts distinct Ks for two only"


class Schedule(SpecModel):
    """K by batch size (vLLM's num_speculative_tokens_per_batch_size)."""

    rules: ClassVar[tuple[Rule[Schedule], ...]] = (
        Rule(
            "(self.mode != 'Off' && self.mode != 'Auto') || size(self.bands) == 0",
            "schedule.bands are for mode Learned or Fixed",
            lambda s: s.mode not in (ScheduleMode.OFF, ScheduleMode.AUTO) or not s.bands,
            ".bands",
            refusals=(
                Refusal(
                    "schedule-bands-while-off",
                    {"spec.speculation.schedule": {"mode": "Off", "bands": [{"tokens": 3}]}},
                ),
            ),
        ),
        Rule(
            "self.mode != 'Fixed' || (size(self.bands) > 0 && self.bands.all(b, has(b.tokens)))",
            "schedule mode Fixed needs bands, each with tokens",
            lambda s: (
                s.mode is not ScheduleMode.FIXED
                or bool(s.bands and all(b.tokens is not None for b in s.bands))
            ),
            ".bands",
            refusals=(
                Refusal(
                    "fixed-schedule-band-without-tokens",
                    {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"maxTokens": 3}]}},
                ),
            ),
        ),
        Rule(
            "self.mode != 'Fixed' || self.bands.exists(b, has(b.tokens) && b.tokens > 0)",
            "a Fixed schedule needs a band with tokens above 0 (for no drafting at all, "
            "draft.method is none)",
            lambda s: s.mode is not ScheduleMode.FIXED or any(b.tokens for b in s.bands),
            ".bands",
            refusals=(
                Refusal(
                    "fixed-schedule-drafting-nowhere",
                    {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"tokens": 0}]}},
                ),
            ),
        ),
        Rule(
            "self.mode == 'Fixed' || self.bands.all(b, !has(b.tokens))",
            "schedule band tokens are for mode Fixed (Learned takes minTokens and maxTokens)",
            lambda s: s.mode is ScheduleMode.FIXED or all(b.tokens is None for b in s.bands),
            ".bands",
            refusals=(
                Refusal(
                    "learned-schedule-band-with-tokens",
                    {"spec.speculation.schedule": {"mode": "Learned", "bands": [{"tokens": 3}]}},
                ),
            ),
        ),
        Rule(
            "size(self.bands) == 0 || (!has(self.bands[size(self.bands) - 1].upToBatch) && "
            "self.bands.filter(b, !has(b.upToBatch)).size() == 1)",
            "schedule bands: every band but the last needs upToBatch, and the last has none "
            "(it takes every larger batch size)",
            lambda s: (
                not s.bands
                or (
                    s.bands[-1].up_to_batch is None
                    and sum(b.up_to_batch is None for b in s.bands) == 1
                )
            ),
            ".bands",
            refusals=(
                Refusal(
                    "schedule-last-band-with-edge",
                    {
                        "spec.speculation.schedule": {
                            "mode": "Fixed",
                            "bands": [{"upToBatch": 4, "tokens": 3}],
                        }
                    },
                ),
            ),
        ),
        Rule(
            "self.bands.filter(b, has(b.upToBatch)).map(b, b.upToBatch).isSorted() "
            "&& self.bands.filter(b, has(b.upToBatch)).all(b, self.bands.filter(c, "
            "has(c.upToBatch) && c.upToBatch == b.upToBatch).size() == 1)",
            "schedule bands' upToBatch must increase from band to band",
            lambda s: _edges(s) == sorted(set(_edges(s))),
            ".bands",
            found=lambda s: f"{_edges(s)}",
            refusals=(
                Refusal(
                    "schedule-edges-decreasing",
                    {
                        "spec.speculation.schedule": {
                            "mode": "Fixed",
                            "bands": [
                                {"upToBatch": 8, "tokens": 3},
                                {"upToBatch": 4, "tokens": 2},
                                {"tokens": 2},
                            ],
                        }
                    },
                ),
            ),
        ),
        Rule(
            f"{_FIXED_KS}.all(x, {_FIXED_KS}.all(y, {_FIXED_KS}.all(z, "
            "x == y || y == z || x == z)))",
            f"a schedule may use at most {MAX_SCHEDULE_KS} K values above 0: vLLM counts drafts "
            "and draft tokens, not drafts per K, so acceptance per position could not be "
            "measured with more",
            lambda s: len(_ks(s)) <= MAX_SCHEDULE_KS,
            ".bands",
            found=lambda s: f"{_ks(s)}",
            refusals=(
                Refusal(
                    "schedule-three-ks",
                    {
                        "spec.speculation.schedule": {
                            "mode": "Fixed",
                            "bands": [
                                {"upToBatch": 1, "tokens": 5},
                                {"upToBatch": 8, "tokens": 3},
                                {"tokens": 1},
                            ],
                        }
                    },
                ),
            ),
        ),
    )

    mode: Annotated[ScheduleMode, Lax] = Field(
        default=ScheduleMode.AUTO,
        description="Auto: one K, and K per band of batch sizes (as Learned) while the load "
        "the pods saw spans bands whose best K differs; Off: one K at every load; Learned: "
        "the tuner learns K per band of batch sizes from the measured step cost and "
        "acceptance; Fixed: the bands as written.",
    )
    bands: list[ScheduleBand] = Field(
        default_factory=list,
        max_length=MAX_SCHEDULE_BANDS,
        description="Learned: band edges and per-band bounds (optional: without them the "
        "tuner places one edge where the load it sees splits); Fixed: K per band.",
    )


def _edges(schedule: Schedule) -> list[int]:
    return [b.up_to_batch for b in schedule.bands if b.up_to_batch is not None]


def _ks(schedule: Schedule) -> list[int]:
    return sorted({b.tokens for b in schedule.bands if b.tokens})


class Speculation(SpecModel):
    """K, the number of speculative tokens, and the range the tuner may move it in."""

    rules: ClassVar[tuple[Rule[Speculation], ...]] = (
        Rule(
            "self.minTokens <= self.maxTokens",
            "speculation.minTokens must not exceed speculation.maxTokens",
            lambda s: s.min_tokens <= s.max_tokens,
            ".minTokens",
            found=lambda s: f"{s.min_tokens} > {s.max_tokens}",
            refusals=(
                Refusal(
                    "min-tokens-above-max",
                    {"spec.speculation.minTokens": 6, "spec.speculation.maxTokens": 4},
                ),
            ),
        ),
        # Only an ordered range can hold tokens: otherwise the rule above says why.
        Rule(
            "self.minTokens > self.maxTokens || "
            "(self.minTokens <= self.tokens && self.tokens <= self.maxTokens)",
            "speculation.tokens must be between speculation.minTokens and speculation.maxTokens",
            lambda s: s.min_tokens > s.max_tokens or s.min_tokens <= s.tokens <= s.max_tokens,
            ".tokens",
            found=lambda s: f"{s.tokens}, not in {s.min_tokens}..{s.max_tokens}",
            refusals=(
                Refusal("tokens-above-max", {"spec.speculation.tokens": 12}),
                Refusal("tokens-below-min", {"spec.speculation.minTokens": 4}),
            ),
        ),
        Rule(
            "self.schedule.bands.all(b, (!has(b.tokens) || b.tokens <= self.maxTokens) && "
            "(!has(b.maxTokens) || b.maxTokens <= self.maxTokens))",
            "schedule band tokens and maxTokens must not exceed speculation.maxTokens",
            lambda s: all(k <= s.max_tokens for k in _band_ks(s)),
            ".schedule",
            found=lambda s: f"{max(_band_ks(s))} > {s.max_tokens}",
            refusals=(
                Refusal(
                    "schedule-band-above-max-tokens",
                    {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"tokens": 9}]}},
                ),
            ),
        ),
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
    schedule: Schedule = Field(
        default_factory=Schedule,
        description="K by batch size: off, learned from measurements, or fixed.",
    )
    switching: Annotated[KSwitching, Lax] = Field(
        default=KSwitching.AUTO,
        description="How the stable pods take a new K or schedule. Restart: a new pod "
        "template (the pods restart). Hot: the running engine takes it between two steps "
        "(specfleet-runtime's --hot-schedule; the pods start with maxTokens as their "
        "ceiling); where a pod cannot, K changes restart it again, and "
        "status.speculation.hotSchedule.fallback says why. Auto: Hot where the engine "
        "schedules the method's K, drafts only the K of each step (not a parallel drafter: "
        "peagle, dflash, dspark) and keeps a per-batch schedule (runtime.parallelism.data "
        "1), else Restart.",
    )


def _band_ks(speculation: Speculation) -> list[int]:
    """Each band's fixed K and learned maximum."""
    bands = speculation.schedule.bands
    return [k for b in bands for k in (b.tokens, b.max_tokens) if k is not None]


class Tuning(SpecModel):
    """How K is tuned from the pods' acceptance metrics."""

    enabled: bool = Field(default=True, description="Tune K; when false K stays as given.")
    strategy: Annotated[TuningStrategy, Lax] = Field(
        default=TuningStrategy.CANARY,
        description="Canary: try a candidate K on one extra pod; InPlace: roll all pods.",
    )
    interval: Annotated[str, Duration("1h", "Length of one metrics window.")] = "60s"
    min_draft_tokens: int = Field(
        default=20000,
        ge=1,
        description="Draft tokens a window needs to be conclusive; a window with fewer "
        "grows over the next intervals until it has them or reaches maxWindowAge.",
    )
    max_window_age: Annotated[
        str, Duration("24h", "Longest a window may grow to collect minDraftTokens.")
    ] = "20m"
    cooldown: Annotated[str, Duration("720h", "Quiet time after any change of K.")] = "5m"
    canary_windows: int = Field(
        default=3, ge=1, description="Conclusive windows compared before promoting a canary."
    )
    min_improvement: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Relative goodput gain a candidate must show (hysteresis); with "
        "switching Hot, only until an interleaved trial has measured how much its pairs "
        "spread (then: what such a trial can prove).",
    )
    acceptance_margin: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Margin above the floor a candidate's predicted acceptance must clear.",
    )
    canary_pending_timeout: Annotated[
        str, Duration("24h", "A canary pod Pending this long switches to InPlace.")
    ] = "5m"
    max_inconclusive_windows: int = Field(
        default=5, ge=1, description="Inconclusive windows in a row before MetricsAvailable=False."
    )


# A floor of 1 would disable speculation even at 100% acceptance.
_FLOOR: Rule[float] = Rule(
    "self > 0.0 && self < 1.0",
    "rollback.minAcceptance must be a fraction between 0 and 1, both excluded (0.75 is 75%)",
    lambda floor: 0 < floor < 1,
    found=lambda floor: (
        f"{floor:g}" + (f": as a fraction, {floor / 100:g}" if 1 < floor < 100 else "")
    ),
    refusals=(
        Refusal("floor-zero", {"spec.rollback.minAcceptance": 0}),
        Refusal("floor-above-one", {"spec.rollback.minAcceptance": 1.5}),
        Refusal("floor-one", {"spec.rollback.minAcceptance": 1.0}),
        Refusal("floor-a-percentage", {"spec.rollback.minAcceptance": 75}),
    ),
)


class Rollback(SpecModel):
    """When to give up on the K in effect."""

    min_acceptance: Annotated[float, _FLOOR] = Field(
        default=0.75,
        description="The acceptance floor: the lower confidence bound of `metric` must stay "
        "above. A fraction between 0 and 1, both excluded.",
    )
    metric: Annotated[RollbackMetric, Lax] = Field(
        default=RollbackMetric.FIRST_POSITION_ACCEPTANCE,
        description=(
            "FirstPositionAcceptance: block acceptance, the share of drafts whose first "
            "token is accepted (it does not fall with K); "
            "DraftAcceptanceRate: accepted / drafted tokens (vLLM's definition; it falls "
            "as K grows, so the floor also caps K); "
            "RelativeToBaseline: the window's rate over the rate measured at promotion."
        ),
    )
    below_floor: Annotated[BelowFloorPolicy, Lax] = Field(
        default=BelowFloorPolicy.KEEP_FASTEST,
        description="When no K clears the floor: KeepFastest keeps the fastest K while "
        "speculation still measures faster than plain decoding (condition "
        "AcceptanceBelowFloor and a Warning Event say so); Disable switches speculation "
        "off regardless.",
    )
    failure_limit: int = Field(
        default=2, ge=1, description="Conclusive failing windows in a row before rolling back."
    )
    reprobe_after: Annotated[
        str,
        Duration(
            "720h",
            "Back-off before speculation is tried again once disabled; each re-probe "
            "that is disabled again doubles it, up to 16 times.",
        ),
    ] = "30m"


class Rollout(SpecModel):
    """How a changed config (draft.method, draft.model, runtime.image or runtime.args)
    reaches the stable pods (docs/rollouts.md)."""

    strategy: Annotated[RolloutStrategy, Lax] = Field(
        default=RolloutStrategy.CANARY,
        description="Canary: the new config on one extra pod, compared with the stable pods; "
        "InPlace: the stable pods switch and are compared with their windows before; "
        "Immediate: the stable pods switch with no trial.",
    )
    windows: int = Field(
        default=3,
        ge=1,
        description="Conclusive windows of the new config compared before it is promoted "
        "(up to three times as many while its gain is promising but not proven).",
    )
    min_gain: float = Field(
        default=0.0,
        ge=-0.5,
        le=1,
        description="Lower confidence bound of the new config's goodput gain it must show; "
        "negative lets a slightly slower config through (-0.02: at most 2% slower).",
    )
    timeout: Annotated[
        str, Duration("720h", "A trial not decided by then is rejected; the stable pods stay.")
    ] = "2h"


# The name of a Secret, a ServiceAccount, a PriorityClass...: a DNS-1123 subdomain, as
# the API server checks it, said in words offline.
ObjectName = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(
        f"^{_DNS_1123_SUBDOMAIN}$",
        "an object's name: a DNS-1123 subdomain (lower case letters, digits, '-' and '.')",
    ),
]


# A key of a ConfigMap's or Secret's data, as the API server's IsConfigMapKey.
DataKey = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(
        "^[-._a-zA-Z0-9]+$", "a ConfigMap's or Secret's key: letters, digits, '-', '_' and '.'"
    ),
]


class SecretKeyRef(SpecModel):
    name: ObjectName = Field(description="Secret name in the model's namespace.")
    key: DataKey = Field(default="token", description="Key holding the token.")


# The environment render gives every runtime container, each with why a user's entry
# of that name may not replace it (an entry later in the list would win).
RENDERED_ENV = {
    ENV_POD_IP: "the pod's IP, from whose family the runtime picks where vLLM listens (every "
    "address of the pod)",
    "HF_TOKEN": "set from runtime.hfTokenSecretRef: name the Secret there",
    "HF_HOME": "the model cache (runtime.modelCache)",
}


class EnvVar(SpecModel):
    """An environment variable for the runtime container (value or valueFrom)."""

    rules: ClassVar[tuple[Rule[EnvVar], ...]] = (
        Rule(
            f"!(self.name in {_cel_list(list(RENDERED_ENV))})",
            "runtime.env may not set a variable specfleet renders: "
            + "; ".join(f"{name} is {why}" for name, why in RENDERED_ENV.items()),
            lambda var: var.name not in RENDERED_ENV,
            ".name",
            found=lambda var: var.name,
            refusals=(
                Refusal("env-pod-ip", {"spec.runtime.env": [{"name": "POD_IP", "value": "1"}]}),
                Refusal(
                    "env-hf-token",
                    {
                        "spec.runtime.env": [
                            {"name": "A", "value": "1"},
                            {"name": "HF_TOKEN", "value": "hf_x"},
                        ]
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.valueFrom) || !has(self.value) || self.value == ''",
            "runtime.env: a variable takes value or valueFrom, not both (the API server "
            "refuses the pods)",
            lambda var: var.value_from is None or not var.value,
            ".valueFrom",
            found=lambda var: var.name,
            refusals=(
                Refusal(
                    "env-value-and-value-from",
                    {
                        "spec.runtime.env": [
                            {
                                "name": "A",
                                "value": "1",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=256),
        Matching(ENV_NAME_PATTERN, "printable ASCII characters other than '='"),
    ]
    value: str | None = None
    value_from: EnvVarSource | None = None


@dataclass(frozen=True)
class UniqueNames(CheckedAnnotation):
    """A list of named items keyed by name, as Kubernetes keys it (server-side apply
    refuses two items of one name): a map-list in the CRD, checked offline in words."""

    what: str

    def check(self, items: list[Any]) -> list[Any]:
        names = [item.name for item in items]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise ValueError(
                f"must not name a {self.what} twice (found {twice!r} twice): Kubernetes keys "
                "them by name and refuses the pods; keep one"
            )
        return items

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["x-kubernetes-list-type"] = "map"
        json_schema["x-kubernetes-list-map-keys"] = ["name"]
        return json_schema


def _toleration_refusal(id: str, toleration: dict[str, Any]) -> Refusal:
    return Refusal(id, {"spec.runtime.tolerations": [toleration]})


class Toleration(SpecModel):
    """A core/v1 Toleration, checked as the API server checks the pods'."""

    rules: ClassVar[tuple[Rule[Toleration], ...]] = (
        Rule(
            "has(self.key) && self.key != '' || has(self.operator) && self.operator == 'Exists'",
            "runtime.tolerations: a toleration without a key (it matches every taint) needs "
            "operator Exists",
            lambda t: bool(t.key) or t.operator == "Exists",
            ".operator",
            refusals=(_toleration_refusal("toleration-no-key-equal", {"value": "x"}),),
        ),
        Rule(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
            "self.value == ''",
            "runtime.tolerations: a toleration with operator Exists takes no value",
            lambda t: t.operator != "Exists" or not t.value,
            ".value",
            refusals=(
                _toleration_refusal(
                    "toleration-exists-with-value", {"key": "a", "operator": "Exists", "value": "x"}
                ),
            ),
        ),
        Rule(
            "!has(self.tolerationSeconds) || has(self.effect) && self.effect == 'NoExecute'",
            "runtime.tolerations: tolerationSeconds needs effect NoExecute",
            lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            ".tolerationSeconds",
            refusals=(
                _toleration_refusal(
                    "toleration-seconds-without-no-execute",
                    {"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
                ),
            ),
        ),
    )

    key: (
        Annotated[
            str, Matching(f"^$|{LABEL_KEY_PATTERN}", f"empty or a label key: {_LABEL_KEY_WORDS}")
        ]
        | None
    ) = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


# Resource names as the API server takes them: cpu, memory, ephemeral-storage,
# hugepages-<size>, or an extended resource (a domain-prefixed name: nvidia.com/gpu).
EXTENDED_RESOURCE = "[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
RESOURCE_NAME = (
    f"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+([KMGTPE]i|[kMGTPE])?|{EXTENDED_RESOURCE})$"
)
RESOURCES_MAX = 16


def _request_above_limit(r: Resources) -> str | None:
    """The first request above its limit, in words; None: none is."""
    return next(
        (
            f"{name}: {request} > {r.limits[name]}"
            for name, request in r.requests.items()
            if name in r.limits and quantity_value(request) > quantity_value(r.limits[name])
        ),
        None,
    )


def _unknown_resource(r: Resources) -> str | None:
    names = [*r.requests, *r.limits]
    return next((name for name in names if not re.fullmatch(RESOURCE_NAME, name)), None)


class Resources(SpecModel):
    rules: ClassVar[tuple[Rule[Resources], ...]] = (
        Rule(
            f"self.requests.all(k, k.matches('{RESOURCE_NAME}')) && "
            f"self.limits.all(k, k.matches('{RESOURCE_NAME}'))",
            "runtime.resources names cpu, memory, ephemeral-storage, hugepages-<size> or an "
            "extended resource with its domain (example.com/name): the API server refuses "
            "other names",
            lambda r: _unknown_resource(r) is None,
            found=lambda r: repr(_unknown_resource(r)),
            refusals=(
                Refusal(
                    "resources-misspelt-name",
                    {"spec.runtime.resources": {"requests": {"memroy": "1Gi"}}},
                ),
            ),
        ),
        Rule(
            "self.requests.all(k, !(k in self.limits) || "
            "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
            "runtime.resources requests may not exceed their limits: the API server refuses "
            "the pods",
            lambda r: _request_above_limit(r) is None,
            found=lambda r: _request_above_limit(r) or "",
            refusals=(
                Refusal(
                    "resources-request-above-limit",
                    {
                        "spec.runtime.resources": {
                            "requests": {"memory": "2Gi"},
                            "limits": {"memory": "1Gi"},
                        }
                    },
                ),
            ),
        ),
    )

    requests: Annotated[dict[str, Quantity], Field(max_length=RESOURCES_MAX)] = Field(
        default_factory=dict
    )
    limits: Annotated[dict[str, Quantity], Field(max_length=RESOURCES_MAX)] = Field(
        default_factory=dict
    )


_NODE_SELECTOR_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.nodeSelector keys must be label keys: {_LABEL_KEY_WORDS}",
    lambda selector: all(_is_label_key(key) for key in selector),
    found=lambda selector: repr(next(key for key in selector if not _is_label_key(key))),
    refusals=(
        Refusal("node-selector-key-with-space", {"spec.runtime.nodeSelector": {"gpu pool": "a"}}),
        Refusal(
            "node-selector-key-bad-prefix",
            {"spec.runtime.nodeSelector": {"Example.com/pool": "a"}},
        ),
    ),
)


# ------------------------------------------------------------------ pod settings
# What platform teams set on inference pods (runtime.pod), passed to the pod template
# as Kubernetes defines it; render_pod.py merges it with what the operator owns.

# Labels and annotations the operator puts on the pods: spec.runtime.pod may not set
# them (the selectors, the scrape relabelling and rollouts read them).
OPERATOR_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
)
OPERATOR_PREFIX = "specfleet.io/"
# Volumes and mount paths the operator renders (render_pod.py): shared memory, the
# writable temp directory, the model cache and the injected runtime.
OPERATOR_VOLUMES = ("dshm", "tmp", "model-cache", "specfleet-runtime")
MODEL_CACHE_PATH = "/var/cache/specfleet"
INJECTED_RUNTIME_PATH = "/opt/specfleet-runtime"
OPERATOR_MOUNT_PATHS = ("/dev/shm", "/tmp", MODEL_CACHE_PATH, INJECTED_RUNTIME_PATH)
DEFAULT_RUNTIME_IMAGE = "ghcr.io/specfleet/runtime:0.1.0"
# vLLM's own images (vllm/vllm-openai and its variants), which lack specfleet-runtime.
VLLM_IMAGE_PATTERN = "^(docker[.]io/)?vllm/vllm-openai(-[a-z0-9]+)*([:@].*)?$"
# The extended resource runtime.gpus counts when runtime.accelerator is unset.
DEFAULT_ACCELERATOR = "nvidia.com/gpu"
AMD_ACCELERATOR = "amd.com/gpu"
# vLLM's own image for AMD GPUs (ROCm); DEFAULT_RUNTIME_IMAGE is built on its CUDA one.
ROCM_VLLM_IMAGE = "vllm/vllm-openai-rocm:v0.33.0"
# The variable render sets to load the injected runtime (runtime.injectRuntime).
INJECTED_ENV = "PYTHONPATH"
POD_LIST_MAX = 32
# runtime.env's most variables: the API server prices each CEL rule at the most items a
# list may hold, and an unbounded list prices a valueFrom's one-source rule 10x over.
ENV_MAX = 128
DNS_1123_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
PERCENT_PATTERN = r"^[0-9]+%$"


def _operator_key(key: str) -> bool:
    return key.startswith(OPERATOR_PREFIX) or key in OPERATOR_LABELS


def _percent_or_count(value: str | int) -> str | int:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if not re.fullmatch(PERCENT_PATTERN, value):
        raise ValueError("must be a count (2) or a percentage ('25%')")
    return value


CountOrPercent = Annotated[
    str | int,
    AfterValidator(_percent_or_count),
    Field(json_schema_extra={"pattern": PERCENT_PATTERN, "minimum": 0}),
]


class ProbeTimings(SpecModel):
    """Timings of one of the runtime's /health probes (the operator owns what it probes)."""

    initial_delay_seconds: int | None = Field(default=None, ge=0, le=86400)
    period_seconds: int | None = Field(default=None, ge=1, le=3600)
    timeout_seconds: int | None = Field(default=None, ge=1, le=3600)
    failure_threshold: int | None = Field(default=None, ge=1, le=100000)


class Probes(SpecModel):
    """Probe timings; unset values keep specfleet's (startup: every 5s for 30 minutes)."""

    startup: ProbeTimings | None = Field(
        default=None, description="A large model's load takes minutes: raise failureThreshold."
    )
    readiness: ProbeTimings | None = None
    liveness: ProbeTimings | None = None


class LocalObjectReference(SpecModel):
    name: NonEmptyString


class SeccompProfile(SpecModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    localhost_profile: str | None = None


class AppArmorProfile(SpecModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    localhost_profile: str | None = None


class SELinuxOptions(SpecModel):
    user: str | None = None
    role: str | None = None
    type: str | None = None
    level: str | None = None


class WindowsSecurityContextOptions(SpecModel):
    rules: ClassVar[tuple[Rule[WindowsSecurityContextOptions], ...]] = (
        Rule(
            "!has(self.hostProcess) || !self.hostProcess",
            "runtime.pod security contexts may not set windowsOptions.hostProcess: a host "
            "process is the node's; leave it unset",
            lambda w: not w.host_process,
            ".hostProcess",
            refusals=(
                Refusal(
                    "pod-host-process",
                    {"spec.runtime.pod.securityContext": {"windowsOptions": {"hostProcess": True}}},
                ),
            ),
        ),
    )

    gmsa_credential_spec_name: str | None = None
    gmsa_credential_spec: str | None = None
    run_as_user_name: str | None = None
    host_process: bool | None = None


class Sysctl(SpecModel):
    name: NonEmptyString
    value: str


class Capabilities(SpecModel):
    rules: ClassVar[tuple[Rule[Capabilities], ...]] = (
        Rule(
            "!has(self.add) || self.add.all(c, c == 'NET_BIND_SERVICE')",
            "runtime.pod.containerSecurityContext.capabilities.add may add only "
            "NET_BIND_SERVICE (as Pod Security 'restricted'): remove the others",
            lambda c: all(name == "NET_BIND_SERVICE" for name in c.add or []),
            ".add",
            found=lambda c: next(n for n in c.add or [] if n != "NET_BIND_SERVICE"),
            refusals=(
                Refusal(
                    "pod-capability-sys-admin",
                    {
                        "spec.runtime.pod.containerSecurityContext": {
                            "capabilities": {"add": ["SYS_ADMIN"]}
                        }
                    },
                ),
            ),
        ),
    )

    add: list[str] | None = None
    drop: list[str] | None = None


class PodSecurityContext(SpecModel):
    """core/v1 PodSecurityContext. Given, it replaces specfleet's restricted default
    field by field (runAsNonRoot, runAsUser/Group 1000, fsGroup 1000, seccomp
    RuntimeDefault): a field set here wins, the others keep the default."""

    run_as_user: int | None = Field(default=None, ge=0)
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    fs_group: int | None = Field(default=None, ge=0)
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    supplemental_groups: list[int] | None = None
    supplemental_groups_policy: Literal["Merge", "Strict"] | None = None
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: SELinuxOptions | None = None
    se_linux_change_policy: str | None = None
    sysctls: list[Sysctl] | None = None
    windows_options: WindowsSecurityContextOptions | None = None


class SecurityContext(SpecModel):
    """core/v1 SecurityContext of the runtime container. Given, it replaces specfleet's
    restricted default (no privilege escalation, all capabilities dropped) field by field."""

    rules: ClassVar[tuple[Rule[SecurityContext], ...]] = (
        Rule(
            "!has(self.privileged) || !self.privileged",
            "runtime.pod.containerSecurityContext.privileged may not be true: a privileged "
            "container is root on the node; leave it unset (GPUs need no privilege)",
            lambda c: not c.privileged,
            ".privileged",
            refusals=(
                Refusal(
                    "pod-privileged",
                    {"spec.runtime.pod.containerSecurityContext": {"privileged": True}},
                ),
            ),
        ),
    )

    run_as_user: int | None = Field(default=None, ge=0)
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    allow_privilege_escalation: bool | None = None
    privileged: bool | None = None
    read_only_root_filesystem: bool | None = None
    capabilities: Capabilities | None = None
    proc_mount: Literal["Default", "Unmasked"] | None = None
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: SELinuxOptions | None = None
    windows_options: WindowsSecurityContextOptions | None = None


class LabelSelectorRequirement(SpecModel):
    rules: ClassVar[tuple[Rule[LabelSelectorRequirement], ...]] = (
        Rule(
            "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
            "!has(self.values) || size(self.values) == 0",
            "runtime.pod: a label selector requirement takes values with operator In or "
            "NotIn, none with Exists or DoesNotExist (the API server refuses the pods)",
            lambda r: (len(r.values or []) > 0) == (r.operator in ("In", "NotIn")),
            ".values",
            found=lambda r: f"operator {r.operator}, {len(r.values or [])} values",
            refusals=(
                Refusal(
                    "pod-anti-affinity-exists-with-values",
                    {
                        "spec.runtime.pod.affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "topologyKey": "kubernetes.io/hostname",
                                        "labelSelector": {
                                            "matchExpressions": [
                                                {
                                                    "key": "app",
                                                    "operator": "Exists",
                                                    "values": ["a"],
                                                }
                                            ]
                                        },
                                    }
                                ]
                            }
                        }
                    },
                ),
            ),
        ),
    )

    key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] | None = None


_MATCH_LABELS_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod: a label selector's matchLabels keys must be label keys: {_LABEL_KEY_WORDS}",
    lambda labels: all(_is_label_key(key) for key in labels),
    found=lambda labels: repr(next(key for key in labels if not _is_label_key(key))),
    refusals=(
        Refusal(
            "spread-match-labels-key-with-space",
            {
                "spec.runtime.pod.topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"my app": "a"}},
                    }
                ]
            },
        ),
    ),
)


class LabelSelector(SpecModel):
    match_labels: (
        Annotated[dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), _MATCH_LABELS_KEYS]
        | None
    ) = None
    match_expressions: (
        Annotated[list[LabelSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None


class TopologySpreadConstraint(SpecModel):
    """core/v1 TopologySpreadConstraint. Without labelSelector, the model's pods (both
    tracks) are the ones spread."""

    rules: ClassVar[tuple[Rule[TopologySpreadConstraint], ...]] = (
        Rule(
            "!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
            "runtime.pod.topologySpreadConstraints: minDomains needs whenUnsatisfiable "
            "DoNotSchedule (the API server refuses the pods)",
            lambda c: c.min_domains is None or c.when_unsatisfiable == "DoNotSchedule",
            ".minDomains",
            refusals=(
                Refusal(
                    "spread-min-domains-schedule-anyway",
                    {
                        "spec.runtime.pod.topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "minDomains": 2,
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    max_skew: int = Field(ge=1)
    topology_key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    match_label_keys: list[str] | None = None
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None


def _spread_pair(c: TopologySpreadConstraint) -> tuple[str, str]:
    return c.topology_key, c.when_unsatisfiable


_SPREAD_PAIRS: Rule[list[TopologySpreadConstraint]] = Rule(
    "self.all(c, self.exists_one(d, d.topologyKey == c.topologyKey && "
    "d.whenUnsatisfiable == c.whenUnsatisfiable))",
    "runtime.pod.topologySpreadConstraints may not repeat a topologyKey with the same "
    "whenUnsatisfiable (the API server refuses the pods)",
    lambda cs: len({_spread_pair(c) for c in cs}) == len(cs),
    found=lambda cs: next(
        c.topology_key for c in cs if [_spread_pair(d) for d in cs].count(_spread_pair(c)) > 1
    ),
    refusals=(
        Refusal(
            "spread-pair-twice",
            {
                "spec.runtime.pod.topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                ]
            },
        ),
    ),
)


# A path as the container runtime resolves it: `/dev/shm/` is `/dev/shm`, which the
# operator already mounts, but the API server compares mount paths as strings.
_CLEAN_PATH = "^/?([^/]+/)*[^/]+$"
_DOT_SEGMENT = "(^|/)[.][.]?(/|$)"


def _is_clean_path(path: str) -> bool:
    return bool(re.fullmatch(_CLEAN_PATH, path)) and not re.search(_DOT_SEGMENT, path)


_MOUNT_PATH: Rule[str] = Rule(
    f"self.matches('{_CLEAN_PATH}') && !self.matches('{_DOT_SEGMENT}')",
    "runtime.pod.volumeMounts mountPath must be written clean: no trailing '/', no '//', "
    "no '.' or '..' part (the container sees /dev/shm/ as /dev/shm)",
    _is_clean_path,
    found=repr,
    refusals=(
        Refusal(
            "pod-mount-path-trailing-slash",
            {
                "spec.runtime.pod.volumes": [{"name": "shm", "emptyDir": {}}],
                "spec.runtime.pod.volumeMounts": [{"name": "shm", "mountPath": "/dev/shm/"}],
            },
        ),
    ),
)


# ------------------------------------------------- volume sources and affinity
# The core/v1 types a model's pods take as written, typed with exactly the fields of
# Kubernetes' own schema for them (tests/test_crd.py compares them with 1.37's) and
# checked as the API server checks a pod's (pkg/apis/core/validation), so that a
# mistake in them is refused by validate and at admission, not when the Deployment's
# pods are created. Lists that a rule runs over are bounded, to bound the rule's cost.

FileMode = Annotated[int, Field(ge=0, le=0o777, description="Mode bits, 0 to 0777.")]
UserId = Annotated[int, Field(ge=0, le=2**31 - 1)]
# A path under the volume's root, as ValidateLocalNonReservedPath takes it: not
# absolute, no '..' part, not starting with '..' (RE2 has no lookahead: spelled out).
_PATH_PART = "([^/.][^/]*|[.]|[.][^/.][^/]*)"
RELATIVE_PATH_PATTERN = f"^{_PATH_PART}(/({_PATH_PART}|[.][.][^/]+)?)*$"
RelativePath = Annotated[
    str,
    StringConstraints(max_length=4096),
    Matching(RELATIVE_PATH_PATTERN, "a relative path with no '..' part"),
]
AbsolutePath = Annotated[
    str,
    StringConstraints(max_length=4096),
    Matching(r"^/.*$", "an absolute path (starting with '/')"),
]
# A StorageClass or VolumeAttributesClass name; empty asks for no class.
ClassName = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(f"^({_DNS_1123_SUBDOMAIN})?$", "a class's name: a DNS-1123 subdomain, or empty"),
]


class KeyToPath(SpecModel):
    key: NonEmptyString
    path: RelativePath
    mode: FileMode | None = None
    user: UserId | None = None


class EmptyDirVolumeSource(SpecModel):
    medium: str | None = None
    size_limit: Quantity | None = None
    mode: int | None = Field(default=None, ge=0, le=0o1777)


class ConfigMapVolumeSource(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None
    optional: bool | None = None


class SecretVolumeSource(SpecModel):
    secret_name: NonEmptyString
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None
    optional: bool | None = None


class PersistentVolumeClaimVolumeSource(SpecModel):
    claim_name: NonEmptyString
    read_only: bool | None = None


class NFSVolumeSource(SpecModel):
    server: NonEmptyString
    path: AbsolutePath
    read_only: bool | None = None


class ImageVolumeSource(SpecModel):
    """An OCI image or artifact mounted read-only (weights shipped as an image)."""

    reference: NonEmptyString
    pull_policy: Literal["Always", "Never", "IfNotPresent"] | None = None


class SecretReference(SpecModel):
    name: ObjectName


class CSIVolumeSource(SpecModel):
    driver: Annotated[
        str,
        StringConstraints(max_length=63),
        Matching(
            f"^{_DNS_1123_SUBDOMAIN.replace('a-z', 'a-zA-Z')}$",
            "a CSI driver's name: a DNS-1123 subdomain (letters, digits, '-' and '.')",
        ),
    ]
    fs_type: str | None = None
    read_only: bool | None = None
    volume_attributes: dict[str, str] | None = None
    node_publish_secret_ref: SecretReference | None = None


class TypedLocalObjectReference(SpecModel):
    api_group: str | None = None
    kind: NonEmptyString
    name: NonEmptyString


class TypedObjectReference(TypedLocalObjectReference):
    namespace: str | None = None


class VolumeResourceRequirements(SpecModel):
    rules: ClassVar[tuple[Rule[VolumeResourceRequirements], ...]] = (
        Rule(
            "has(self.requests) && 'storage' in self.requests && "
            "quantity(string(self.requests['storage'])).isGreaterThan(quantity('0'))",
            "an ephemeral volume's claim must request storage, more than 0 (the API server "
            "refuses the pods)",
            lambda r: quantity_value((r.requests or {}).get("storage", 0)) > 0,
            ".requests",
            refusals=(
                Refusal(
                    "ephemeral-volume-without-storage",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "scratch",
                                "ephemeral": {
                                    "volumeClaimTemplate": {
                                        "spec": {
                                            "accessModes": ["ReadWriteOnce"],
                                            "resources": {"requests": {"cpu": 1}},
                                        }
                                    }
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ClaimTemplateMeta(SpecModel):
    """What the API server lets an ephemeral volume's claim template set of metadata."""

    labels: dict[str, LabelValue] | None = None
    annotations: dict[str, str] | None = None


class PersistentVolumeClaimSpec(SpecModel):
    rules: ClassVar[tuple[Rule[PersistentVolumeClaimSpec], ...]] = (
        Rule(
            "self.accessModes.all(m, m == 'ReadWriteOncePod') || "
            "!self.accessModes.exists(m, m == 'ReadWriteOncePod')",
            "runtime.pod.volumes: an ephemeral volume's claim may not take ReadWriteOncePod "
            "with another access mode (the API server refuses the pods)",
            lambda c: (
                len(set(c.access_modes) | {"ReadWriteOncePod"}) == 1
                or "ReadWriteOncePod" not in c.access_modes
            ),
            ".accessModes",
            refusals=(
                Refusal(
                    "ephemeral-read-write-once-pod-and-more",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "scratch",
                                "ephemeral": {
                                    "volumeClaimTemplate": {
                                        "spec": {
                                            "accessModes": ["ReadWriteOncePod", "ReadWriteOnce"],
                                            "resources": {"requests": {"storage": "1Gi"}},
                                        }
                                    }
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    access_modes: Annotated[
        list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]],
        Field(min_length=1, max_length=4),
    ]
    resources: VolumeResourceRequirements
    selector: LabelSelector | None = None
    storage_class_name: ClassName | None = None
    volume_attributes_class_name: ClassName | None = None
    volume_mode: Literal["Block", "Filesystem"] | None = None
    volume_name: str | None = None
    data_source: TypedLocalObjectReference | None = None
    data_source_ref: TypedObjectReference | None = None


class PersistentVolumeClaimTemplate(SpecModel):
    metadata: ClaimTemplateMeta | None = None
    spec: PersistentVolumeClaimSpec


class EphemeralVolumeSource(SpecModel):
    """A PersistentVolumeClaim made for each pod and deleted with it."""

    volume_claim_template: PersistentVolumeClaimTemplate


class NodeSelectorRequirement(SpecModel):
    rules: ClassVar[tuple[Rule[NodeSelectorRequirement], ...]] = (
        Rule(
            "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
            "self.operator in ['Gt', 'Lt'] ? has(self.values) && size(self.values) == 1 : "
            "!has(self.values) || size(self.values) == 0",
            "runtime.pod.affinity: a node selector requirement takes values with operator In "
            "or NotIn, exactly one with Gt or Lt, none with Exists or DoesNotExist",
            lambda r: (
                len(r.values or []) >= 1
                if r.operator in ("In", "NotIn")
                else len(r.values or []) == (1 if r.operator in ("Gt", "Lt") else 0)
            ),
            ".values",
            found=lambda r: f"operator {r.operator}, {len(r.values or [])} values",
            refusals=(
                Refusal(
                    "node-affinity-in-without-values",
                    {
                        "spec.runtime.pod.affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {"matchExpressions": [{"key": "gpu", "operator": "In"}]}
                                    ]
                                }
                            }
                        }
                    },
                ),
            ),
        ),
    )

    key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None


class RequiredNodeSelectorRequirement(NodeSelectorRequirement):
    """In a required node affinity, values are label values (the API server lets a
    preferred one's through: it may match no node and still schedule)."""

    values: list[LabelValue] | None = None


class NodeFieldSelectorRequirement(SpecModel):
    """The one node field a selector may match: the node's name, with one value."""

    key: Literal["metadata.name"]
    operator: Literal["In", "NotIn"]
    values: Annotated[list[ObjectName], Field(min_length=1, max_length=1)]


class NodeSelectorTerm(SpecModel):
    match_expressions: (
        Annotated[list[NodeSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    match_fields: list[NodeFieldSelectorRequirement] | None = None


class RequiredNodeSelectorTerm(SpecModel):
    match_expressions: (
        Annotated[list[RequiredNodeSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    match_fields: list[NodeFieldSelectorRequirement] | None = None


class NodeSelector(SpecModel):
    node_selector_terms: Annotated[
        list[RequiredNodeSelectorTerm], Field(min_length=1, max_length=POD_LIST_MAX)
    ]


Weight = Annotated[int, Field(ge=1, le=100)]


class PreferredSchedulingTerm(SpecModel):
    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[PreferredSchedulingTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None


LabelKeyField = Annotated[
    str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
]


class PodAffinityTerm(SpecModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: (
        list[
            Annotated[
                str,
                StringConstraints(max_length=63),
                Matching(DNS_1123_LABEL, "a namespace's name (a DNS-1123 label)"),
            ]
        ]
        | None
    ) = None
    topology_key: LabelKeyField
    match_label_keys: list[LabelKeyField] | None = None
    mismatch_label_keys: list[LabelKeyField] | None = None


class WeightedPodAffinityTerm(SpecModel):
    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: (
        Annotated[list[PodAffinityTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[WeightedPodAffinityTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None


class Affinity(SpecModel):
    """core/v1 Affinity: node affinity, pod affinity and pod anti-affinity."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# Sources passed through as written, which the API server checks when the pods are
# created: the in-tree drivers Kubernetes keeps for compatibility (deprecated for CSI,
# some removed), and two kinds of a projected volume's sources (see docs/install.md).
PassedThrough = dict[str, Any] | None


def _untyped(alias: str | None = None) -> Any:
    return Field(
        default=None,
        alias=alias,
        description="Kept as written; the API server checks it with the pods.",
    )


# A pod field a downwardAPI volume may write: as the API server's
# validVolumeDownwardAPIFieldPathExpressions, or one label or annotation.
FIELD_PATH_PATTERN = (
    r"^metadata[.](name|namespace|uid|labels|annotations)$"
    rf"|^metadata[.](labels|annotations)\['{LABEL_KEY_PATTERN[1:-1]}'\]$"
)
RESOURCE_FIELD_PATTERN = (
    "^(limits|requests)[.](cpu|memory|ephemeral-storage)$|^(limits|requests)[.]hugepages-.+$"
)


class ObjectFieldSelector(SpecModel):
    api_version: Literal["v1"] | None = None
    field_path: Annotated[
        str,
        StringConstraints(max_length=1024),
        Matching(
            FIELD_PATH_PATTERN,
            "metadata.name, namespace, uid, labels or annotations, or one label or "
            "annotation (metadata.labels['key'])",
        ),
    ]


ResourceField = Annotated[
    str,
    StringConstraints(max_length=317),
    Matching(
        RESOURCE_FIELD_PATTERN,
        "limits. or requests. and cpu, memory, ephemeral-storage or hugepages-<size>",
    ),
]


class ResourceFieldSelector(SpecModel):
    container_name: NonEmptyString  # required in a volume (the container it reads)
    resource: ResourceField
    divisor: Quantity | None = None


# A pod field a variable may read: as the API server's
# validEnvDownwardAPIFieldPathExpressions, or one label or annotation.
ENV_FIELD_PATH_PATTERN = (
    r"^metadata[.](name|namespace|uid)$|^spec[.](nodeName|serviceAccountName)$"
    r"|^status[.](hostIP|hostIPs|podIP|podIPs)$"
    rf"|^metadata[.](labels|annotations)\['{LABEL_KEY_PATTERN[1:-1]}'\]$"
)


class EnvFieldSelector(SpecModel):
    api_version: Literal["v1"] | None = None
    field_path: Annotated[
        str,
        StringConstraints(max_length=1024),
        Matching(
            ENV_FIELD_PATH_PATTERN,
            "metadata.name, namespace or uid, spec.nodeName or serviceAccountName, "
            "status.hostIP(s) or podIP(s), or one label or annotation (metadata.labels['key'])",
        ),
    ]


class EnvResourceFieldSelector(SpecModel):
    container_name: NonEmptyString | None = None  # unset: the runtime container
    resource: ResourceField
    divisor: Quantity | None = None


class DataKeySelector(SpecModel):
    """A key of a ConfigMap or Secret in the model's namespace."""

    name: ObjectName
    key: DataKey
    optional: bool | None = None


ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")


class EnvVarSource(SpecModel):
    """A core/v1 EnvVarSource, typed and checked as the API server checks the pods' (a
    file's key, alpha in Kubernetes 1.34, is kept as written)."""

    rules: ClassVar[tuple[Rule[EnvVarSource], ...]] = (
        Rule(
            "[" + ", ".join(f"has(self.{s})" for s in ENV_SOURCES) + "].filter(s, s).size() == 1",
            "runtime.env: a valueFrom takes exactly one of "
            + ", ".join(ENV_SOURCES)
            + " (the API server refuses the pods)",
            lambda source: len(source.sources()) == 1,
            found=lambda source: ", ".join(source.sources()) or "none",
            refusals=(
                Refusal(
                    "env-value-from-empty", {"spec.runtime.env": [{"name": "A", "valueFrom": {}}]}
                ),
                Refusal(
                    "env-value-from-two-sources",
                    {
                        "spec.runtime.env": [
                            {
                                "name": "A",
                                "valueFrom": {
                                    "fieldRef": {"fieldPath": "metadata.name"},
                                    "secretKeyRef": {"name": "s", "key": "k"},
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    field_ref: EnvFieldSelector | None = None
    resource_field_ref: EnvResourceFieldSelector | None = None
    config_map_key_ref: DataKeySelector | None = None
    secret_key_ref: DataKeySelector | None = None
    file_key_ref: PassedThrough = _untyped()

    def sources(self) -> list[str]:
        """The sources set, as Kubernetes names them."""
        written = self.model_dump(by_alias=True, exclude_none=True)
        return [source for source in ENV_SOURCES if source in written]


class DownwardAPIVolumeFile(SpecModel):
    rules: ClassVar[tuple[Rule[DownwardAPIVolumeFile], ...]] = (
        Rule(
            "has(self.fieldRef) != has(self.resourceFieldRef)",
            "runtime.pod.volumes: a downwardAPI item takes fieldRef or resourceFieldRef, one "
            "of them (the API server refuses the pods)",
            lambda f: (f.field_ref is None) != (f.resource_field_ref is None),
            refusals=(
                Refusal(
                    "downward-api-item-without-field",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "downwardAPI": {"items": [{"path": "p"}]}}
                        ]
                    },
                ),
            ),
        ),
    )

    path: RelativePath
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: FileMode | None = None
    user: UserId | None = None


class DownwardAPIVolumeSource(SpecModel):
    items: list[DownwardAPIVolumeFile] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None


class ConfigMapProjection(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class SecretProjection(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class DownwardAPIProjection(SpecModel):
    items: list[DownwardAPIVolumeFile] | None = None


class ServiceAccountTokenProjection(SpecModel):
    audience: str | None = None
    expiration_seconds: int | None = Field(
        default=None, ge=600, le=2**32, description="At least 10 minutes; none: 1h."
    )
    path: RelativePath
    user: UserId | None = None


PROJECTIONS = (
    "configMap",
    "secret",
    "downwardAPI",
    "serviceAccountToken",
    "clusterTrustBundle",
    "podCertificate",
)


class VolumeProjection(SpecModel):
    """One source of a projected volume; clusterTrustBundle and podCertificate (certificate
    signers' names and key types) are kept as written."""

    rules: ClassVar[tuple[Rule[VolumeProjection], ...]] = (
        Rule(
            "[" + ", ".join(f"has(self.{p})" for p in PROJECTIONS) + "].filter(p, p).size() <= 1",
            "runtime.pod.volumes: each of a projected volume's sources takes one of "
            + _words(list(PROJECTIONS))
            + ", not two (the API server refuses the pods)",
            lambda p: len(p.model_dump(exclude_none=True)) <= 1,
            refusals=(
                Refusal(
                    "projected-source-two-kinds",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "a",
                                "projected": {
                                    "sources": [
                                        {"configMap": {"name": "c"}, "secret": {"name": "s"}}
                                    ]
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    downward_api: DownwardAPIProjection | None = Field(default=None, alias="downwardAPI")
    service_account_token: ServiceAccountTokenProjection | None = None
    cluster_trust_bundle: PassedThrough = _untyped()
    pod_certificate: PassedThrough = _untyped()


class ProjectedVolumeSource(SpecModel):
    sources: Annotated[list[VolumeProjection], Field(max_length=POD_LIST_MAX)] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None


# Every source of a core/v1 Volume, as Kubernetes 1.37 names them (tests/test_crd.py
# compares them with its schema); the CRD's rule counts them.
VOLUME_SOURCES = (
    "emptyDir",
    "configMap",
    "secret",
    "persistentVolumeClaim",
    "ephemeral",
    "csi",
    "image",
    "nfs",
    "hostPath",
    "downwardAPI",
    "projected",
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "iscsi",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)


class VolumeMount(SpecModel):
    """core/v1 VolumeMount on the runtime container."""

    name: NonEmptyString
    mount_path: Annotated[str, StringConstraints(min_length=1, max_length=4096), _MOUNT_PATH]
    read_only: bool | None = None
    sub_path: str | None = None
    sub_path_expr: str | None = None
    mount_propagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None
    recursive_read_only: Literal["Disabled", "IfPossible", "Enabled"] | None = None


class Volume(SpecModel):
    """A core/v1 Volume: its name and exactly one source, typed and checked as the API
    server checks the pods' (emptyDir, configMap, secret, persistentVolumeClaim,
    ephemeral, csi, image, nfs, downwardAPI, projected); the in-tree drivers are kept
    as written."""

    rules: ClassVar[tuple[Rule[Volume], ...]] = (
        Rule(
            "!has(self.hostPath)",
            "runtime.pod.volumes may not be hostPath: a pod holding the node's files holds "
            "the node; use a PersistentVolumeClaim (a local PersistentVolume for node disks)",
            lambda v: v.host_path is None,
            refusals=(
                Refusal(
                    "pod-volume-host-path",
                    {"spec.runtime.pod.volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
                ),
            ),
        ),
        Rule(
            "[" + ", ".join(f"has(self.{s})" for s in VOLUME_SOURCES) + "]"
            ".filter(s, s).size() == 1",
            "runtime.pod.volumes must each have exactly one volume source (emptyDir, "
            "persistentVolumeClaim, configMap, ...): the API server refuses two, and makes a "
            "volume with none an emptyDir (write emptyDir: {} if that is meant)",
            lambda v: len(v.sources()) == 1,
            found=lambda v: ", ".join(v.sources()) or "none",
            refusals=(
                Refusal("pod-volume-without-source", {"spec.runtime.pod.volumes": [{"name": "a"}]}),
                Refusal(
                    "pod-volume-two-sources",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "emptyDir": {}, "configMap": {"name": "c"}}
                        ]
                    },
                ),
            ),
        ),
    )

    name: Annotated[
        str,
        StringConstraints(max_length=63),
        Matching(DNS_1123_LABEL, "a DNS-1123 label (lower case letters, digits and '-')"),
    ]
    empty_dir: EmptyDirVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    csi: CSIVolumeSource | None = None
    image: ImageVolumeSource | None = None
    nfs: NFSVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = Field(default=None, alias="downwardAPI")
    projected: ProjectedVolumeSource | None = None
    host_path: dict[str, Any] | None = Field(
        default=None, description="Refused: a hostPath volume holds the node's files."
    )
    aws_elastic_block_store: PassedThrough = _untyped()
    azure_disk: PassedThrough = _untyped()
    azure_file: PassedThrough = _untyped()
    cephfs: PassedThrough = _untyped()
    cinder: PassedThrough = _untyped()
    fc: PassedThrough = _untyped()
    flex_volume: PassedThrough = _untyped()
    flocker: PassedThrough = _untyped()
    gce_persistent_disk: PassedThrough = _untyped()
    git_repo: PassedThrough = _untyped()
    glusterfs: PassedThrough = _untyped()
    iscsi: PassedThrough = _untyped()
    photon_persistent_disk: PassedThrough = _untyped()
    portworx_volume: PassedThrough = _untyped()
    quobyte: PassedThrough = _untyped()
    rbd: PassedThrough = _untyped()
    scale_io: PassedThrough = _untyped("scaleIO")
    storageos: PassedThrough = _untyped()
    vsphere_volume: PassedThrough = _untyped()

    def sources(self) -> list[str]:
        """The sources set, as Kubernetes names them."""
        written = self.model_dump(by_alias=True, exclude_none=True)
        return [source for source in VOLUME_SOURCES if source in written]


_POD_LABEL_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod.labels keys must be label keys: {_LABEL_KEY_WORDS}",
    lambda labels: all(_is_label_key(key) for key in labels),
    found=lambda labels: repr(next(key for key in labels if not _is_label_key(key))),
    refusals=(Refusal("pod-label-key-with-space", {"spec.runtime.pod.labels": {"a b": "c"}}),),
)

_POD_ANNOTATION_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.lowerAscii().matches('{LABEL_KEY_PATTERN}') && "
    f"k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod.annotations keys must be annotation keys: {_LABEL_KEY_WORDS}",
    lambda annotations: all(_is_label_key(key.lower()) for key in annotations),
    found=lambda annotations: repr(
        next(key for key in annotations if not _is_label_key(key.lower()))
    ),
    refusals=(
        Refusal("pod-annotation-key-with-space", {"spec.runtime.pod.annotations": {"a b": "c"}}),
    ),
)


class Scratch(SpecModel):
    """The size limits of the emptyDir volumes specfleet mounts for what vLLM writes."""

    shared_memory: Quantity | None = Field(
        default=None,
        description="/dev/shm (in memory: NCCL and vLLM's processes share tensors there); "
        "none: 2Gi per GPU, at least 2Gi.",
    )
    tmp: Quantity | None = Field(
        default=None,
        description="/tmp, HOME (vLLM's, torch's and triton's compile caches); none: "
        "10Gi, also the container's default ephemeral-storage request.",
    )


def _effective(pod: PodSettings, name: str, default: Any = None) -> Any:
    """A field of the container's security context, else of the pod's, else the default."""
    contexts = (pod.container_security_context, pod.security_context)
    return next(
        (getattr(c, name) for c in contexts if c is not None and getattr(c, name) is not None),
        default,
    )


class PodSettings(SpecModel):
    """What a platform team sets on the inference pods, passed to the pod template as
    Kubernetes defines it. The operator owns the container's command, args, port and
    GPU count, the model's labels and its own volumes; this block cannot set those."""

    rules: ClassVar[tuple[Rule[PodSettings], ...]] = (
        Rule(
            "self.labels.all(k, !k.startsWith('"
            + OPERATOR_PREFIX
            + f"') && !(k in {_cel_list(list(OPERATOR_LABELS))}))",
            f"runtime.pod.labels may not set the model's labels (keys under {OPERATOR_PREFIX}, "
            + ", ".join(OPERATOR_LABELS)
            + "): the operator selects and tells the pods apart by them",
            lambda p: not any(_operator_key(k) for k in p.labels),
            ".labels",
            found=lambda p: next(k for k in p.labels if _operator_key(k)),
            refusals=(
                Refusal(
                    "pod-label-track", {"spec.runtime.pod.labels": {"specfleet.io/track": "x"}}
                ),
                Refusal(
                    "pod-label-instance",
                    {"spec.runtime.pod.labels": {"app.kubernetes.io/instance": "x"}},
                ),
            ),
        ),
        Rule(
            f"self.annotations.all(k, !k.startsWith('{OPERATOR_PREFIX}'))",
            f"runtime.pod.annotations may not set keys under {OPERATOR_PREFIX}: the operator "
            "writes the runtime config hash and K there",
            lambda p: not any(k.startswith(OPERATOR_PREFIX) for k in p.annotations),
            ".annotations",
            found=lambda p: next(k for k in p.annotations if k.startswith(OPERATOR_PREFIX)),
            refusals=(
                Refusal(
                    "pod-annotation-config-hash",
                    {"spec.runtime.pod.annotations": {"specfleet.io/runtime-config-hash": "x"}},
                ),
            ),
        ),
        Rule(
            f"self.volumes.all(v, !(v.name in {_cel_list(list(OPERATOR_VOLUMES))}))",
            "runtime.pod.volumes may not be named as a volume specfleet renders: "
            + _words(list(OPERATOR_VOLUMES))
            + " (the model cache is runtime.modelCache)",
            lambda p: not any(v.name in OPERATOR_VOLUMES for v in p.volumes),
            ".volumes",
            found=lambda p: next(v.name for v in p.volumes if v.name in OPERATOR_VOLUMES),
            refusals=(
                Refusal(
                    "pod-volume-dshm",
                    {"spec.runtime.pod.volumes": [{"name": "dshm", "emptyDir": {}}]},
                ),
            ),
        ),
        Rule(
            f"self.volumeMounts.all(m, !(m.mountPath in {_cel_list(list(OPERATOR_MOUNT_PATHS))}))",
            "runtime.pod.volumeMounts may not mount over a path specfleet renders: "
            + _words(list(OPERATOR_MOUNT_PATHS))
            + " (the model cache is runtime.modelCache)",
            lambda p: not any(m.mount_path in OPERATOR_MOUNT_PATHS for m in p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.mount_path for m in p.volume_mounts if m.mount_path in OPERATOR_MOUNT_PATHS
            ),
            refusals=(
                Refusal(
                    "pod-mount-over-cache",
                    {
                        "spec.runtime.pod.volumes": [{"name": "models", "emptyDir": {}}],
                        "spec.runtime.pod.volumeMounts": [
                            {"name": "models", "mountPath": MODEL_CACHE_PATH}
                        ],
                    },
                ),
            ),
        ),
        Rule(
            "self.volumeMounts.all(m, self.volumeMounts.exists_one(n, n.mountPath == m.mountPath))",
            "runtime.pod.volumeMounts may not mount two volumes at one mountPath (the API "
            "server refuses the pods)",
            lambda p: len({m.mount_path for m in p.volume_mounts}) == len(p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.mount_path
                for m in p.volume_mounts
                if [n.mount_path for n in p.volume_mounts].count(m.mount_path) > 1
            ),
            refusals=(
                Refusal(
                    "pod-mount-path-twice",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "emptyDir": {}},
                            {"name": "b", "emptyDir": {}},
                        ],
                        "spec.runtime.pod.volumeMounts": [
                            {"name": "a", "mountPath": "/data"},
                            {"name": "b", "mountPath": "/data"},
                        ],
                    },
                ),
            ),
        ),
        Rule(
            "self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name))",
            "runtime.pod.volumeMounts must each name one of runtime.pod.volumes",
            lambda p: all(any(v.name == m.name for v in p.volumes) for m in p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.name for m in p.volume_mounts if not any(v.name == m.name for v in p.volumes)
            ),
            refusals=(
                Refusal(
                    "pod-mount-without-volume",
                    {"spec.runtime.pod.volumeMounts": [{"name": "nowhere", "mountPath": "/x"}]},
                ),
            ),
        ),
        Rule(
            # The container's field wins over the pod's; runAsNonRoot is true by default.
            "!((has(self.containerSecurityContext) && "
            "has(self.containerSecurityContext.runAsNonRoot) ? "
            "self.containerSecurityContext.runAsNonRoot : !has(self.securityContext) || "
            "!has(self.securityContext.runAsNonRoot) || self.securityContext.runAsNonRoot) && "
            "(has(self.containerSecurityContext) && has(self.containerSecurityContext.runAsUser) "
            "? self.containerSecurityContext.runAsUser == 0 : has(self.securityContext) && "
            "has(self.securityContext.runAsUser) && self.securityContext.runAsUser == 0))",
            "runtime.pod security contexts may not set runAsUser 0 (root) with runAsNonRoot, "
            "which is true unless set: the kubelet refuses to start the container; set "
            "another runAsUser",
            lambda p: (
                not (_effective(p, "run_as_non_root", True) and _effective(p, "run_as_user") == 0)
            ),
            refusals=(
                Refusal("pod-root-user", {"spec.runtime.pod.securityContext": {"runAsUser": 0}}),
                Refusal(
                    "container-root-user",
                    {"spec.runtime.pod.containerSecurityContext": {"runAsUser": 0}},
                ),
            ),
        ),
    )

    volumes: Annotated[list[Volume], Field(max_length=POD_LIST_MAX), UniqueNames("volume")] = Field(
        default_factory=list,
        description="core/v1 Volumes added to the pods (each as Kubernetes defines it).",
    )
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=POD_LIST_MAX)] = Field(
        default_factory=list, description="core/v1 VolumeMounts of the runtime container."
    )
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=POD_LIST_MAX)] = (
        Field(default_factory=list, description="Secrets to pull the images with.")
    )
    service_account_name: ObjectName | None = Field(
        default=None,
        description="ServiceAccount of the pods (IRSA / workload identity for S3 or GCS "
        "weights); none: the namespace's default.",
    )
    security_context: PodSecurityContext | None = Field(
        default=None,
        description="Pod securityContext, over specfleet's restricted default field by field.",
    )
    container_security_context: SecurityContext | None = Field(
        default=None,
        description="The runtime container's securityContext, over specfleet's restricted "
        "default field by field.",
    )
    affinity: Affinity | None = Field(
        default=None, description="A core/v1 Affinity (node, pod and anti-affinity)."
    )
    topology_spread_constraints: (
        Annotated[list[TopologySpreadConstraint], Field(max_length=POD_LIST_MAX), _SPREAD_PAIRS]
        | None
    ) = Field(
        default=None,
        description="How the pods spread across nodes or zones; none: the model's pods "
        "spread across nodes where they can (maxSkew 1 by kubernetes.io/hostname, "
        "ScheduleAnyway); [] spreads nothing.",
    )
    priority_class_name: ObjectName | None = None
    runtime_class_name: ObjectName | None = Field(
        default=None, description="A RuntimeClass (e.g. nvidia for the GPU container runtime)."
    )
    scheduler_name: ObjectName | None = None
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="Time to drain in-flight requests (60s)."
    )
    enable_service_links: bool = Field(
        default=False,
        description="Kubernetes' service environment variables in the pods (off: a Service "
        "named vllm would set VLLM_PORT, which vLLM reads as its own setting).",
    )
    automount_service_account_token: bool = Field(
        default=False,
        description="Mount the ServiceAccount's API token into the pods (off: neither "
        "specfleet-runtime nor vLLM calls the Kubernetes API; workload identity webhooks "
        "add their own token).",
    )
    scratch: Scratch = Field(
        default_factory=Scratch,
        description="Size limits of the scratch volumes specfleet mounts (/dev/shm, /tmp).",
    )
    labels: Annotated[
        dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), _POD_LABEL_KEYS
    ] = Field(default_factory=dict, description="Extra labels on the pods (not on selectors).")
    annotations: Annotated[
        dict[str, str], Field(max_length=NODE_SELECTOR_MAX), _POD_ANNOTATION_KEYS
    ] = Field(default_factory=dict, description="Extra annotations on the pods.")
    probes: Probes = Field(default_factory=Probes, description="The /health probes' timings.")


class ModelCache(SpecModel):
    """Where the hub cache lives (HF_HOME, where vLLM downloads to): a PVC shared by the
    pods, a directory on each node, or (neither) an emptyDir lost with each pod."""

    rules: ClassVar[tuple[Rule[ModelCache], ...]] = (
        Rule(
            "!(has(self.claimName) && has(self.hostPath))",
            "runtime.modelCache takes claimName or hostPath, not both",
            lambda c: c.claim_name is None or c.host_path is None,
            ".hostPath",
            refusals=(
                Refusal(
                    "model-cache-claim-and-host-path",
                    {"spec.runtime.modelCache": {"claimName": "hub", "hostPath": "/mnt/hub"}},
                ),
            ),
        ),
        Rule(
            "!has(self.sizeLimit) || !(has(self.claimName) || has(self.hostPath))",
            "runtime.modelCache.sizeLimit bounds the emptyDir cache only: a claim's size is "
            "its PersistentVolumeClaim's, a hostPath's its node's disk",
            lambda c: c.size_limit is None or (c.claim_name is None and c.host_path is None),
            ".sizeLimit",
            refusals=(
                Refusal(
                    "model-cache-size-limit-with-claim",
                    {"spec.runtime.modelCache": {"claimName": "hub", "sizeLimit": "100Gi"}},
                ),
            ),
        ),
        Rule(
            "!self.readOnly || has(self.claimName) || has(self.hostPath)",
            "runtime.modelCache.readOnly needs claimName or hostPath: without them the cache "
            "is an emptyDir, empty at each start, and read-only vLLM could not download the "
            "weights into it",
            lambda c: not c.read_only or c.claim_name is not None or c.host_path is not None,
            ".readOnly",
            refusals=(
                Refusal(
                    "model-cache-read-only-empty", {"spec.runtime.modelCache": {"readOnly": True}}
                ),
            ),
        ),
    )

    claim_name: ObjectName | None = Field(
        default=None,
        description="A PersistentVolumeClaim in the model's namespace (ReadWriteMany for "
        "more than one node, or ReadOnlyMany once warm).",
    )
    host_path: (
        Annotated[
            str,
            StringConstraints(max_length=4096),
            Matching(r"^/.*$", "an absolute path (starting with '/')"),
        ]
        | None
    ) = Field(
        default=None,
        description="A directory on each node (a hostPath volume: Pod Security 'restricted' "
        "refuses it; use a local PersistentVolume there).",
    )
    read_only: bool = Field(
        default=False, description="Mount read-only (a cache filled beforehand)."
    )
    size_limit: Quantity | None = Field(
        default=None,
        description="The emptyDir cache's size limit (neither claimName nor hostPath): "
        "the weights must fit; none: 100Gi per GPU, at least 100Gi.",
    )


class RuntimeInjection(SpecModel):
    """Run specfleet-runtime in an image without it (e.g. vllm/vllm-openai): an init
    container copies it from `image` into a shared volume, and the serving container
    runs it with its own Python."""

    image: NonEmptyString = Field(
        default=DEFAULT_RUNTIME_IMAGE, description="The specfleet-runtime image to copy from."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="The init container's image pull policy."
    )
    resources: Resources | None = Field(
        default=None,
        description="The init container's requests and limits; none: cpu 100m (limit 1), "
        "memory 256Mi (limit 256Mi), ephemeral-storage 256Mi. A resource given here "
        "(request or limit) replaces that resource's default.",
    )


class RollingUpdate(SpecModel):
    """The Deployments' rolling update: GPUs borrowed (maxSurge) or capacity given up
    (maxUnavailable) while pods are replaced."""

    rules: ClassVar[tuple[Rule[RollingUpdate], ...]] = (
        Rule(
            "!((self.maxSurge == 0 || self.maxSurge == '0%') && "
            "(self.maxUnavailable == 0 || self.maxUnavailable == '0%'))",
            "runtime.rollingUpdate: maxSurge and maxUnavailable may not both be 0 (no pod "
            "could ever be replaced)",
            lambda r: not (_zero(r.max_surge) and _zero(r.max_unavailable)),
            ".maxSurge",
            refusals=(
                Refusal(
                    "rolling-update-both-zero",
                    {"spec.runtime.rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}},
                ),
            ),
        ),
    )

    max_surge: CountOrPercent = Field(
        default=1,
        description="Pods above replicas during a rollout (each needs its GPUs): 0 when no "
        "GPU is spare, with maxUnavailable 1.",
    )
    max_unavailable: CountOrPercent = Field(
        default=0, description="Pods below replicas during a rollout."
    )


def _zero(value: str | int) -> bool:
    return value in (0, "0%")


class DisruptionBudget(SpecModel):
    """The model's PodDisruptionBudget: how many stable pods a voluntary disruption (a
    node drain, a cluster upgrade, the autoscaler) may take at once. Pods not Ready are
    always evictable, so a crash-looping or starting pod never blocks a drain."""

    max_unavailable: CountOrPercent = Field(
        default=1,
        description="Stable pods a drain may evict at once (1: one at a time; '100%': no "
        "protection).",
    )


# One per spelling class that vLLM 0.33's parser reads as an owned flag (the runtime's
# contract test checks them against vLLM).
_OWNED_ARGS_REFUSED = [
    ("speculative-config", ["--speculative-config", "{}"]),
    ("speculative-config-equals", ['--speculative-config={"method":"ngram"}']),
    ("speculative-abbreviated", ["--speculative", '{"method":"ngram"}']),
    ("speculative-underscore", ["--speculative_config", "{}"]),
    ("speculative-key", ["--speculative-config.num_speculative_tokens", "9"]),
    ("speculative-short", ["-sc", "{}"]),
    ("speculative-short-equals", ["-sc={}"]),
    ("speculative-short-key", ["-sc.method", "ngram"]),
    ("speculative-short-abbreviated", ["-s", "{}"]),
    ("spec-method", ["--spec-method", "ngram"]),
    ("spec-model", ["--spec-model", "other/draft"]),
    ("spec-tokens-abbreviated", ["--spec-t", "9"]),
    ("spec-ambiguous", ["--spec", "9"]),
    ("config-file", ["--config", "/etc/serve.yaml"]),
    ("model", ["--model", "other/model"]),
    ("model-equals", ["--model=other/model"]),
    ("served-abbreviated", ["--served", "x"]),
    ("served-underscore-abbreviated", ["--served_model", "x"]),
    ("tensor-parallel-abbreviated", ["--tensor-parallel", "8"]),
    ("tp-short", ["-tp", "8"]),
    ("tp-glued", ["-tp8"]),
    ("tp-short-abbreviated", ["-t", "8"]),
    ("pipeline-parallel-short", ["-pp", "2"]),
    ("pipeline-parallel-underscore", ["--pipeline_parallel_size=2"]),
    ("data-parallel-short-glued", ["-dp2"]),
    ("data-parallel-abbreviated", ["--data-parallel-si", "2"]),
    ("host-abbreviated", ["--hos", "0.0.0.0"]),
    ("host-key", ["--host.x", "1"]),
    ("port-after-others", ["--max-model-len", "8192", "--port=9000"]),
    ("end-of-options", ["--max-model-len", "8192", "--", "other/model"]),
]


def _owned(args: list[str], pattern: str) -> tuple[str, str] | None:
    """The first arg a group's pattern refuses (it may set a flag the runtime renders),
    and the flag."""
    return next(
        ((a, owned_flag(a) or "") for a in args if re.fullmatch(pattern, a) is not None), None
    )


def _owned_flags_rule(pattern: str) -> Rule[Runtime]:
    """The rule over runtime.args for one group of owned flags (OWNED_ARG_PATTERNS says
    why in groups): its pattern in CEL and in Python; each says every owned flag."""
    first = next(iter(OWNED_ARG_PATTERNS.values()))
    return Rule(
        f"self.args.all(a, !a.matches('{pattern}'))",
        "runtime.args may not set a flag specfleet renders, in any spelling vLLM reads (a "
        "prefix, '_' for '-', =value, .key): "
        + ", ".join(" or ".join(s) for s in OWNED_FLAGS.values()),
        lambda r: _owned(r.args, pattern) is None,
        ".args",
        found=lambda r: "{!r}, which sets {}".format(*_owned(r.args, pattern) or ("", "")),
        # Each case under the first group's rule that refuses it.
        refusals=tuple(
            Refusal(f"args-{name}", {"spec.runtime.args": args})
            for name, args in _OWNED_ARGS_REFUSED
            if _owned(args, pattern) and (pattern == first or not _owned(args, first))
        ),
    )


class Parallelism(SpecModel):
    """How one replica's engine spreads the target over GPUs: vLLM's parallel sizes."""

    rules: ClassVar[tuple[Rule[Parallelism], ...]] = (
        Rule(
            "self.nodesPerReplica == 1 || self.data == 1",
            "runtime.parallelism.nodesPerReplica above 1 needs data 1: a replica across "
            "nodes (a LeaderWorkerSet group) runs one engine, tensor x pipeline split over "
            "its nodes; data parallel ranks across nodes are not supported",
            lambda p: p.nodes_per_replica == 1 or p.data == 1,
            ".nodesPerReplica",
            found=lambda p: f"{p.nodes_per_replica} with data {p.data}",
            refusals=(
                Refusal(
                    "multi-node-data-parallel",
                    {
                        "spec.runtime.gpus": 2,
                        "spec.runtime.parallelism": {"data": 2, "nodesPerReplica": 2},
                    },
                ),
            ),
        ),
    )

    tensor: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Tensor parallel size (vLLM's --tensor-parallel-size): GPUs each layer "
        "is split over. Unset: runtime.tensorParallelSize, its older name, else 1.",
    )
    pipeline: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Pipeline parallel size (--pipeline-parallel-size): stages the layers "
        "are cut into, each on its own tensor parallel group.",
    )
    data: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Data parallel size (--data-parallel-size): engines in the pod, each "
        "with tensor x pipeline GPUs. Above 1 the pods run one K at every batch size: vLLM "
        "drops per-batch K schedules (speculation.schedule) with data parallel ranks.",
    )
    nodes_per_replica: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Nodes one replica spans. Above 1 each replica is a LeaderWorkerSet "
        "group of that many pods, one a node (LeaderWorkerSet's controller must be "
        "installed): tensor x pipeline is split evenly over them, runtime.gpus on each; the "
        "leader serves and is scraped, and the group restarts as a whole.",
    )


# The tensor parallel size of a Runtime in CEL: parallelism.tensor, else its older name.
_CEL_TENSOR = (
    "(has(self.parallelism.tensor) ? self.parallelism.tensor : "
    "(has(self.tensorParallelSize) ? self.tensorParallelSize : 1))"
)
_CEL_GPUS_PER_REPLICA = f"({_CEL_TENSOR} * self.parallelism.pipeline * self.parallelism.data)"
_CEL_NODES = "self.parallelism.nodesPerReplica"
# The resource runtime.gpus counts, in CEL.
_CEL_ACCELERATOR = f"(has(self.accelerator) ? self.accelerator : '{DEFAULT_ACCELERATOR}')"


class Runtime(SpecModel):
    """The inference pods: image, GPUs and what the runtime passes on to vLLM."""

    rules: ClassVar[tuple[Rule[Runtime], ...]] = (
        Rule(
            f"has(self.injectRuntime) || !self.image.matches('{VLLM_IMAGE_PATTERN}')",
            "runtime.image is vLLM's own image, which has no specfleet-runtime (its pods "
            "would crash at start): add runtime.injectRuntime: {} to copy it in, or use "
            f"{DEFAULT_RUNTIME_IMAGE}",
            lambda r: r.inject_runtime is not None or not re.match(VLLM_IMAGE_PATTERN, r.image),
            ".image",
            found=lambda r: r.image,
            refusals=(
                Refusal(
                    "vllm-image-without-runtime", {"spec.runtime.image": "vllm/vllm-openai:v0.33.0"}
                ),
                Refusal(
                    "vllm-image-by-registry",
                    {"spec.runtime.image": "docker.io/vllm/vllm-openai@sha256:" + "0" * 64},
                ),
            ),
        ),
        Rule(
            f"!has(self.injectRuntime) || !self.env.exists(e, e.name == '{INJECTED_ENV}')",
            f"runtime.env may not set {INJECTED_ENV} with runtime.injectRuntime: it points "
            "the image's Python at the injected runtime",
            lambda r: r.inject_runtime is None or all(e.name != INJECTED_ENV for e in r.env),
            ".env",
            refusals=(
                Refusal(
                    "inject-with-pythonpath",
                    {
                        "spec.runtime.injectRuntime": {},
                        "spec.runtime.env": [{"name": "PYTHONPATH", "value": "/x"}],
                    },
                ),
            ),
        ),
        Rule(
            f"!({_CEL_ACCELERATOR} in self.resources.requests) && "
            f"!({_CEL_ACCELERATOR} in self.resources.limits)",
            "runtime.resources may not set the accelerator's resource (runtime.accelerator, "
            f"else {DEFAULT_ACCELERATOR}): the operator sets it from runtime.gpus",
            lambda r: (
                r.accelerator_resource not in r.resources.requests
                and r.accelerator_resource not in r.resources.limits
            ),
            ".resources",
            found=lambda r: r.accelerator_resource,
            refusals=(
                Refusal(
                    "resources-gpu",
                    {"spec.runtime.resources": {"limits": {DEFAULT_ACCELERATOR: 2}}},
                ),
                Refusal(
                    "resources-amd-gpu",
                    {
                        "spec.runtime.accelerator": AMD_ACCELERATOR,
                        "spec.runtime.image": ROCM_VLLM_IMAGE,
                        "spec.runtime.injectRuntime": {},
                        "spec.runtime.resources": {"requests": {AMD_ACCELERATOR: 1}},
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.resourceClaimTemplate) || !has(self.accelerator)",
            "runtime.accelerator and runtime.resourceClaimTemplate are two ways to ask for the "
            "GPUs, a device plugin's extended resource or a claim (DRA): set one",
            lambda r: r.resource_claim_template is None or r.accelerator is None,
            ".resourceClaimTemplate",
            refusals=(
                Refusal(
                    "accelerator-and-claim-template",
                    {
                        "spec.runtime.resourceClaimTemplate": "gpus",
                        "spec.runtime.accelerator": "nvidia.com/gpu",
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.resourceClaimTemplate) || self.gpus >= 1",
            "runtime.resourceClaimTemplate with runtime.gpus 0: each pod would claim GPUs its "
            "engine does not use; set gpus to what the template gives a pod",
            lambda r: r.resource_claim_template is None or r.gpus >= 1,
            ".gpus",
            refusals=(
                Refusal(
                    "claim-template-without-gpus",
                    {"spec.runtime.resourceClaimTemplate": "gpus", "spec.runtime.gpus": 0},
                ),
            ),
        ),
        Rule(
            f"!has(self.accelerator) || self.accelerator != '{AMD_ACCELERATOR}' || "
            f"self.image != '{DEFAULT_RUNTIME_IMAGE}'",
            f"runtime.image {DEFAULT_RUNTIME_IMAGE} is built on vLLM's CUDA image, which does "
            f"not run on runtime.accelerator {AMD_ACCELERATOR}: set runtime.image to vLLM's "
            f"ROCm image, {ROCM_VLLM_IMAGE}, with runtime.injectRuntime: {{}} (or to a runtime "
            f"image built on it: runtime/Dockerfile's BASE)",
            lambda r: r.accelerator != AMD_ACCELERATOR or r.image != DEFAULT_RUNTIME_IMAGE,
            ".image",
            refusals=(
                Refusal("amd-with-the-cuda-image", {"spec.runtime.accelerator": AMD_ACCELERATOR}),
            ),
        ),
        Rule(
            "!has(self.tensorParallelSize) || !has(self.parallelism.tensor) || "
            "self.tensorParallelSize == 1 || self.tensorParallelSize == self.parallelism.tensor",
            "runtime.tensorParallelSize is the older name of runtime.parallelism.tensor: set "
            "parallelism.tensor alone (a tensorParallelSize of 1, the default older versions "
            "wrote, is ignored)",
            lambda r: (
                r.tensor_parallel_size in (None, 1, r.parallelism.tensor)
                or r.parallelism.tensor is None
            ),
            ".tensorParallelSize",
            found=lambda r: f"{r.tensor_parallel_size} and {r.parallelism.tensor}",
            refusals=(
                Refusal(
                    "tp-under-both-names",
                    {
                        "spec.runtime.gpus": 4,
                        "spec.runtime.tensorParallelSize": 4,
                        "spec.runtime.parallelism": {"tensor": 2},
                    },
                ),
            ),
        ),
        # At most, not exactly: specs admitted before parallelism asked for more GPUs than
        # their tensor parallel size, and the operator cannot rewrite them.
        Rule(
            f"{_CEL_GPUS_PER_REPLICA} == 1 || {_CEL_GPUS_PER_REPLICA} <= self.gpus * {_CEL_NODES}",
            "runtime.parallelism: tensor x pipeline x data, the GPUs one replica's engine "
            "uses, must not exceed runtime.gpus per pod times nodesPerReplica (and must be 1 "
            "when runtime.gpus is 0)",
            lambda r: r.gpus_per_replica <= max(r.gpus * r.parallelism.nodes_per_replica, 1),
            ".parallelism",
            found=lambda r: (
                f"{r.tensor} x {r.parallelism.pipeline} x {r.parallelism.data} > {r.gpus}"
            ),
            refusals=(
                Refusal(
                    "tp-above-gpus",
                    {"spec.runtime.tensorParallelSize": 4, "spec.runtime.gpus": 2},
                ),
                Refusal(
                    "tp-without-gpus",
                    {"spec.runtime.tensorParallelSize": 2, "spec.runtime.gpus": 0},
                ),
                Refusal(
                    "parallel-product-above-gpus",
                    {
                        "spec.runtime.gpus": 4,
                        "spec.runtime.parallelism": {"tensor": 2, "pipeline": 2, "data": 2},
                    },
                ),
                Refusal(
                    "data-parallel-without-gpus",
                    {"spec.runtime.gpus": 0, "spec.runtime.parallelism": {"data": 2}},
                ),
            ),
        ),
        Rule(
            f"({_CEL_TENSOR} * self.parallelism.pipeline) % {_CEL_NODES} == 0",
            "runtime.parallelism.nodesPerReplica must divide tensor x pipeline: vLLM splits "
            "a replica's ranks evenly over its nodes",
            lambda r: (r.tensor * r.parallelism.pipeline) % r.parallelism.nodes_per_replica == 0,
            ".parallelism",
            found=lambda r: (
                f"{r.tensor} x {r.parallelism.pipeline} over {r.parallelism.nodes_per_replica}"
            ),
            refusals=(
                Refusal(
                    "nodes-not-dividing-ranks",
                    {
                        "spec.runtime.gpus": 2,
                        "spec.runtime.parallelism": {"tensor": 3, "nodesPerReplica": 2},
                    },
                ),
            ),
        ),
        Rule(
            "size(self.args) == 0 || self.args[0].startsWith('-')",
            "runtime.args may not start with a positional argument: vLLM would read a second "
            "model (the model is spec.model.name)",
            lambda r: not r.args or r.args[0].startswith("-"),
            ".args",
            found=lambda r: repr(r.args[0]),
            refusals=(Refusal("args-positional-model", {"spec.runtime.args": ["other/model"]}),),
        ),
        *(_owned_flags_rule(pattern) for pattern in OWNED_ARG_PATTERNS.values()),
        Rule(
            f"self.args.all(a, !a.matches('{OLDER_SPECULATIVE_PATTERN}'))",
            "runtime.args may not use the speculative decoding flags of vLLM before 0.8 ("
            + ", ".join(OLDER_SPECULATIVE_FLAGS)
            + "): vLLM 0.33 refuses them at start. Set speculation.tokens for "
            "--num-speculative-tokens and draft.model for --speculative-model",
            lambda r: _older(r.args) is None,
            ".args",
            found=lambda r: "{!r}: {}".format(*_older(r.args) or ("", "")),
            refusals=(
                Refusal(
                    "args-older-num-speculative-tokens",
                    {"spec.runtime.args": ["--num-speculative-tokens", "5"]},
                ),
                Refusal(
                    "args-older-speculative-model",
                    {"spec.runtime.args": ["--max-model-len", "8192", "--speculative-model=x/y"]},
                ),
                Refusal(
                    "args-older-ngram-underscore",
                    {"spec.runtime.args": ["--ngram_prompt_lookup_max", "4"]},
                ),
            ),
        ),
    )

    image: NonEmptyString = Field(
        default=DEFAULT_RUNTIME_IMAGE,
        description="Serving image: vLLM plus specfleet-runtime, or vLLM alone (e.g. "
        "vllm/vllm-openai:v0.33.0) with injectRuntime.",
    )
    gpus: int = Field(
        default=1,
        ge=0,
        le=64,
        description=f"GPUs per pod: requests and limits of runtime.accelerator's resource "
        f"({DEFAULT_ACCELERATOR} unless set).",
    )
    accelerator: (
        Annotated[
            str,
            StringConstraints(max_length=253),
            Matching(
                f"^{EXTENDED_RESOURCE}$",
                "an extended resource name with its domain, such as nvidia.com/gpu or amd.com/gpu",
            ),
        ]
        | None
    ) = Field(
        default=None,
        description=f"The extended resource `gpus` counts: {DEFAULT_ACCELERATOR} (unset), "
        f"{AMD_ACCELERATOR} (with vLLM's ROCm image, {ROCM_VLLM_IMAGE}, and injectRuntime), "
        "or another vendor's device plugin's name.",
    )
    resource_claim_template: ObjectName | None = Field(
        default=None,
        description="A ResourceClaimTemplate in the model's namespace each pod claims its "
        "GPUs from (Dynamic Resource Allocation, resource.k8s.io/v1) instead of a device "
        "plugin's extended resource: the pods request no runtime.accelerator, and "
        "runtime.gpus says how many GPUs the template gives a pod.",
    )
    tensor_parallel_size: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="The older name of parallelism.tensor, still read where that is unset.",
    )
    parallelism: Parallelism = Field(
        default_factory=Parallelism,
        description="vLLM's tensor, pipeline and data parallel sizes within one replica.",
    )
    args: Annotated[
        list[Annotated[str, StringConstraints(max_length=MAX_ARG_LENGTH)]],
        Field(max_length=MAX_ARGS),
    ] = Field(
        default_factory=list,
        description=f"Extra `vllm serve` arguments: at most {MAX_ARGS}, each at most "
        f"{MAX_ARG_LENGTH} characters (a longer value, such as a chat template, belongs in a "
        "file in the image).",
    )
    env: Annotated[list[EnvVar], Field(max_length=ENV_MAX), UniqueNames("variable")] = Field(
        default_factory=list, description="Extra environment."
    )
    port: int = Field(default=8000, ge=1, le=65535, description="HTTP port of the server.")
    node_selector: Annotated[
        dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), _NODE_SELECTOR_KEYS
    ] = Field(default_factory=dict, description="Node labels the pods must run on.")
    tolerations: list[Toleration] = Field(default_factory=list)
    resources: Resources = Field(
        default_factory=Resources,
        description="CPU/memory; the accelerator's resource is set from `gpus`. A resource "
        "with neither request nor limit here is requested by default: cpu 2 and memory 8Gi "
        "per GPU (at least 2 and 8Gi), ephemeral-storage as pod.scratch.tmp (10Gi).",
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret with a hub token, exposed as HF_TOKEN."
    )
    pod: PodSettings = Field(
        default_factory=PodSettings,
        description="Pod settings: volumes, pull secrets, service account, security "
        "context, affinity, topology spread, priority, probe timings, labels.",
    )
    model_cache: ModelCache = Field(
        default_factory=ModelCache,
        description=f"The hub cache, mounted at {MODEL_CACHE_PATH} (HF_HOME): a PVC or a "
        "node directory keeps the weights across restarts; neither: an emptyDir per pod.",
    )
    inject_runtime: RuntimeInjection | None = Field(
        default=None,
        description="Copy specfleet-runtime into `image` with an init container, for a "
        "vLLM image without it; none: `image` has it.",
    )
    rolling_update: RollingUpdate = Field(
        default_factory=RollingUpdate,
        description="Surge and unavailability of the Deployments' rollouts (a K change "
        "rolls the stable pods).",
    )
    disruption_budget: DisruptionBudget = Field(
        default_factory=DisruptionBudget,
        description="The PodDisruptionBudget of the stable pods (named as the model).",
    )

    @property
    def accelerator_resource(self) -> str:
        """The extended resource runtime.gpus counts."""
        return self.accelerator or DEFAULT_ACCELERATOR

    @property
    def gpu_source(self) -> str:
        """Where the pods' GPUs come from, in words: the extended resource, or the claim."""
        if self.resource_claim_template is not None:
            return f"claimed from ResourceClaimTemplate {self.resource_claim_template}"
        return self.accelerator_resource

    @property
    def tensor(self) -> int:
        """The target's tensor parallel size, under either name."""
        return self.parallelism.tensor or self.tensor_parallel_size or 1

    @property
    def gpus_per_replica(self) -> int:
        """GPUs one replica's engine uses: a tensor x pipeline group per data rank."""
        return self.tensor * self.parallelism.pipeline * self.parallelism.data

    @property
    def gpus_per_pod(self) -> int:
        """GPUs the engine uses in each of a replica's pods (one pod a node)."""
        return self.gpus_per_replica // self.parallelism.nodes_per_replica


def _older(args: list[str]) -> tuple[str, str] | None:
    """The first arg that is an older vLLM speculative flag, and what replaced it."""
    return next(
        (
            (a, OLDER_SPECULATIVE_FLAGS[flag].for_spec())
            for a in args
            if (flag := older_speculative_flag(a)) is not None
        ),
        None,
    )


# http(s), a host, a path: no user:password@ (credentials in a spec anyone may read) and
# no ?query or #fragment, which would make the path the operator queries the tenant's.
PrometheusUrl = Annotated[
    str, StringConstraints(pattern=r"^https?://[^/?#@\s]+(/[^?#\s]*)?$", max_length=1024)
]


class PrometheusEndpoint(SpecModel):
    url: PrometheusUrl = Field(
        description="Base URL of a Prometheus server, e.g. http://prometheus.monitoring:9090: "
        "http or https, no user:password@, no ?query or #fragment. The operator may allow "
        "only some URLs (its --prometheus-url, the chart's evaluation.allowedPrometheusUrls)."
    )


# The operator's default ceiling on metrics.scrapeTimeout (its --max-scrape-timeout).
MAX_SCRAPE_TIMEOUT_SECONDS = 30.0


class Metrics(SpecModel):
    """Where acceptance metrics come from."""

    rules: ClassVar[tuple[Rule[Metrics], ...]] = (
        Rule(
            "self.source != 'Prometheus' || has(self.prometheus)",
            "metrics.prometheus.url is required when metrics.source is Prometheus",
            lambda m: m.source is not MetricsSource.PROMETHEUS or m.prometheus is not None,
            ".prometheus",
            refusals=(Refusal("prometheus-without-url", {"spec.metrics.source": "Prometheus"}),),
        ),
    )

    source: Annotated[MetricsSource, Lax] = Field(
        default=MetricsSource.PODS,
        description="Pods: scrape each ready pod; Prometheus: query a server.",
    )
    prometheus: PrometheusEndpoint | None = None
    scrape_timeout: Annotated[
        str,
        Duration(
            "5m",
            "Timeout of one scrape or query; at most the operator's --max-scrape-timeout "
            "(the chart's evaluation.maxScrapeTimeout, 30s by default).",
        ),
    ] = "5s"


def _suffix_at_one_k(speculation: dict[str, Any]) -> dict[str, Any]:
    """A refusal's edit: suffix decoding held at K=8 (as it must be), with `speculation`
    fields that suffix decoding cannot have."""
    return {
        "spec.draft.method": "suffix",
        "spec.draft.model": DELETE,
        "spec.speculation": {"tokens": 8, "minTokens": 8, "maxTokens": 8, **speculation},
    }


class SpeculativeModelSpec(SpecModel):
    """What the user (or Git) wants. The operator never writes it."""

    rules: ClassVar[tuple[Rule[SpeculativeModelSpec], ...]] = (
        Rule(
            "!has(self.draft.tensorParallelSize) || self.draft.tensorParallelSize == 1 || "
            "self.draft.tensorParallelSize == " + _CEL_TENSOR.replace("self.", "self.runtime."),
            "draft.tensorParallelSize must be 1 or the target's tensor parallel size "
            "(runtime.parallelism.tensor)",
            lambda s: s.draft.tensor_parallel_size in (None, 1, s.runtime.tensor),
            ".draft.tensorParallelSize",
            found=lambda s: f"{s.draft.tensor_parallel_size}, not 1 or {s.runtime.tensor}",
            refusals=(
                Refusal(
                    "draft-tp-neither-one-nor-target",
                    {
                        "spec.runtime.gpus": 4,
                        "spec.runtime.tensorParallelSize": 4,
                        "spec.draft.tensorParallelSize": 2,
                    },
                ),
            ),
        ),
        Rule(
            "self.speculation.switching != 'Hot' || self.runtime.parallelism.data == 1",
            "speculation.switching Hot needs runtime.parallelism.data 1: a hot K is a per-batch "
            "schedule, which vLLM 0.33 drops with data parallel ranks (they could pick "
            "different Ks and deadlock); use Restart",
            lambda s: (
                s.speculation.switching is not KSwitching.HOT or s.runtime.parallelism.data == 1
            ),
            ".speculation.switching",
            found=lambda s: f"data {s.runtime.parallelism.data}",
            refusals=(
                Refusal(
                    "hot-switching-with-data-parallel",
                    {
                        "spec.speculation.switching": "Hot",
                        "spec.runtime.gpus": 2,
                        "spec.runtime.parallelism": {"data": 2},
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.draft.adaptiveVerification) || !self.draft.adaptiveVerification || "
            "self.runtime.parallelism.pipeline == 1",
            "draft.adaptiveVerification needs runtime.parallelism.pipeline 1: vLLM 0.33 refuses "
            "adaptive verification with pipeline parallelism",
            lambda s: not s.draft.adaptive_verification or s.runtime.parallelism.pipeline == 1,
            ".draft.adaptiveVerification",
            found=lambda s: f"pipeline {s.runtime.parallelism.pipeline}",
            refusals=(
                Refusal(
                    "adaptive-verification-with-pipeline-parallel",
                    {
                        "spec.draft.method": "dspark",
                        "spec.draft.model": DELETE,
                        "spec.draft.adaptiveVerification": True,
                        "spec.runtime.gpus": 2,
                        "spec.runtime.parallelism": {"pipeline": 2},
                    },
                ),
            ),
        ),
        Rule(
            "self.draft.method != 'suffix' || "
            "(self.speculation.minTokens == self.speculation.tokens && "
            "self.speculation.maxTokens == self.speculation.tokens)",
            "speculation: draft.method suffix is not tuned (suffix decoding picks its draft "
            "length per step, up to K): set speculation.minTokens and maxTokens to "
            "speculation.tokens",
            lambda s: (
                s.draft.method is not DraftMethod.SUFFIX
                or s.speculation.min_tokens == s.speculation.tokens == s.speculation.max_tokens
            ),
            ".speculation",
            refusals=(
                Refusal(
                    "suffix-with-a-k-range",
                    {"spec.draft.method": "suffix", "spec.draft.model": DELETE},
                ),
            ),
        ),
        Rule(
            "self.draft.method != 'suffix' || self.speculation.schedule.mode == 'Off' || "
            "self.speculation.schedule.mode == 'Auto'",
            "speculation.schedule needs a tuned method: suffix decoding sets its draft length "
            "per step itself",
            lambda s: (
                s.draft.method is not DraftMethod.SUFFIX
                or s.speculation.schedule.mode in (ScheduleMode.OFF, ScheduleMode.AUTO)
            ),
            ".speculation.schedule",
            refusals=(
                Refusal(
                    "suffix-with-a-schedule",
                    _suffix_at_one_k({"schedule": {"mode": "Learned"}}),
                ),
            ),
        ),
        Rule(
            "!has(self.speculation.switching) || self.speculation.switching != 'Hot' || "
            "(self.draft.method != 'suffix' && self.draft.method != 'none')",
            "speculation.switching Hot needs a method whose K the engine schedules "
            "(not suffix or none): use Restart",
            lambda s: (
                s.speculation.switching is not KSwitching.HOT
                or s.draft.method not in (DraftMethod.SUFFIX, DraftMethod.NONE)
            ),
            ".speculation.switching",
            refusals=(
                Refusal(
                    "hot-switching-without-a-scheduled-k",
                    _suffix_at_one_k({"switching": "Hot"}),
                ),
            ),
        ),
        Rule(
            "duration(self.rollout.timeout).getSeconds() >= "
            "duration(self.tuning.interval).getSeconds() * self.rollout.windows",
            "rollout.timeout must be at least rollout.windows times tuning.interval: a config "
            "trial needs that many windows before it can be judged",
            lambda s: (
                int(parse_duration(s.rollout.timeout).total_seconds())
                >= int(parse_duration(s.tuning.interval).total_seconds()) * s.rollout.windows
            ),
            ".rollout.timeout",
            found=lambda s: f"{s.rollout.timeout} < {s.rollout.windows} x {s.tuning.interval}",
            refusals=(
                Refusal("rollout-timeout-shorter-than-its-windows", {"spec.rollout.timeout": "2m"}),
            ),
        ),
        Rule(
            "self.speculation.schedule.mode != 'Learned' || self.tuning.enabled",
            "speculation.schedule mode Learned needs tuning.enabled: the tuner learns it, and "
            "with tuning off it would never be learned (for bands as written, mode Fixed)",
            lambda s: s.speculation.schedule.mode is not ScheduleMode.LEARNED or s.tuning.enabled,
            ".speculation.schedule.mode",
            refusals=(
                Refusal(
                    "learned-schedule-without-tuning",
                    {
                        "spec.tuning.enabled": False,
                        "spec.speculation.schedule": {"mode": "Learned"},
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.draft.rejectionSampleMethod) || "
            "self.draft.rejectionSampleMethod != 'fly' || self.speculation.minTokens >= 2",
            "speculation.minTokens must be at least 2 with draft.rejectionSampleMethod fly "
            "(FLy defers rejection over a window shorter than K)",
            lambda s: (
                s.draft.rejection_sample_method is not RejectionSampleMethod.FLY
                or s.speculation.min_tokens >= 2
            ),
            ".speculation.minTokens",
            refusals=(
                Refusal(
                    "fly-with-k-one",
                    {"spec.draft.rejectionSampleMethod": "fly", "spec.speculation.minTokens": 1},
                ),
            ),
        ),
    )

    model: TargetModel
    draft: DraftModel
    speculation: Speculation = Field(default_factory=Speculation)
    tuning: Tuning = Field(default_factory=Tuning)
    rollback: Rollback = Field(default_factory=Rollback)
    rollout: Rollout = Field(default_factory=Rollout)
    replicas: int = Field(
        default=1,
        ge=1,
        le=1000,
        description="Stable pods. The scale subresource's replicas: `kubectl scale`, an HPA or a "
        "KEDA ScaledObject may set it; the operator follows and never writes it.",
    )
    runtime: Runtime = Field(default_factory=Runtime)
    metrics: Metrics = Field(default_factory=Metrics)

    @property
    def schedule_in_effect(self) -> Schedule:
        """The K-by-batch schedule the tuner and the pods follow: speculation.schedule, or
        one K (mode Off) with data parallel ranks, where vLLM 0.33 drops per-batch
        schedules (ranks could pick different Ks and deadlock) and runs one K."""
        if self.runtime.parallelism.data > 1:
            return Schedule(mode=ScheduleMode.OFF)
        return self.speculation.schedule

    def warnings(self) -> list[str]:
        """What an admissible spec asks for that does not run as written, one
        `field: why` a line: `specfleet validate` prints them and still passes the spec,
        as the API server admits it."""
        found = []
        written, data = self.speculation.schedule, self.runtime.parallelism.data
        if data > 1 and written.mode in (ScheduleMode.LEARNED, ScheduleMode.FIXED):
            found.append(
                f"spec.speculation.schedule: mode {written.mode.value} is not followed with "
                f"spec.runtime.parallelism.data {data}: vLLM 0.33 drops per-batch K schedules "
                "with data parallel ranks, so the pods run one K (speculation.tokens, tuned)"
            )
        runtime = self.runtime
        if runtime.gpus > runtime.gpus_per_pod:
            found.append(
                f"spec.runtime.gpus: {runtime.gpus} per pod, and the engine uses "
                f"{runtime.gpus_per_pod} (parallelism tensor x pipeline x data over "
                "nodesPerReplica): the others stay idle"
            )
        budget = runtime.disruption_budget.max_unavailable
        if _zero(budget):
            found.append(
                f"spec.runtime.disruptionBudget.maxUnavailable: {budget!r} lets no drain "
                "evict a Ready stable pod: a node drain (an upgrade, the cluster autoscaler) "
                "waits until the pod goes another way; 1 evicts one at a time"
            )
        return found


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


# Schemas of fields a status written by an earlier version has, and today's does not.
_NUMBER: dict[str, Any] = {"type": "number"}
_NUMBERS: dict[str, Any] = {"type": "array", "items": _NUMBER}
_OBJECTS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}
_STRING: dict[str, Any] = {"type": "string"}
_INTEGER: dict[str, Any] = {"type": "integer"}
_BOOLEAN: dict[str, Any] = {"type": "boolean"}
_OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
# A trial's fields in status.speculation before `trial` (read with status.canary).
_FLAT_TRIAL = ("candidateTokens", "candidateSchedule", "canaryStartedAt")


def _legacy(**fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Fields of a status written by an earlier version, kept in the CRD's schema so the
    API server does not prune them before a before-validator reads them into today's
    shape."""

    def add(schema: dict[str, Any]) -> None:
        for name, item in fields.items():
            schema["properties"][name] = {**item, "description": "Read on upgrade; not written."}

    return add


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


def _nest_counts(data: Any, legacy: dict[str, tuple[str, str]]) -> Any:
    """A status body written before `Counts` kept the counters flat beside the other
    fields: `legacy` maps each old key to the object and key it now lives under. Old keys
    are dropped whenever they appear (a merge patch leaves them beside the new objects);
    they are moved only into an object the body does not have yet."""
    if not isinstance(data, dict) or not legacy.keys() & data.keys():
        return data
    rest = {key: value for key, value in data.items() if key not in legacy}
    moved: dict[str, dict[str, Any]] = {}
    for key, (into, name) in legacy.items():
        if key in data and into not in data:
            moved.setdefault(into, {})[name] = data[key]
    return {**rest, **moved}


# The counters a status written before `Counts` kept flat: fixed, whatever Counts grows.
_FLAT_COUNTERS = (
    "drafts",
    "draftTokens",
    "acceptedTokens",
    "generationTokens",
    "decodeSeconds",
    "decodeSteps",
    "engineSteps",
)


class TrackTotals(ApiModel):
    """Sums over the conclusive windows of one track, for the canary comparison."""

    # Before `Counts`: `acceptedFirst` was the first position, and the decode counters
    # were summed over the timed windows only.
    _LEGACY: ClassVar = {
        "drafts": ("counts", "drafts"),
        "draftTokens": ("counts", "draftTokens"),
        "acceptedTokens": ("counts", "acceptedTokens"),
        "generatedTokens": ("counts", "generationTokens"),
        "decodeSeconds": ("timed", "decodeSeconds"),
        "decodeSteps": ("timed", "decodeSteps"),
        "engineSteps": ("timed", "engineSteps"),
    }
    model_config = ConfigDict(
        json_schema_extra=_legacy(**dict.fromkeys([*_LEGACY, "acceptedFirst"], _NUMBER))
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
        if isinstance(data, dict) and "acceptedFirst" in data:
            data = dict(data)
            first = data.pop("acceptedFirst")
            data.setdefault("acceptedPerPosition", [first])
            data = _nest_counts(
                data, {**cls._LEGACY, "acceptedPerPosition": ("counts", "acceptedPerPosition")}
            )
        return _nest_counts(data, cls._LEGACY)

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


class Trial(ApiModel):
    """A running trial of a candidate K or schedule: on a canary pod, or in place."""

    tokens: StatusK = Field(
        description="The candidate K (a schedule's largest; 0: plain decoding, measured on "
        "a canary or in place before speculation stops)."
    )
    schedule: list[ScheduledBand] | None = Field(
        default=None, description="The candidate schedule, if it tries one (K by batch size)."
    )
    started_at: datetime
    in_place: InPlace | None = Field(
        default=None, description="On the stable pods themselves; none: on a canary pod."
    )
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
    stable: TrackTotals = Field(
        default_factory=TrackTotals,
        description="The windows it is compared with (in place: those before the switch).",
    )
    canary: TrackTotals = Field(default_factory=TrackTotals, description="The candidate's windows.")

    @property
    def plain(self) -> bool:
        """A trial of plain decoding (K=0): whether to stop speculating."""
        return self.tokens == 0


class SpeculationState(ApiModel):
    """The K in effect and the tuner's memory of it, each state an object while it holds."""

    # Written before the states were objects: read into them, then dropped.
    _FLAT: ClassVar = (
        "disabled",
        "disabledReason",
        "disabledAcceptance",
        "reprobeAt",
        "failedReprobes",
        "reprobedAt",
        "lastKnownGoodTokens",
        "lastKnownGoodSchedule",
    )
    model_config = ConfigDict(
        json_schema_extra=_legacy(
            rejectedTokens=_NUMBERS,
            rejectedSchedule=_OBJECTS,
            rejectedUntil=_STRING,
            disabled=_BOOLEAN,
            disabledReason=_STRING,
            disabledAcceptance=_NUMBERS,
            reprobeAt=_STRING,
            failedReprobes=_INTEGER,
            reprobedAt=_STRING,
            lastKnownGoodTokens=_INTEGER,
            lastKnownGoodSchedule=_OBJECTS,
            candidateTokens=_INTEGER,
            candidateSchedule=_OBJECTS,
            canaryStartedAt=_STRING,
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
    def _from_parallel_drafting(cls, data: Any) -> Any:
        """A status written before drafting styles had `parallelDrafting`: read it as its
        style, so the step cost learned for it is kept."""
        if isinstance(data, dict) and "parallelDrafting" in data:
            data = dict(data)
            parallel = data.pop("parallelDrafting")
            data.setdefault("drafting", Drafting.PARALLEL if parallel else Drafting.SEQUENTIAL)
        return data

    @model_validator(mode="before")
    @classmethod
    def _from_flat_rejected(cls, data: Any) -> Any:
        """A status written before `rejected` kept its three fields flat; with no
        `rejectedUntil` nothing was rejected."""
        legacy = ("rejectedTokens", "rejectedSchedule", "rejectedUntil")
        if not isinstance(data, dict) or not any(key in data for key in legacy):
            return data
        data = dict(data)
        tokens, schedule, until = (data.pop(key, None) for key in legacy)
        if until is not None and "rejected" not in data:
            data["rejected"] = {"tokens": tokens or [], "schedule": schedule, "until": until}
        return data

    @model_validator(mode="before")
    @classmethod
    def _from_flat_states(cls, data: Any) -> Any:
        """A status written before the states were objects kept them flat: `disabled`
        with its reason, acceptance and re-probe time is `off`; a re-probe not yet proven
        (`reprobedAt`) is `reprobing`; the two last-known-good fields are one object.
        Old keys are dropped whenever they appear (a merge patch leaves them beside the
        new objects); they are read only into objects the body does not have yet. A
        trial's flat fields are read with status.canary (SpeculativeModelStatus)."""
        flat = (*cls._FLAT, *_FLAT_TRIAL)
        if not isinstance(data, dict) or not any(key in data for key in flat):
            return data
        old = {key: data[key] for key in flat if key in data}
        data = {key: value for key, value in data.items() if key not in flat}
        failed = old.get("failedReprobes") or 0
        if old.get("disabled") and "off" not in data:
            acceptance = old.get("disabledAcceptance")
            data["off"] = {
                # Plain decoding was chosen exactly when its acceptance was kept.
                "reason": OffReason.NO_K_CLEARS_FLOOR
                if acceptance is None
                else OffReason.NO_K_PAYS,
                "message": old.get("disabledReason") or "speculation disabled by rollback",
                "acceptance": acceptance,
                # Never set: due at once, as an unset time was read then.
                "reprobeAt": old.get("reprobeAt") or datetime.fromtimestamp(0, UTC),
                "failedReprobes": failed,
            }
        reprobed = old.get("reprobedAt")
        if not old.get("disabled") and reprobed is not None and "reprobing" not in data:
            data["reprobing"] = {"since": reprobed, "failedReprobes": failed}
        tokens = old.get("lastKnownGoodTokens")
        if tokens is not None and "lastKnownGood" not in data:
            data["lastKnownGood"] = {"tokens": tokens, "schedule": old.get("lastKnownGoodSchedule")}
        return data

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
    changed_at: datetime | None = Field(default=None, description="Last change of K (cooldown).")
    baseline_acceptance: float | None = Field(
        default=None, description="Acceptance measured when the K in effect was promoted."
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

    failing_windows: int = 0
    plain_faster_windows: int = Field(
        default=0,
        description="Conclusive windows in a row in which plain decoding was predicted "
        "faster than every K; StopSpeculation needs rollback.failureLimit of them.",
    )
    inconclusive_windows: int = 0
    windows: int = Field(default=0, description="Conclusive windows seen since the last change.")

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
        in_place = trial.in_place if trial is not None else None
        return trial is not None and trial.plain and in_place is not None and in_place.switched

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

    _LEGACY: ClassVar = {
        **{key: ("counts", key) for key in _FLAT_COUNTERS},
        "acceptedPerPosition": ("counts", "acceptedPerPosition"),
    }
    model_config = ConfigDict(
        json_schema_extra=_legacy(
            **dict.fromkeys(_FLAT_COUNTERS, _NUMBER), acceptedPerPosition=_NUMBERS
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
        return _nest_counts(data, cls._LEGACY)


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
    the spec already says the next one."""

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
            runtime = self.pods.runtime.model_dump(by_alias=True, mode="json") | runtime
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


class ConfigTrial(ApiModel):
    """A new config on trial against the running one."""

    config: RunningConfig = Field(description="The config on trial (the spec's).")
    tokens: StatusK = Field(description="K the new config runs in the trial (the spec's K).")
    schedule: list[ScheduledBand] | None = Field(
        default=None,
        description="On a canary: K by batch size it runs, if a schedule (the stable pods' "
        "when the trial started).",
    )
    in_place: bool = Field(
        default=False, description="InPlace: the stable pods themselves switch to it."
    )
    switched: bool = Field(
        default=False, description="InPlace: the stable pods run it (after the windows before)."
    )
    previous_tokens: int | None = Field(
        default=None, description="InPlace: the stable K before the switch, restored on reject."
    )
    previous_schedule: list[ScheduledBand] | None = Field(
        default=None, description="InPlace: the stable schedule before the switch."
    )
    started_at: datetime
    stable: TrackTotals = Field(
        default_factory=TrackTotals, description="The running config's windows."
    )
    canary: TrackTotals = Field(
        default_factory=TrackTotals, description="The new config's windows."
    )


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

    model_config = ConfigDict(json_schema_extra=_legacy(canary=_OBJECT))

    @model_validator(mode="before")
    @classmethod
    def _from_flat_trial(cls, data: Any) -> Any:
        """A status written before `speculation.trial` kept a trial in `canary` (its
        totals, in place or not) and in speculation's flat `candidateTokens`,
        `candidateSchedule` and `canaryStartedAt`, which a config trial's canary shared.
        Read into `speculation.trial` and the config trial's `schedule`; the old keys are
        dropped whenever they appear (a merge patch leaves them beside the new ones)."""
        if not isinstance(data, dict):
            return data
        speculation = data.get("speculation")
        speculation = dict(speculation) if isinstance(speculation, dict) else {}
        if "canary" not in data and not any(key in speculation for key in _FLAT_TRIAL):
            return data
        data = dict(data)
        canary = data.pop("canary", None)
        flat = {key: speculation.pop(key, None) for key in _FLAT_TRIAL}
        if canary is not None and "trial" not in speculation:
            speculation["trial"] = _trial_of(canary, flat, speculation, data)
        config = data.get("config")
        trial = config.get("trial") if isinstance(config, dict) else None
        if isinstance(trial, dict) and not trial.get("inPlace") and "schedule" not in trial:
            trial = {**trial, "schedule": flat["candidateSchedule"]}
            data["config"] = {**config, "trial": trial}
        data["speculation"] = speculation
        return data

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
        if trial is not None and trial.in_place is None:
            return trial.tokens, trial.schedule
        config = self.config.trial if self.config is not None else None
        if config is not None and not config.in_place:
            return config.tokens, config.schedule
        return None


def _trial_of(
    canary: dict[str, Any],
    flat: dict[str, Any],
    speculation: dict[str, Any],
    status: dict[str, Any],
) -> dict[str, Any]:
    """`speculation.trial` from a status before it: the old `canary` object and the
    trial's flat fields. In place and switched, the candidate schedule was the stable
    one; a start time and replicas at the start were always written since trials were
    in status but the first versions: the changes then, and the pods that existed."""
    in_place = None
    if canary.get("inPlace"):
        pending = bool(canary.get("baselinePending"))
        in_place = {
            "previousTokens": canary.get("previousTokens")
            if canary.get("previousTokens") is not None
            else speculation.get("tokens"),
            "previousSchedule": canary.get("previousSchedule"),
            "switched": not pending,
        }
        schedule = flat["candidateSchedule"] if pending else speculation.get("schedule")
    else:
        schedule = flat["candidateSchedule"]
    replicas = canary.get("stableReplicas")
    return {
        "tokens": canary.get("candidateTokens"),
        "schedule": schedule,
        "startedAt": flat["canaryStartedAt"] or speculation.get("changedAt"),
        "inPlace": in_place,
        "stableReplicas": replicas if replicas is not None else status.get("replicas", 0),
        "stable": canary.get("stable") or {},
        "canary": canary.get("canary") or {},
    }


# A namespace's name, as the API server takes it (offline: `specfleet validate`, `render`).
NamespaceName = Annotated[
    str,
    StringConstraints(max_length=63),
    Matching(DNS_1123_LABEL, "a namespace name: lower case letters, digits and '-'"),
]


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; the rest is kept as given. Labels and
    annotations are checked as the API server checks any object's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str
    namespace: NamespaceName | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    annotations: dict[AnnotationKey, str] = Field(default_factory=dict)


class SpeculativeModel(ApiModel, RuledModel):
    """A target model served by vLLM with a speculative draft, tuned by the operator."""

    # At the root: a CRD's schema may not constrain metadata.
    rules: ClassVar[tuple[Rule[SpeculativeModel], ...]] = (
        Rule(
            "self.metadata.name.matches('" + DNS_1035_LABEL + "')",
            f"metadata.name must be {_DNS_1035_WORDS}",
            lambda m: bool(re.fullmatch(DNS_1035_LABEL, m.metadata.name)),
            found=lambda m: repr(m.metadata.name),
            refusals=(Refusal("name-not-dns-label", {"metadata.name": "Llama_8B"}),),
        ),
        Rule(
            "self.metadata.name != 'vllm'",
            "metadata.name may not be vllm: the model's Service would be named vllm, and "
            "Kubernetes then sets VLLM_PORT=tcp://... in the namespace's pods, which vLLM "
            "reads as its own port setting and refuses at start; name the model otherwise",
            lambda m: m.metadata.name != "vllm",
            refusals=(Refusal("name-vllm", {"metadata.name": "vllm"}),),
        ),
    )

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["specfleet.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeModel"]
    metadata: ObjectMeta
    spec: SpeculativeModelSpec
    status: SpeculativeModelStatus = Field(default_factory=SpeculativeModelStatus)


# Every cross-field rule, each declared once on its model (or field): the CRD, the
# validators and the invalid-manifest tests all come from these.
RULES: list[Rule[Any]] = [
    *SpeculativeModel.rules,
    *DraftModel.rules,
    *ScheduleBand.rules,
    *Schedule.rules,
    *Speculation.rules,
    *Runtime.rules,
    *Parallelism.rules,
    *Resources.rules,
    *Toleration.rules,
    *TopologySpreadConstraint.rules,
    _SPREAD_PAIRS,
    _NODE_SELECTOR_KEYS,
    *PodSettings.rules,
    _POD_LABEL_KEYS,
    _POD_ANNOTATION_KEYS,
    _MOUNT_PATH,
    *Volume.rules,
    *VolumeResourceRequirements.rules,
    *DownwardAPIVolumeFile.rules,
    *VolumeProjection.rules,
    *LabelSelectorRequirement.rules,
    *NodeSelectorRequirement.rules,
    *PersistentVolumeClaimSpec.rules,
    _MATCH_LABELS_KEYS,
    *SecurityContext.rules,
    *Capabilities.rules,
    *WindowsSecurityContextOptions.rules,
    *ModelCache.rules,
    *RollingUpdate.rules,
    *EnvVar.rules,
    *EnvVarSource.rules,
    _FLOOR,
    *Metrics.rules,
    *SpeculativeModelSpec.rules,
]


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "K", "type": "integer", "jsonPath": ".status.speculation.tokens"},
    # ACCEPT is the figure the floor judges (spec.rollback.metric), next to the floor itself;
    # vLLM's draft acceptance rate and the metric's name are in `-o wide`.
    {"name": "Accept", "type": "number", "jsonPath": ".status.acceptance.judged"},
    {"name": "Floor", "type": "number", "jsonPath": ".spec.rollback.minAcceptance"},
    {"name": "ALen", "type": "number", "jsonPath": ".status.acceptance.meanLength"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Rejected", "type": "string", "jsonPath": ".status.config.rejected.hash"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Metric", "type": "string", "jsonPath": ".spec.rollback.metric", "priority": 1},
    {"name": "Rate", "type": "number", "jsonPath": ".status.acceptance.rate", "priority": 1},
    {"name": "Config", "type": "string", "jsonPath": ".status.config.running.hash", "priority": 1},
]
