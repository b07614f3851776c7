"""What a model's status write costs the API server, sent as a merge patch of `/status`
(the operator's write before) and as a PUT of `/status` whose body carries no spec (the
operator's write now, `kube.Cluster.replace_status`), side by side on the local control
plane (issue 46).

N bench models are applied as a user applies them (`kubectl apply --server-side`); each
pass writes a new status (the one the operator writes first, a minute later each pass)
to every model, half of them one way and half the other, one request at a time, each
at the resourceVersion it last read, and reads the API server's CPU seconds
(/proc/PID/stat) around each half. Which way goes first alternates between passes. It
prints CPU milliseconds a request for each way, and each pass's ratio of the PUT to the
merge patch. Both leave the same status and the same field ownership (checked at the
end: one model written each way).

    make cluster-up
    .venv/bin/python benchmarks/status_write_cost.py --models 1000 --passes 6 \
        --json build/bench/status_write_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.child_write_cost import api_and_its_cpu  # noqa: E402
from benchmarks.model_write_cost import first_status  # noqa: E402
from benchmarks.operator_scale import (  # noqa: E402
    create_namespace,
    delete_namespace,
    kubectl,
    log,
    measured_code,
    models_yaml,
)
from specfleet.operator import kube  # noqa: E402
from specfleet.operator.api import GROUP, KIND, PLURAL, VERSION  # noqa: E402

WAYS = ("merge patch", "PUT")


def write(
    api: Any, way: str, namespace: str, name: str, version: str, status: dict[str, Any]
) -> str:
    """One status write; the resourceVersion it left."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
    if way == "merge patch":
        body: dict[str, Any] = {"metadata": {"resourceVersion": version}, "status": status}
        written = kube.call(api, "PATCH", path, body, kube.MERGE)
    else:
        metadata = {"name": name, "namespace": namespace, "resourceVersion": version}
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": metadata}
        written = kube.call(api, "PUT", path, {**body, "status": status})
    return str(written["metadata"]["resourceVersion"])


def apply_models(namespace: str, count: int) -> dict[str, str]:
    """`count` bench models applied as a user applies them; their resourceVersions."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as models:
        models.write(models_yaml(namespace, count))
        models.flush()
        kubectl("apply", "--server-side", "-f", models.name, "--request-timeout=60s")
    listed = json.loads(kubectl("get", "specmodel", "-n", namespace, "-o", "json"))
    return {m["metadata"]["name"]: m["metadata"]["resourceVersion"] for m in listed["items"]}


def ownership(namespace: str, name: str) -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """A model's status and who owns which top-level fields."""
    body = json.loads(
        kubectl("get", "specmodel", name, "-n", namespace, "-o", "json", "--show-managed-fields")
    )
    owners = [
        (m["manager"], m.get("subresource", ""), ",".join(sorted(m["fieldsV1"])))
        for m in body["metadata"]["managedFields"]
    ]
    return body["status"], sorted(owners)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    api, apiserver = api_and_its_cpu()
    namespace = f"bench-status-write-{int(time.time())}"
    create_namespace(namespace)
    passes: list[dict[str, Any]] = []
    try:
        versions = apply_models(namespace, args.models)
        names = sorted(versions)
        halves = (names[: len(names) // 2], names[len(names) // 2 :])
        start = datetime.now(UTC)
        for number in range(args.passes):
            status = first_status(start + timedelta(minutes=number + 1))
            order = WAYS if number % 2 == 0 else WAYS[::-1]
            cost: dict[str, float] = {}
            # The first half always goes first: each way writes each half in turn.
            for way, half in zip(order, halves, strict=True):
                before = apiserver()
                for name in half:
                    versions[name] = write(api, way, namespace, name, versions[name], status)
                cost[way] = 1000 * (apiserver() - before) / len(half)
            passes.append({"pass": number + 1, "first": order[0], **cost})
            log(f"pass {number + 1} ({order[0]} first): {cost}")
        # The last pass wrote the first half one way and the second the other.
        one, other = ownership(namespace, halves[0][0]), ownership(namespace, halves[1][0])
        same = one == other
    finally:
        delete_namespace(namespace)
    print(f"{args.models} models, a status write each a pass, half each way, one at a time")
    print("| pass | first | merge patch (ms CPU) | PUT (ms CPU) | PUT / merge patch |")
    print("|---|---|---|---|---|")
    for p in passes:
        ratio = p["PUT"] / p["merge patch"]
        cells = f"{p['merge patch']:.2f} | {p['PUT']:.2f} | {ratio:.2f}"
        print(f"| {p['pass']} | {p['first']} | {cells} |")
    ratios = [p["PUT"] / p["merge patch"] for p in passes]
    print(
        f"PUT / merge patch: median {statistics.median(ratios):.2f}, "
        f"spread {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} passes; "
        f"the same status and field ownership either way: {same}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "code": measured_code(Path(__file__)),
            "models": args.models,
            "passes": passes,
            "same_status_and_owners": same,
        }
        args.json.write_text(json.dumps(result, indent=1))
    if not same:
        sys.exit(f"the two writes left different models: {one} / {other}")


if __name__ == "__main__":
    main()
