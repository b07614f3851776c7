"""Replay recorded window sequences through decide and compare with the recorded decisions.

The files in tests/data hold what the operator saw (the stable and canary windows of each
evaluation) and what was decided. A change of behaviour shows here as a diff of actions;
if it is intended, re-record (`.venv/bin/python tests/test_tuner_replay.py`) and say why
in the commit.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from specfleet.operator.api import SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.observations import Observation, TrackWindow
from specfleet.operator.simulate import load_scenario, scenario_spec, simulate
from specfleet.operator.tuner import Decided, decide

DATA = Path(__file__).parent / "data"
SCENARIOS = Path(__file__).parent.parent / "scenarios"
# (file in tests/data, scenario file, variant, seed)
RECORDINGS = [
    ("replay-stale-draft.json", "stale-draft.yaml", "c8/published", 0),
    ("replay-code-to-chat.json", "code-to-chat.yaml", "c1/published", 0),
]


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
        got = (actions, status.speculation.tokens, _candidate(status))
        want = (row["actions"], row["tokens"], row["candidate"])
        assert got == want, f"window {index}"
    # the status survives the API server: it round-trips through JSON unchanged
    dumped = status.model_dump(mode="json", by_alias=True)
    assert SpeculativeModelStatus.model_validate(dumped) == status


def _candidate(status: SpeculativeModelStatus) -> int | None:
    """The K on the canary pod, as recorded ("candidate")."""
    run = status.canary_run
    return run[0] if run else None


def test_stale_draft_recording_turns_speculation_off_within_failure_limit_plus_one() -> None:
    recording = json.loads((DATA / "replay-stale-draft.json").read_text())
    kinds = [row["actions"] for row in recording["windows"]]
    disabled = next(i for i, a in enumerate(kinds) if "Disable" in a)
    assert 75 <= disabled <= 75 + 2 + 1  # the draft goes stale at 75 minutes, failureLimit 2


def record() -> None:
    """Run each recording's scenario through `simulate` and write what decide saw and did."""
    for name, scenario_file, variant, seed in RECORDINGS:
        scenario = load_scenario(SCENARIOS / scenario_file, variant)
        rows: list[dict[str, Any]] = []

        def recorder(
            spec: SpeculativeModelSpec,
            status: SpeculativeModelStatus,
            observation: Observation,
            now: datetime,
            rows: list[dict[str, Any]] = rows,
        ) -> Decided:
            decided = decide(spec, status, observation, now)
            status, sp = decided.status, decided.status.speculation
            rows.append(
                {
                    "now": now.isoformat(),
                    "stable": _window(observation.stable),
                    "canary": _window(observation.canary),
                    "actions": [a.kind for a in decided.actions if a.kind != "Inconclusive"],
                    "tokens": sp.tokens,
                    "candidate": _candidate(status),
                    "disabled": sp.off is not None,
                }
            )
            return decided

        simulate(scenario, seed, decider=recorder)
        spec = scenario_spec(scenario).model_dump(mode="json", by_alias=True)
        body = {"scenario": scenario.name, "seed": seed, "spec": spec, "windows": rows}
        (DATA / name).write_text(json.dumps(body, indent=1) + "\n")
        print(f"wrote tests/data/{name}: {len(rows)} windows of {scenario.name}")


def _window(window: TrackWindow | None) -> dict[str, Any] | None:
    return None if window is None else dataclasses.asdict(window)


if __name__ == "__main__":
    record()
