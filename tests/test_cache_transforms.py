"""The cache keeps what the fleet reads of a child and nothing else (issue 42, item 6):
the watches take every object with the model label, which anyone who may create a
Deployment or a pod in a namespace can set, with or without a SpeculativeModel."""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

from specfleet.operator import render
from specfleet.operator.fleet import FleetCache

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
