"""A fake API server for fast tests of the fleet loop: objects with resourceVersions and
generations, server-side apply, status patches with preconditions, Events, and a queue of
watch events the test delivers when it chooses (the real watch's delays, made explicit)."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from specfleet.operator.fleet import Fleet, without_nulls

ObjectKey = tuple[str, str, str]  # kind, namespace, name


@dataclass
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED
    body: dict[str, Any]


def _key(body: dict[str, Any]) -> ObjectKey:
    meta = body["metadata"]
    return (body["kind"], meta["namespace"], meta["name"])


class FakeCluster:
    def __init__(self) -> None:
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.watch: list[WatchEvent] = []
        self.applied: list[dict[str, Any]] = []  # every apply request, in order
        self.events: list[dict[str, Any]] = []
        self.status_writes = 0
        # Returns the API server's message to refuse an apply with (HTTP 422), or None.
        self.refuse: Callable[[dict[str, Any]], str | None] = lambda manifest: None
        self._versions = itertools.count(100)

    # ------------------------------------------------------------- the API server

    def _store(self, body: dict[str, Any], type: str) -> dict[str, Any]:
        body["metadata"]["resourceVersion"] = str(next(self._versions))
        self.objects[_key(body)] = body
        self.watch.append(WatchEvent(type, copy.deepcopy(body)))
        return copy.deepcopy(body)

    def create_model(self, manifest: dict[str, Any], namespace: str = "team") -> dict[str, Any]:
        body = copy.deepcopy(manifest)
        body["metadata"] = {**body["metadata"], "namespace": namespace}
        body["metadata"].update(generation=1, uid=f"uid-{body['metadata']['name']}")
        body.setdefault("status", {})
        return self._store(body, "ADDED")

    def edit_spec(self, name: str, edit: Callable[[dict[str, Any]], None]) -> None:
        body = copy.deepcopy(self.objects[("SpeculativeModel", "team", name)])
        edit(body["spec"])
        body["metadata"]["generation"] += 1
        self._store(body, "MODIFIED")

    def delete(self, kind: str, name: str) -> None:
        body = self.objects.pop((kind, "team", name))
        self.watch.append(WatchEvent("DELETED", copy.deepcopy(body)))

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(copy.deepcopy(manifest))
        message = self.refuse(manifest)
        if message is not None:
            raise ApiException(
                status=422,
                reason="Unprocessable Entity",
                body=json.dumps({"kind": "Status", "message": message, "code": 422}),
            )
        before = self.objects.get(_key(manifest))
        if before is not None and before["spec"] == manifest["spec"]:
            return copy.deepcopy(before)  # server-side apply of the same fields: no write
        body = copy.deepcopy(manifest)
        body["metadata"]["generation"] = (before or {"metadata": {}})["metadata"].get(
            "generation", 0
        ) + 1
        body["status"] = (before or {}).get("status", {})
        return self._store(body, "MODIFIED" if before else "ADDED")

    def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        self.status_writes += 1
        current = self.objects.get(("SpeculativeModel", namespace, name))
        if current is None or current["metadata"]["resourceVersion"] != resource_version:
            return None
        body = copy.deepcopy(current)
        body["status"] = without_nulls(status)  # a merge patch drops null fields
        return self._store(body, "MODIFIED")

    def post_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, warning: bool
    ) -> None:
        self.events.append({"reason": reason, "message": message, "warning": warning})

    # ------------------------------------------------------------------ the watch

    def deliver(self, fleet: Fleet, kinds: tuple[str, ...] | None = None) -> None:
        """Hand queued watch events to the fleet, in order: all, or only those of `kinds`
        (the rest stay queued, as when one watch lags behind another)."""
        kept = []
        for event in self.watch:
            if kinds is not None and event.body["kind"] not in kinds:
                kept.append(event)
            elif event.body["kind"] == "SpeculativeModel":
                fleet.remember_model(copy.deepcopy(event.body), deleted=event.type == "DELETED")
            else:
                fleet.cache.remember_child(copy.deepcopy(event.body), event.type == "DELETED")
        self.watch = kept

    def model(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.objects[("SpeculativeModel", "team", name)])

    def stable_args(self, name: str) -> list[str]:
        deployment = self.objects[("Deployment", "team", name)]
        args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return args
