"""The local control plane behaves like a cluster in the ways specfleet relies on."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e import cluster
from e2e.waiting import wait_for
from tests.invalid_manifests import INVALID_CASES, InvalidCase, apply_changes

REPO = cluster.REPO


def _pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "local/process", "command": command}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], **spec},
    }


def test_server_reports_its_real_version(control_plane: None) -> None:
    version = cluster.kubectl("version", "-o", "yaml").stdout
    assert yaml.safe_load(version)["serverVersion"]["gitVersion"] == "v1.37.2"


def test_examples_are_admitted(crds: None, namespace: str) -> None:
    result = cluster.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(REPO / "examples")
    )
    assert result.stdout.count("(server dry run)") == len(list((REPO / "examples").glob("*.yaml")))


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_invalid_manifests_are_refused_at_admission(
    case: InvalidCase, crds: None, namespace: str
) -> None:
    example = yaml.safe_load((REPO / "examples" / "llama-peagle.yaml").read_text())
    manifest = apply_changes(example, case.changes)
    result = cluster.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump(manifest),
        check=False,
    )
    assert result.returncode != 0, f"{case.id} was admitted"
    assert case.field in result.stderr, result.stderr


def test_scheduler_honours_gpu_capacity(api_client: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api_client)
    pod = _pod(
        "greedy",
        ["sleep", "600"],
        container={"resources": {"limits": {"nvidia.com/gpu": "100"}}},
    )
    core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> str | None:
        status = core.read_namespaced_pod_status("greedy", namespace).status
        for condition in status.conditions or []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                return str(condition.message)
        return None

    message = wait_for("the scheduler's verdict", unschedulable)
    assert "Insufficient nvidia.com/gpu" in message
    assert core.read_namespaced_pod("greedy", namespace).status.phase == "Pending"


def test_garbage_collector_deletes_owned_objects(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "child", "ownerReferences": [reference]}}
    )
    core.delete_namespaced_config_map("owner", namespace)

    def child_gone() -> bool:
        names = [c.metadata.name for c in core.list_namespaced_config_map(namespace).items]
        return "child" not in names

    wait_for("the garbage collector to delete the child", child_gone)


def test_termination_message_reaches_container_status(
    api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    script = (
        "echo 'preflight: draft vocabulary 128256 != target 151936' > /dev/termination-log; exit 3"
    )
    core.create_namespaced_pod(
        namespace, _pod("fails", ["sh", "-c", script], restartPolicy="Never")
    )

    def terminated() -> Any:
        statuses = core.read_namespaced_pod_status("fails", namespace).status.container_statuses
        return statuses and statuses[0].state.terminated

    state = wait_for("the container to terminate", terminated)
    assert state.exit_code == 3
    assert state.message == "preflight: draft vocabulary 128256 != target 151936"
    assert core.read_namespaced_pod("fails", namespace).status.phase == "Failed"


def test_pod_runs_with_its_service_account_rbac(
    api_client: client.ApiClient, namespace: str
) -> None:
    """The pod's KUBECONFIG carries a token for its ServiceAccount, not the admin's."""
    core = client.CoreV1Api(api_client)
    kubectl = cluster.kubectl_binary()
    script = (
        f"{kubectl} auth whoami -o jsonpath='{{.status.userInfo.username}}' > /dev/termination-log"
    )
    core.create_namespaced_pod(
        namespace, _pod("whoami", ["sh", "-c", script], restartPolicy="Never")
    )

    def message() -> Any:
        statuses = core.read_namespaced_pod_status("whoami", namespace).status.container_statuses
        terminated = statuses and statuses[0].state.terminated
        return terminated and terminated.message

    assert wait_for("whoami", message) == f"system:serviceaccount:{namespace}:default"


def _replicas(namespace: str, name: str) -> int:
    got = cluster.kubectl("get", "specmodel", name, "-n", namespace, "-o", "json").stdout
    return int(json.loads(got)["spec"]["replicas"])


def _sync(namespace: str, manifest: dict[str, Any]) -> None:
    """What an Argo CD sync with ServerSideApply=true does: a forced server-side apply
    under Argo CD's field manager."""
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--field-manager=argocd-controller",
        "-n",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump(manifest),
    )


def _without(manifest: dict[str, Any], pointer: str) -> dict[str, Any]:
    """The manifest less the field at a JSON pointer (Argo CD's RespectIgnoreDifferences
    keeps the live value there)."""
    trimmed = copy.deepcopy(manifest)
    *parents, leaf = pointer.strip("/").split("/")
    node = trimmed
    for part in parents:
        node = node.get(part, {})
    node.pop(leaf, None)
    return trimmed


def test_a_gitops_sync_leaves_replicas_to_the_autoscaler(crds: None, namespace: str) -> None:
    """docs/gitops.md#autoscaled-models: a model kept in Git without `replicas` (the
    autoscaling example), scaled through the scale subresource, stays scaled across syncs;
    one that sets `replicas` stays scaled only with the Application's ignoreDifferences."""
    git = yaml.safe_load((REPO / "examples" / "autoscaling" / "llama-peagle.yaml").read_text())
    name = git["metadata"]["name"]
    assert "replicas" not in git["spec"]
    _sync(namespace, git)
    assert _replicas(namespace, name) == 1  # the CRD's default
    cluster.kubectl("scale", "specmodel", name, "-n", namespace, "--replicas=3")
    assert _replicas(namespace, name) == 3
    _sync(namespace, git)
    assert _replicas(namespace, name) == 3

    applications = yaml.safe_load_all(
        (REPO / "deploy" / "gitops" / "argocd" / "applications.yaml").read_text()
    )
    models = next(a for a in applications if a["metadata"]["name"] == "specfleet-models")
    assert "RespectIgnoreDifferences=true" in models["spec"]["syncPolicy"]["syncOptions"]
    (ignored,) = [d for d in models["spec"]["ignoreDifferences"] if d["kind"] == git["kind"]]
    assert ignored["group"] == git["apiVersion"].split("/")[0]
    pinned = {**git, "spec": {**git["spec"], "replicas": 1}}
    respected = pinned
    for pointer in ignored["jsonPointers"]:
        respected = _without(respected, pointer)
    _sync(namespace, respected)
    assert _replicas(namespace, name) == 3
    # Without ignoreDifferences, Git's replicas win over the autoscaler's at every sync.
    _sync(namespace, pinned)
    assert _replicas(namespace, name) == 1
