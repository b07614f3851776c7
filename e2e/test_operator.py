"""The operator on the real control plane: children, status, updates, failures, restarts."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster, real_engine
from e2e.models import (
    apply,
    canary_tokens,
    condition,
    get_model,
    schedule_generation,
    sim_model,
)
from e2e.operator_process import OperatorProcess
from e2e.waiting import wait_for


def _ready(api_client: client.ApiClient, namespace: str, name: str, generation: int) -> Any:
    def probe() -> dict[str, Any] | None:
        body = get_model(api_client, namespace, name)
        ready = condition(body, "Ready")
        status = body.get("status") or {}
        if ready and ready["status"] == "True" and status.get("observedGeneration") == generation:
            return body
        return None

    return wait_for(f"{name} Ready at generation {generation}", probe, timeout=240)


def _args(deployment: Any) -> list[str]:
    return list(deployment.spec.template.spec.containers[0].args)


def test_create_renders_children_and_reports_ready(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(sim_model("llama"), model_namespace)
    body = _ready(api_client, model_namespace, "llama", generation=1)
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)

    stable = apps.read_namespaced_deployment("llama", model_namespace)
    canary = apps.read_namespaced_deployment("llama-canary", model_namespace)
    service = core.read_namespaced_service("llama", model_namespace)
    args = _args(stable)
    assert args[args.index("--method") + 1] == "peagle"
    assert args[args.index("--num-speculative-tokens") + 1] == "3"
    container = stable.spec.template.spec.containers[0]
    assert container.resources.limits["nvidia.com/gpu"] == "1"
    assert container.readiness_probe.http_get.path == "/health"
    assert canary.spec.replicas == 0
    for child in (stable, canary, service):
        owner = child.metadata.owner_references[0]
        assert (owner.kind, owner.uid) == ("SpeculativeModel", body["metadata"]["uid"])

    table = cluster.kubectl("get", "specmodel", "llama", "-n", model_namespace).stdout
    header, row = table.strip().splitlines()
    assert header.split() == [
        "NAME",
        "K",
        "ACCEPT",
        "FLOOR",
        "ALEN",
        "PHASE",
        "READY",
        "REJECTED",
        "AGE",
    ]
    assert row.split()[1] == "3" and "Ready" in row.split()


def test_updates_roll_out_and_observed_generation_follows(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(sim_model("llama"), model_namespace)
    _ready(api_client, model_namespace, "llama", generation=1)
    apps = client.AppsV1Api(api_client)

    apply(sim_model("llama", replicas=2), model_namespace)
    _ready(api_client, model_namespace, "llama", generation=2)
    assert apps.read_namespaced_deployment("llama", model_namespace).spec.replicas == 2

    before = apps.read_namespaced_deployment("llama", model_namespace)
    apply(
        sim_model("llama", replicas=2, speculation={"tokens": 2, "maxTokens": 2}), model_namespace
    )
    body = _ready(api_client, model_namespace, "llama", generation=3)
    after = apps.read_namespaced_deployment("llama", model_namespace)
    assert _args(after)[_args(after).index("--num-speculative-tokens") + 1] == "2"
    hash_key = "specfleet.io/runtime-config-hash"
    assert (
        before.spec.template.metadata.annotations[hash_key]
        != after.spec.template.metadata.annotations[hash_key]
    )
    assert body["status"]["speculation"]["tokens"] == 2


def test_children_changed_by_someone_else_are_restored(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    """A Deployment scaled by hand, or deleted, is put back as the model says."""
    apply(sim_model("llama"), model_namespace)
    _ready(api_client, model_namespace, "llama", generation=1)
    apps = client.AppsV1Api(api_client)
    original = apps.read_namespaced_deployment("llama", model_namespace)

    cluster.kubectl("scale", "deployment", "llama", "--replicas=3", "-n", model_namespace)
    wait_for(
        "the stable Deployment scaled back to 1",
        lambda: apps.read_namespaced_deployment("llama", model_namespace).spec.replicas == 1,
        timeout=60,
    )

    cluster.kubectl("delete", "deployment", "llama-canary", "-n", model_namespace)
    cluster.kubectl("delete", "deployment", "llama", "-n", model_namespace, "--wait=true")

    def recreated() -> bool:
        names = {d.metadata.name for d in apps.list_namespaced_deployment(model_namespace).items}
        stable = (
            apps.read_namespaced_deployment("llama", model_namespace) if "llama" in names else None
        )
        return (
            {"llama", "llama-canary"} <= names
            and stable is not None
            and stable.metadata.uid != original.metadata.uid
            and _args(stable) == _args(original)
        )

    wait_for("both Deployments re-created with the same pod args", recreated, timeout=60)
    _ready(api_client, model_namespace, "llama", generation=1)

    core = client.CoreV1Api(api_client)
    service_uid = core.read_namespaced_service("llama", model_namespace).metadata.uid
    cluster.kubectl("delete", "service", "llama", "-n", model_namespace, "--wait=true")

    def service_recreated() -> bool:
        services = core.list_namespaced_service(model_namespace).items
        return any(s.metadata.name == "llama" and s.metadata.uid != service_uid for s in services)

    wait_for("the Service re-created", service_recreated, timeout=60)


def test_a_child_the_api_server_refuses_degrades_the_model(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    """Admitted, but its Deployment is not: the namespace's quota allows no Deployment.
    The API server's own message reaches status and a Warning Event, once; the quota
    lifted and the spec changed, the model recovers."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-deployments", "namespace": model_namespace},
        "spec": {"hard": {"count/deployments.apps": "0"}},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(quota))
    env = [{"name": "SPECFLEET_ENGINE", "value": "sim"}]
    apply(sim_model("refused", runtime={"gpus": 1, "env": env}), model_namespace)

    def degraded() -> dict[str, Any] | None:
        found = condition(get_model(api_client, model_namespace, "refused"), "Degraded")
        return found if found and found["status"] == "True" else None

    found = wait_for("Degraded=True", degraded, timeout=60)
    assert found["reason"] == "ChildrenRefused"
    assert "quota" in found["message"], found["message"]
    assert get_model(api_client, model_namespace, "refused")["status"]["phase"] == "Degraded"

    def warnings() -> list[Any]:
        events = client.CoreV1Api(api_client).list_namespaced_event(
            model_namespace, field_selector="involvedObject.name=refused,reason=ChildrenRefused"
        )
        return [e for e in events.items if e.type == "Warning"]

    wait_for("a ChildrenRefused Warning event", warnings, timeout=30)
    time.sleep(12)  # two more sweeps: backed off, no second Event
    assert len(warnings()) == 1

    cluster.kubectl("delete", "resourcequota", "no-deployments", "-n", model_namespace)
    env.append({"name": "SPECFLEET_E2E_FIXED", "value": "1"})
    apply(sim_model("refused", runtime={"gpus": 1, "env": env}), model_namespace)
    _ready(api_client, model_namespace, "refused", generation=2)


def test_preflight_failure_surfaces_as_degraded(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    tmp_path: Path,
) -> None:
    target, draft = tmp_path / "target", tmp_path / "draft"
    target.mkdir()
    draft.mkdir()
    (target / "config.json").write_text(
        json.dumps(
            {"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096}
        )
    )
    (draft / "config.json").write_text(
        json.dumps(
            {"architectures": ["LlamaForCausalLMEagle3"], "vocab_size": 32000, "hidden_size": 4096}
        )
    )
    manifest = sim_model(
        "broken",
        model={"name": str(target)},
        draft={"method": "eagle3", "model": str(draft)},
    )
    apply(manifest, model_namespace)

    def degraded() -> dict[str, Any] | None:
        found = condition(get_model(api_client, model_namespace, "broken"), "Degraded")
        return found if found and found["status"] == "True" else None

    found = wait_for("Degraded=True", degraded, timeout=90)
    assert found["reason"] == "RuntimeFailed"
    assert "vocab" in found["message"], found["message"]

    def warning() -> list[Any]:
        events = client.CoreV1Api(api_client).list_namespaced_event(
            model_namespace, field_selector="involvedObject.name=broken,reason=RuntimeFailed"
        )
        return [e for e in events.items if e.type == "Warning" and "vocab" in e.message]

    wait_for("a RuntimeFailed Warning event", warning, timeout=30)


def test_deleting_a_model_garbage_collects_its_children(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(sim_model("llama"), model_namespace)
    _ready(api_client, model_namespace, "llama", generation=1)
    cluster.kubectl("delete", "specmodel", "llama", "-n", model_namespace)
    apps = client.AppsV1Api(api_client)
    wait_for(
        "children deleted",
        lambda: (
            not apps.list_namespaced_deployment(model_namespace).items
            and not client.CoreV1Api(api_client).list_namespaced_service(model_namespace).items
        ),
    )


def test_operator_restart_keeps_children_and_status(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(sim_model("llama"), model_namespace)
    before = _ready(api_client, model_namespace, "llama", generation=1)
    apps = client.AppsV1Api(api_client)
    deployments = {
        d.metadata.name: d.metadata.uid
        for d in apps.list_namespaced_deployment(model_namespace).items
    }

    operator.kill()
    operator.start()
    # A tick after the restart: status is rewritten only if something changed.
    after = _ready(api_client, model_namespace, "llama", generation=1)
    assert {
        d.metadata.name: d.metadata.uid
        for d in apps.list_namespaced_deployment(model_namespace).items
    } == deployments
    # The tuned state survives; window counters move on (the restart's first scrape is
    # only a baseline, counted as one inconclusive window).
    tuned = ("tokens", "requestedTokens", "lastKnownGood", "off")
    for key in tuned:
        assert after["status"]["speculation"].get(key) == before["status"]["speculation"].get(key)
    assert canary_tokens(after) == canary_tokens(before)
    assert after["status"]["history"] == before["status"]["history"]


def test_reapplying_the_same_manifest_changes_nothing(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    manifest = sim_model("llama", tuning={"enabled": False})
    apply(manifest, model_namespace, "--server-side")
    _ready(api_client, model_namespace, "llama", generation=1)
    apps = client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)

    def versions() -> dict[str, str]:
        found = {
            d.metadata.name: d.metadata.resource_version
            for d in apps.list_namespaced_deployment(model_namespace).items
        }
        found["service"] = core.read_namespaced_service(
            "llama", model_namespace
        ).metadata.resource_version
        return found

    children_before = versions()
    status_before = get_model(api_client, model_namespace, "llama")["status"]
    output = apply(manifest, model_namespace, "--server-side")
    assert "serverside-applied" in output
    time.sleep(4)  # several operator ticks, to (not) react
    assert versions() == children_before
    status_after = get_model(api_client, model_namespace, "llama")["status"]
    for volatile in ("acceptance",):  # window timestamps move as windows close
        status_before.pop(volatile, None)
        status_after.pop(volatile, None)
    assert yaml.safe_dump(status_after) == yaml.safe_dump(status_before)


def test_a_fixed_schedule_reaches_the_pods_and_they_follow_it(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    schedule = {"mode": "Fixed", "bands": [{"upToBatch": 2, "tokens": 6}, {"tokens": 1}]}
    speculation = {"tokens": 3, "minTokens": 1, "maxTokens": 6, "schedule": schedule}
    apply(sim_model("sched", speculation=speculation, tuning={"enabled": False}), model_namespace)
    body = _ready(api_client, model_namespace, "sched", generation=1)
    sp = body["status"]["speculation"]
    assert sp["tokens"] == 6
    assert sp["schedule"] == [{"upToBatch": 2, "tokens": 6}, {"tokens": 1}]
    stable = client.AppsV1Api(api_client).read_namespaced_deployment("sched", model_namespace)
    args = _args(stable)
    assert args[args.index("--num-speculative-tokens") + 1] == "6"
    entries = [args[i + 1] for i, a in enumerate(args) if a == "--batch-schedule"]
    assert entries == ["1:2:6", "3:65536:1"]
    # The simulated engine under its default load decodes many requests at once: mostly
    # K=1 steps, so fewer than 6 draft tokens a draft (one K of 6 would give exactly 6).
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        model_namespace, label_selector="app.kubernetes.io/instance=sched"
    )
    ip = next(p.status.pod_ip for p in pods.items if p.status.pod_ip)

    def drafting() -> dict[str, float] | None:
        with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=5) as reply:
            counters = real_engine.spec_counters(reply.read().decode())
        return counters if counters.get("num_drafts", 0) > 1000 else None

    counters = wait_for("the sched pod drafting", drafting, timeout=60)
    assert 1.0 <= counters["num_draft_tokens"] / counters["num_drafts"] < 6.0, counters


def test_a_new_k_reaches_the_running_engine_with_no_restart(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    """speculation.switching Hot: the stable pod starts at the ceiling, and a new K is
    handed to the engine it runs (same pod, no container restart, same template)."""
    speculation = {"tokens": 3, "maxTokens": 6, "switching": "Hot"}
    apply(sim_model("hot", speculation=speculation), model_namespace)
    _ready(api_client, model_namespace, "hot", generation=1)
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    before = apps.read_namespaced_deployment("hot", model_namespace)
    assert _args(before)[_args(before).index("--num-speculative-tokens") + 1] == "6"
    assert "--hot-schedule" in _args(before)

    def stable_pod() -> Any:
        pods = core.list_namespaced_pod(
            model_namespace, label_selector="specfleet.io/model=hot,specfleet.io/track=stable"
        ).items
        ready = [p for p in pods if p.status.pod_ip and p.status.container_statuses]
        return ready[0] if len(ready) == 1 and ready[0].status.container_statuses[0].ready else None

    pod = wait_for("the stable pod Ready", stable_pod, timeout=120)
    # The first evaluation hands the pod generation 1 (its startup schedule is the spec's K).
    wait_for(
        "generation 1 in force on the pod",
        lambda: schedule_generation(pod.status.pod_ip) == 1,
        timeout=120,
        context=lambda: (
            schedule_generation(pod.status.pod_ip),
            cluster.kubectl("get", "pods", "-o", "wide", "-n", model_namespace).stdout,
            get_model(api_client, model_namespace, "hot").get("status"),
        ),
    )
    apply(sim_model("hot", speculation={**speculation, "tokens": 2}), model_namespace)
    asked = time.monotonic()
    wait_for(
        "generation 2 in force on the pod",
        lambda: schedule_generation(pod.status.pod_ip) == 2,
        timeout=30,
        interval=0.2,
    )
    took = time.monotonic() - asked
    body = _ready(api_client, model_namespace, "hot", generation=2)
    hot = body["status"]["speculation"]["hotSchedule"]
    assert (hot["generation"], hot["schedule"], hot.get("fallback")) == (2, [{"tokens": 2}], None)
    after = core.read_namespaced_pod(pod.metadata.name, model_namespace)
    assert after.metadata.uid == pod.metadata.uid
    assert after.status.container_statuses[0].restart_count == 0
    template = apps.read_namespaced_deployment("hot", model_namespace).spec.template
    assert template.metadata.annotations == before.spec.template.metadata.annotations
    print(f"hot K change: in force on the pod {took:.2f}s after the spec edit")
