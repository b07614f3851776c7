"""Replicas across nodes (runtime.parallelism.nodesPerReplica above 1): each track is one
LeaderWorkerSet of groups, the leader vLLM's API server and rank 0, the workers headless
ranks joining it with vLLM 0.33's multi-node arguments (no Ray); the Service and the
scrapes reach leaders only, a group restarts whole, and single-node replicas stay
Deployments (their golden files are unchanged)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specfleet.operator import render, runtime_container
from specfleet.operator.api import ConditionType, SpeculativeModel
from specfleet.operator.children import owned_pods, owned_workers
from specfleet.operator.observations import CanaryPending
from specfleet.operator.pod_reading import canary_pending
from specfleet.operator.status import ObservedChildren, summarize
from specfleet.operator.track_plan import plan
from specfleet.runtime.cli import engine_env
from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.vllm_args import vllm_argv
from tests.conftest import REPO
from tests.test_render import example, model_from
from tests.test_status import T0

EXAMPLE = REPO / "examples" / "llama-405b-multi-node.yaml"
LEADER = "llama-405b-stable-0.llama-405b-stable.serving"


def _stable_hash(model: SpeculativeModel) -> str:
    return plan(model.spec, model.status).stable.config_hash


def _expanded(args: list[str], index: int) -> list[str]:
    """The args as the kubelet passes them: LeaderWorkerSet's variables expanded."""
    values = {runtime_container.LEADER_ADDRESS_ENV: LEADER, render.WORKER_INDEX_ENV: str(index)}
    return [values.get(a[2:-1], a) if a.startswith("$(") else a for a in args]


def _templates(manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    group = manifest["spec"]["leaderWorkerTemplate"]
    return group["leaderTemplate"], group["workerTemplate"]


def test_each_track_is_one_leader_worker_set_of_groups_restarted_whole() -> None:
    model = model_from(example(EXAMPLE))
    children = render.manifests(model)
    assert [(c["kind"], c["metadata"]["name"]) for c in children] == [
        ("LeaderWorkerSet", "llama-405b-stable"),
        ("LeaderWorkerSet", "llama-405b-canary"),
        ("Service", "llama-405b"),
        ("PodDisruptionBudget", "llama-405b"),
    ]
    stable, canary = children[0]["spec"], children[1]["spec"]
    assert (stable["replicas"], canary["replicas"]) == (1, 0)
    for spec in (stable, canary):
        group = spec["leaderWorkerTemplate"]
        assert group["size"] == 2
        assert group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert stable["rolloutStrategy"]["rollingUpdateConfiguration"] == {
        "maxSurge": 1,
        "maxUnavailable": 0,
    }


def test_the_leader_serves_and_the_worker_joins_it_headless() -> None:
    leader, worker = _templates(render.manifests(model_from(example(EXAMPLE)))[0])
    lead, work = leader["spec"]["containers"][0], worker["spec"]["containers"][0]
    lead_argv = vllm_argv(parse_serve_args(_expanded(lead["args"], 0), env={})[0])
    work_argv = vllm_argv(parse_serve_args(_expanded(work["args"], 1), env={})[0])
    for argv in (lead_argv, work_argv):
        flags = ("--tensor-parallel-size", "--pipeline-parallel-size", "--nnodes")
        assert [argv[argv.index(f) + 1] for f in flags] == ["8", "2", "2"]
        assert argv[argv.index("--master-addr") + 1] == LEADER
    assert "--headless" not in lead_argv and "--node-rank" not in lead_argv
    assert work_argv[work_argv.index("--node-rank") + 1] == "1" and "--headless" in work_argv
    # The same engine config on both (the leader's config hash stands for the group's);
    # the worker serves no HTTP, so nothing probes or drains it.
    assert (
        lead_argv[lead_argv.index("--speculative-config") + 1]
        == (work_argv[work_argv.index("--speculative-config") + 1])
    )
    assert {"startupProbe", "readinessProbe", "livenessProbe", "lifecycle"} <= set(lead)
    assert not {"startupProbe", "readinessProbe", "livenessProbe", "lifecycle"} & set(work)
    annotation = render.CONFIG_HASH_ANNOTATION
    assert leader["metadata"]["annotations"][annotation] == _stable_hash(
        model_from(example(EXAMPLE))
    )
    assert worker["metadata"]["labels"] == leader["metadata"]["labels"]


def test_the_service_and_the_scale_selector_pick_leaders() -> None:
    model = model_from(example(EXAMPLE))
    service = render.service(model)
    assert service["spec"]["selector"] == {
        render.MODEL_LABEL: "llama-405b",
        render.WORKER_INDEX_LABEL: "0",
    }
    assert render.WORKER_INDEX_LABEL + "=0" in render.scale_selector(model).split(",")
    single = model_from(example(REPO / "examples" / "llama-peagle.yaml"))
    assert render.service(single)["spec"]["selector"] == {render.MODEL_LABEL: "llama-8b"}


def _pod(name: str, controller: str, track: str, ready: bool, config: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {render.MODEL_LABEL: "llama-405b", render.TRACK_LABEL: track},
            "annotations": {render.CONFIG_HASH_ANNOTATION: config},
            "ownerReferences": [
                {"kind": "StatefulSet", "name": controller, "uid": "s", "controller": True}
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _group_set(name: str, ready: int, owner: str = "uid-1") -> dict[str, Any]:
    return {
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "generation": 2,
            "ownerReferences": [{"kind": "SpeculativeModel", "uid": owner, "controller": True}],
        },
        "status": {"replicas": 1, "readyReplicas": ready, "updatedReplicas": 1},
    }


def test_only_the_leaders_of_the_models_own_groups_are_its_pods() -> None:
    stable = _group_set("llama-405b-stable", 1)
    foreign = _group_set("other-stable", 1, owner="uid-other")
    pods = [
        _pod("llama-405b-stable-0", "llama-405b-stable", "stable", True, "h"),  # a leader
        _pod("llama-405b-stable-0-1", "llama-405b-stable-0", "stable", True, "h"),  # a worker
        _pod("other-stable-0", "other-stable", "stable", True, "h"),  # another's leader
    ]
    kept = owned_pods("uid-1", [stable, foreign], [], pods)
    assert [pod["metadata"]["name"] for pod in kept] == ["llama-405b-stable-0"]


@pytest.mark.parametrize(
    ("leader_config", "ready_groups", "ready"),
    [("current", 1, True), ("old", 1, False), ("current", 0, False)],
)
def test_ready_when_the_groups_are_ready_and_their_leaders_run_the_rendered_config(
    leader_config: str, ready_groups: int, ready: bool
) -> None:
    """LeaderWorkerSet's status has no observedGeneration: counts from before a new
    template do not make the model Ready while its leader runs the old config."""
    model = model_from(example(EXAMPLE))
    config = _stable_hash(model) if leader_config == "current" else "old"
    leader = _pod("llama-405b-stable-0", "llama-405b-stable", "stable", True, config)
    children = ObservedChildren(
        stable=_group_set("llama-405b-stable", ready_groups),
        canary=_group_set("llama-405b-canary", 0),
        pods=[leader],
    )
    status = summarize(model, children, T0)
    condition = next(c for c in status.conditions if c.type == ConditionType.READY)
    assert (condition.status == "True") is ready


def test_the_workloads_of_the_kind_a_model_left_are_scaled_to_zero() -> None:
    """nodesPerReplica changed between 1 and more: the previous kind's workloads the
    cluster still has are applied at 0 replicas (never created where absent)."""
    grouped = model_from(example(EXAMPLE))
    single = model_from(example(REPO / "examples" / "llama-peagle.yaml"))
    old_deployments = {("Deployment", "llama-405b"), ("Deployment", "llama-405b-canary")}
    retired = render.retired_workloads(grouped, old_deployments | {("Service", "llama-405b")})
    assert [(m["kind"], m["metadata"]["name"], m["spec"]["replicas"]) for m in retired] == [
        ("Deployment", "llama-405b", 0),
        ("Deployment", "llama-405b-canary", 0),
    ]
    old_groups = {("LeaderWorkerSet", "llama-8b-stable")}
    retired = render.retired_workloads(single, old_groups)
    assert [(m["kind"], m["metadata"]["name"], m["spec"]["replicas"]) for m in retired] == [
        ("LeaderWorkerSet", "llama-8b-stable", 0)
    ]
    assert render.retired_workloads(single, set()) == []
    assert render.retired_workloads(grouped, {("LeaderWorkerSet", "llama-405b-stable")}) == []


@pytest.mark.parametrize("arg", ["--headless", "--headless=true", "--head"])
def test_a_user_arg_cannot_make_a_leader_headless(arg: str) -> None:
    """`--headless` is the workers' alone: on a leader (or a single pod) it would start no
    API server, and the pod would never turn Ready."""
    manifest = example(EXAMPLE)
    manifest["spec"]["runtime"]["args"] = [arg]
    with pytest.raises(ValidationError) as refused:
        model_from(manifest)
    assert "runtime.args" in str(refused.value) and "--headless" in str(refused.value)


def test_a_canary_group_whose_worker_no_node_takes_is_pending_with_the_schedulers_reason() -> None:
    """The leader of a canary group may be scheduled while a worker is not: the group
    never runs, so the trial waits for it and then goes on in place (canaryPendingTimeout)
    with the scheduler's words, as for a single canary pod; a stranger's group is not read."""
    model = model_from(example(EXAMPLE))
    stable, canary = _group_set("llama-405b-stable", 1), _group_set("llama-405b-canary", 0)
    leader = _pod("llama-405b-canary-0", "llama-405b-canary", "canary", False, "c")
    worker = _pod("llama-405b-canary-0-1", "llama-405b-canary-0", "canary", False, "c")
    worker["metadata"]["creationTimestamp"] = "2026-12-03T01:00:00Z"
    worker["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": NO_NODE},
        ],
    }  # fmt: skip
    strangers = _pod("other-canary-0-1", "other-canary-0", "canary", False, "c")
    strangers["status"] = worker["status"]
    labelled = [leader, worker, strangers]
    pods = owned_pods("uid-1", [stable, canary], [], labelled)
    assert [pod["metadata"]["name"] for pod in pods] == ["llama-405b-canary-0"]
    workers = owned_workers(labelled, pods)
    assert [pod["metadata"]["name"] for pod in workers] == ["llama-405b-canary-0-1"]

    children = ObservedChildren(stable=stable, canary=canary, pods=pods, workers=workers)
    assert canary_pending(children) == CanaryPending(1796259600.0, NO_NODE)
    status = summarize(model, children, T0)
    progressing = next(c for c in status.conditions if c.type == ConditionType.PROGRESSING)
    assert progressing.reason == "Unschedulable"
    assert NO_NODE in progressing.message
    # Without its workers read, the group's leader alone says nothing of it.
    alone = ObservedChildren(stable=stable, canary=canary, pods=pods)
    assert canary_pending(alone) is None


NO_NODE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def test_a_groups_ranks_advertise_their_pods_ip() -> None:
    """vLLM advertises VLLM_HOST_IP to a group's other ranks, else its default route's
    interface's address, which a pod network may lack (it then says 0.0.0.0 and the
    group hangs): the runtime gives it the pod's IP, unless the pod set one."""
    worker, _ = parse_serve_args(
        ["--model", "/m", "--tensor-parallel-size", "2", "--nnodes", "2",
         "--master-addr", LEADER, "--node-rank", "1"],
        env={},
    )  # fmt: skip
    single, _ = parse_serve_args(["--model", "/m"], env={})
    pod = {"POD_IP": "10.0.0.7"}
    assert engine_env(worker, pod)["VLLM_HOST_IP"] == "10.0.0.7"
    assert engine_env(worker, pod | {"VLLM_HOST_IP": "10.1.0.7"})["VLLM_HOST_IP"] == "10.1.0.7"
    assert "VLLM_HOST_IP" not in engine_env(single, pod)
    assert "VLLM_HOST_IP" not in engine_env(worker, {})
