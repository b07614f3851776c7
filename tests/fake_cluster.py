"""A fake API server for fast tests of the fleet loop: objects with resourceVersions and
generations, server-side apply, status patches with preconditions, gets and listings,
Events, the garbage collector (on request), and a queue of watch events the test delivers
when it chooses (the real watch's delays and gaps, made explicit)."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from specfleet.operator import tuner
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.fleet import Fleet, without_nulls
from specfleet.operator.kube import PAGE, Conflict, Exists, Gone, NotLeading, Page
from specfleet.operator.outcomes import Action
from specfleet.operator.status import ObservedChildren

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
        self.requests: list[tuple[str, str, str]] = []  # (verb, kind, name) of every call
        # Called before each status write is taken, e.g. to write in between.
        self.before_status_write: Callable[[], None] = lambda: None
        # Returns the API server's message to refuse an apply with (HTTP 422), or None.
        self.refuse: Callable[[dict[str, Any]], str | None] = lambda manifest: None
        # The leader election's fence: closed, every write raises NotLeading, as kube.Cluster's.
        self.fence_open = True
        self._versions = itertools.count(100)
        self.page = PAGE  # objects a listing's page holds
        # The snapshots of listings with pages still to come: id -> (items, version).
        self._listings: dict[int, tuple[list[dict[str, Any]], str]] = {}
        self._listing_ids = itertools.count()

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

    def annotate(self, name: str, key: str, value: str) -> None:
        body = copy.deepcopy(self.objects[("SpeculativeModel", "team", name)])
        body["metadata"].setdefault("annotations", {})[key] = value
        self._store(body, "MODIFIED")

    def write_status(self, name: str, status: dict[str, Any]) -> None:
        """A status as an earlier operator (or another writer) left it."""
        body = copy.deepcopy(self.objects[("SpeculativeModel", "team", name)])
        body["status"] = status
        self._store(body, "MODIFIED")

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """Someone else's object (a user's Service, another model's Deployment)."""
        body = copy.deepcopy(body)
        body.setdefault("status", {})
        body["metadata"].setdefault("generation", 1)
        return self._store(body, "ADDED")

    def run_pods(self, deployment: str, ips: list[str]) -> list[str]:
        """The Deployment controller's part: a ReplicaSet controlled by the Deployment
        `deployment`, and one Ready pod of its template for each address, controlled by
        the ReplicaSet; returns the pods' names."""
        owner = self.objects[("Deployment", "team", deployment)]
        template = owner["spec"]["template"]["metadata"]
        replica_set = f"{deployment}-{len(self.objects)}"
        self.create(
            {
                "kind": "ReplicaSet",
                "metadata": {
                    "name": replica_set,
                    "namespace": "team",
                    "uid": f"uid-ReplicaSet-{replica_set}",
                    "labels": template["labels"],
                    "ownerReferences": [_controller(owner)],
                },
            }
        )
        names = []
        for index, ip in enumerate(ips):
            name = f"{replica_set}-{index}"
            self.create(
                {
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": "team",
                        "uid": f"uid-Pod-{name}",
                        "labels": template["labels"],
                        "annotations": template.get("annotations", {}),
                        "ownerReferences": [
                            _controller(self.objects[("ReplicaSet", "team", replica_set)])
                        ],
                    },
                    "status": {
                        "phase": "Running",
                        "podIP": ip,
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
            names.append(name)
        return names

    def set_child_status(self, kind: str, name: str, status: dict[str, Any]) -> None:
        """A controller's status write on a child (the Deployment's replicas, a pod's)."""
        body = copy.deepcopy(self.objects[(kind, "team", name)])
        body["status"] = status
        self._store(body, "MODIFIED")

    def delete(self, kind: str, name: str) -> None:
        body = self.objects.pop((kind, "team", name))
        self.watch.append(WatchEvent("DELETED", copy.deepcopy(body)))

    def delete_model(self, name: str) -> None:
        """Delete a model, then (the garbage collector) every object it controls."""
        model = self.objects[("SpeculativeModel", "team", name)]
        self.delete("SpeculativeModel", name)
        self.collect_garbage(model["metadata"]["uid"])

    def collect_garbage(self, uid: str) -> None:
        for key, body in list(self.objects.items()):
            refs = body["metadata"].get("ownerReferences") or []
            if any(ref.get("uid") == uid for ref in refs):
                self.delete(key[0], key[2])

    def scale(self, name: str, replicas: int) -> None:
        """A write to the model's /scale subresource, as an HPA or KEDA makes."""
        body = copy.deepcopy(self.objects[("SpeculativeModel", "team", name)])
        body["spec"]["replicas"] = replicas
        body["metadata"]["generation"] += 1
        self._store(body, "MODIFIED")

    async def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get_child("SpeculativeModel", namespace, name)

    async def get_child(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.requests.append(("get", kind, name))
        found = self.objects.get((kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def list_models(self, namespace: str, start: str = "") -> Page:
        return self._list("SpeculativeModel", namespace, None, start)

    async def list_children(
        self, kind: str, namespace: str, selector: str, start: str = ""
    ) -> Page:
        return self._list(kind, namespace, selector, start)

    def _list(self, kind: str, namespace: str, selector: str | None, start: str) -> Page:
        """A page of `page` objects of a snapshot taken at the first page, as the API
        server's paged listings are: every page has the first page's version."""
        self.requests.append(("list", kind, ""))
        if start:
            listing, offset = (int(part) for part in start.split(":"))
            items, version = self._listings.pop(listing)
        else:
            required = [term.split("=") for term in selector.split(",")] if selector else []
            items = [
                copy.deepcopy(body)
                for (k, ns, _), body in sorted(self.objects.items())
                if k == kind
                and ns == namespace
                and all(
                    term[0] in body["metadata"].get("labels", {})
                    and (len(term) == 1 or body["metadata"]["labels"][term[0]] == term[1])
                    for term in required
                )
            ]
            version = str(next(self._versions))
            listing, offset = next(self._listing_ids), 0
        end = offset + self.page
        following = ""
        if end < len(items):
            self._listings[listing] = (items, version)  # kept until its next page is asked
            following = f"{listing}:{end}"
        return Page(items[offset:end], version, following)

    def lose_watch(self) -> None:
        """The watches break (410 Gone): queued events are never delivered; a relist
        would bring only what exists now."""
        self.watch = []

    def _fence(self) -> None:
        if not self.fence_open:
            raise NotLeading("this replica does not hold the leader Lease")

    async def apply(self, manifest: dict[str, Any], create_only: bool = False) -> dict[str, Any]:
        self._fence()
        self.requests.append(("patch", manifest["kind"], manifest["metadata"]["name"]))
        if create_only and _key(manifest) in self.objects:
            # kube.Cluster's create-only apply carries a resourceVersion no object has.
            raise Exists(f"{manifest['kind']} {manifest['metadata']['name']}")
        self.applied.append(copy.deepcopy(manifest))
        message = self.refuse(manifest)
        if message is not None:
            raise ApiException(
                status=422,
                reason="Unprocessable Entity",
                body=json.dumps({"kind": "Status", "message": message, "code": 422}),
            )
        before = self.objects.get(_key(manifest))
        if (
            before is not None
            and before["spec"] == manifest["spec"]
            and all(
                before["metadata"].get(field) == manifest["metadata"].get(field)
                for field in ("labels", "ownerReferences")
            )
        ):
            return copy.deepcopy(before)  # server-side apply of the same fields: no write
        body = copy.deepcopy(manifest)
        body["metadata"]["generation"] = (before or {"metadata": {}})["metadata"].get(
            "generation", 0
        ) + 1
        body["metadata"]["uid"] = (before or {"metadata": {}})["metadata"].get(
            "uid", f"uid-{manifest['kind']}-{manifest['metadata']['name']}"
        )
        body["status"] = (before or {}).get("status", {})
        return self._store(body, "MODIFIED" if before else "ADDED")

    async def replace_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        self._fence()
        self.before_status_write()
        self.status_writes += 1
        self.requests.append(("update", "SpeculativeModel/status", name))
        current = self.objects.get(("SpeculativeModel", namespace, name))
        if current is None:
            raise Gone(f"{namespace}/{name}")
        if current["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(f"{namespace}/{name}")
        body = copy.deepcopy(current)
        body["status"] = without_nulls(status)  # the API server prunes null fields
        return self._store(body, "MODIFIED")

    async def post_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, warning: bool
    ) -> None:
        self._fence()
        self.requests.append(("create", "Event", reason))
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


def _controller(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"kind": owner["kind"], "name": meta["name"], "uid": meta["uid"], "controller": True}


class ScriptedEvaluator(Evaluator):
    """Decides what the test says instead of scraping pods."""

    def __init__(self) -> None:
        super().__init__()
        self.next_tokens: int | None = None

    async def evaluate(
        self, model: SpeculativeModel, children: ObservedChildren, now: datetime
    ) -> tuner.Decided:
        status = model.status.model_copy(deep=True)
        actions = []
        if self.next_tokens is not None:
            before, status.speculation.tokens = status.speculation.tokens, self.next_tokens
            actions.append(Action("Promote", "Faster", f"K {before} -> {self.next_tokens}"))
            self.next_tokens = None
        return tuner.Decided(status, actions)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def fleet(cluster: FakeCluster) -> Fleet:
    return Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
