"""The kinds of object a SpeculativeModel owns: rendered, applied, watched and cached
from this one registry, so a new kind cannot be applied without also being watched."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from specfleet.operator.api import KIND

# A model's two Deployments: the stable pods (the K in effect) and the canary (a candidate).
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
        root = f"/apis/{self.api_version}" if self.group else f"/api/{self.version}"
        return f"{root}/namespaces/{namespace}/{self.plural}/{name}"


DEPLOYMENT = ChildKind("Deployment", "apps/v1", "deployments", True, "generation")
SERVICE = ChildKind("Service", "v1", "services", True, "resourceVersion")
# The stable pods' disruption budget; its spec changes move its generation.
DISRUPTION_BUDGET = ChildKind(
    "PodDisruptionBudget", "policy/v1", "poddisruptionbudgets", True, "generation"
)
POD = ChildKind("Pod", "v1", "pods", False)
# Observed only to tell the model's pods from others with its labels (`owned_pods`).
REPLICA_SET = ChildKind("ReplicaSet", "apps/v1", "replicasets", False)
CHILD_KINDS = (DEPLOYMENT, SERVICE, DISRUPTION_BUDGET, POD, REPLICA_SET)
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
    deployments: Iterable[dict[str, Any] | None],
    replica_sets: Iterable[dict[str, Any]],
    pods: Iterable[dict[str, Any]],
) -> list[dict[str, Any]]:
    """The pods whose owner chain leads to the model: each controlled by a ReplicaSet
    that one of `deployments` controls, which the model controls. Labels and the config
    hash are anyone's to copy (`specfleet render` prints them); a pod with them and no
    such chain is another's, neither scraped nor counted."""
    ours = {
        deployment["metadata"].get("uid")
        for deployment in deployments
        if deployment is not None
        and model_uid is not None
        and controller_uid(deployment, KIND) == model_uid
    }
    ours.discard(None)
    sets = {
        replica_set["metadata"].get("uid")
        for replica_set in replica_sets
        if controller_uid(replica_set, DEPLOYMENT.kind) in ours
    }
    sets.discard(None)
    return [pod for pod in pods if controller_uid(pod, REPLICA_SET.kind) in sets]


def child_kind(kind: str) -> ChildKind:
    """The registered kind named `kind`; ValueError for a kind the operator does not own."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"the operator does not manage {kind}") from None
