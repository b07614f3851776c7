"""The operator's writes to the API server: server-side apply of children, status patches.

Blocking calls of the generated client; the fleet runs them in worker threads.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specfleet.operator.api import GROUP, PLURAL, VERSION
from specfleet.operator.children import child_kind

FIELD_MANAGER = "specfleet-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


class NotLeading(Exception):
    """A write was refused because this replica does not hold the leader Lease."""


def user_agent(instance: str) -> str:
    return f"{FIELD_MANAGER}/{instance}"


def api_client(instance: str) -> Any:
    """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config.
    The user agent names this replica, so the API server's audit log says which one wrote."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.ApiClient()
    api.configuration.connection_pool_maxsize = 32
    api.user_agent = user_agent(instance)
    return api


def call(
    api: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    content_type: str = "application/json",
    query: list[tuple[str, Any]] | None = None,
    timeout: float | None = None,
) -> dict[str, Any]:
    """One request, its response as raw JSON: callers keep dicts, and the client's model
    classes cost CPU. Raises ApiException on an error status."""
    request = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request, _request_timeout=timeout)
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    result: dict[str, Any] = json.loads(response.data)
    return result


def always() -> bool:
    return True


class Cluster:
    """`may_write` is the leader election's fence (always true for a replica running
    alone): it is checked just before each write leaves, so a replica that lost the Lease
    while a reconcile was in flight sends nothing."""

    def __init__(self, api: Any, instance: str, may_write: Callable[[], bool]) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.instance = instance
        self.may_write = may_write

    def _fence(self) -> None:
        if not self.may_write():
            raise NotLeading("this replica does not hold the leader Lease")

    def _request(
        self,
        path: str,
        body: dict[str, Any],
        content_type: str,
        query: list[tuple[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """One PATCH, once the fence lets it leave."""
        self._fence()
        return call(self.api, "PATCH", path, body, content_type, query)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of a child; returns the object as the server now has it.
        Re-applying the same manifest changes nothing, not even the resourceVersion,
        which keeps GitOps diffs and watches quiet."""
        meta = manifest["metadata"]
        kind = child_kind(manifest["kind"])
        if not kind.applied:
            raise ValueError(f"the operator does not apply {kind.kind}s")
        return self._request(
            kind.path(meta["namespace"], meta["name"]),
            manifest,
            APPLY,
            [("fieldManager", FIELD_MANAGER), ("force", "true")],
        )

    def post_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, warning: bool
    ) -> None:
        """A core/v1 Event on `involved` (an object reference)."""
        self._fence()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.core.create_namespaced_event(
            involved["namespace"],
            {
                "metadata": {
                    "generateName": f"{involved['name']}.",
                    "namespace": involved["namespace"],
                },
                "involvedObject": {**involved, "kind": kind},
                "type": "Warning" if warning else "Normal",
                "reason": reason,
                "message": message[:1000],
                "source": {"component": FIELD_MANAGER},
                "reportingComponent": FIELD_MANAGER,
                "reportingInstance": self.instance,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Replace status; the model as written, or None on a conflict (someone wrote
        since `resource_version`) or when the model is gone."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        try:
            return self._request(path, body, MERGE)
        except ApiException as error:
            if error.status in (404, 409):
                return None
            raise
