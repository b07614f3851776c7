"""The cache keeps what the fleet reads of a child and nothing else (issue 42, item 6):
the watches take every object with the model label, which anyone who may create a
Deployment or a pod in a namespace can set, with or without a SpeculativeModel."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import tracemalloc
from typing import Any

from specfleet.operator import render
from specfleet.operator.configs import FORCE_CONFIG_ANNOTATION
from specfleet.operator.fleet import Fleet, FleetCache
from tests.fake_cluster import FakeCluster, ScriptedEvaluator

KEY = ("team", "m")
BIG = "x" * (250 * 2**10)


def _bloated(kind: str, name: str) -> dict[str, Any]:
    """An object with the model's labels and 250 KiB of annotations, 2,000 more labels,
    managedFields, other owners and status fields nothing reads."""
    return {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "generation": 3,
            "creationTimestamp": "2026-12-02T12:00:00Z",
            "labels": {
                render.MODEL_LABEL: "m",
                render.TRACK_LABEL: "canary",
                "app.kubernetes.io/managed-by": "specfleet",
                **{f"junk-{i}": "y" * 63 for i in range(2000)},
            },
            "annotations": {render.CONFIG_HASH_ANNOTATION: "abc123", "junk": BIG},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:junk": BIG}}],
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "m-1", "uid": "rs", "controller": True},
                *({"kind": "Thing", "name": f"t{i}", "uid": f"u{i}"} for i in range(500)),
            ],
        },
        "spec": {"junk": BIG},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "junk": BIG,
        },
    }


def _kept_bytes(kind: str) -> int:
    """Bytes the cache still holds of one bloated object once the caller's copy is gone."""
    cache = FleetCache()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        body = _bloated(kind, "m-pod")
        cache.remember_child(body)
        del body
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_bloated_labelled_object_costs_the_cache_a_few_kib() -> None:
    """Before, 250 KiB of annotations cost 251 KiB of the operator's memory (and more
    with the labels, the owners and status); no SpeculativeModel is needed."""
    for kind in ("Deployment", "Pod", "ReplicaSet"):
        assert _kept_bytes(kind) < 16 * 2**10, kind


def test_what_the_fleet_reads_is_kept() -> None:
    cache = FleetCache()
    cache.remember_child(_bloated("Pod", "m-pod"))
    cached = cache.children[KEY][("Pod", "m-pod")]
    assert len(json.dumps(cached)) < 2**10
    assert cached == {
        "kind": "Pod",
        "metadata": {
            "name": "m-pod",
            "namespace": "team",
            "uid": "uid-m-pod",
            "resourceVersion": "7",
            "generation": 3,
            "creationTimestamp": "2026-12-02T12:00:00Z",
            "labels": {
                render.MODEL_LABEL: "m",
                render.TRACK_LABEL: "canary",
                "app.kubernetes.io/managed-by": "specfleet",
            },
            "annotations": {render.CONFIG_HASH_ANNOTATION: "abc123"},
            "ownerReferences": [
                {"kind": "ReplicaSet", "name": "m-1", "uid": "rs", "controller": True}
            ],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _bloated_model(manifest: dict[str, Any]) -> dict[str, Any]:
    """A SpeculativeModel as `kubectl apply` leaves it (its spec again, 250 KiB of it, in
    the last-applied annotation), with 2,000 labels, managedFields, 500 owners and a
    status holding a key no version writes any more."""
    body = copy.deepcopy(manifest)
    body["metadata"] = {
        "name": "m",
        "namespace": "team",
        "uid": "uid-m",
        "resourceVersion": "7",
        "generation": 3,
        "creationTimestamp": "2026-12-02T12:00:00Z",
        "labels": {f"junk-{i}": "y" * 63 for i in range(2000)},
        "annotations": {
            LAST_APPLIED: json.dumps(body) + BIG,
            FORCE_CONFIG_ANNOTATION: "abc123",
        },
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:junk": BIG}}],
        "ownerReferences": [{"kind": "Thing", "name": f"t{i}", "uid": f"u{i}"} for i in range(500)],
    }
    body["status"] = {"observedGeneration": 2, "retiredField": "x"}
    return body


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def test_a_model_is_cached_with_its_spec_and_status_and_no_more(
    peagle_manifest: dict[str, Any],
) -> None:
    """Spec and status whole (read, and written back), the metadata the fleet reads and
    the force-config annotation; not the author's labels, kubectl's copy of the spec,
    managedFields or owners (about 1 MiB of the operator's memory before, 6 KiB now)."""
    body = _bloated_model(peagle_manifest)
    cache = FleetCache()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        read = json.loads(json.dumps(body))  # as a watch event arrives: all its own
        cache.remember_model(read)
        del read
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 32 * 2**10, kept
    cached = cache.body(KEY)
    assert cached == {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "spec": body["spec"],
        "status": body["status"],
        "metadata": {
            "name": "m",
            "namespace": "team",
            "uid": "uid-m",
            "resourceVersion": "7",
            "generation": 3,
            "creationTimestamp": "2026-12-02T12:00:00Z",
            "annotations": {FORCE_CONFIG_ANNOTATION: "abc123"},
        },
    }


def test_a_cached_models_status_write_still_removes_what_it_lacks(
    peagle_manifest: dict[str, Any],
) -> None:
    """The status write replaces the cached status with the new one: trimming the model
    keeps status whole, so a key this version does not know (read as an invalid status,
    which is written afresh) still goes."""
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
    model = _bloated_model(peagle_manifest)
    del model["metadata"]["annotations"][FORCE_CONFIG_ANNOTATION]
    cluster.create_model(model)
    replaced: list[dict[str, Any]] = []
    write = cluster.replace_status

    async def recorded(
        namespace: str, name: str, status: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        replaced.append(status)
        return await write(namespace, name, status, resource_version)

    cluster.replace_status = recorded  # type: ignore[method-assign]
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(KEY))
    assert replaced and "retiredField" in model["status"], replaced
    assert "retiredField" not in replaced[0]
    assert replaced[0] == cluster.model("m")["status"]
