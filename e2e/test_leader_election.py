"""Two operator replicas behind a Lease on the real control plane: the leader killed
mid-canary, then the new leader frozen. The API server's audit log (e2e/cluster.py) says
which replica wrote what: each replica's user agent carries its name."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e import cluster
from e2e.cluster import AuditedWrite
from e2e.models import apply, canary_running, get_model, history
from e2e.operator_process import OperatorProcess, replica
from e2e.story import MODEL, story_model
from e2e.waiting import wait_for
from specfleet.operator.kube import user_agent

# Shorter than the defaults (15/10/2 s, measured by benchmarks/failover.py) to keep the test
# quick; the same ratios: the renew deadline well before the Lease runs out, and requests
# that time out within the margin between the two.
QUICK_ELECTION = (
    "--lease-duration=6",
    "--renew-deadline=4",
    "--retry-period=1",
    "--request-timeout=1.5",
)


def writes(namespace: str, name: str, after: datetime | None = None) -> list[AuditedWrite]:
    """The writes the API server accepted from replica `name` in `namespace`."""
    return cluster.accepted_writes(user_agent(name), namespace, after)


def first_write(namespace: str, name: str, after: datetime) -> datetime:
    return cluster.first_accepted_write(user_agent(name), namespace, after).received


def test_a_standby_takes_over_from_a_killed_then_a_frozen_leader(
    crds: None, api_client: client.ApiClient, ha_namespace: str, tmp_path: Path
) -> None:
    namespace = ha_namespace
    first = replica(namespace, tmp_path, "op-a", *QUICK_ELECTION)
    second = replica(namespace, tmp_path, "op-b", *QUICK_ELECTION)
    third: OperatorProcess | None = None
    try:
        first.start()
        wait_for("op-a to lead", first.leading, timeout=30)
        second.start()
        apply(story_model(), namespace)
        during = wait_for(
            "a canary", lambda: canary_running(api_client, namespace, MODEL), timeout=180
        )
        candidate = during["status"]["speculation"]["candidateTokens"]
        assert writes(namespace, "op-a") and not writes(namespace, "op-b")  # a standby is silent

        # SIGKILL: the leader neither finishes nor lets go; op-b waits out the Lease.
        killed = datetime.now(UTC)
        first.kill()
        wait_for("op-b to lead", second.leading, timeout=60)
        took_over = first_write(namespace, "op-b", killed)

        def decided() -> dict[str, Any] | None:
            body = get_model(api_client, namespace, MODEL)
            return body if {"Promote", "Abort"} & {h["action"] for h in history(body)} else None

        after = wait_for("the canary's decision", decided, timeout=180)
        assert history(after)[: len(history(during))] == history(during)  # nothing lost
        decision = next(
            i for i, h in enumerate(history(after)) if h["action"] in ("Promote", "Abort")
        )
        # op-b finished the same canary rather than starting another.
        starts = [h["toTokens"] for h in history(after)[:decision] if h["action"] == "StartCanary"]
        assert starts == [candidate]

        # SIGSTOP: the leader is frozen with the Lease; a new standby takes over once it
        # expires, an evaluation due meanwhile happens after that, and op-b, thawed, sends
        # nothing more and exits.
        third = replica(namespace, tmp_path, "op-c", *QUICK_ELECTION)
        third.start()
        frozen = datetime.now(UTC)
        second.freeze()
        wait_for("op-c to lead", third.leading, timeout=60)
        op_c_took_over = first_write(namespace, "op-c", frozen)

        def evaluated_after_takeover() -> bool:
            acceptance = get_model(api_client, namespace, MODEL)["status"].get("acceptance") or {}
            measured = acceptance.get("measuredAt")
            return measured is not None and datetime.fromisoformat(measured) > op_c_took_over

        wait_for("an evaluation by op-c", evaluated_after_takeover, timeout=60)
        second.thaw()
        assert second.process is not None
        assert second.process.wait(timeout=30) == 1  # lost leadership: exits to restart
        assert not writes(namespace, "op-b", op_c_took_over)
        print(
            f"failover: SIGKILL -> first write {(took_over - killed).total_seconds():.1f}s; "
            f"SIGSTOP -> first write {(op_c_took_over - frozen).total_seconds():.1f}s"
        )
    finally:
        for process in (first, second, third):
            if process is not None:
                process.stop()
