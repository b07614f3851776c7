"""The operator's writes to the API server: server-side apply of children, status patches.

Blocking calls of the generated client; the fleet runs them in worker threads.
"""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specfleet.operator.api import GROUP, PLURAL, VERSION

FIELD_MANAGER = "specfleet-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def api_client() -> Any:
    """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.ApiClient()
    api.configuration.connection_pool_maxsize = 32
    return api


class Cluster:
    def __init__(self, api: Any) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply; returns the object as the server now has it. Re-applying
        the same manifest changes nothing, not even the resourceVersion, which keeps
        GitOps diffs and watches quiet."""
        meta = manifest["metadata"]
        arguments = {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "body": manifest,
            "field_manager": FIELD_MANAGER,
            "force": True,
            "_content_type": APPLY,
            # Raw JSON: the fleet keeps dicts, and the client's model classes cost CPU.
            "_preload_content": False,
        }
        if manifest["kind"] == "Deployment":
            response = self.apps.patch_namespaced_deployment(**arguments)
        elif manifest["kind"] == "Service":
            response = self.core.patch_namespaced_service(**arguments)
        else:
            raise ValueError(f"the operator does not manage {manifest['kind']}")
        applied: dict[str, Any] = json.loads(response.data)
        return applied

    def post_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, warning: bool
    ) -> None:
        """A core/v1 Event on `involved` (an object reference)."""
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
                "reportingInstance": socket.gethostname(),
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> bool:
        """Replace status; False on a conflict (someone wrote since `resource_version`)."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE
            )
        except ApiException as error:
            if error.status in (404, 409):
                return False
            raise
        return True
