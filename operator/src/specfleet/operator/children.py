"""The kinds of object a SpeculativeModel owns: rendered, applied, watched and cached
from this one registry, so a new kind cannot be applied without also being watched."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from specfleet.operator.api import KIND

# A model's two tracks, each a Deployment (a LeaderWorkerSet where a replica spans
# nodes): the stable pods (the K in effect) and the canary (a candidate).
Track = Literal["stable", "canary"]
TRACKS: tuple[Track, ...] = ("stable", "canary")


@dataclass(frozen=True)
class ChildKind:
    kind: str
    api_version: str  # "apps/v1", or "v1" for the core group
    plural: str
    # Rendered and server-side applied by the operator; otherwise only observed (pods,
    # which the Deployments create).
    applied: bool
    # What moves when someone else changes an applied child, so the operator re-applies
    # it: a Deployment's generation (its resourceVersion also moves with every status
    # update of a rollout); a Service has no generation, and no status that changes.
    edit_marker: Literal["generation", "resourceVersion"] | None = None

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str, name: str) -> str:
        """The object's URL path on the API server."""
        return f"{self.collection(namespace)}/{name}"

    def collection(self, namespace: str | None) -> str:
        """The URL path of the kind's objects in `namespace` (None: in every namespace)."""
        root = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        within = f"/namespaces/{namespace}" if namespace else ""
        return f"{root}{within}/{self.plural}"


DEPLOYMENT = ChildKind("Deployment", "apps/v1", "deployments", True, "generation")
# A track whose replicas span nodes: one LeaderWorkerSet of groups (its controller, from
# sigs.k8s.io/lws, must be installed); its spec changes move its generation.
LEADER_WORKER_SET = ChildKind(
    "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "leaderworkersets", True, "generation"
)
# The kind of the leaders' controller, which LeaderWorkerSet names after itself.
STATEFUL_SET_KIND = "StatefulSet"
SERVICE = ChildKind("Service", "v1", "services", True, "resourceVersion")
# The stable pods' disruption budget; its spec changes move its generation.
DISRUPTION_BUDGET = ChildKind(
    "PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, "generation"
)
POD = ChildKind("Pod", "v1", "pods", False)
# Observed only to tell the model's pods from others with its labels (`owned_pods`).
REPLICA_SET = ChildKind("ReplicaSet", "apps/v1", "replicasets", False)
CHILD_KINDS = (DEPLOYMENT, LEADER_WORKER_SET, SERVICE, DISRUPTION_BUDGET, POD, REPLICA_SET)
_BY_KIND = {child.kind: child for child in CHILD_KINDS}


def controller_uid(body: dict[str, Any], kind: str) -> str | None:
    """The uid of the object's controller (its ownerReference with controller: true),
    if that is of `kind`."""
    for ref in body["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid")) if ref.get("kind") == kind and ref.get("uid") else None
    return None


def owned_pods(
    model_uid: str | None,
    workloads: Iterable[dict[str, Any] | None],
    replica_sets: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The pods whose owner chain leads to the model, through one of its `workloads`
    (the tracks' Deployments or LeaderWorkerSets, which the model controls): a
    Deployment's pods, each controlled by a ReplicaSet it controls; a LeaderWorkerSet's
    leaders, each controlled by the StatefulSet LeaderWorkerSet names after it (the
    StatefulSets carry none of the operator's labels and are not watched; its workers
    are served and scraped through their leader). Labels and the config hash are anyone's
    to copy (`specfleet render` prints them); a pod with them and no such chain is
    another's, neither scraped nor counted."""
    ours = [
        workload
        for workload in workloads
        if workload is not None
        and model_uid is not None
        and controller_uid(workload, KIND) == model_uid
    ]
    deployments = {
        w["metadata"].get("uid") for w in ours if w.get("kind") != LEADER_WORKER_SET.kind
    }
    deployments.discard(None)
    leader_sets = {w["metadata"]["name"] for w in ours if w.get("kind") == LEADER_WORKER_SET.kind}
    sets = {
        replica_set["metadata"].get("uid")
        for replica_set in replica_sets
        if controller_uid(replica_set, DEPLOYMENT.kind) in deployments
    }
    sets.discard(None)
    return [
        pod
        for pod in pods
        if controller_uid(pod, REPLICA_SET.kind) in sets
        or controller_name(pod, STATEFUL_SET_KIND) in leader_sets
    ]


def owned_workers(
    pods: Iterable[dict[str, Any]], owned: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The workers of the groups whose leaders are among `owned` (the model's pods, as
    `owned_pods` found them): LeaderWorkerSet runs a group's workers as a StatefulSet named
    after, and controlled by, its leader pod. Neither served nor scraped (they run no API
    server); read for what keeps a group from running, such as a worker no node takes."""
    leaders = {pod["metadata"]["name"] for pod in owned if controller_name(pod, STATEFUL_SET_KIND)}
    return [pod for pod in pods if controller_name(pod, STATEFUL_SET_KIND) in leaders]


def controller_name(body: dict[str, Any], kind: str) -> str | None:
    """The name of the object's controller, if that is of `kind`."""
    for ref in body["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("name")) if ref.get("kind") == kind and ref.get("name") else None
    return None


def child_kind(kind: str) -> ChildKind:
    """The registered kind named `kind`; ValueError for a kind the operator does not own."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"the operator does not manage {kind}") from None
