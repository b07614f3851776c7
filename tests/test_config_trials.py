"""Config trials: a changed draft model, method, image or vLLM args is tried against the
running config, promoted on measured goodput or rejected with the stable pods kept on
the last good config."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from specfleet.operator import render
from specfleet.operator.api import (
    ConditionType,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.conditions import condition_status
from specfleet.operator.configs import config_of
from specfleet.operator.observations import CanaryPending, Observation
from specfleet.operator.run import working_copy
from specfleet.operator.track_plan import plan
from specfleet.operator.tuner import decide, sync_with_spec
from specfleet.runtime.sim_model import StepCost
from tests.decisions import BROKEN, CHAT, CODE, T0, make_spec, window

ENGINE = StepCost()


def _with(spec: SpeculativeModelSpec, **changes: Any) -> SpeculativeModelSpec:
    """The spec with dotted fields changed, as a new commit would have it."""
    body = spec.model_dump(by_alias=True, exclude_none=True)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return SpeculativeModelSpec.model_validate(body)


class ConfigFleet:
    """Runs decide window after window; each config's pods follow its own profile."""

    def __init__(self, spec: SpeculativeModelSpec, profiles: dict[str, list[float]]) -> None:
        self.spec = spec
        self.profiles = profiles  # draft.model -> acceptance profile
        self.status = sync_with_spec(spec, SpeculativeModelStatus(), T0).status
        self.now = T0
        self.kinds: list[str] = []
        self.stable_models: list[str | None] = []

    def model(self) -> SpeculativeModel:
        return SpeculativeModel.model_validate(
            {
                "apiVersion": "specfleet.io/v1alpha1",
                "kind": "SpeculativeModel",
                "metadata": {"name": "m", "namespace": "ns"},
                "spec": self.spec.model_dump(by_alias=True, exclude_none=True),
                "status": self.status.model_dump(by_alias=True, exclude_none=True),
            }
        )

    def sync(self, forced: str | None = None) -> list[str]:
        decided = sync_with_spec(self.spec, self.status, self.now, forced_config=forced)
        self.status = decided.status
        kinds = [a.kind for a in decided.actions]
        self.kinds += kinds
        return kinds

    def step(self) -> list[str]:
        self.sync()
        stable_draft = plan(self.spec, self.status).stable.spec.draft.model
        self.stable_models.append(stable_draft)
        sp = self.status.speculation
        k = sp.tokens or self.spec.speculation.tokens
        stable = window(self.profiles[stable_draft or ""], k, engine=ENGINE)
        canary = None
        if (run := self.status.canary_run) is not None:
            draft = self.spec.draft.model or ""
            canary = replace(window(self.profiles[draft], run[0], 10_000, engine=ENGINE), pods=1)
        self.now += timedelta(minutes=1)
        decided = decide(
            self.spec, self.status, Observation(stable=stable, canary=canary), self.now
        )
        self.status = decided.status
        kinds = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        self.kinds += kinds
        return kinds


def _settled(profiles: dict[str, list[float]], **policy: Any) -> ConfigFleet:
    spec = make_spec(tuning={"enabled": False}, **policy)
    fleet = ConfigFleet(spec, profiles)
    for _ in range(3):
        fleet.step()
    return fleet


def test_the_hash_names_draft_model_method_image_and_args_and_nothing_else() -> None:
    spec = make_spec()
    same = config_of(spec).hash
    assert config_of(_with(spec, **{"speculation.tokens": 5})).hash == same
    assert config_of(_with(spec, **{"tuning.interval": "2m"})).hash == same
    changed = {
        config_of(_with(spec, **{"draft.model": "d2"})).hash,
        config_of(_with(spec, **{"draft.method": "eagle3"})).hash,
        config_of(_with(spec, **{"runtime.image": "vllm:next"})).hash,
        config_of(_with(spec, **{"runtime.args": ["--max-model-len", "4096"]})).hash,
    }
    assert same not in changed and len(changed) == 4


def test_a_new_model_runs_its_config_without_a_trial() -> None:
    fleet = ConfigFleet(make_spec(), {"d": CODE})
    assert fleet.status.config is not None
    assert fleet.status.config.running.hash == config_of(fleet.spec).hash
    assert fleet.status.config.trial is None and fleet.kinds == []


def test_a_better_head_is_tried_on_a_canary_and_promoted() -> None:
    fleet = _settled({"d": CHAT, "d2": CODE})
    # As if a deeper K had run with the old head: its positions 4-6 in the memory.
    fleet.status.speculation.good_acceptance = CHAT[:6]
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    assert fleet.sync() == ["StartConfigTrial"]
    model = fleet.model()
    stable, canary = render.deployment(model, "stable"), render.deployment(model, "canary")
    assert (_draft_arg(stable), _draft_arg(canary)) == ("d", "d2")
    assert canary["spec"]["replicas"] == 1
    for _ in range(6):
        fleet.step()
    assert "PromoteConfig" in fleet.kinds
    config = fleet.status.config
    assert config is not None and config.running.draft_model == "d2" and config.trial is None
    # K, the step cost and the acceptance per position are learned anew for the new draft.
    assert fleet.status.step_cost is None or fleet.status.step_cost.samples
    assert fleet.status.speculation.good_acceptance in (None, CODE[:3])
    assert fleet.status.canary_run is None
    assert condition_status(fleet.status.conditions, ConditionType.CONFIG_REJECTED) == "False"
    assert _draft_arg(render.deployment(fleet.model(), "stable")) == "d2"


def test_a_worse_head_is_rejected_and_the_stable_pods_never_run_it() -> None:
    fleet = _settled({"d": CODE, "d2": BROKEN})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    for _ in range(8):
        fleet.step()
    assert "RejectConfig" in fleet.kinds and "PromoteConfig" not in fleet.kinds
    assert set(fleet.stable_models) == {"d"}
    config = fleet.status.config
    assert config is not None and config.rejected is not None
    rejected = next(c for c in fleet.status.conditions if c.type is ConditionType.CONFIG_REJECTED)
    assert rejected.status == "True" and config.rejected.hash in rejected.message
    assert "FirstPositionAcceptance 0.400" in rejected.message  # BROKEN's first position
    assert fleet.status.canary_run is None
    # A K trial's canary after the rejection runs the config the stable pods run.
    assert _draft_arg(render.deployment(fleet.model(), "canary")) == "d"
    # Held back: the same hash does not start another trial.
    for _ in range(3):
        fleet.step()
    assert fleet.kinds.count("StartConfigTrial") == 1
    # A new commit (a new hash) starts a new trial.
    fleet.spec = _with(fleet.spec, **{"draft.model": "d3"})
    fleet.profiles["d3"] = CODE
    assert fleet.sync() == ["StartConfigTrial"]


def test_a_slower_head_passes_only_within_the_minimum_gain_allowed() -> None:
    profiles = {"d": CODE, "d2": [0.95, 0.93, 0.91, 0.89, 0.87, 0.85, 0.83, 0.81]}
    strict = _settled(profiles)
    lenient = _settled(profiles, rollout={"minGain": -0.05})
    for fleet in (strict, lenient):
        fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
        for _ in range(12):
            fleet.step()
    assert "RejectConfig" in strict.kinds
    assert "PromoteConfig" in lenient.kinds
    rejected = strict.status.config.rejected if strict.status.config else None
    assert rejected is not None and rejected.reason == "NoGain"
    assert "goodput -" in rejected.message and "needs +0.0%" in rejected.message


def test_reverting_the_spec_cancels_the_trial_and_clears_a_rejection() -> None:
    fleet = _settled({"d": CODE, "d2": BROKEN})
    original = fleet.spec
    fleet.spec = _with(original, **{"draft.model": "d2"})
    assert fleet.sync() == ["StartConfigTrial"]
    fleet.spec = original
    assert fleet.sync() == ["CancelConfigTrial"]
    assert fleet.status.canary_run is None
    fleet.spec = _with(original, **{"draft.model": "d2"})
    for _ in range(8):
        fleet.step()
    assert fleet.status.config is not None and fleet.status.config.rejected is not None
    fleet.spec = original
    fleet.sync()
    assert fleet.status.config.rejected is None
    assert condition_status(fleet.status.conditions, ConditionType.CONFIG_REJECTED) == "False"


def test_the_annotation_forces_a_rejected_config_through() -> None:
    fleet = _settled({"d": CODE, "d2": BROKEN})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    for _ in range(8):
        fleet.step()
    config = fleet.status.config
    assert config is not None and config.rejected is not None
    assert fleet.sync(forced="not-this-hash") == []
    assert fleet.sync(forced=config.rejected.hash) == ["AdoptConfig"]
    assert fleet.status.config is not None and fleet.status.config.running.draft_model == "d2"
    assert _draft_arg(render.deployment(fleet.model(), "stable")) == "d2"


def test_immediate_rolls_the_stable_pods_at_once() -> None:
    fleet = _settled({"d": CODE, "d2": BROKEN}, rollout={"strategy": "Immediate"})
    fleet.spec = _with(fleet.spec, **{"runtime.image": "vllm:next"})
    assert fleet.sync() == ["AdoptConfig"]
    assert render.deployment(fleet.model(), "stable")["spec"]["template"]["spec"]["containers"][0][
        "image"
    ] == ("vllm:next")


@pytest.mark.parametrize(("head", "outcome"), [(CODE, "PromoteConfig"), (BROKEN, "RejectConfig")])
def test_in_place_switches_after_a_window_before_and_judges_after(
    head: list[float], outcome: str
) -> None:
    fleet = _settled({"d": CHAT, "d2": head}, rollout={"strategy": "InPlace"})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    assert fleet.sync() == ["StartConfigTrial"]
    assert fleet.status.canary_run is None  # no canary
    assert fleet.step() == ["SwitchConfigInPlace"]
    assert _draft_arg(render.deployment(fleet.model(), "stable")) == "d2"
    for _ in range(8):
        fleet.step()
    assert outcome in fleet.kinds
    want = "d2" if outcome == "PromoteConfig" else "d"
    assert want == _draft_arg(render.deployment(fleet.model(), "stable"))


def test_a_trial_not_decided_within_the_timeout_is_rejected() -> None:
    fleet = _settled({"d": CODE, "d2": CODE}, rollout={"timeout": "5m"})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    fleet.sync()
    fleet.now += timedelta(minutes=10)
    fleet.step()
    assert fleet.status.config is not None and fleet.status.config.rejected is not None
    assert fleet.status.config.rejected.reason == "Timeout"


def _draft_arg(deployment: dict[str, Any]) -> str:
    """The draft model a Deployment's pods load."""
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--draft-model") + 1]


def test_a_new_config_whose_pod_fails_is_rejected_at_once() -> None:
    fleet = _settled({"d": CODE, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"runtime.image": "vllm:broken"})
    fleet.sync()
    failure = "pod m-canary-0: draft vocab 32000 != target vocab 128256 (exit code 1)"
    fleet.now += timedelta(minutes=1)
    observation = Observation(stable=None, canary=None, runtime_failures={"canary": failure})
    decided = decide(fleet.spec, fleet.status, observation, fleet.now)
    config = decided.status.config
    assert config is not None and config.rejected is not None
    assert config.rejected.reason == "RuntimeFailed" and failure in config.rejected.message
    assert decided.status.canary_run is None


def test_the_step_cost_of_the_running_draft_is_kept_until_a_new_method_is_promoted() -> None:
    fleet = _settled({"d": CODE, "d2": CODE})
    assert fleet.status.step_cost is not None
    fitted = fleet.status.step_cost.fitted
    fleet.spec = _with(fleet.spec, **{"draft.method": "eagle3"})  # sequential drafting
    fleet.sync()
    assert fleet.status.step_cost is not None and fleet.status.step_cost.fitted == fitted
    assert fleet.status.speculation.drafting is not None
    assert fleet.status.speculation.drafting.value == "Parallel"
    fleet.sync(forced=config_of(fleet.spec).hash)
    assert fleet.status.step_cost is None
    assert fleet.status.speculation.drafting.value == "Sequential"


def test_a_canary_pending_too_long_goes_on_in_place() -> None:
    fleet = _settled({"d": CHAT, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    fleet.sync()
    fleet.now += timedelta(minutes=10)
    stable = window(CHAT, fleet.status.speculation.tokens or 3, engine=ENGINE)
    pending = Observation(
        stable=stable,
        canary=None,
        canary_pending=CanaryPending((fleet.now - timedelta(minutes=6)).timestamp(), None),
    )
    decided = decide(fleet.spec, fleet.status, pending, fleet.now)
    assert [a.kind for a in decided.actions if a.kind != "Inconclusive"] == ["InPlaceFallback"]
    fleet.status = decided.status
    trial = fleet.status.config.trial if fleet.status.config else None
    assert trial is not None and trial.in_place and fleet.status.canary_run is None
    for _ in range(8):
        fleet.step()
    assert "SwitchConfigInPlace" in fleet.kinds and "PromoteConfig" in fleet.kinds
    assert _draft_arg(render.deployment(fleet.model(), "stable")) == "d2"


VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"


def _committed(spec: SpeculativeModelSpec, edit: Any) -> SpeculativeModelSpec:
    """The spec of a commit: `edit` changes its manifest (fields may go)."""
    body = spec.model_dump(by_alias=True, exclude_none=True)
    edit(body)
    return SpeculativeModelSpec.model_validate(body)


def _pod(deployment: dict[str, Any]) -> tuple[str, list[str], list[str]]:
    """A Deployment's serving image, command and init containers."""
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    return (
        container["image"],
        container["command"],
        [c["name"] for c in pod.get("initContainers", [])],
    )


def _model_and_draft(deployment: dict[str, Any]) -> tuple[str, str]:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--model") + 1], args[args.index("--draft-model") + 1]


def test_a_trial_from_vllms_image_with_the_runtime_injected_holds_the_whole_pod_back() -> None:
    """Issue 41, item 3: one commit goes from vLLM's own image with injectRuntime to the
    runtime image. The stable pods keep the whole pod they ran (vLLM's image, the runtime
    injected by an init container, run with its Python), the canary runs the commit's
    whole: never vLLM's image told to run specfleet-runtime with nothing injected."""
    old = make_spec(tuning={"enabled": False}, runtime={"image": VLLM_IMAGE, "injectRuntime": {}})
    fleet = ConfigFleet(old, {"d": CODE})
    for _ in range(3):
        fleet.step()
    before = render.deployment(fleet.model(), "stable")["spec"]["template"]
    assert _pod(render.deployment(fleet.model(), "stable"))[2] == ["specfleet-runtime"]

    def to_runtime_image(body: dict[str, Any]) -> None:
        body["runtime"]["image"] = "ghcr.io/specfleet/runtime:0.2.0"
        del body["runtime"]["injectRuntime"]

    fleet.spec = _committed(old, to_runtime_image)
    assert fleet.sync() == ["StartConfigTrial"]
    model = fleet.model()
    stable, canary = render.deployment(model, "stable"), render.deployment(model, "canary")
    assert stable["spec"]["template"] == before  # the whole pod, not four fields of it
    assert _pod(canary) == ("ghcr.io/specfleet/runtime:0.2.0", ["specfleet-runtime", "serve"], [])
    # Rejected, the stable pods still run the whole old pod.
    fleet.now += timedelta(hours=3)
    fleet.step()
    assert fleet.status.config is not None and fleet.status.config.rejected is not None
    assert render.deployment(fleet.model(), "stable")["spec"]["template"] == before


def test_a_commit_moving_target_and_head_is_a_new_config_end_to_end() -> None:
    """Issue 41, item 3: target and head from 8B to 70B in one commit. No trial compares
    two target models' goodput, and no pod loads the 70B target with the 8B head (which
    preflight refuses): every pod runs the commit, at once, K learned anew."""
    old = make_spec(
        tuning={"enabled": False},
        model={"name": "meta-llama/Llama-3.1-8B-Instruct"},
        draft={"model": "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"},
    )
    fleet = ConfigFleet(old, {"RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3": CODE})
    for _ in range(3):
        fleet.step()
    assert fleet.status.step_cost is not None

    def to_70b(body: dict[str, Any]) -> None:
        body["model"]["name"] = "meta-llama/Llama-3.3-70B-Instruct"
        body["draft"]["model"] = "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3"
        body["runtime"]["tensorParallelSize"] = 4
        body["runtime"]["gpus"] = 4

    fleet.spec = _committed(old, to_70b)
    assert fleet.sync() == ["AdoptConfig"]
    config = fleet.status.config
    assert config is not None and config.trial is None and config.rejected is None
    assert config.running.hash == config_of(fleet.spec).hash
    assert condition_status(fleet.status.conditions, ConditionType.CONFIG_REJECTED) == "False"
    reason = next(c for c in fleet.status.conditions if c.type is ConditionType.CONFIG_REJECTED)
    assert reason.reason == "TargetChanged" and "Llama-3.3-70B" in reason.message
    assert fleet.status.step_cost is None  # measured on the 8B target
    model = fleet.model()
    stable = render.deployment(model, "stable")
    assert _model_and_draft(stable) == (
        "meta-llama/Llama-3.3-70B-Instruct",
        "RedHatAI/Llama-3.3-70B-Instruct-speculator.eagle3",
    )
    assert "--tensor-parallel-size" in stable["spec"]["template"]["spec"]["containers"][0]["args"]
    assert render.deployment(model, "canary")["spec"]["replicas"] == 0


def test_a_target_change_during_a_trial_ends_it_and_runs_the_commit_everywhere() -> None:
    """A head on trial against the 8B target, then a commit moving the target: the trial
    ends unjudged and the commit runs end to end, never the old head on the new target."""
    fleet = _settled({"d": CHAT, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    assert fleet.sync() == ["StartConfigTrial"]
    fleet.spec = _with(fleet.spec, **{"model.name": "t-70b"})
    assert fleet.sync() == ["CancelConfigTrial", "AdoptConfig"]
    model = fleet.model()
    assert _model_and_draft(render.deployment(model, "stable")) == ("t-70b", "d2")
    assert model.status.canary_run is None


def test_other_fields_of_a_trials_commit_reach_the_stable_pods_with_it() -> None:
    """An env var and the pods' resources change in the commit of a new head: held back
    with it on the stable pods until it is promoted; alone, a commit's env var reaches
    every pod at once, as before."""
    fleet = _settled({"d": CHAT, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"runtime.env": [{"name": "A", "value": "1"}]})
    fleet.sync()
    env = render.deployment(fleet.model(), "stable")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "A", "value": "1"} in env["env"]
    fleet.spec = _with(
        fleet.spec,
        **{"draft.model": "d2", "runtime.env": [{"name": "A", "value": "2"}]},
    )
    assert fleet.sync() == ["StartConfigTrial"]
    model = fleet.model()
    stable = render.deployment(model, "stable")["spec"]["template"]["spec"]["containers"][0]
    canary = render.deployment(model, "canary")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "A", "value": "1"} in stable["env"]
    assert {"name": "A", "value": "2"} in canary["env"]
    for _ in range(8):
        fleet.step()
    assert "PromoteConfig" in fleet.kinds
    stable = render.deployment(fleet.model(), "stable")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "A", "value": "2"} in stable["env"] and _draft_arg(
        render.deployment(fleet.model(), "stable")
    ) == "d2"


def test_a_config_trial_never_changes_the_status_it_decided_from() -> None:
    """A decision's working copy shares the configs in status (frozen: replaced whole,
    never changed in place) and copies the rest: through a trial started, measured and
    promoted, the status each call was given reads as it did before it."""
    fleet = _settled({"d": CHAT, "d2": CODE})
    fleet.spec = _with(fleet.spec, **{"draft.model": "d2"})
    given: list[tuple[SpeculativeModelStatus, dict[str, Any]]] = []
    for _ in range(8):
        given.append((fleet.status, fleet.status.model_dump()))
        fleet.step()
    assert "StartConfigTrial" in fleet.kinds and "PromoteConfig" in fleet.kinds
    for status, before in given:
        assert status.model_dump() == before
    config = fleet.status.config
    assert config is not None and working_copy(fleet.status).config is not config
    assert working_copy(fleet.status).config.running is config.running  # type: ignore[union-attr]
    with pytest.raises(ValidationError, match="frozen"):
        config.running.hash = "another"  # type: ignore[misc]
