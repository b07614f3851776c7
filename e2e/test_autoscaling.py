"""Autoscaling on the real control plane: KEDA, on vLLM's queue read from the Prometheus
that prometheus-operator runs, scales a SpeculativeModel through its scale subresource
(KEDA drives the kube-controller-manager's own HPA) while a canary runs; the operator
follows with the pods, restarts the trial at the new size, and follows KEDA back down."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e import cluster
from e2e.keda import Keda
from e2e.models import apply, canary_running, canary_trial, get_model, history, sim_admin
from e2e.operator_process import OperatorProcess
from e2e.prometheus import MONITOR_VALUES, Prometheus, as_json
from e2e.story import HIGH_ACCEPTANCE, MODEL, sim_profile, story_model
from e2e.waiting import wait_for
from specfleet.operator.api import GROUP, PLURAL, VERSION
from specfleet.operator.kube import FIELD_MANAGER
from tests.test_chart import manifests, render

EXAMPLES = cluster.REPO / "examples" / "autoscaling"
# Room for 8 running requests a pod: the light load runs without a queue, the heavy one
# queues.
MAX_NUM_SEQS = 8
LIGHT, HEAVY = 3.0, 40.0  # requests per second per pod


def queue_profile(requests_per_second: float) -> dict[str, Any]:
    profile = sim_profile(HIGH_ACCEPTANCE)
    profile["load"] = {"requests_per_second": requests_per_second}
    profile["max_num_seqs"] = MAX_NUM_SEQS
    return profile


def offer(pod_ip: str | None, requests_per_second: float) -> bool:
    """Set a sim's arrivals; False while it does not answer yet."""
    if not pod_ip:
        return False
    try:
        sim_admin(pod_ip, "/admin/load", {"requests_per_second": requests_per_second})
    except OSError:
        return False
    return True


def scaled_object(namespace: str, prometheus_url: str) -> dict[str, Any]:
    """The example ScaledObject for this test's model, Prometheus and pace: polled every
    2 s, and scaled in as soon as the queue is empty (the example waits 10 minutes)."""
    scaled: dict[str, Any] = yaml.safe_load((EXAMPLES / "keda-scaledobject.yaml").read_text())
    spec = scaled["spec"]
    scaled["metadata"]["name"] = spec["scaleTargetRef"]["name"] = MODEL
    spec["pollingInterval"] = 2
    spec["maxReplicaCount"] = 2
    spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"] = {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 5}],
    }
    trigger = spec["triggers"][0]["metadata"]
    trigger["serverAddress"] = prometheus_url
    trigger["query"] = f'sum(vllm:num_requests_waiting{{namespace="{namespace}", model="{MODEL}"}})'
    return scaled


def test_keda_scales_the_model_on_vllm_queue_and_a_running_canary_restarts(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str, tmp_path: Path
) -> None:
    prometheus = Prometheus(api_client, model_namespace, tmp_path)
    keda = Keda(model_namespace, tmp_path)
    profile_file = tmp_path / "profile.yaml"
    profile_file.write_text(yaml.safe_dump(queue_profile(LIGHT)))
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)

    def switched(name: str, requests_per_second: float) -> bool:
        """The pod took the new load, or is going away (a canary ended meanwhile)."""
        try:
            pod = core.read_namespaced_pod(name, model_namespace)
        except ApiException as error:
            if error.status == 404:
                return True
            raise
        if pod.metadata.deletion_timestamp:
            return True
        return offer(pod.status.pod_ip, requests_per_second)

    def set_load(requests_per_second: float) -> None:
        """Running sims switch now, new ones start that way."""
        profile_file.write_text(yaml.safe_dump(queue_profile(requests_per_second)))
        for pod in core.list_namespaced_pod(
            model_namespace, label_selector=f"specfleet.io/model={MODEL}"
        ).items:
            wait_for(
                f"{pod.metadata.name} to take the new load",
                functools.partial(switched, pod.metadata.name, requests_per_second),
                timeout=30,
            )

    def scaled_to(count: int) -> Any:
        def reached() -> Any:
            model = get_model(api_client, model_namespace, MODEL)
            stable = apps.read_namespaced_deployment(MODEL, model_namespace)
            done = (
                model["spec"]["replicas"] == count
                and stable.spec.replicas == count
                and (stable.status.ready_replicas or 0) == count
            )
            return model if done else None

        return reached

    try:
        prometheus.start()
        text = render(namespace=model_namespace, set_json=as_json(MONITOR_VALUES)).stdout
        pod_monitor = next(d for d in manifests(text) if d["kind"] == "PodMonitor")
        cluster.kubectl(
            "apply", "-n", model_namespace, "-f", "-", input=yaml.safe_dump(pod_monitor)
        )
        keda.start()
        apply(story_model(profile_file), model_namespace)
        cluster.kubectl(
            "apply",
            "-n",
            model_namespace,
            "-f",
            "-",
            input=yaml.safe_dump(scaled_object(model_namespace, prometheus.url)),
        )
        during = wait_for(
            "a canary", lambda: canary_running(api_client, model_namespace, MODEL), timeout=180
        )
        assert during["spec"]["replicas"] == 1  # no queue yet: KEDA keeps the minimum
        trial = canary_trial(during)
        assert trial is not None and trial["stableReplicas"] == 1

        # Requests queue up: KEDA scales the model out in the middle of the canary.
        set_load(HEAVY)
        body = wait_for("KEDA to scale the model out", scaled_to(2), timeout=120)
        after = history(body)[len(history(during)) :]
        restarts = [h for h in after if h["reason"].startswith("FleetScaled")]
        assert restarts and "from 1 to 2" in restarts[0]["reason"], after
        assert not any(h["action"] == "Promote" for h in after[: after.index(restarts[0])])

        scale = json.loads(
            cluster.kubectl(
                "get",
                "--raw",
                f"/apis/{GROUP}/{VERSION}/namespaces/{model_namespace}/{PLURAL}/{MODEL}/scale",
            ).stdout
        )
        assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (2, 2)
        selector = scale["status"]["selector"]
        assert selector == f"specfleet.io/model={MODEL},specfleet.io/track=stable"
        assert len(core.list_namespaced_pod(model_namespace, label_selector=selector).items) == 2
        # KEDA's HPA (the kube-controller-manager's) read and wrote the scale subresource;
        # the operator never wrote spec.
        hpa = client.AutoscalingV2Api(api_client).read_namespaced_horizontal_pod_autoscaler(
            f"keda-hpa-{MODEL}", model_namespace
        )
        assert hpa.spec.scale_target_ref.kind == "SpeculativeModel"
        able = {c.type: c for c in hpa.status.conditions}["AbleToScale"]
        assert able.status == "True", able
        entries = get_model(api_client, model_namespace, MODEL)["metadata"]["managedFields"]
        scalers = {e["manager"] for e in entries if e.get("subresource") == "scale"}
        assert scalers == {"kube-controller-manager"}, entries
        assert not [
            e
            for e in entries
            if e["manager"] == FIELD_MANAGER and "f:spec" in e.get("fieldsV1", {})
        ], entries

        # The queue drains: KEDA scales the model back in.
        set_load(0)
        wait_for("KEDA to scale the model back in", scaled_to(1), timeout=120)
    finally:
        keda.stop()
        prometheus.stop()


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
