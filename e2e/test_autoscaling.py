"""Autoscaling on the real control plane: an HPA (the kube-controller-manager's own)
scales a SpeculativeModel through its scale subresource while a canary runs; the
operator follows with the pods and restarts the trial at the new size."""

from __future__ import annotations

import json
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster
from e2e.models import apply, canary_running, get_model, history
from e2e.operator_process import OperatorProcess
from e2e.story import MODEL, story_model
from e2e.waiting import wait_for
from specfleet.operator.api import GROUP, KIND, PLURAL, VERSION
from specfleet.operator.kube import FIELD_MANAGER


def hpa(min_replicas: int, max_replicas: int) -> dict[str, Any]:
    """An HPA on the model itself (not its Deployment). Below minReplicas the controller
    scales up without reading a metric; the CPU target only makes the object complete."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": MODEL},
        "spec": {
            "scaleTargetRef": {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "name": MODEL},
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        },
    }


def test_an_hpa_scales_the_model_mid_canary_and_the_trial_restarts(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(story_model(), model_namespace)
    during = wait_for(
        "a canary", lambda: canary_running(api_client, model_namespace, MODEL), timeout=180
    )
    assert during["status"]["canary"]["stableReplicas"] == 1
    cluster.kubectl("apply", "-n", model_namespace, "-f", "-", input=json.dumps(hpa(2, 3)))

    def restarted() -> dict[str, Any] | None:
        body = get_model(api_client, model_namespace, MODEL)
        aborts = [h for h in history(body) if h["reason"].startswith("FleetScaled")]
        return body if aborts and body["spec"]["replicas"] == 2 else None

    body = wait_for("the HPA's scale and the trial's restart", restarted, timeout=90)
    abort = next(h for h in history(body) if h["reason"].startswith("FleetScaled"))
    assert abort["action"] == "Abort" and "from 1 to 2" in abort["reason"]
    assert not any(h["action"] == "Promote" for h in history(body)[len(history(during)) :])

    apps = client.AppsV1Api(api_client)

    def followed() -> dict[str, Any] | None:
        stable = apps.read_namespaced_deployment(MODEL, model_namespace)
        scale = json.loads(
            cluster.kubectl(
                "get",
                "--raw",
                f"/apis/{GROUP}/{VERSION}/namespaces/{model_namespace}/{PLURAL}/{MODEL}/scale",
            ).stdout
        )
        done = stable.spec.replicas == 2 and scale["status"].get("replicas") == 2
        return scale if done else None

    scale = wait_for("the pods to follow the scale", followed, timeout=120)
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["selector"] == f"specfleet.io/model={MODEL},specfleet.io/track=stable"
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        model_namespace, label_selector=scale["status"]["selector"]
    )
    assert len(pods.items) == 2

    # The HPA read the scale subresource and owns spec.replicas; the operator never wrote it.
    hpa_status = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler(
        MODEL, model_namespace
    )
    able = {c.type: c for c in hpa_status.status.conditions}["AbleToScale"]
    assert able.status == "True", able
    entries = get_model(api_client, model_namespace, MODEL)["metadata"]["managedFields"]
    scaler = [e for e in entries if e.get("subresource") == "scale"]
    assert [e["manager"] for e in scaler] == ["kube-controller-manager"], entries
    assert not [
        e for e in entries if e["manager"] == FIELD_MANAGER and "f:spec" in e.get("fieldsV1", {})
    ], entries

    # The next trial starts at the new size and remembers it.
    later = wait_for(
        "a canary at two replicas",
        lambda: (
            body
            if (body := canary_running(api_client, model_namespace, MODEL))
            and body["status"]["canary"].get("stableReplicas") == 2
            else None
        ),
        timeout=120,
    )
    assert later["spec"]["replicas"] == 2


def test_the_keda_example_is_admitted_with_kedas_own_crd(crds: None, namespace: str) -> None:
    """examples/autoscaling: the autoscaled model and its ScaledObject, judged by KEDA
    v2.21.0's CRD (strict: a misspelled field is refused, not pruned)."""
    cluster.install_keda_crds()
    directory = cluster.REPO / "examples" / "autoscaling"
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-n", namespace, "-f", str(directory)
    )
    assert result.stdout.count("(server dry run)") == 2, result.stdout
    scaled = yaml.safe_load((directory / "keda-scaledobject.yaml").read_text())
    model = yaml.safe_load((directory / "llama-peagle.yaml").read_text())
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == (
        model["apiVersion"],
        model["kind"],
        model["metadata"]["name"],
    )
    scaled["spec"]["minReplicaCountt"] = 1
    refused = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-n",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump(scaled),
        check=False,
    )
    assert refused.returncode != 0 and "minReplicaCountt" in refused.stderr
