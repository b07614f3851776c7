"""GPUs by Dynamic Resource Allocation on the real control plane: a model whose pods claim
their GPUs from a ResourceClaimTemplate (runtime.resourceClaimTemplate). Kubernetes'
resourceclaim controller makes each pod's claim, the real scheduler allocates it from the
devices a ResourceSlice publishes (here for one node, as a DRA driver would), and the pod
runs on that node. No DRA driver prepares the devices: the node agent runs the simulated
engine, which needs none."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from e2e.models import apply, condition, get_model, sim_model
from e2e.operator_process import OperatorProcess
from e2e.waiting import wait_for

DRIVER = "gpu.specfleet.test"
NODE = "gpu-node-0"  # the node agent's first node (e2e/node_agent.py --node-prefix)


@pytest.fixture
def device_class(api_client: client.ApiClient) -> Iterator[str]:
    """A DeviceClass of the test's own driver and two of its GPUs on NODE, published as a
    driver would (cluster-scoped: named for this test, deleted after it)."""
    name = f"specfleet-e2e-{uuid.uuid4().hex[:6]}"
    resources = client.ResourceV1Api(api_client)
    resources.create_device_class(
        {
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        }
    )
    resources.create_resource_slice(
        {
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "nodeName": NODE,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}],
            },
        }
    )
    try:
        yield name
    finally:
        resources.delete_resource_slice(name)
        resources.delete_device_class(name)


def test_a_models_pods_claim_their_gpus_from_a_template_and_the_scheduler_places_them(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    device_class: str,
) -> None:
    client.ResourceV1Api(api_client).create_namespaced_resource_claim_template(
        model_namespace,
        {
            "metadata": {"name": "two-gpus"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpus",
                                "exactly": {
                                    "deviceClassName": device_class,
                                    "allocationMode": "ExactCount",
                                    "count": 2,
                                },
                            }
                        ]
                    }
                }
            },
        },
    )
    manifest = sim_model("claims")
    manifest["spec"]["runtime"] |= {"gpus": 2, "resourceClaimTemplate": "two-gpus"}
    manifest["spec"]["tuning"]["enabled"] = False
    apply(manifest, model_namespace)

    def ready() -> dict[str, Any] | None:
        body = get_model(api_client, model_namespace, "claims")
        return body if (condition(body, "Ready") or {}).get("status") == "True" else None

    body = wait_for("the model Ready on claimed GPUs", ready, timeout=180)
    assert body["status"]["capacity"]["resource"] == ("claimed from ResourceClaimTemplate two-gpus")
    (pod,) = client.CoreV1Api(api_client).list_namespaced_pod(model_namespace).items
    assert pod.spec.node_name == NODE
    container = pod.spec.containers[0]
    assert [c.name for c in container.resources.claims] == ["gpus"]
    assert not any("gpu" in name for name in container.resources.limits or {})
    (claim,) = (
        client.ResourceV1Api(api_client).list_namespaced_resource_claim(model_namespace).items
    )
    assert claim.metadata.owner_references[0].uid == pod.metadata.uid
    devices = claim.status.allocation.devices.results
    assert sorted(d.device for d in devices) == ["gpu-0", "gpu-1"]
    assert {d.pool for d in devices} == {device_class}
