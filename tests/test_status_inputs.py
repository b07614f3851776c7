"""Status is input too (issue 42, item 7): the stable pods run `status.config.running`
(the last good config) while the spec already names the next, so its image and
arguments are held to spec.runtime's rules before anything is rendered from them.
Whoever may patch status must not get a pod the spec could not ask for."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from pydantic import ValidationError

from specfleet.operator.api import RunningConfig
from specfleet.operator.fleet import Fleet
from tests.fake_cluster import FakeCluster, ScriptedEvaluator

MODEL = "llama-8b"


def _running(**config: Any) -> dict[str, Any]:
    return {"hash": "0123456789ab", "method": "eagle3", "image": "vllm/x:1", **config}


@pytest.mark.parametrize(
    "config",
    [
        {"args": ["--port=1"]},  # a flag the operator renders
        {"args": ["--max-model-len", "8192", "--host", "0.0.0.0"]},
        {"args": ["--num-speculative-tokens", "5"]},  # an older speculative flag
        {"args": ["--x"] * 10_000},  # over MAX_ARGS
        {"image": ""},
    ],
    ids=["owned-flag", "owned-later", "older-flag", "too-many", "empty-image"],
)
def test_a_running_config_the_spec_could_not_hold_is_refused(config: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=r"spec\.runtime's rules"):
        RunningConfig.model_validate(_running(**config))


def test_a_running_config_the_spec_could_hold_is_read() -> None:
    config = RunningConfig.model_validate(_running(args=["--max-model-len", "8192"]))
    assert config.args == ["--max-model-len", "8192"]


def test_a_patched_status_does_not_render_into_the_pods(peagle_manifest: dict[str, Any]) -> None:
    """A status patch naming a last good config whose arguments set --host: before, the
    stable Deployment ran them (the spec's config differs, so the stable pods keep the
    running one). Now the status is read as invalid, Degraded names the field, and no
    apply carries them; the next reconcile starts from the spec's config."""
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
    manifest = copy.deepcopy(peagle_manifest)
    draft = manifest["spec"]["draft"]
    hostile = _running(
        method=draft["method"],
        draftModel=draft["model"],
        image="evil/image:1",
        args=["--host=0.0.0.0"],
    )
    manifest["status"] = {"config": {"running": hostile}}
    cluster.create_model(manifest)
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(("team", MODEL)))
    degraded = next(
        c for c in cluster.model(MODEL)["status"]["conditions"] if c["type"] == "Degraded"
    )
    assert degraded["status"] == "True"
    assert "status.config.running" in degraded["message"]
    for _ in range(3):
        cluster.deliver(fleet)
        asyncio.run(fleet.reconcile(("team", MODEL)))
    containers = [
        container
        for manifest in cluster.applied
        if manifest["kind"] == "Deployment"
        for container in manifest["spec"]["template"]["spec"]["containers"]
    ]
    assert containers  # the spec's own config is applied
    assert not any("--host=0.0.0.0" in c.get("args", []) for c in containers)
    assert not any(c["image"] == "evil/image:1" for c in containers)


def test_the_pod_policy_holds_for_the_pods_status_renders(peagle_manifest: dict[str, Any]) -> None:
    """The last good config keeps the whole runtime its pods ran with
    (status.config.running.pods), which the stable pods are rendered from while a new
    config is on trial: a status patch naming another ServiceAccount there ran the stable
    pods as it, past the pod policy the spec is held to. Now the model is refused
    (PodPolicyRefused, naming status) and nothing is applied."""
    from specfleet.operator.api import SpeculativeModel
    from specfleet.operator.configs import config_of

    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
    manifest = copy.deepcopy(peagle_manifest)
    last_good = copy.deepcopy(manifest)
    last_good["spec"]["runtime"]["args"] = ["--max-model-len", "4096"]  # another config
    last_good["spec"]["runtime"].setdefault("pod", {})["serviceAccountName"] = "cluster-admin"
    running = config_of(SpeculativeModel.model_validate(last_good).spec)
    manifest["status"] = {"config": {"running": running.model_dump(by_alias=True, mode="json")}}
    cluster.create_model(manifest)
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(("team", MODEL)))
    assert not [m for m in cluster.applied if m["kind"] == "Deployment"]
    degraded = next(
        c for c in cluster.model(MODEL)["status"]["conditions"] if c["type"] == "Degraded"
    )
    assert degraded["reason"] == "PodPolicyRefused"
    assert "status.config.running.pods (stable pods)" in degraded["message"]
    assert "cluster-admin" in degraded["message"]


@pytest.mark.parametrize("where", ["both", "config-only"])
def test_a_running_config_with_its_pods_is_held_to_the_rules_too(where: str) -> None:
    """With the pods' runtime kept, the arguments the pods run are judged with it: as the
    pods' own Runtime when the config repeats its arguments and image (read as a Runtime
    once, not twice), and merged with it when the config's differ."""
    owned = ["--port=1"]
    pods_args = owned if where == "both" else []
    pods = {
        "model": {"name": MODEL},
        "draft": {"method": "eagle3", "model": "draft"},
        "runtime": {"image": "vllm/x:1", "args": pods_args},
    }
    with pytest.raises(ValidationError, match=r"--port"):
        RunningConfig.model_validate(_running(args=owned, pods=pods))
    fine = {**pods, "runtime": {"image": "vllm/x:1", "args": ["--max-model-len", "8192"]}}
    read = RunningConfig.model_validate(_running(args=["--max-model-len", "8192"], pods=fine))
    assert read.pods is not None and read.pods.runtime.args == read.args
