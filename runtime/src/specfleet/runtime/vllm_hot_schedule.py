"""A vLLM general plugin: EngineCore utility methods that report and replace the per-batch
K schedule of a running engine, between two steps.

vLLM reads the K of each step from one list in the EngineCore process,
`Scheduler.dynamic_sd_lookup` (batch size -> K, built once from
`num_speculative_tokens_per_batch_size` by `build_dynamic_sd_schedule_lookup`); the
workers only consume the number it puts in the scheduler's output, and every buffer is
sized for `num_speculative_tokens`, the ceiling. Utility calls run on the engine's busy
loop between steps, so replacing the list there is race-free and takes effect at the
next `schedule()`. The list is rebuilt with vLLM's own function, so its validation and
clamp apply, after hot_schedule.py refused what vLLM would silently change.

vLLM loads general plugins in EngineCore before the scheduler exists (and in its other
processes, where EngineCore is not imported and this does nothing). Whether to install
is decided by behaviour: vLLM's lookup builder must expand a small schedule as this
plugin expects. The endpoint (vllm_schedule_endpoint.py) reaches the methods with
`call_utility_async`.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

from specfleet.runtime import vllm_parallel_draft_fix
from specfleet.runtime.hot_schedule import (
    Schedule,
    ScheduleRefused,
    ScheduleState,
    ks_in_force,
    parse_schedule,
    requested_generation,
    requested_schedule,
)

ENGINE_MODULE = "vllm.v1.engine.core"
LOOKUP_MODULE = "vllm.v1.spec_decode.dynamic.utils"
SET_METHOD = "specfleet_set_schedule"
GET_METHOD = "specfleet_schedule"
STATE_ATTRIBUTE = "_specfleet_schedule_state"
log = logging.getLogger("vllm.plugins.specfleet_hot_schedule")


def refusal(core: Any) -> str | None:
    """Why this engine cannot take a schedule between steps, if it cannot."""
    config = core.vllm_config
    if config.parallel_config.data_parallel_size > 1:
        return (
            "data parallel size > 1: vLLM drops per-batch schedules there (DP divergence); "
            "K changes need a restart"
        )
    if not getattr(core.scheduler, "num_spec_tokens", 0):
        return "the engine does not speculate"
    if getattr(core.scheduler, "dynamic_sd_lookup", None) is None:
        return (
            "the engine started without a per-batch schedule "
            "(num_speculative_tokens_per_batch_size): K changes need a restart"
        )
    return None


def _state(core: Any) -> ScheduleState:
    state = getattr(core, STATE_ATTRIBUTE, None)
    if state is None:
        startup = core.vllm_config.speculative_config.num_speculative_tokens_per_batch_size
        ceiling = core.scheduler.num_spec_tokens
        state = ScheduleState(parse_schedule([list(band) for band in startup], ceiling))
        setattr(core, STATE_ATTRIBUTE, state)
    return state


def _below_ceiling_refusal(core: Any, schedule: Schedule) -> str | None:
    """Parallel drafting at 0 < K < ceiling is wrong in stock vLLM; refused where the
    parallel-draft fix is not in force."""
    ceiling = core.scheduler.num_spec_tokens
    if not getattr(core.vllm_config.speculative_config, "parallel_drafting", False):
        return None
    if not any(0 < k < ceiling for _, _, k in schedule):
        return None
    if vllm_parallel_draft_fix.below_ceiling_works():
        return None
    return (
        "parallel drafting below its ceiling is broken in this vLLM and the fix is not "
        f"loaded or does not apply: use K=0 or K={ceiling}, or restart with the ceiling wanted"
    )


def report(core: Any) -> dict[str, Any]:
    """The schedule in force: generation, bands, ceiling and the Ks the lookup now
    schedules; or why this engine cannot change it."""
    reason = refusal(core)
    scheduler = core.scheduler
    body: dict[str, Any] = {
        "hot": reason is None,
        "reason": reason,
        "ceiling": getattr(scheduler, "num_spec_tokens", 0),
        "maxNumSeqs": scheduler.scheduler_config.max_num_seqs,
    }
    if reason is None:
        state = _state(core)
        body.update(
            generation=state.generation,
            schedule=[list(band) for band in state.schedule],
            ks=ks_in_force(scheduler.dynamic_sd_lookup),
        )
    return body


def set_schedule(core: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Apply {"generation": N, "schedule": [[start, end, K], ...]} or {"generation": N,
    "k": K}: the report with `changed`, or `refused` with its HTTP status and reason."""
    reason = refusal(core)
    if reason is not None:
        return {**report(core), "refused": True, "status": 409, "reason": reason}
    scheduler = core.scheduler
    ceiling, max_num_seqs = scheduler.num_spec_tokens, scheduler.scheduler_config.max_num_seqs
    state = _state(core)
    try:
        generation = requested_generation(body)
        schedule = requested_schedule(body, ceiling, max_num_seqs)
        changed = state.decide(generation, schedule)
        below = _below_ceiling_refusal(core, schedule)
        if below is not None:
            raise ScheduleRefused(below, 409)
        if changed:
            lookup = _build_lookup()([list(band) for band in schedule], max_num_seqs, ceiling)
            scheduler.dynamic_sd_lookup = lookup
            state.schedule, state.generation = schedule, generation
            log.info(
                "specfleet: schedule generation %d in force: %s (Ks %s)",
                generation,
                [list(band) for band in schedule],
                ks_in_force(lookup),
            )
    except ScheduleRefused as error:
        return {**report(core), "refused": True, "status": error.status, "reason": str(error)}
    except ValueError as error:  # vLLM's own validation: what it refuses, it says why
        return {**report(core), "refused": True, "status": 422, "reason": str(error)}
    return {**report(core), "refused": False, "changed": changed}


def _build_lookup() -> Any:
    return sys.modules[LOOKUP_MODULE].build_dynamic_sd_schedule_lookup


def builds_as_expected(build: Any) -> bool:
    """Whether vLLM's lookup builder expands a schedule as this plugin relies on: dense,
    1-indexed, gaps and tail carried forward, K clamped to the ceiling."""
    try:
        lookup = build([[1, 1, 3], [3, 3, 0]], 4, 2)
    except Exception:
        return False
    return bool(lookup == [0, 2, 2, 0, 0])


def _engine_set_schedule(self: Any, body: dict[str, Any]) -> dict[str, Any]:
    return set_schedule(self, body)


def _engine_schedule(self: Any) -> dict[str, Any]:
    return report(self)


def register() -> None:
    """The plugin's entry point: vLLM calls it once per process. Installs the utility
    methods on EngineCore where it is loaded (the engine process, and the API server's,
    where they are never called)."""
    engine = sys.modules.get(ENGINE_MODULE)
    engine_core = getattr(engine, "EngineCore", None)
    if engine_core is None or hasattr(engine_core, SET_METHOD):
        return
    try:
        build = importlib.import_module(LOOKUP_MODULE).build_dynamic_sd_schedule_lookup
    except (ImportError, AttributeError):
        log.warning("specfleet: this vLLM has no per-batch schedules; hot schedules are off")
        return
    if not builds_as_expected(build):
        log.warning("specfleet: vLLM's schedule lookup is not as expected; hot schedules are off")
        return
    setattr(engine_core, SET_METHOD, _engine_set_schedule)
    setattr(engine_core, GET_METHOD, _engine_schedule)
    log.info("specfleet: hot schedules installed (EngineCore.%s)", SET_METHOD)
