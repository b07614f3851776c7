"""The chart's two operator replicas, as pods from the operator image built here, behind
their Lease on the real control plane, mid-canary: the leader's container killed, then
frozen, then the leader cut off the network. The API server's audit log (e2e/cluster.py)
says which replica wrote what: each replica's user agent carries its pod's name."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client

from e2e import cluster, operator_pods
from e2e.cluster import AuditedWrite
from e2e.models import (
    apply,
    canary_running,
    canary_tokens,
    get_model,
    history,
    schedule_generation,
    sim_model,
)
from e2e.operator_pods import Replica
from e2e.story import MODEL, install_chart, story_model
from e2e.waiting import wait_for
from specfleet.operator.kube import user_agent

# Shorter than the chart's defaults (15/10/2 s, measured by benchmarks/failover.py) to keep
# the test quick; the same ratios: the renew deadline well before the Lease runs out.
RENEW_DEADLINE = 4
QUICK_ELECTION = (
    "leaderElection.leaseDuration=6",
    f"leaderElection.renewDeadline={RENEW_DEADLINE}",
    "leaderElection.retryPeriod=1",
    "requestTimeout=1.5",
)


def writes(namespace: str, name: str, after: datetime | None = None) -> list[AuditedWrite]:
    """The writes the API server accepted from replica `name` in `namespace`."""
    return cluster.accepted_writes(user_agent(name), namespace, after)


def first_write(namespace: str, name: str, after: datetime) -> datetime:
    return cluster.first_accepted_write(user_agent(name), namespace, after).received


def two_replicas_mid_canary(
    api_client: client.ApiClient, namespace: str
) -> tuple[Replica, Replica, dict[str, Any]]:
    """The chart installed with its two replicas and the story's model: (leader, standby,
    the model while its first canary runs)."""
    install_chart(namespace, QUICK_ELECTION)
    leader = wait_for("a leader", lambda: operator_pods.leader(api_client, namespace), timeout=60)
    (standby,) = [
        r for r in operator_pods.replicas(api_client, namespace).values() if r.name != leader.name
    ]
    apply(story_model(), namespace)
    during = wait_for("a canary", lambda: canary_running(api_client, namespace, MODEL), timeout=180)
    assert writes(namespace, leader.name)
    assert not writes(namespace, standby.name)  # a standby is silent
    return leader, standby, during


def decided(api_client: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    body = get_model(api_client, namespace, MODEL)
    return body if {"Promote", "Abort"} & {h["action"] for h in history(body)} else None


def assert_finished_once(after: dict[str, Any], during: dict[str, Any]) -> None:
    """Nothing of the history before the fault is lost, and the canary running then is the
    one decided: no second StartCanary before the decision."""
    candidate = canary_tokens(during)
    assert history(after)[: len(history(during))] == history(during)
    decision = next(i for i, h in enumerate(history(after)) if h["action"] in ("Promote", "Abort"))
    starts = [h["toTokens"] for h in history(after)[:decision] if h["action"] == "StartCanary"]
    assert starts == [candidate]


def schedule_key(namespace: str) -> tuple[str, str] | None:
    """The Secret the chart's operator keeps its hot-schedule key in (hotSchedules.keySecret
    empty), created at its first start: (name, the key), if exactly one such Secret."""
    found = cluster.kubectl(
        "get",
        "secrets",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/managed-by=specfleet",
        "-o",
        "json",
    ).stdout
    items = json.loads(found)["items"]
    if len(items) != 1:
        return None
    return items[0]["metadata"]["name"], items[0]["data"]["key"]


def replica(api_client: client.ApiClient, namespace: str, name: str) -> Replica | None:
    return operator_pods.replicas(api_client, namespace).get(name)


def test_the_charts_replicas_through_a_killed_then_a_frozen_leader(
    crds: None, api_client: client.ApiClient, ha_namespace: str
) -> None:
    namespace = ha_namespace
    first, _, during = two_replicas_mid_canary(api_client, namespace)
    # Both replicas started at once, each creating the key's Secret if absent: one won.
    key = wait_for("the operator's schedule key", lambda: schedule_key(namespace), timeout=30)

    # SIGKILL of the leader's container: the node agent restarts it, as a kubelet does.
    # Named by its pod, the restarted operator takes its own Lease back at once; the
    # standby takes over only if the Lease expires first. Either way one leader finishes
    # the same canary.
    killed = datetime.now(UTC)
    first.signal("KILL")

    def next_leader() -> Replica | None:
        now = operator_pods.leader(api_client, namespace)
        restarted = now is not None and (now.name != first.name or now.restarts > first.restarts)
        return now if restarted else None

    successor = wait_for("a leader after the kill", next_leader, timeout=60)
    took_over = first_write(namespace, successor.name, killed)
    after = wait_for("the canary's decision", lambda: decided(api_client, namespace), timeout=180)
    assert_finished_once(after, during)

    # SIGSTOP: the leader is frozen with the Lease; the other replica takes over once it
    # expires, an evaluation due meanwhile happens after that, and the frozen one, thawed,
    # sends nothing more: it exits (1) and its container comes back as the standby.
    (other,) = [
        r
        for r in operator_pods.replicas(api_client, namespace).values()
        if r.name != successor.name
    ]
    frozen = datetime.now(UTC)
    successor.signal("STOP")
    try:
        wait_for("the other replica to lead", other.leading, timeout=60)
        other_took_over = first_write(namespace, other.name, frozen)

        def evaluated_after_takeover() -> bool:
            acceptance = get_model(api_client, namespace, MODEL)["status"].get("acceptance")
            measured = (acceptance or {}).get("measuredAt")
            return measured is not None and datetime.fromisoformat(measured) > other_took_over

        wait_for("an evaluation by the new leader", evaluated_after_takeover, timeout=60)
    finally:
        successor.signal("CONT")

    def exited_and_back() -> Replica | None:
        now = replica(api_client, namespace, successor.name)
        if now is None or now.restarts <= successor.restarts or not now.runc_id:
            return None
        return now if now.last_exit_code == 1 and not now.leading() else None

    wait_for("the thawed replica to exit (1) and run again", exited_and_back, timeout=60)
    assert not writes(namespace, successor.name, other_took_over)
    wait_for("the other replica leading on", other.leading, timeout=30)
    # Every replica, restarted or not, derives the pods' credentials from that one key,
    # and a hot model's engine takes its schedule from the leader with it.
    assert schedule_key(namespace) == key
    speculation = {"tokens": 2, "maxTokens": 4, "switching": "Hot"}
    apply(sim_model("hot", speculation=speculation), namespace)

    def hot_pod_in_force() -> int | None:
        pods = (
            client.CoreV1Api(api_client)
            .list_namespaced_pod(
                namespace, label_selector="specfleet.io/model=hot,specfleet.io/track=stable"
            )
            .items
        )
        ips = [p.status.pod_ip for p in pods if p.status.pod_ip]
        generation = schedule_generation(ips[0]) if len(ips) == 1 else None
        return generation if generation else None

    wait_for(
        "a hot schedule in force on the hot model's pod",
        hot_pod_in_force,
        timeout=120,
        context=lambda: get_model(api_client, namespace, "hot").get("status"),
    )
    hot = get_model(api_client, namespace, "hot")["status"]["speculation"]["hotSchedule"]
    assert hot.get("fallback") is None, hot
    print(
        f"failover: SIGKILL -> first write by {successor.name} "
        f"({'restarted' if successor.name == first.name else 'standby'}) "
        f"{(took_over - killed).total_seconds():.1f}s; "
        f"SIGSTOP -> first write {(other_took_over - frozen).total_seconds():.1f}s"
    )


def test_a_leader_cut_off_the_network_is_fenced_and_comes_back_as_standby(
    crds: None, api_client: client.ApiClient, ha_namespace: str
) -> None:
    namespace = ha_namespace
    leader, standby, during = two_replicas_mid_canary(api_client, namespace)

    # The leader's veth goes down: it can neither renew nor write. By its renew deadline it
    # stops writing (its fence) and exits; the standby takes over once the Lease expires.
    cut = datetime.now(UTC)
    leader.connect(False)
    try:
        wait_for("the standby to lead", standby.leading, timeout=60)
        took_over = first_write(namespace, standby.name, cut)
        after = wait_for(
            "the canary's decision", lambda: decided(api_client, namespace), timeout=180
        )
        assert_finished_once(after, during)
        log = cluster.NODE_AGENT_STATE / f"{namespace}_{leader.name}_{leader.uid[:8]}"
        assert "lost leadership" in (log / "operator.log").read_text(errors="replace")
    finally:
        reconnected = time.monotonic()
        leader.connect(True)

    # Reconnected, the old leader runs as a standby: Ready, not leading, silent.
    def back_as_standby() -> Replica | None:
        now = replica(api_client, namespace, leader.name)
        pod = client.CoreV1Api(api_client).read_namespaced_pod(leader.name, namespace)
        ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
        return now if now is not None and ready and not now.leading() else None

    wait_for("the old leader back as a standby", back_as_standby, timeout=180)
    back = time.monotonic() - reconnected
    assert standby.leading()
    # Its fence: the renew deadline after its last renew (the Lease write the API server
    # accepted last, received just after the renew started). Nothing of it was accepted
    # after that, before or after the reconnection, and the standby wrote only after it.
    renewed = [w for w in writes(namespace, leader.name) if w.resource == "leases"][-1]
    fence = renewed.received + timedelta(seconds=RENEW_DEADLINE)
    assert not writes(namespace, leader.name, fence)
    assert fence < took_over
    print(
        f"partition: cut -> fence {(fence - cut).total_seconds():.1f}s, -> standby's first "
        f"write {(took_over - cut).total_seconds():.1f}s; reconnect -> old leader back as a "
        f"standby {back:.1f}s"
    )
