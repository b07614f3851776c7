"""The key the models' hot-schedule credentials are derived from (hot_schedules.credential),
kept by the operator in a Secret of its own namespace when the install gives it none: every
replica, and every restart, derives the same credentials, so no pod restarts for a new one.

Deleting the Secret rotates the key at the operator's next start (each hot pod then
restarts once, with its new credential).
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from specfleet.operator.kube import REQUEST_TIMEOUT, call

FIELD = "key"  # the Secret's data key, as the chart's hotSchedules.keySecret expects
KEY_BYTES = 32


class ScheduleKeyError(Exception):
    """The Secret exists but holds no usable key, or the API server refused."""


def ensure(api: Any, namespace: str, name: str, timeout: float = REQUEST_TIMEOUT) -> bytes:
    """The key in Secret `namespace/name`, created when absent. Replicas starting at once
    both try the create: the one answered 409 reads the key the other stored."""
    try:
        return _ensure(api, namespace, name, timeout)
    except urllib3.exceptions.HTTPError as error:
        raise ScheduleKeyError(
            f"Secret {namespace}/{name}: the API server did not answer ({type(error).__name__})"
        ) from None


def _ensure(api: Any, namespace: str, name: str, timeout: float) -> bytes:
    secret = _read(api, namespace, name, timeout)
    if secret is None:
        key = secrets.token_hex(KEY_BYTES).encode()
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "specfleet"},
            },
            "type": "Opaque",
            "data": {FIELD: base64.b64encode(key).decode()},
        }
        try:
            call(api, "POST", f"/api/v1/namespaces/{namespace}/secrets", body, timeout=timeout)
            return key
        except ApiException as error:
            if error.status != 409:
                raise ScheduleKeyError(_refused("create", namespace, name, error)) from None
        secret = _read(api, namespace, name, timeout)
        if secret is None:
            raise ScheduleKeyError(f"Secret {namespace}/{name} was deleted while it was created")
    return _key_of(secret, namespace, name)


def _read(api: Any, namespace: str, name: str, timeout: float) -> dict[str, Any] | None:
    try:
        return call(
            api, "GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", None, timeout=timeout
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise ScheduleKeyError(_refused("read", namespace, name, error)) from None


def _key_of(secret: dict[str, Any], namespace: str, name: str) -> bytes:
    encoded = (secret.get("data") or {}).get(FIELD)
    key = base64.b64decode(encoded).strip() if encoded else b""
    if not key:
        raise ScheduleKeyError(f"Secret {namespace}/{name} has no {FIELD!r} (or it is empty)")
    return key


def _refused(verb: str, namespace: str, name: str, error: ApiException) -> str:
    return f"cannot {verb} Secret {namespace}/{name}: HTTP {error.status} {error.reason}"
