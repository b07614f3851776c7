"""What writing one child costs the API server, by the request the operator sends (a
create-only server-side apply, as `kubectl apply --server-side` writes too) and by a plain
POST (a create), side by side on the local control plane (issue 46).

The operator's time at 1,000 models is set by the CPU the API server spends on its
requests (docs/benchmarks.md, "Where the cores go"): what a request costs decides how near
kubectl's pace it can get. Each request here is a dry run (`dryRun=All`): the whole
request path (decoding, defaulting, admission, validation, the field manager) but not the
etcd write, the same for both, nor the ReplicaSets and pods a created Deployment would
start. The children are those of N bench models (`operator_scale.bench_model`), rendered
as the operator renders them, sent one at a time from one thread. Each repeat sends them
all once each way, alternating which goes first, and reads the API server's CPU seconds
(/proc/PID/stat) before and after each pass; it prints CPU milliseconds a request by
kind for each way and each repeat's ratio of apply to POST.

    make cluster-up
    .venv/bin/python benchmarks/child_write_cost.py --models 300 --repeats 3 \
        --json build/bench/child_write_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.operator_scale import (  # noqa: E402
    bench_model,
    cpu_seconds,
    create_namespace,
    delete_namespace,
    log,
    measured_code,
)
from e2e import cluster  # noqa: E402
from specfleet.operator import kube, render  # noqa: E402
from specfleet.operator.api import SpeculativeModel  # noqa: E402
from specfleet.operator.children import child_kind  # noqa: E402
from specfleet.operator.tuner import sync_with_spec  # noqa: E402

NAMESPACE = "bench-child-write-cost"
WAYS = ("apply", "post")


def children(count: int, namespace: str) -> list[dict[str, Any]]:
    """The children of `count` bench models, rendered as the operator renders them."""
    rendered = []
    for i in range(count):
        manifest = bench_model(f"m{i:04d}")
        manifest["metadata"].update(namespace=namespace, uid=f"00000000-0000-0000-0000-{i:012d}")
        model = SpeculativeModel.model_validate(manifest)
        synced = sync_with_spec(model.spec, model.status, datetime.now(UTC)).status
        rendered += render.manifests(model.model_copy(update={"status": synced}))
    return rendered


def send(api: Any, way: str, manifest: dict[str, Any]) -> None:
    """One dry-run create of `manifest`: the operator's create-only apply, or a POST."""
    meta, kind = manifest["metadata"], child_kind(manifest["kind"])
    path = kind.path(meta["namespace"], meta["name"])
    dry_run = ("dryRun", "All")
    if way == "apply":
        body = {
            **manifest,
            "metadata": {**meta, "resourceVersion": kube.NO_OBJECT_HAS_THIS_VERSION},
        }
        query = [("fieldManager", kube.FIELD_MANAGER), ("force", "true"), dry_run]
        kube.call(api, "PATCH", path, body, kube.APPLY, query)
    else:
        query = [("fieldManager", kube.FIELD_MANAGER), dry_run]
        kube.call(api, "POST", path.rsplit("/", 1)[0], manifest, "application/json", query)


def one_pass(
    api: Any, way: str, manifests: list[dict[str, Any]], apiserver: Callable[[], float]
) -> dict[str, Any]:
    """Every manifest sent once `way`: the API server's CPU and the wall time, by kind."""
    cpu: dict[str, float] = defaultdict(float)
    sent: dict[str, int] = defaultdict(int)
    started = time.monotonic()
    for manifest in manifests:
        before = apiserver()
        send(api, way, manifest)
        cpu[manifest["kind"]] += apiserver() - before
        sent[manifest["kind"]] += 1
    return {
        "way": way,
        "seconds": time.monotonic() - started,
        "cpu_ms_a_request": {k: 1000 * cpu[k] / sent[k] for k in sorted(sent)},
        "cpu_ms_a_request_all": 1000 * sum(cpu.values()) / len(manifests),
    }


def api_and_its_cpu() -> tuple[Any, Callable[[], float]]:
    """A client of the local control plane (the operator's, no retries) and a reader of
    its API server's CPU seconds; exits when the control plane is not running."""
    if not cluster.is_up():
        sys.exit("the local control plane is not running: make cluster-up")
    config.load_kube_config(config_file=str(cluster.kubeconfig_path()))
    api = kube.client_for(client.Configuration.get_default_copy(), "bench")
    pid = int((cluster.STATE / "kube-apiserver.pid").read_text())
    return api, lambda: cpu_seconds(pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    api, apiserver = api_and_its_cpu()
    manifests = children(args.models, NAMESPACE)
    create_namespace(NAMESPACE)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(2):  # warm: the API server's caches and the client's connections
            send(api, "apply", manifests[0])
            send(api, "post", manifests[0])
        for repeat in range(args.repeats):
            order = WAYS if repeat % 2 == 0 else WAYS[::-1]
            passes = {way: one_pass(api, way, manifests, apiserver) for way in order}
            ratio = passes["apply"]["cpu_ms_a_request_all"] / passes["post"]["cpu_ms_a_request_all"]
            runs.append({"repeat": repeat + 1, "first": order[0], **passes, "ratio": ratio})
            log(
                f"repeat {repeat + 1} ({order[0]} first): apply "
                f"{passes['apply']['cpu_ms_a_request_all']:.2f} ms, post "
                f"{passes['post']['cpu_ms_a_request_all']:.2f} ms of API server CPU a "
                f"request; apply / post {ratio:.2f}"
            )
    finally:
        delete_namespace(NAMESPACE)
    ratios = [run["ratio"] for run in runs]
    print(f"{len(manifests)} children of {args.models} models, one request at a time, dry run")
    print("| repeat | first | kind | apply (ms CPU) | POST (ms CPU) | apply / POST |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        ways = [
            {**run[way]["cpu_ms_a_request"], "all": run[way]["cpu_ms_a_request_all"]}
            for way in ("apply", "post")
        ]
        for kind, a in ways[0].items():
            p, which = ways[1][kind], f"{run['repeat']} | {run['first']}"
            print(f"| {which} | {kind} | {a:.2f} | {p:.2f} | {a / p:.2f} |")
    print(
        f"apply / POST: median {statistics.median(ratios):.2f}, "
        f"spread {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} repeats"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {"code": measured_code(Path(__file__)), "models": args.models, "runs": runs}
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
