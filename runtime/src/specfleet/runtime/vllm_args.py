"""The exact `vllm serve` argv for a runtime config (vLLM 0.33's CLI)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specfleet.runtime.config import ConfigError, Method, RuntimeConfig

# vLLM options that set what the runtime renders: the flags it passes, the speculative
# config's own flags (--spec-* write its keys), and a config file (it can set any option,
# and sets the speculative config when the runtime renders none). Each with every
# spelling vLLM 0.33's parser has for it; the contract test checks them against vLLM.
# "--model" comes first: after "--" or a lone "-" vLLM reads a positional model.
OWNED_FLAGS: dict[str, tuple[str, ...]] = {
    "--model": ("--model",),
    "--served-model-name": ("--served-model-name",),
    "--tensor-parallel-size": ("--tensor-parallel-size", "-tp"),
    "--pipeline-parallel-size": ("--pipeline-parallel-size", "-pp"),
    "--data-parallel-size": ("--data-parallel-size", "-dp"),
    "--nnodes": ("--nnodes", "-n"),
    "--node-rank": ("--node-rank", "-r"),
    "--master-addr": ("--master-addr",),
    "--headless": ("--headless",),
    "--host": ("--host",),
    "--port": ("--port",),
    "--speculative-config": ("--speculative-config", "-sc"),
    "--spec-method": ("--spec-method",),
    "--spec-model": ("--spec-model",),
    "--spec-tokens": ("--spec-tokens",),
    "--config": ("--config",),
}


ITERATION_DETAILS_FLAG = "--enable-logging-iteration-details"


# The speculative decoding flags of vLLM releases before `--speculative-config` (0.7 and
# earlier; other operators and old guides still write them). vLLM 0.33 stops at start on
# "unrecognized arguments": refused up front instead, each with the runtime option (and
# SpeculativeModel field) that replaced it.
@dataclass(frozen=True)
class Replacement:
    """What took over an older flag: the runtime's own flag and the SpeculativeModel field
    that sets it, or, when nothing did, why."""

    flag: str | None = None
    field: str | None = None
    why_none: str = ""

    def for_runtime(self) -> str:
        """What a user of specfleet-runtime writes instead (one of its own flags, which
        may be spelt like vLLM's old one: it is not an extra vLLM arg)."""
        return f"specfleet-runtime's own {self.flag}" if self.flag else f"nothing: {self.why_none}"

    def for_spec(self) -> str:
        """What a SpeculativeModel sets instead."""
        return f"set {self.field}" if self.field else f"drop it: {self.why_none}"


OLDER_SPECULATIVE_FLAGS: dict[str, Replacement] = {
    "--speculative-model": Replacement("--draft-model", "spec.draft.model"),
    "--num-speculative-tokens": Replacement("--num-speculative-tokens", "spec.speculation.tokens"),
    "--speculative-draft-tensor-parallel-size": Replacement(
        "--draft-tensor-parallel-size", "spec.draft.tensorParallelSize"
    ),
    "--ngram-prompt-lookup-min": Replacement("--prompt-lookup-min", "spec.draft.promptLookupMin"),
    "--ngram-prompt-lookup-max": Replacement("--prompt-lookup-max", "spec.draft.promptLookupMax"),
    "--speculative-max-model-len": Replacement(why_none="vLLM 0.33 sizes the draft itself"),
    "--speculative-disable-by-batch-size": Replacement(
        "--batch-schedule", "spec.speculation.schedule"
    ),
    "--speculative-model-quantization": Replacement(why_none="vLLM 0.33 reads it from the draft"),
    "--speculative-disable-mqa-scorer": Replacement(why_none="vLLM 0.33 has no MQA scorer"),
    "--spec-decoding-acceptance-method": Replacement(
        "--rejection-sample-method", "spec.draft.rejectionSampleMethod"
    ),
    "--typical-acceptance-sampler-posterior-threshold": Replacement(
        why_none="vLLM 0.33 has no typical sampler"
    ),
    "--typical-acceptance-sampler-posterior-alpha": Replacement(
        why_none="vLLM 0.33 has no typical sampler"
    ),
    "--disable-logprobs-during-spec-decoding": Replacement(why_none="vLLM 0.33 dropped it"),
}
# Each exactly, '_' for an inner '-', alone or with =value: no prefixes, which may be
# another flag's in vLLM 0.33. No backslash or quote, so CEL's matches() reads it as
# Python does.
OLDER_SPECULATIVE_PATTERN = (
    "^--("
    + "|".join(flag[2:].replace("-", "[-_]") for flag in OLDER_SPECULATIVE_FLAGS)
    + ")(=(?s:.)*)?$"
)


def older_speculative_flag(arg: str) -> str | None:
    """The older vLLM speculative flag an arg spells, if any."""
    if not re.fullmatch(OLDER_SPECULATIVE_PATTERN, arg):
        return None
    return arg.split("=", 1)[0].replace("_", "-")


def _prefixes(spellings: list[str], depth: int = 0) -> str:
    """A regex for every non-empty prefix of the spellings. A '-' inside a long option's
    name may be written '_' (vLLM's parser reads it as '-'); the leading ones may not."""
    branches: dict[str, list[str]] = {}
    for spelling in spellings:
        if spelling:
            branches.setdefault(spelling[0], []).append(spelling[1:])
    alternatives = [
        ("[-_]" if char == "-" and depth >= 2 else char) + _prefixes(rests, depth + 1)
        for char, rests in sorted(branches.items())
    ]
    if not alternatives:
        return ""
    return f"({'|'.join(alternatives)})" + ("?" if depth else "")


def _owned_pattern(spellings: list[str]) -> str:
    """Args vLLM's parser may read as one of the spellings: any prefix of one (argparse
    takes an unambiguous prefix, and an ambiguous one fails inside vLLM anyway), alone or
    with `=value` or `.key` (vLLM's JSON keys); or a short option with a value glued on
    that starts with no letter (vLLM's short options go on in letters: -dpl, -dpn... are
    flags of their own). Anchored, with no backslash or quote, so CEL's matches() reads
    it as Python does."""
    shorts = [s for s in spellings if not s.startswith("--")]
    glued = [f"|({'|'.join(shorts)})[^A-Za-z](?s:.)*"] if shorts else []
    return f"^({_prefixes(spellings)}([=.](?s:.)*)?{''.join(glued)})$"


OWNED_ARG_PATTERN = _owned_pattern([s for spellings in OWNED_FLAGS.values() for s in spellings])
# The API server costs a CEL matches() at the arg's length times the pattern's and stops
# a rule past its per-call limit: over MAX_ARGS args of MAX_ARG_LENGTH (the API's) the
# one pattern above would, so admission checks the owned flags in groups, one rule each,
# whose patterns are at most this long (as long as the one pattern was when it passed).
OWNED_PATTERN_MAX = 414


def _owned_groups() -> tuple[tuple[str, ...], ...]:
    """OWNED_FLAGS in order, cut into groups whose patterns are at most OWNED_PATTERN_MAX."""
    groups: list[list[str]] = [[]]
    for owner in OWNED_FLAGS:
        spellings = [s for o in [*groups[-1], owner] for s in OWNED_FLAGS[o]]
        if groups[-1] and len(_owned_pattern(spellings)) > OWNED_PATTERN_MAX:
            groups.append([])
        groups[-1].append(owner)
    return tuple(tuple(group) for group in groups)


# Each group of owned flags and its pattern: the CRD's rules over runtime.args.
OWNED_ARG_PATTERNS: dict[tuple[str, ...], str] = {
    group: _owned_pattern([s for owner in group for s in OWNED_FLAGS[owner]])
    for group in _owned_groups()
}
_OWNED_BY = {owner: re.compile(_owned_pattern(list(s))) for owner, s in OWNED_FLAGS.items()}


def owned_flag(arg: str) -> str | None:
    """The owned flag an extra arg may set in vLLM's parser, if any."""
    return next((owner for owner, pattern in _OWNED_BY.items() if pattern.fullmatch(arg)), None)


def speculative_config(config: RuntimeConfig) -> dict[str, Any] | None:
    """vLLM's `--speculative-config` for the config's method; None for method none.
    `method` is always explicit: vLLM would otherwise guess it from the draft's path."""
    method = config.method
    if not method.speculates:
        return None
    spec: dict[str, Any] = {"method": method.vllm_name}
    if config.draft_model and method.takes_draft_model:
        spec["model"] = config.draft_model
    if config.num_speculative_tokens is not None:
        spec["num_speculative_tokens"] = config.num_speculative_tokens
    if method.parallel_drafting:
        spec["parallel_drafting"] = True  # vLLM sets it itself for dflash and dspark
    if method.prompt_lookup:
        if config.prompt_lookup_min is not None:
            spec["prompt_lookup_min"] = config.prompt_lookup_min
        if config.prompt_lookup_max is not None:
            spec["prompt_lookup_max"] = config.prompt_lookup_max
    if method is Method.SUFFIX:
        for key, value in (
            ("suffix_decoding_max_tree_depth", config.suffix_max_tree_depth),
            ("suffix_decoding_max_cached_requests", config.suffix_max_cached_requests),
            ("suffix_decoding_max_spec_factor", config.suffix_max_spec_factor),
            ("suffix_decoding_min_token_prob", config.suffix_min_token_prob),
        ):
            if value is not None:
                spec[key] = value
    if config.draft_tensor_parallel_size is not None and method.learned_draft:
        spec["draft_tensor_parallel_size"] = config.draft_tensor_parallel_size
    if config.draft_sample_method is not None:
        spec["draft_sample_method"] = config.draft_sample_method.value
    if config.rejection_sample_method is not None:
        spec["rejection_sample_method"] = config.rejection_sample_method.value
    if config.adaptive_verification:
        spec["enable_adaptive_verification"] = True
    if config.startup_schedule:
        spec["num_speculative_tokens_per_batch_size"] = [
            [entry.start, entry.end, entry.k] for entry in config.startup_schedule
        ]
    return spec


def refuse_collisions(extra_args: Sequence[str]) -> None:
    """Raise ConfigError when an extra arg may set a flag the runtime owns. The API
    checks `runtime.args` with this function too, and CEL with OWNED_ARG_PATTERN."""
    if extra_args and not extra_args[0].startswith("-"):
        raise ConfigError(
            f"the first extra vLLM arg {extra_args[0]!r} is positional: vLLM would read a "
            "second model, and the model is the runtime's to set"
        )
    for arg in extra_args:
        older = older_speculative_flag(arg)
        if older is not None:
            raise ConfigError(
                f"extra vLLM arg {arg!r} is a speculative decoding flag of vLLM before 0.8, "
                f"which vLLM 0.33 refuses: use {OLDER_SPECULATIVE_FLAGS[older].for_runtime()} "
                "instead"
            )
        owner = owned_flag(arg)
        if owner is not None:
            raise ConfigError(
                f"extra vLLM arg {arg!r} would set {owner}, which the runtime owns (vLLM reads "
                "any prefix of a flag, '_' for '-', =value and .key forms)"
            )


def vllm_argv(config: RuntimeConfig) -> list[str]:
    """The full argv that `serve` execs: `vllm serve MODEL ...`."""
    refuse_collisions(config.extra_args)
    argv = ["vllm", "serve", config.model]
    if config.served_model_name:
        argv += ["--served-model-name", config.served_model_name]
    argv += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    # Left out at 1, vLLM's default: argv of single-GPU and TP-only configs stay as before.
    if config.pipeline_parallel_size > 1:
        argv += ["--pipeline-parallel-size", str(config.pipeline_parallel_size)]
    if config.data_parallel_size > 1:
        argv += ["--data-parallel-size", str(config.data_parallel_size)]
    if config.nnodes > 1:
        # vLLM's multi-node launch without Ray (its multiproc executor across nodes).
        argv += ["--nnodes", str(config.nnodes), "--master-addr", str(config.master_addr)]
        if config.headless:
            argv += ["--node-rank", str(config.node_rank), "--headless"]
    if config.host is not None:
        argv += ["--host", config.host]
    if config.port is not None:
        argv += ["--port", str(config.port)]
    spec = speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if config.hot_schedule:
        # Per-step time and batch reach the step-stats plugin only with these details.
        argv.append(ITERATION_DETAILS_FLAG)
    return argv + list(config.extra_args)
