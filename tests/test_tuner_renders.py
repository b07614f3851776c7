"""Every status `decide` returns renders: random decision sequences (schedules, re-probes,
rollbacks, trials, slow windows, idle windows) and each status through `render.manifests`."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel, SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.tuner import decide
from specfleet.runtime.sim_model import StepCost
from tests.decisions import CHAT, CODE, STALE, T0, make_spec, window

SCHEDULES: list[dict[str, Any]] = [
    {"mode": "Off"},
    {"mode": "Learned"},
    {"mode": "Fixed", "bands": [{"upToBatch": 8, "tokens": 6}, {"tokens": 2}]},
    {
        "mode": "Fixed",
        "bands": [{"upToBatch": 2, "tokens": 7}, {"upToBatch": 16, "tokens": 3}, {"tokens": 0}],
    },
]
ENGINE = StepCost()
SLOW = StepCost(target_forward_ms=30.0)


def _model(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> SpeculativeModel:
    return SpeculativeModel.model_validate(
        {
            "apiVersion": "specfleet.io/v1alpha1",
            "kind": "SpeculativeModel",
            "metadata": {"name": "m", "namespace": "serving", "uid": "u", "generation": 1},
            "spec": spec.model_dump(by_alias=True, exclude_none=True),
            "status": status.model_dump(by_alias=True, mode="json", exclude_none=True),
        }
    )


@st.composite
def sequences(draw: st.DrawFn) -> tuple[SpeculativeModelSpec, list[tuple[Any, int, bool]]]:
    spec = make_spec(
        speculation={
            "tokens": 3,
            "minTokens": 1,
            "maxTokens": 8,
            "schedule": draw(st.sampled_from(SCHEDULES)),
        },
        tuning={
            "cooldown": "1m",
            "canaryWindows": draw(st.integers(1, 2)),
            "strategy": draw(st.sampled_from(["Canary", "InPlace"])),
        },
        rollback={
            "failureLimit": draw(st.integers(1, 2)),
            "reprobeAfter": "2m",
            "metric": draw(st.sampled_from(["FirstPositionAcceptance", "DraftAcceptanceRate"])),
            "belowFloor": draw(st.sampled_from(["KeepFastest", "Disable"])),
        },
    )
    steps = draw(
        st.lists(
            st.tuples(
                st.sampled_from([None, "idle", CODE, CHAT, STALE]),
                st.sampled_from([1, 4, 16, 32]),
                st.booleans(),  # a slow window (step time x10)
            ),
            min_size=5,
            max_size=50,
        )
    )
    return spec, steps


def _idle(k: int) -> TrackWindow:
    return replace(
        window(CODE, k),
        drafts=0,
        draft_tokens=0,
        accepted_tokens=0,
        accepted_per_position=(),
        generation_tokens=0,
        running_requests=0,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequences())
def test_every_decided_status_renders(
    run: tuple[SpeculativeModelSpec, list[tuple[Any, int, bool]]],
) -> None:
    spec, steps = run
    status = SpeculativeModelStatus()
    now = T0
    for profile, batch, slow in steps:
        sp = status.speculation
        k = 0 if sp.off is not None else (sp.tokens or spec.speculation.tokens)
        engine = SLOW if slow else ENGINE
        stable = canary = None
        if profile == "idle":
            stable = _idle(k)
        elif profile is not None:
            stable = window(profile, k, batch=batch, engine=engine)
            if k == 0:
                stable = replace(
                    stable, drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=()
                )
            if (on_canary := status.canary_run) is not None:
                canary = replace(
                    window(profile, on_canary[0], 5_000, batch=batch, engine=engine), pods=1
                )
        now += timedelta(minutes=1)
        status = decide(spec, status, Observation(stable, canary), now).status
        manifests = render.manifests(_model(spec, status))
        assert [m["kind"] for m in manifests] == [
            "Deployment",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
        ]


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0, 1e12, allow_nan=False),
    st.floats(0, 1e12, allow_nan=False),
    st.floats(0, 1e12, allow_nan=False),
    st.floats(0, 1e9, allow_nan=False),
    st.floats(0, 1e12, allow_nan=False),
    st.floats(0, 1e12, allow_nan=False),
)
def test_no_finite_counters_raise(
    drafts: float,
    accepted: float,
    steps: float,
    seconds: float,
    engine_steps: float,
    running: float,
) -> None:
    """Any finite counter values, step times under a nanosecond included, are decided
    on without an exception (the evaluation, the floor's included, is never lost)."""
    spec = make_spec(rollback={"failureLimit": 1})
    status = SpeculativeModelStatus()
    now = T0
    for k_window in range(3):
        k = status.speculation.tokens or 3
        extreme = TrackWindow(
            drafts=drafts,
            draft_tokens=drafts * k,
            accepted_tokens=min(accepted, drafts * k),
            accepted_per_position=tuple(min(accepted, drafts) / (i + 1) for i in range(k)),
            generation_tokens=drafts + accepted,
            seconds=60,
            pod_seconds=120,
            pods=2,
            running_requests=running,
            decode_steps=steps,
            engine_steps=engine_steps,
            decode_seconds=seconds * (k_window + 1),
        )
        now += timedelta(minutes=1)
        status = decide(spec, status, Observation(extreme, extreme), now).status
        fitted = status.step_cost.fitted if status.step_cost else None
        if fitted is not None:
            assert all(
                math.isfinite(v) for v in (fitted.target_forward_ms, fitted.verify_ms_per_token)
            )
