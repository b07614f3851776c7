"""Replay recorded window sequences through decide and compare with the recorded decisions.

The files in tests/data hold what the operator saw (the stable and canary windows of each
evaluation) and what was decided. A change of behaviour shows here as a diff of actions;
if it is intended, re-record and say why in the commit.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specfleet.operator.api import SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.metrics import Observation, TrackWindow
from specfleet.operator.tuner import decide

DATA = Path(__file__).parent / "data"


def track(data: dict[str, Any] | None) -> TrackWindow | None:
    if data is None:
        return None
    return TrackWindow(**{**data, "accepted_per_position": tuple(data["accepted_per_position"])})


@pytest.mark.parametrize("path", sorted(DATA.glob("replay-*.json")), ids=lambda p: p.stem)
def test_replay(path: Path) -> None:
    recording = json.loads(path.read_text())
    spec = SpeculativeModelSpec.model_validate(recording["spec"])
    status = SpeculativeModelStatus()
    for index, row in enumerate(recording["windows"]):
        observation = Observation(track(row["stable"]), track(row["canary"]))
        decided = decide(spec, status, observation, datetime.fromisoformat(row["now"]))
        status = decided.status
        actions = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        got = (actions, status.speculation.tokens, status.speculation.candidate_tokens)
        want = (row["actions"], row["tokens"], row["candidate"])
        assert got == want, f"window {index}"
    # the status survives the API server: it round-trips through JSON unchanged
    dumped = status.model_dump(mode="json", by_alias=True)
    assert SpeculativeModelStatus.model_validate(dumped) == status


def test_drift_recording_rolls_back_within_failure_limit_plus_one() -> None:
    recording = json.loads((DATA / "replay-drift.json").read_text())
    kinds = [row["actions"] for row in recording["windows"]]
    rollback = next(i for i, a in enumerate(kinds) if {"Rollback", "StepDown"} & set(a))
    assert 75 <= rollback <= 75 + 2 + 1  # drift at 75 minutes, failureLimit 2
