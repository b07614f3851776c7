"""The requests `benchmarks/child_write_cost.py` compares are what it says: a model's
children sent both ways, the operator's create-only apply and a POST, each accepted by the
real API server as a dry run, and nothing created."""

from __future__ import annotations

from kubernetes import client

from benchmarks import child_write_cost
from specfleet.operator import kube


def test_both_ways_of_writing_a_child_are_accepted_and_create_nothing(
    api_client: client.ApiClient, namespace: str
) -> None:
    api = kube.client_for(api_client.configuration, "test")
    manifests = child_write_cost.children(1, namespace)
    assert sorted(m["kind"] for m in manifests) == [
        "Deployment",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
    ]
    for manifest in manifests:
        for way in child_write_cost.WAYS:
            child_write_cost.send(api, way, manifest)  # raises on an error status
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    assert apps.list_namespaced_deployment(namespace).items == []
    assert core.list_namespaced_service(namespace).items == []
