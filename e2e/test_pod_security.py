"""Pod Security on the real API server: a namespace enforcing `restricted` admits a model's
stable and canary pods as specfleet renders them by default (a refusal would show as the
ReplicaSets' FailedCreate events and no pods), and the pod settings reach the pods."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster
from e2e.models import apply, canary_running, get_model, sim_model
from e2e.operator_process import OperatorProcess
from e2e.story import MODEL, story_model
from e2e.waiting import wait_for
from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel

PRODUCTION = cluster.REPO / "examples" / "production-llama-70b.yaml"

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


BARE_POD = {
    "metadata": {"name": "plain"},
    "spec": {"containers": [{"name": "c", "image": "ghcr.io/specfleet/runtime:0.1.0"}]},
}


def _refusal(core: client.CoreV1Api, namespace: str) -> str | None:
    """Pod Security's answer to a pod without the settings (a server-side dry run)."""
    try:
        core.create_namespaced_pod(namespace, BARE_POD, dry_run="All")
    except client.ApiException as error:
        if error.status == 403 and "restricted" in str(error.body):
            return str(error.body)
        raise
    return None


def enforce_restricted(core: client.CoreV1Api, namespace: str) -> None:
    """Label the namespace and wait until Pod Security enforces it: admission reads
    namespaces from its informer cache, so the first pods after the patch may be judged
    by the old labels."""
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    wait_for("Pod Security enforcing restricted", lambda: _refusal(core, namespace), timeout=30)


def _ready_pods(core: client.CoreV1Api, namespace: str, track: str) -> list[Any] | None:
    pods = core.list_namespaced_pod(namespace, label_selector=f"specfleet.io/track={track}").items
    ready = [
        p
        for p in pods
        if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]
    return ready or None


def _failed_creates(core: client.CoreV1Api, namespace: str) -> list[str]:
    events = core.list_namespaced_event(namespace).items
    return [e.message for e in events if e.reason == "FailedCreate"]


def test_restricted_namespace_runs_stable_and_canary_pods(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    enforce_restricted(core, model_namespace)
    manifest = story_model()
    manifest["spec"]["runtime"]["pod"] = {
        # A core Volume passes through the CRD's preserve-unknown-fields as written.
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
        "labels": {"team": "ml"},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "ScheduleAnyway",
            }
        ],
    }
    apply(manifest, model_namespace)

    stable = wait_for(
        "a Ready stable pod", lambda: _ready_pods(core, model_namespace, "stable"), timeout=240
    )
    wait_for("a canary", lambda: canary_running(api_client, model_namespace, MODEL), timeout=300)
    canary = wait_for(
        "a Ready canary pod", lambda: _ready_pods(core, model_namespace, "canary"), timeout=240
    )

    assert _failed_creates(core, model_namespace) == []
    for pod in stable + canary:
        assert pod.spec.security_context.run_as_non_root is True
        assert pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
        container = pod.spec.containers[0]
        assert container.security_context.allow_privilege_escalation is False
        assert container.security_context.capabilities.drop == ["ALL"]
        assert pod.metadata.labels["team"] == "ml"
        scratch = next(v for v in pod.spec.volumes if v.name == "scratch")
        assert scratch.empty_dir.size_limit == "1Gi"
        assert any(m.mount_path == "/scratch" for m in container.volume_mounts)
    status = get_model(api_client, model_namespace, MODEL)["status"]
    # Each pod's start (created to Ready) is measured into status.
    assert status["startupSeconds"] > 0
    print(f"status.startupSeconds: {status['startupSeconds']}")


def test_restricted_namespace_refuses_what_specfleet_does_not_render(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The test above can fail: the same namespace refuses a pod without the settings."""
    core = client.CoreV1Api(api_client)
    enforce_restricted(core, namespace)
    try:
        core.create_namespaced_pod(namespace, BARE_POD)
    except client.ApiException as error:
        assert error.status == 403 and "restricted" in str(error.body)
    else:
        raise AssertionError("a pod without a security context was admitted")


def test_an_image_without_specfleet_runs_the_injected_runtime(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    """runtime.injectRuntime: the init container copies the runtime into a shared volume
    and the serving image's own Python runs it (here the simulated engine, in an image
    whose Python has the runtime's dependencies but no specfleet, as vLLM's has)."""
    plain = subprocess.run(
        [str(cluster.PLAIN_PYTHON_BIN / "python3"), "-c", "import specfleet.runtime"],
        capture_output=True,
        text=True,
    )
    assert plain.returncode != 0 and "No module named 'specfleet'" in plain.stderr
    core = client.CoreV1Api(api_client)
    enforce_restricted(core, model_namespace)
    manifest = sim_model("plain")
    manifest["spec"]["runtime"]["image"] = cluster.PLAIN_PYTHON_IMAGE
    manifest["spec"]["runtime"]["injectRuntime"] = {}
    apply(manifest, model_namespace)

    (pod,) = wait_for(
        "a Ready pod of the image without specfleet",
        lambda: _ready_pods(core, model_namespace, "stable"),
        timeout=240,
    )
    assert pod.spec.containers[0].image == cluster.PLAIN_PYTHON_IMAGE
    assert pod.spec.containers[0].command[:3] == ["python3", "-m", "specfleet.runtime.cli"]
    (init,) = pod.status.init_container_statuses
    assert init.state.terminated.exit_code == 0
    assert _failed_creates(core, model_namespace) == []


def test_the_production_example_is_admitted_in_a_restricted_namespace(
    crds: None, api_client: client.ApiClient, namespace: str
) -> None:
    """The example and its pods as rendered, through admission in a namespace enforcing
    `restricted` (server-side dry runs: nothing is scheduled)."""
    core = client.CoreV1Api(api_client)
    enforce_restricted(core, namespace)
    manifest = yaml.safe_load(PRODUCTION.read_text())
    manifest["metadata"]["namespace"] = namespace
    assert "created (server dry run)" in apply(manifest, namespace, "--dry-run=server")
    model = SpeculativeModel.model_validate(manifest)
    account = model.spec.runtime.pod.service_account_name
    core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    for track in ("stable", "canary"):
        template = render.deployment(model, track)["spec"]["template"]
        spec = dict(template["spec"])
        # Cluster objects the example names and this cluster has not: their admission
        # plugins would refuse the pod before Pod Security is asked.
        del spec["priorityClassName"], spec["runtimeClassName"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{model.metadata.name}-{track}", **template["metadata"]},
            "spec": spec,
        }
        out = apply(pod, namespace, "--dry-run=server")
        assert "created (server dry run)" in out, out
