"""The SpeculativeModel's spec: target, draft, speculation, tuning, rollback, rollout,
runtime and metrics."""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    Field,
    StringConstraints,
)

from specfleet.operator.api.common import (
    MAX_ARG_LENGTH,
    MAX_ARGS,
    NODE_SELECTOR_MAX,
    LabelValue,
    Lax,
    Matching,
    NonEmptyString,
    SpecModel,
    cel_list,
    in_words,
)
from specfleet.operator.api.pod import (
    AMD_ACCELERATOR,
    DEFAULT_ACCELERATOR,
    DEFAULT_RUNTIME_IMAGE,
    ENV_MAX,
    EXTENDED_RESOURCE,
    INJECTED_ENV,
    MODEL_CACHE_PATH,
    NODE_SELECTOR_KEYS,
    OWNED_ARGS_REFUSED,
    ROCM_VLLM_IMAGE,
    VLLM_IMAGE_PATTERN,
    DisruptionBudget,
    EnvVar,
    ModelCache,
    ObjectName,
    PodSettings,
    Resources,
    RollingUpdate,
    RuntimeInjection,
    SecretKeyRef,
    Toleration,
    UniqueNames,
    is_zero,
)
from specfleet.operator.durations import Duration, Span
from specfleet.operator.rules import DELETE, Refusal, Rule

# The runtime's config is the contract the operator renders; the API shares its
# vocabulary rather than keeping a second copy.
from specfleet.runtime.config import (
    MAX_SPECULATIVE_TOKENS,
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
            f"!(self.method in {cel_list(NEEDS_DRAFT_MODEL)}) || has(self.model)",
            f"draft.model is required when draft.method is {in_words(NEEDS_DRAFT_MODEL)}",
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
            f"!has(self.model) || self.method in {cel_list(TAKES_DRAFT_MODEL)}",
            f"draft.model is not used by draft.method {in_words(NO_DRAFT_MODEL)}: remove it",
            lambda d: d.model is None or d.method.runtime.takes_draft_model,
            ".model",
            refusals=(
                Refusal("ngram-with-draft-model", {"spec.draft.method": "ngram"}),
                Refusal("suffix-with-draft-model", {"spec.draft.method": "suffix"}),
            ),
        ),
        Rule(
            f"!has(self.sampleMethod) || self.method in {cel_list(LEARNED_DRAFT)}",
            "draft.sampleMethod needs a draft network (draft.method "
            f"{in_words(LEARNED_DRAFT)}); lookups have no distribution to sample",
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
    interval: Annotated[Span, Duration("1h", "Length of one metrics window.")] = Span("60s")
    min_draft_tokens: int = Field(
        default=20000,
        ge=1,
        description="Draft tokens a window needs to be conclusive; a window with fewer "
        "grows over the next intervals until it has them or reaches maxWindowAge.",
    )
    max_window_age: Annotated[
        Span, Duration("24h", "Longest a window may grow to collect minDraftTokens.")
    ] = Span("20m")
    cooldown: Annotated[Span, Duration("720h", "Quiet time after any change of K.")] = Span("5m")
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
        Span, Duration("24h", "A canary pod Pending this long switches to InPlace.")
    ] = Span("5m")
    max_inconclusive_windows: int = Field(
        default=5, ge=1, description="Inconclusive windows in a row before MetricsAvailable=False."
    )


# A floor of 1 would disable speculation even at 100% acceptance.
FLOOR: Rule[float] = Rule(
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

    min_acceptance: Annotated[float, FLOOR] = Field(
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
        Span,
        Duration(
            "720h",
            "Back-off before speculation is tried again once disabled; each re-probe "
            "that is disabled again doubles it, up to 16 times.",
        ),
    ] = Span("30m")


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
        Span, Duration("720h", "A trial not decided by then is rejected; the stable pods stay.")
    ] = Span("2h")


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
            for name, args in OWNED_ARGS_REFUSED
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
        dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), NODE_SELECTOR_KEYS
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
        Span,
        Duration(
            "5m",
            "Timeout of one scrape or query; at most the operator's --max-scrape-timeout "
            "(the chart's evaluation.maxScrapeTimeout, 30s by default).",
        ),
    ] = Span("5s")


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
                int(s.rollout.timeout.length.total_seconds())
                >= int(s.tuning.interval.length.total_seconds()) * s.rollout.windows
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
        if is_zero(budget):
            found.append(
                f"spec.runtime.disruptionBudget.maxUnavailable: {budget!r} lets no drain "
                "evict a Ready stable pod: a node drain (an upgrade, the cluster autoscaler) "
                "waits until the pod goes another way; 1 evicts one at a time"
            )
        return found
