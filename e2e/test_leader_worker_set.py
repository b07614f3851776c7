"""LeaderWorkerSet's real controller (e2e/lws.py) on the local control plane: its
webhooks admit a group, its StatefulSets run the leader and the worker as pods on
separate nodes, told each other's place as LeaderWorkerSet tells them, and a worker's
death restarts the whole group (RecreateGroupOnPodRestart), as a multi-node vLLM replica
needs: a worker alone cannot rejoin its leader's process group."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from e2e import cluster
from e2e.lws import LeaderWorkerSetController
from e2e.waiting import wait_for

GROUP = "group"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


@pytest.fixture(scope="module")
def lws_controller(
    control_plane: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LeaderWorkerSetController]:
    controller = LeaderWorkerSetController(tmp_path_factory.mktemp("lws"))
    try:
        controller.start()
        yield controller
    finally:
        controller.stop()


def _group(name: str) -> dict[str, Any]:
    container = {"name": "main", "image": "local/process", "command": ["sleep", "3600"]}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "workerTemplate": {"spec": {"containers": [container]}},
            },
        },
    }


def _running_group(core: client.CoreV1Api, namespace: str) -> dict[str, client.V1Pod] | None:
    """The group's pods by worker index, once both run."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{NAME_LABEL}={GROUP}").items
    running = {
        pod.metadata.labels[WORKER_INDEX_LABEL]: pod
        for pod in pods
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
    }
    return running if len(running) == 2 and len(pods) == 2 else None


def test_the_real_controller_runs_a_group_and_restarts_it_whole_when_a_worker_dies(
    lws_controller: LeaderWorkerSetController, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", _group(GROUP)
    )
    first = wait_for("the group's leader and worker", lambda: _running_group(core, namespace))
    leader, worker = first["0"], first["1"]
    assert leader.metadata.name == f"{GROUP}-0" and worker.metadata.name == f"{GROUP}-0-1"
    # Its pod webhook told each where the leader is and which it is.
    for index, pod in first.items():
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["LWS_LEADER_ADDRESS"] == f"{GROUP}-0.{GROUP}.{namespace}"
        assert env["LWS_GROUP_SIZE"] == "2" and env["LWS_WORKER_INDEX"] == index
    assert leader.spec.node_name != worker.spec.node_name

    uid = worker.metadata.uid
    pid_file = cluster.NODE_AGENT_STATE / f"{namespace}_{worker.metadata.name}_{uid[:8]}/main.pid"
    os.killpg(int(pid_file.read_text()), signal.SIGKILL)

    def recreated() -> dict[str, client.V1Pod] | None:
        group = _running_group(core, namespace)
        return group if group and group["0"].metadata.uid != leader.metadata.uid else None

    again = wait_for("the whole group to be recreated", recreated, timeout=90)
    # Both pods are new: the leader was not left running beside a fresh worker.
    assert again["1"].metadata.uid != uid
    assert {p.status.container_statuses[0].restart_count for p in again.values()} == {0}
