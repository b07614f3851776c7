"""The operator's JSON on its request path, decoded and encoded by the standard library's
`json` and by `orjson`, side by side (issue 46): what a child's watch event, an apply's
reply, the children's digest and an apply's body cost each.

The payloads are the operator's own: a bench model's rendered children (`render.manifests`,
as `operator_scale.py` applies them) and each child as the API server returns it (with
the uid, resourceVersion, managedFields of a server-side apply and a Deployment's status).
Each operation runs `--number` times per repeat, the two codecs one after the other in
each repeat; it prints the microseconds of each, and the ratio, median and spread over
the repeats. No cluster needed.

    .venv/bin/python benchmarks/json_codec.py --repeats 7
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.operator_scale import bench_model, rendered_children  # noqa: E402


def children() -> list[dict[str, Any]]:
    """A bench model's children as the operator renders and applies them."""
    manifest = bench_model("m0000")
    manifest["metadata"].update(namespace="bench", uid="4a6c0c3e-0000-4000-8000-000000000000")
    return rendered_children(manifest)


def fields_of(value: Any) -> dict[str, Any]:
    """A managedFields `fieldsV1` set of every field in `value`, as an apply records it."""
    if not isinstance(value, dict):
        return {}
    return {"f:" + key: fields_of(item) for key, item in value.items()}


def as_served(manifest: dict[str, Any]) -> dict[str, Any]:
    """A child as the API server returns it to an apply or sends it in a watch event."""
    metadata = {
        **manifest["metadata"],
        "uid": "9b1e5f0a-0000-4000-8000-000000000001",
        "resourceVersion": "123456",
        "generation": 1,
        "creationTimestamp": "2026-12-06T12:00:00Z",
        "managedFields": [
            {
                "manager": "specfleet-operator",
                "operation": "Apply",
                "apiVersion": manifest["apiVersion"],
                "time": "2026-12-06T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_of({k: v for k, v in manifest.items() if k != "apiVersion"}),
            }
        ],
    }
    served = {**manifest, "metadata": metadata}
    if manifest["kind"] == "Deployment":
        served["status"] = {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
            "conditions": [
                {
                    "type": kind,
                    "status": "True",
                    "lastUpdateTime": "2026-12-06T12:00:05Z",
                    "lastTransitionTime": "2026-12-06T12:00:05Z",
                    "reason": reason,
                    "message": "message",
                }
                for kind, reason in (
                    ("Available", "MinimumReplicasAvailable"),
                    ("Progressing", "NewReplicaSetAvailable"),
                )
            ],
        }
    return served


def operations() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each operation: (the standard library's, orjson's)."""
    rendered = children()
    deployment = next(c for c in rendered if c["kind"] == "Deployment")
    event = json.dumps({"type": "MODIFIED", "object": as_served(deployment)}).encode()
    reply = json.dumps(as_served(deployment)).encode()
    return {
        "decode a Deployment's watch event": (
            lambda: json.loads(event),
            lambda: orjson.loads(event),
        ),
        "decode an apply's reply (a Deployment)": (
            lambda: json.loads(reply),
            lambda: orjson.loads(reply),
        ),
        "digest of a model's children (sorted keys)": (
            lambda: hashlib.blake2b(
                json.dumps(rendered, sort_keys=True, separators=(",", ":")).encode(),
                digest_size=20,
            ).digest(),
            lambda: hashlib.blake2b(
                orjson.dumps(rendered, option=orjson.OPT_SORT_KEYS), digest_size=20
            ).digest(),
        ),
        "encode an apply's body (a Deployment)": (
            lambda: json.dumps(deployment, separators=(",", ":")).encode(),
            lambda: orjson.dumps(deployment),
        ),
    }


def same(standard: object, fast: object) -> bool:
    """Both codecs give the same value: the same JSON for an encoding, the same digest."""
    if isinstance(standard, bytes) and isinstance(fast, bytes):
        try:
            return bool(json.loads(standard) == json.loads(fast))
        except ValueError:  # a digest
            return standard == fast
    return standard == fast


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    ops = operations()
    print("| operation | json (us) | orjson (us) | orjson / json: median (spread) |")
    print("|---|---|---|---|")
    for name, (standard, fast) in ops.items():
        if not same(standard(), fast()):
            sys.exit(f"{name}: the two codecs disagree")
        times: dict[str, list[float]] = {"json": [], "orjson": []}
        for _ in range(args.repeats):
            for codec, call in (("json", standard), ("orjson", fast)):
                times[codec].append(1e6 * timeit.timeit(call, number=args.number) / args.number)
        ratios = [f / s for s, f in zip(times["json"], times["orjson"], strict=True)]
        print(
            f"| {name} | {statistics.median(times['json']):.1f} | "
            f"{statistics.median(times['orjson']):.1f} | {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
