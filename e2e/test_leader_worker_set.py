"""LeaderWorkerSet's real controller (e2e/lws.py) on the local control plane: its
webhooks admit a group, its StatefulSets run the leader and the worker as pods on
separate nodes, told each other's place as LeaderWorkerSet tells them, and a worker's
death restarts the whole group (RecreateGroupOnPodRestart), as a multi-node vLLM replica
needs: a worker alone cannot rejoin its leader's process group.

Then a model whose replicas span two nodes, on the simulated engine, under an operator
started once LeaderWorkerSet's CRD is served (its watches are chosen at start): served
and scraped from its leader, tuned up through a canary group, and restarted as a group
when a worker dies, rolled back when its draft goes stale; then down to one node a
replica, served by Deployments again. Real vLLM as such a group:
e2e/test_real_engine_multi_node.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster, lws
from e2e.lws import LeaderWorkerSetController
from e2e.models import apply, canary_running, condition, get_model, sim_admin, speculation_off
from e2e.operator_process import OperatorProcess
from e2e.story import HIGH_ACCEPTANCE, MODEL, STALE_ACCEPTANCE, sim_profile, story_model
from e2e.waiting import wait_for
from specfleet.operator import render
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, ActionKind

GROUP = "group"


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
    return lws.running_group(core, namespace, GROUP)


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


def _leaders(core: client.CoreV1Api, namespace: str, track: str) -> list[client.V1Pod]:
    selector = f"{render.TRACK_LABEL}={track},{lws.WORKER_INDEX_LABEL}=0"
    return [
        pod
        for pod in core.list_namespaced_pod(namespace, label_selector=selector).items
        if pod.metadata.deletion_timestamp is None
    ]


def _stable_group_replicas(custom: client.CustomObjectsApi, namespace: str) -> int:
    group = custom.get_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", f"{MODEL}-stable"
    )
    return int(group["spec"]["replicas"])


def _stable_args(custom: client.CustomObjectsApi, namespace: str) -> list[str]:
    group = custom.get_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets", f"{MODEL}-stable"
    )
    leader = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    return list(leader["spec"]["containers"][0]["args"])


def _rollout(api_client: client.ApiClient, namespace: str) -> dict[str, Any]:
    """What a wait for Ready shows when it times out: the model's Ready and Progressing
    conditions, each LeaderWorkerSet's counts, and each pod's phase, readiness and config
    (CI once waited 240 s for Ready after a promotion and said no more than that)."""
    body = get_model(api_client, namespace, MODEL)
    conditions = {
        c["type"]: f"{c['status']} {c.get('reason')}: {c.get('message')}"
        for c in (body.get("status") or {}).get("conditions") or []
        if c["type"] in ("Ready", "Progressing")
    }
    groups = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "leaderworkerset.x-k8s.io", "v1", namespace, "leaderworkersets"
    )["items"]
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    return {
        "conditions": conditions,
        "groups": {g["metadata"]["name"]: g.get("status") for g in groups},
        "pods": [
            (
                pod.metadata.name,
                pod.status.phase,
                [(c.type, c.status) for c in pod.status.conditions or []],
                (pod.metadata.annotations or {}).get(render.CONFIG_HASH_ANNOTATION),
                pod.metadata.deletion_timestamp is not None,
            )
            for pod in pods
        ],
    }


def test_a_model_across_two_nodes_is_served_scraped_and_tuned_through_a_canary_group(
    lws_controller: LeaderWorkerSetController,
    crds: None,
    api_client: client.ApiClient,
    ha_namespace: str,
    tmp_path: Path,
) -> None:
    namespace = ha_namespace
    operator = OperatorProcess([namespace], tmp_path / "operator.log")
    operator.start()
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    try:
        # The sims read their profile from this file, so a drift reaches new pods too.
        profile = tmp_path / "profile.yaml"
        profile.write_text(yaml.safe_dump(sim_profile(HIGH_ACCEPTANCE)))
        model = story_model(profile)
        # Tensor parallel 2 over two pods of one GPU each: a group of a leader and a worker.
        model["spec"]["runtime"]["parallelism"] = {"tensor": 2, "nodesPerReplica": 2}
        apply(model, namespace)

        def ready() -> dict[str, Any] | None:
            body = get_model(api_client, namespace, MODEL)
            return body if (condition(body, "Ready") or {}).get("status") == "True" else None

        def rollout() -> dict[str, Any]:
            return _rollout(api_client, namespace)

        body = wait_for("the model Ready on its group", ready, timeout=180, context=rollout)
        # Its GPUs at peak, through the API server (a field its schema lacked would be
        # pruned): groups of 2 pods of 1 GPU, 1 stable + 1 surge + 1 canary.
        assert body["status"]["capacity"]["peak"] == 6, body["status"].get("capacity")
        group = lws.running_group(core, namespace, f"{MODEL}-stable")
        assert group is not None
        # The Service reaches the leader alone: the worker runs headless and serves nothing.
        slices = client.DiscoveryV1Api(api_client).list_namespaced_endpoint_slice(
            namespace, label_selector=f"kubernetes.io/service-name={MODEL}"
        )
        addresses = {a for s in slices.items for e in s.endpoints or [] for a in e.addresses}
        # A canary's or a surge group's leader may serve beside it (CI saw one already up).
        workers = {
            pod.status.pod_ip
            for pod in core.list_namespaced_pod(namespace).items
            if pod.metadata.labels.get(lws.WORKER_INDEX_LABEL, "0") != "0"
        }
        assert group["0"].status.pod_ip in addresses and not addresses & workers, (
            addresses,
            workers,
        )

        # Tuned through a canary group: the canary LeaderWorkerSet runs a group of its own,
        # scraped from its leader, and its K is promoted to the stable groups.
        during = wait_for(
            "a canary group", lambda: canary_running(api_client, namespace, MODEL), timeout=240
        )
        assert wait_for("the canary's leader", lambda: _leaders(core, namespace, "canary"))

        def promoted() -> dict[str, Any] | None:
            body = get_model(api_client, namespace, MODEL)
            history = (body.get("status") or {}).get("history") or []
            return body if any(h["action"] == ActionKind.PROMOTE for h in history) else None

        after = wait_for("a promotion", promoted, timeout=300)
        tokens = after["status"]["speculation"]["tokens"]
        assert tokens > during["spec"]["speculation"]["tokens"]
        # The decision is written to status before the groups are rolled (CI read the
        # stable template between the two): the template follows within a reconcile.

        def stable_k() -> str:
            args = _stable_args(custom, namespace)
            return args[args.index("--num-speculative-tokens") + 1]

        wait_for(f"the stable groups at K={tokens}", lambda: stable_k() == str(tokens), 30)
        wait_for("the model Ready at the promoted K", ready, timeout=240, context=rollout)

        # A worker dies: its whole group is recreated, and the model is Ready again.
        before = wait_for(
            "the stable group running",
            lambda: lws.running_group(core, namespace, f"{MODEL}-stable"),
            timeout=120,
        )
        worker = before["1"]
        pods = cluster.NODE_AGENT_STATE / f"{namespace}_{worker.metadata.name}_"
        pid_file = Path(f"{pods}{worker.metadata.uid[:8]}") / "runtime.pid"
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)

        def recreated() -> dict[str, client.V1Pod] | None:
            group = lws.running_group(core, namespace, f"{MODEL}-stable")
            leader_uid = before["0"].metadata.uid
            return group if group and group["0"].metadata.uid != leader_uid else None

        again = wait_for("the stable group recreated whole", recreated, timeout=120)
        assert again["1"].metadata.uid != worker.metadata.uid
        wait_for("the model Ready again", ready, timeout=180, context=rollout)

        # The draft goes stale: rolled back on the groups as on pods, from the leaders'
        # windows, and the stable groups roll to plain decoding.
        profile.write_text(yaml.safe_dump(sim_profile(STALE_ACCEPTANCE)))

        def drifted() -> bool:
            group = lws.running_group(core, namespace, f"{MODEL}-stable")
            if group is None or not group["0"].status.pod_ip:
                return False
            stale = {"acceptance": STALE_ACCEPTANCE}
            try:
                sim_admin(group["0"].status.pod_ip, "/admin/profile", stale)
            except OSError:  # its engine not listening yet
                return False
            return True

        wait_for("the leader's engine told of the drift", drifted, timeout=120)

        def rolled_back() -> dict[str, Any] | None:
            body = get_model(api_client, namespace, MODEL)
            actions = {h["action"] for h in (body.get("status") or {}).get("history") or []}
            return body if actions & ROLLBACK_ACTIONS else None

        off = wait_for("a rollback", rolled_back, timeout=180)
        assert speculation_off(off), off["status"]["speculation"]
        wait_for(
            "the stable groups without a draft",
            lambda: "--draft-model" not in _stable_args(custom, namespace),
            timeout=60,
        )
        wait_for("the model Ready decoding plainly", ready, timeout=180, context=rollout)

        # Down to one node a replica: Deployments serve, the groups are scaled to 0.
        model["spec"]["runtime"]["parallelism"] = {"tensor": 1, "nodesPerReplica": 1}
        apply(model, namespace)
        apps = client.AppsV1Api(api_client)

        def deployment_ready() -> int | None:
            # The operator creates the Deployment on its next reconcile: not there yet
            # is not a failure.
            try:
                deployment = apps.read_namespaced_deployment(MODEL, namespace)
            except client.exceptions.ApiException as error:
                if error.status == 404:
                    return None
                raise
            ready: int | None = deployment.status.ready_replicas
            return ready

        wait_for("the stable Deployment ready", deployment_ready, timeout=180)
        wait_for(
            "the groups gone",
            lambda: (
                not core.list_namespaced_pod(
                    namespace, label_selector=f"{lws.NAME_LABEL}={MODEL}-stable"
                ).items
            ),
            timeout=120,
        )
        assert _stable_group_replicas(custom, namespace) == 0
        wait_for("the model Ready on a Deployment", ready, timeout=180, context=rollout)
    finally:
        operator.stop()
