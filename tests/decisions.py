"""Helpers of the decision-core tests: specs, windows of engines that follow an acceptance
profile exactly, and a fleet that runs decide window after window."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from specfleet.operator.api import (
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.tuner import decide
from specfleet.runtime.config import Drafting
from specfleet.runtime.decoding import cumulative_acceptance
from specfleet.runtime.sim_model import StepCost, step_seconds

T0 = datetime(2026, 1, 1, tzinfo=UTC)


CODE = [0.96, 0.94, 0.92, 0.90, 0.88, 0.86, 0.84, 0.82]


CHAT = [0.85, 0.55, 0.45, 0.40, 0.38, 0.35]


BROKEN = [0.4, 0.3, 0.2]


# Block acceptance under the floor, but deep enough that speculation still pays.
UNDER_FLOOR = [0.70, 0.65, 0.6, 0.55]


# A draft that no longer matches the target: speculation costs more than it gives.
STALE = [0.04, 0.02]


DAR = {"metric": "DraftAcceptanceRate"}


def make_spec(**policy: Any) -> SpeculativeModelSpec:
    manifest: dict[str, Any] = {
        "model": {"name": "t"},
        "draft": {"method": "peagle", "model": "d"},
        # Restart: these tests follow trials on canary and restarted pods; hot pods'
        # tests ask for switching Hot (or the default, Auto) themselves.
        "speculation": {"tokens": 3, "minTokens": 1, "maxTokens": 8, "switching": "Restart"},
        "tuning": {"minDraftTokens": 1000, "cooldown": "3m", "interval": "60s"},
    }
    for key, value in policy.items():
        manifest[key] = {**manifest.get(key, {}), **value}
    return SpeculativeModelSpec.model_validate(manifest)


def window(
    conditional: list[float],
    k: int,
    drafts: float = 20_000,
    batch: int = 4,
    engine: StepCost | None = None,
) -> TrackWindow:
    """A window of engines following `conditional` exactly; with `engine`, they report
    step times as vLLM does (one inter-token latency per request per step)."""
    per_pos = tuple(drafts * r for r in cumulative_acceptance(conditional, k))
    steps = drafts if engine is not None else 0.0
    seconds = (
        drafts * step_seconds(engine, k, batch, Drafting.PARALLEL) if engine is not None else 0.0
    )
    return TrackWindow(
        drafts=drafts,
        draft_tokens=drafts * k,
        accepted_tokens=sum(per_pos),
        accepted_per_position=per_pos,
        generation_tokens=drafts + sum(per_pos),
        seconds=60,
        pod_seconds=120,
        pods=2,
        running_requests=2 * batch,
        decode_steps=steps,
        engine_steps=steps / batch,
        decode_seconds=seconds,
    )


class Fleet:
    """Runs decide window after window with engines following `profile` exactly."""

    def __init__(
        self, spec: SpeculativeModelSpec, engine: StepCost | None = None, batch: int = 4
    ) -> None:
        self.spec = spec
        self.engine = engine
        self.batch = batch
        self.status = SpeculativeModelStatus()
        self.now = T0
        self.kinds: list[list[str]] = []

    def _window(self, profile: list[float], k: int, drafts: float) -> TrackWindow:
        """K=0 (plain decoding): tokens and step times, no drafts."""
        measured = window(profile, k, drafts, self.batch, self.engine)
        return replace(measured, drafts=0) if k == 0 else measured

    def step(self, profile: list[float] | None, **observation: Any) -> list[str]:
        sp = self.status.speculation
        stable = canary = None
        if profile is not None:
            k = sp.stable_k if sp.tokens is not None else self.spec.speculation.tokens
            stable = self._window(profile, k, 20_000)
            if (run := self.status.canary_run) is not None:
                tried = self._window(profile, run[0], 10_000)
                canary = replace(tried, pods=1, running_requests=self.batch)
        self.now += timedelta(minutes=1)
        decided = decide(
            self.spec,
            self.status,
            Observation(stable=stable, canary=canary, **observation),
            self.now,
        )
        self.status = decided.status
        kinds = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        self.kinds.append(kinds)
        return kinds


# Verification compute-bound from 4 tokens on, and dear: at a batch of 4 no K pays.
NO_K_PAYS = StepCost(compute_bound_tokens=4, verify_ms_per_token=1.0)


# Verification compute-bound from 8 tokens on: the prior thinks deep K cheap, it is not.
DEAR_VERIFY = StepCost(compute_bound_tokens=8, verify_ms_per_token=0.5)


def scaled(spec: SpeculativeModelSpec, replicas: int) -> SpeculativeModelSpec:
    """The spec after a scaler wrote spec.replicas through the scale subresource."""
    return spec.model_copy(update={"replicas": replicas})
