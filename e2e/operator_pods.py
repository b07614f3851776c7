"""The chart's operator replicas as pods on the local cluster, and what tests and
benchmarks do to them: a signal to a pod's container (the node agent runs it with runc,
so `runc kill` reaches the operator itself, the container's only process), or the pod cut
off the network (its veth's host end down, e2e/podnet.py) and joined again."""

from __future__ import annotations

import subprocess
import urllib.request
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from e2e import cluster, podnet
from e2e.story import OPERATOR_METRICS_PORT, RELEASE

SELECTOR = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"


@dataclass(frozen=True)
class Replica:
    """One operator pod as its status says now."""

    name: str
    uid: str
    ip: str
    runc_id: str  # "" while its container does not run
    restarts: int
    last_exit_code: int | None  # of the container's previous run

    def metrics(self) -> str:
        url = f"http://{self.ip}:{OPERATOR_METRICS_PORT}/metrics"
        with urllib.request.urlopen(url, timeout=2) as reply:
            return str(reply.read().decode())

    def answers(self) -> bool:
        """Whether the operator serves its metrics (it runs and is reachable)."""
        try:
            self.metrics()
        except OSError:
            return False
        return True

    def leading(self) -> bool:
        """Whether the replica says it leads (its `specfleet_leader` gauge)."""
        try:
            return "specfleet_leader 1.0" in self.metrics()
        except OSError:
            return False

    def signal(self, name: str) -> None:
        """Send signal `name` (KILL, STOP, CONT) to the replica's container."""
        if not self.runc_id:
            raise RuntimeError(f"{self.name}: its container does not run")
        runc_root = cluster.NODE_AGENT_STATE / "runc"
        subprocess.run(["runc", "--root", str(runc_root), "kill", self.runc_id, name], check=True)

    def connect(self, connected: bool) -> None:
        """Cut the pod off the network, or join it again."""
        podnet.set_connected(self.uid, connected)


def _replica(pod: dict[str, Any]) -> Replica:
    (status,) = pod["status"].get("containerStatuses") or [{}]
    running = "running" in (status.get("state") or {})
    container_id = str(status.get("containerID") or "")
    previous = (status.get("lastState") or {}).get("terminated") or {}
    return Replica(
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        ip=pod["status"].get("podIP") or "",
        runc_id=container_id.removeprefix("runc://") if running else "",
        restarts=int(status.get("restartCount") or 0),
        last_exit_code=previous.get("exitCode"),
    )


def replicas(api_client: client.ApiClient, namespace: str) -> dict[str, Replica]:
    """The release's operator pods that have an address, by name."""
    pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace, label_selector=SELECTOR)
    found = [_replica(api_client.sanitize_for_serialization(p)) for p in pods.items]
    return {r.name: r for r in found if r.ip}


def leader(api_client: client.ApiClient, namespace: str) -> Replica | None:
    """The one replica that says it leads, or None (none does, or more than one)."""
    leading = [r for r in replicas(api_client, namespace).values() if r.leading()]
    return leading[0] if len(leading) == 1 else None
