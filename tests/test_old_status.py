"""Status written by an earlier operator is read, and decided on, as it was then.

tests/data/status-v1 holds real status bodies written by main's decide() at a9adef6 (one
per tuner state, from `specfleet simulate` runs), each with the observation decided on
next and what that version decided. Today's code reads the old body and must take the
same decision and write the same status (in today's shape).
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specfleet.operator import exploration
from specfleet.operator.api import (
    SpeculationState,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    TrackTotals,
)
from specfleet.operator.configs import config_of
from specfleet.operator.metrics import Observation, TrackWindow
from specfleet.operator.tuner import decide

OLD = Path(__file__).parent / "data" / "status-v1"
# Predicted gains in messages follow the fit, whose arithmetic changed since.
PERCENT = re.compile(r"[+-]?\d+\.\d%")


def _as_decided_today(
    spec: SpeculativeModelSpec, then: SpeculativeModelStatus, actions: list[str]
) -> None:
    """The one decision that changed on purpose since the fixtures: a re-probe after the
    back-off tries the requested K, no longer minTokens (a recovered draft at K=1 of a
    parallel drafter is barely faster than plain decoding)."""
    last = then.history[-1] if then.history and "Reprobe" in actions else None
    if last is not None and last.action == "Reprobe" and last.reason.startswith("BackoffElapsed"):
        k = spec.speculation.tokens
        last.to_tokens = k
        last.reason = last.reason.replace(f"K={then.speculation.candidate_tokens}", f"K={k}")
        then.speculation.candidate_tokens = k
        if then.canary is not None:
            then.canary.candidate_tokens = k


def _window(data: dict[str, Any] | None) -> TrackWindow | None:
    if data is None:
        return None
    return TrackWindow(
        **{
            **data,
            "accepted_per_position": tuple(data["accepted_per_position"]),
            "ks": tuple(data["ks"]),
        }
    )


def _comparable(status: SpeculativeModelStatus) -> dict[str, Any]:
    """Status as JSON, with a trial's totals cut to what the old shape kept: the first
    position's acceptance, and the decode counters of the timed windows."""
    body = status.model_dump(by_alias=True, mode="json")
    # Added since the fixtures were written (the figure the floor judges, for ACCEPT).
    (body.get("acceptance") or {}).pop("judged", None)
    body.pop("config", None)  # the running config: its own test below
    # Added since: the acceptance last measured above the floor, where re-probes look.
    (body.get("speculation") or {}).pop("goodAcceptance", None)
    # The fit's arithmetic changed since (robust to slow minutes and slow targets): the
    # samples it rests on must be the same, its coefficients need not be.
    step_cost = body.get("stepCost") or {}
    for key in ("fitted", "relativeError", "perturbedWindows"):
        step_cost.pop(key, None)
    for condition in body.get("conditions") or []:
        condition["message"] = PERCENT.sub("%", condition["message"])
    for entry in body.get("history") or []:
        entry["reason"] = PERCENT.sub("%", entry["reason"])
    for track in ("stable", "canary"):
        totals = (body.get("canary") or {}).get(track)
        if totals is not None:
            first = sum(totals["counts"].pop("acceptedPerPosition")[:1])
            totals["counts"]["acceptedFirst"] = first
            totals["counts"].update(decodeSeconds=0.0, decodeSteps=0.0, engineSteps=0.0)
            timed = totals["timed"]
            totals["timed"] = {
                key: timed[key] for key in ("decodeSeconds", "decodeSteps", "engineSteps")
            }
    return body


@pytest.mark.parametrize("path", sorted(OLD.glob("*.json")), ids=lambda p: p.stem)
def test_an_old_status_is_read_and_decided_on_as_before(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exploration is newer than the fixtures (its trials would be new decisions, not the
    # old status read differently): the decisions compared are the ones that existed.
    monkeypatch.setattr(exploration, "EXPLORATION_BUDGET", 0)
    record = json.loads(path.read_text())
    spec = SpeculativeModelSpec.model_validate(record["spec"])
    old = SpeculativeModelStatus.model_validate(record["status"])
    observation = Observation(
        _window(record["stable"]),
        _window(record["canary"]),
        canary_pending_since=record["canaryPendingSince"],
    )
    decided = decide(spec, old, observation, datetime.fromisoformat(record["now"]))
    assert [a.kind for a in decided.actions] == record["decided"]["actions"]
    then = SpeculativeModelStatus.model_validate(record["decided"]["status"])
    _as_decided_today(spec, then, record["decided"]["actions"])
    assert _comparable(decided.status) == _comparable(then)
    # A status from before config trials takes the spec's config as running: no trial.
    config = decided.status.config
    assert config is not None and config.trial is None
    assert config.running.hash == config_of(spec).hash


def test_the_fixtures_cover_every_state_of_the_old_shape() -> None:
    states = {path.stem for path in OLD.glob("*.json")}
    assert {"stable", "canary-trial", "inplace-trial", "disabled", "rejected", "schedule"} <= states
    collecting = [json.loads(p.read_text())["status"] for p in OLD.glob("*collecting*.json")]
    assert any("drafts" in (s["openWindows"].get("canary") or {}) for s in collecting)


def test_old_flat_totals_move_into_counts() -> None:
    old = {
        "drafts": 10.0,
        "draftTokens": 30.0,
        "acceptedTokens": 20.0,
        "acceptedFirst": 9.0,
        "generatedTokens": 40.0,
        "decodeSeconds": 1.5,
        "decodeSteps": 30.0,
        "engineSteps": 10.0,
        "windows": 2,
    }
    totals = TrackTotals.model_validate(old)
    assert totals.counts.drafts == 10.0 and totals.counts.generation_tokens == 40.0
    assert totals.accepted_first == 9.0
    assert (totals.timed.decode_seconds, totals.timed.engine_steps) == (1.5, 10.0)
    assert totals.timed.drafts == 0.0  # only the decode counters were timed-only
    # A merge patch leaves old keys beside the new objects: the new ones win.
    both = {**old, **totals.model_dump(by_alias=True, mode="json")}
    assert TrackTotals.model_validate({**both, "drafts": 99.0}) == totals


def test_old_flat_rejected_fields_become_one_rejected_object() -> None:
    until = "2026-01-01T01:00:00Z"
    old = {"rejectedTokens": [5, 6], "rejectedSchedule": None, "rejectedUntil": until}
    state = SpeculationState.model_validate(old)
    assert state.rejected is not None
    assert (state.rejected.tokens, state.rejected.schedule) == ([5, 6], None)
    assert state.rejected_tokens == [5, 6]
    # Nothing was rejected without an until: no object, whatever the lists held.
    assert (
        SpeculationState.model_validate({"rejectedTokens": [], "rejectedUntil": None}).rejected
        is None
    )
    # A merge patch leaves the old keys beside the new object: the object wins.
    both = {**old, **state.model_dump(by_alias=True, mode="json"), "rejectedTokens": [9]}
    assert SpeculationState.model_validate(both) == state
