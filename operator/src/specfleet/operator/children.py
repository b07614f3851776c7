"""The kinds of object a SpeculativeModel owns: rendered, applied, watched and cached
from this one registry, so a new kind cannot be applied without also being watched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
POD = ChildKind("Pod", "v1", "pods", False)
CHILD_KINDS = (DEPLOYMENT, SERVICE, POD)
_BY_KIND = {child.kind: child for child in CHILD_KINDS}


def child_kind(kind: str) -> ChildKind:
    """The registered kind named `kind`; ValueError for a kind the operator does not own."""
    try:
        return _BY_KIND[kind]
    except KeyError:
        raise ValueError(f"the operator does not manage {kind}") from None
