"""Status follows spec edits through one path, recorded in history and reported as actions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from specfleet.operator.api import LastKnownGood, SpeculativeModel
from specfleet.operator.tuner import sync_with_spec
from specfleet.runtime.config import Drafting

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def synced(manifest: dict[str, Any], **status: Any) -> tuple[Any, list[str]]:
    model = SpeculativeModel.model_validate({**manifest, "status": status})
    decided = sync_with_spec(model.spec, model.status, T0, generation=4)
    return decided.status, [action.kind for action in decided.actions]


def test_first_sight_takes_k_from_the_spec_quietly(peagle_manifest: dict[str, Any]) -> None:
    status, actions = synced(peagle_manifest)
    assert status.speculation.tokens == 3
    assert status.speculation.requested_tokens == 3
    assert status.speculation.last_known_good == LastKnownGood(tokens=3)
    assert status.speculation.drafting is Drafting.PARALLEL
    assert actions == [] and status.history == []


def test_tuned_k_survives_unrelated_spec_changes(peagle_manifest: dict[str, Any]) -> None:
    tuned = {"speculation": {"tokens": 6, "requestedTokens": 3, "lastKnownGood": {"tokens": 6}}}
    status, actions = synced(peagle_manifest, **tuned)
    assert status.speculation.tokens == 6 and actions == []


def test_new_k_in_git_resets_k_drops_the_canary_and_says_so(
    peagle_manifest: dict[str, Any],
) -> None:
    peagle_manifest["spec"]["speculation"]["tokens"] = 4
    trial = {"tokens": 7, "startedAt": "2026-11-29T11:50:00Z", "stableReplicas": 1}
    tuned = {"speculation": {"tokens": 6, "requestedTokens": 3, "trial": trial}}
    status, actions = synced(peagle_manifest, **tuned)
    assert status.speculation.tokens == 4
    assert status.speculation.trial is None and status.canary_run is None
    assert actions == ["SpecChanged"]
    (entry,) = status.history
    assert (entry.action, entry.from_tokens, entry.to_tokens) == ("SpecChanged", 6, 4)


def test_new_k_in_git_re_enables_speculation_after_a_disable(
    peagle_manifest: dict[str, Any],
) -> None:
    """docs/tuning.md: a new speculation.tokens resets K, also after rollback disabled it."""
    peagle_manifest["spec"]["speculation"]["tokens"] = 2
    disabled = {
        "speculation": {
            "tokens": 1,
            "requestedTokens": 3,
            "off": {
                "reason": "NoKClearsFloor",
                "message": "no K clears the floor",
                "reprobeAt": "2026-11-29T12:30:00Z",
            },
        }
    }
    status, actions = synced(peagle_manifest, **disabled)
    assert status.speculation.off is None
    assert status.speculation.tokens == 2 and actions == ["SpecChanged"]


def test_narrowed_bounds_clamp_the_tuned_k_and_say_so(peagle_manifest: dict[str, Any]) -> None:
    peagle_manifest["spec"]["speculation"]["maxTokens"] = 5
    tuned = {"speculation": {"tokens": 8, "requestedTokens": 3}}
    status, actions = synced(peagle_manifest, **tuned)
    assert status.speculation.tokens == 5 and actions == ["Clamp"]
    assert status.history[-1].to_tokens == 5


def test_a_status_from_before_drafting_styles_keeps_its_learned_cost(
    peagle_manifest: dict[str, Any],
) -> None:
    fitted = {"targetForwardMs": 20.0, "draftMs": 1.0, "draftMsPerToken": 0.1,
              "verifyMsPerToken": 0.01, "computeBoundTokens": 64}  # fmt: skip
    old: dict[str, Any] = {
        "speculation": {"tokens": 3, "requestedTokens": 3, "parallelDrafting": True},
        "stepCost": {"fitted": fitted, "samples": []},
    }
    status, _ = synced(peagle_manifest, **old)
    assert status.speculation.drafting is Drafting.PARALLEL
    assert status.step_cost is not None and status.step_cost.fitted.target_forward_ms == 20.0
