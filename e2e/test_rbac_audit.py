"""The chart's RBAC is exactly what the operator uses. The operator runs as the chart's
ServiceAccount (a token from the TokenRequest API), under the chart's Roles, against the
real API server, through a model whose name a user's Service already has; the API
server's audit log (every request of that namespace's service accounts, e2e/cluster.py)
then lists each (group, resource, verb) it used, and that set must equal the Roles'."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e import cluster
from e2e.models import apply, condition, get_model, sim_model
from e2e.operator_process import OperatorProcess
from e2e.waiting import wait_for
from tests.test_chart import manifests, permissions, render

NAMESPACE = cluster.RBAC_AUDIT_NAMESPACE
RELEASE = "specfleet"  # the chart names the Lease after its full name: the release's
MODEL_NAME = "audited"
Permission = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


@pytest.fixture
def audit_namespace(control_plane: None) -> Iterator[str]:
    """The one namespace whose service accounts the audit policy logs in full."""
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--timeout=120s")
    cluster.kubectl("create", "namespace", NAMESPACE)
    yield NAMESPACE
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


def token_kubeconfig(account: str, into: Path) -> Path:
    """The admin kubeconfig's cluster, with the ServiceAccount's token as the user."""
    token = cluster.kubectl(
        "create", "token", account, "-n", NAMESPACE, "--duration=1h"
    ).stdout.strip()
    config = yaml.safe_load(cluster.kubeconfig_path().read_text())
    context = config["contexts"][0]
    context["context"]["user"] = account
    config["contexts"] = [context]
    config["current-context"] = context["name"]
    config["users"] = [{"name": account, "user": {"token": token}}]
    into.write_text(yaml.safe_dump(config))
    return into


def used_by(user: str) -> tuple[set[Permission], list[dict[str, Any]]]:
    """What `user` did, by the audit log: the permissions its requests needed, and the
    requests the API server refused it (403)."""
    used: set[Permission] = set()
    refused = []
    for event in cluster.audit_events(user):
        if (event.get("user") or {}).get("username") != user or "objectRef" not in event:
            continue
        ref = event["objectRef"]
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        code = event.get("responseStatus", {}).get("code", 0)
        if code == 403:
            refused.append(event)
            continue
        used.add((ref.get("apiGroup", ""), resource, event["verb"]))
        if event["verb"] == "patch" and code == 201:
            # A server-side apply that created the object: authorized as create too.
            used.add((ref.get("apiGroup", ""), resource, "create"))
    return used, refused


def test_the_operator_uses_exactly_the_verbs_the_chart_grants(
    crds: None, api_client: client.ApiClient, audit_namespace: str, tmp_path: Path
) -> None:
    text = "".join(
        render(
            namespace=NAMESPACE,
            release=RELEASE,
            set_json=[f'watch.namespaces=["{NAMESPACE}"]'],
            show_only=template,
        ).stdout
        for template in ("templates/serviceaccount.yaml", "templates/rbac.yaml")
    )
    documents = manifests(text)
    cluster.kubectl("apply", "-f", "-", input=text)
    account = next(d for d in documents if d["kind"] == "ServiceAccount")["metadata"]["name"]
    granted = set().union(
        *(permissions(d["rules"]) for d in documents if d["kind"] in ("Role", "ClusterRole"))
    )
    # A user's Service that happens to carry the model's name.
    cluster.kubectl("create", "service", "clusterip", MODEL_NAME, "--tcp=80:80", "-n", NAMESPACE)
    theirs = yaml.safe_load(
        cluster.kubectl("get", "service", MODEL_NAME, "-n", NAMESPACE, "-o", "yaml").stdout
    )
    # And a user's Deployment with the name of the model's canary: the create-only apply
    # finds each name taken, and one GET per kind names the owner.
    canary = f"{MODEL_NAME}-canary"
    cluster.kubectl(
        "create",
        "deployment",
        canary,
        "--image=registry.k8s.io/pause:3.10",
        "--replicas=0",
        "-n",
        NAMESPACE,
    )
    their_deployment = yaml.safe_load(
        cluster.kubectl("get", "deployment", canary, "-n", NAMESPACE, "-o", "yaml").stdout
    )
    # And a user's PodDisruptionBudget with the model's name.
    cluster.kubectl(
        "create",
        "poddisruptionbudget",
        MODEL_NAME,
        "--selector=app=theirs",
        "--max-unavailable=1",
        "-n",
        NAMESPACE,
    )

    # And, for a model whose replicas span nodes, a user's LeaderWorkerSet with the name
    # of its canary (LeaderWorkerSet's CRD served before the operator starts, so that it
    # watches the kind).
    cluster.install_lws_crds()
    grouped_canary = "grouped-canary"
    cluster.kubectl(
        "apply",
        "-n",
        NAMESPACE,
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": grouped_canary},
                "spec": {
                    "replicas": 0,
                    "leaderWorkerTemplate": {
                        "size": 2,
                        "workerTemplate": {
                            "spec": {
                                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]
                            }
                        },
                    },
                },
            }
        ),
    )

    operator = OperatorProcess(
        [NAMESPACE],
        tmp_path / "operator.log",
        lease=(NAMESPACE, RELEASE),
        identity="op-audited",
        # As the chart's Deployment passes it (hotSchedules.keySecret empty).
        extra_args=("--schedule-key-secret", f"{NAMESPACE}/{RELEASE}-schedule-key"),
        kubeconfig=token_kubeconfig(account, tmp_path / "operator.kubeconfig"),
    )
    try:
        operator.start()
        wait_for("the operator to lead", operator.leading, timeout=30)
        apply(sim_model(MODEL_NAME, tuning={"enabled": False}), NAMESPACE)
        # And one whose Service the operator creates.
        apply(sim_model("plain", tuning={"enabled": False}), NAMESPACE)
        # And one whose replicas span two nodes: LeaderWorkerSets, its canary's name taken.
        grouped = {"parallelism": {"tensor": 2, "nodesPerReplica": 2}}
        apply(sim_model("grouped", tuning={"enabled": False}, runtime=grouped), NAMESPACE)
        core = client.CoreV1Api(api_client)

        def plains_service() -> bool:
            return any(
                s.metadata.name == "plain" for s in core.list_namespaced_service(NAMESPACE).items
            )

        wait_for("plain's Service", plains_service, timeout=60)
        # Deleted by hand: put back, once a GET says its model is still there (the
        # collector deletes the children of a model whose DELETED the watch lost).
        cluster.kubectl("delete", "service", "plain", "-n", NAMESPACE)
        wait_for("plain's Service put back", plains_service, timeout=60)

        def refused_service() -> dict[str, Any] | None:
            degraded = condition(get_model(api_client, NAMESPACE, MODEL_NAME), "Degraded")
            return degraded if (degraded or {}).get("reason") == "ChildNotOwned" else None

        degraded = wait_for("Degraded: ChildNotOwned", refused_service, timeout=60)
        assert f"Service {NAMESPACE}/{MODEL_NAME}" in degraded["message"]
        assert f"Deployment {NAMESPACE}/{canary}" in degraded["message"]
        assert f"PodDisruptionBudget {NAMESPACE}/{MODEL_NAME}" in degraded["message"]

        def refused_group() -> dict[str, Any] | None:
            degraded = condition(get_model(api_client, NAMESPACE, "grouped"), "Degraded")
            return degraded if (degraded or {}).get("reason") == "ChildNotOwned" else None

        degraded = wait_for("grouped Degraded: ChildNotOwned", refused_group, timeout=60)
        assert f"LeaderWorkerSet {NAMESPACE}/{grouped_canary}" in degraded["message"]
        wait_for(
            "the Warning Event",
            lambda: (
                "ChildNotOwned"
                in cluster.kubectl("get", "events", "-n", NAMESPACE, "-o", "yaml").stdout
            ),
            timeout=30,
        )
        time.sleep(5)  # a few Lease renews and sweeps
    finally:
        operator.stop()

    now = yaml.safe_load(
        cluster.kubectl("get", "service", MODEL_NAME, "-n", NAMESPACE, "-o", "yaml").stdout
    )
    assert now["spec"]["selector"] == theirs["spec"]["selector"]
    assert "ownerReferences" not in now["metadata"]
    assert now["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    deployment = yaml.safe_load(
        cluster.kubectl(
            "get", "deployment", canary, "-n", NAMESPACE, "-o", "yaml", "--show-managed-fields"
        ).stdout
    )
    assert "ownerReferences" not in deployment["metadata"]
    # Its controller writes its status; no one else wrote anything.
    assert deployment["spec"] == their_deployment["spec"]
    assert deployment["metadata"].get("labels") == their_deployment["metadata"].get("labels")
    managers = {m["manager"] for m in deployment["metadata"]["managedFields"]}
    assert "specfleet-operator" not in managers, managers
    budget = yaml.safe_load(
        cluster.kubectl("get", "pdb", MODEL_NAME, "-n", NAMESPACE, "-o", "yaml").stdout
    )
    assert "ownerReferences" not in budget["metadata"]
    assert budget["spec"]["selector"] == {"matchLabels": {"app": "theirs"}}
    # The status writes (a PUT of the status subresource, its body no spec) changed
    # neither the user's spec nor who owns it: the operator owns status and nothing else.
    plain = yaml.safe_load(
        cluster.kubectl(
            "get", "specmodel", "plain", "-n", NAMESPACE, "-o", "yaml", "--show-managed-fields"
        ).stdout
    )
    assert plain["metadata"]["generation"] == 1
    assert plain["status"]["observedGeneration"] == 1
    owned = {
        (m["manager"], m.get("subresource", "")): set(m["fieldsV1"])
        for m in plain["metadata"]["managedFields"]
    }
    assert [fields for (_, sub), fields in owned.items() if sub] == [{"f:status"}], owned
    assert any("f:spec" in fields for (_, sub), fields in owned.items() if not sub), owned

    used, refused = used_by(f"system:serviceaccount:{NAMESPACE}:{account}")
    assert used, (
        "no audit events for the operator's ServiceAccount: was the control plane started "
        "with e2e/cluster.py's current audit policy?"
    )
    assert not refused, [(e["verb"], e["objectRef"]) for e in refused]
    assert used - granted == set(), "used without a grant"
    assert granted - used == set(), "granted but never used"
