"""The exact `vllm serve` argv for a runtime config (vLLM 0.33's CLI)."""

from __future__ import annotations

import json
from typing import Any

from specfleet.runtime.config import ConfigError, Method, RuntimeConfig

# Flags the runtime renders itself, with every spelling vLLM 0.33's parser accepts
# (short aliases; FlexibleArgumentParser also maps underscores to dashes). An extra
# arg that sets one of them would silently override the operator's rendering.
OWNED_FLAGS: dict[str, tuple[str, ...]] = {
    "--speculative-config": ("--speculative-config", "-sc"),
    "--model": ("--model",),
    "--served-model-name": ("--served-model-name",),
    "--tensor-parallel-size": ("--tensor-parallel-size", "-tp"),
    "--host": ("--host",),
    "--port": ("--port",),
}


def speculative_config(config: RuntimeConfig) -> dict[str, Any] | None:
    """vLLM's `--speculative-config` for the config's method; None for method none."""
    method = config.method
    if not method.speculates:
        return None
    spec: dict[str, Any] = {
        # P-EAGLE is EAGLE-3 with parallel drafting; vLLM has no "peagle" method.
        "method": Method.EAGLE3.value if method is Method.PEAGLE else method.value,
    }
    if method.uses_draft_model:
        spec["model"] = config.draft_model
    spec["num_speculative_tokens"] = config.num_speculative_tokens
    if method.parallel_drafting:
        spec["parallel_drafting"] = True
    if method is Method.NGRAM:
        if config.prompt_lookup_min is not None:
            spec["prompt_lookup_min"] = config.prompt_lookup_min
        if config.prompt_lookup_max is not None:
            spec["prompt_lookup_max"] = config.prompt_lookup_max
    if config.draft_tensor_parallel_size is not None and method.uses_draft_model:
        spec["draft_tensor_parallel_size"] = config.draft_tensor_parallel_size
    if config.draft_sample_method is not None:
        spec["draft_sample_method"] = config.draft_sample_method.value
    if config.batch_schedule:
        spec["num_speculative_tokens_per_batch_size"] = [
            [entry.start, entry.end, entry.k] for entry in config.batch_schedule
        ]
    return spec


def _normalized(arg: str) -> str:
    """The flag part of an arg, spelled with dashes as vLLM's parser reads it."""
    if not arg.startswith("--"):
        return arg
    # `--speculative-config.method=x` sets one key of the JSON flag: still that flag.
    name = arg.split("=", 1)[0].split(".", 1)[0]
    return "--" + name[2:].replace("_", "-")


def refuse_collisions(extra_args: tuple[str, ...]) -> None:
    """Raise ConfigError when an extra arg sets a flag the runtime owns."""
    if extra_args and not extra_args[0].startswith("-"):
        raise ConfigError(
            f"extra vLLM arg {extra_args[0]!r} is a positional model; the runtime sets the "
            "model (use --model)"
        )
    for arg in extra_args:
        flag = _normalized(arg)
        for owner, spellings in OWNED_FLAGS.items():
            if flag in spellings or any(arg.startswith(s + "=") for s in spellings):
                raise ConfigError(
                    f"extra vLLM arg {arg!r} collides with {owner}, which the runtime owns "
                    "(set it through the runtime's own flags)"
                )


def vllm_argv(config: RuntimeConfig) -> list[str]:
    """The full argv that `serve` execs: `vllm serve MODEL ...`."""
    refuse_collisions(config.extra_args)
    argv = ["vllm", "serve", config.model]
    if config.served_model_name:
        argv += ["--served-model-name", config.served_model_name]
    argv += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.host is not None:
        argv += ["--host", config.host]
    if config.port is not None:
        argv += ["--port", str(config.port)]
    spec = speculative_config(config)
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    return argv + list(config.extra_args)
