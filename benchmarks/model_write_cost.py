"""What a model's own writes cost the API server, and the share of it the CRD's CEL rules
take: N bench models applied as a user applies them (`kubectl apply --server-side`), then
the status the operator writes first for each (a merge patch of `/status`, the operator's
write until 2388f30; `status_write_cost.py` weighs it against the PUT it sends now), with
the CRD as generated and with its `x-kubernetes-validations` removed, side by side on the
local control plane (issue 46).

The operator's clock at 1,000 models holds the models' own apply and a status write a
model beside the children kubectl's baseline applies (docs/benchmarks.md, "Where the
cores go"); this weighs those two. Each repeat runs both CRDs, alternating which goes
first, each in a fresh namespace, and reads the API server's CPU seconds (/proc/PID/stat)
before and after the apply and the status writes (one request at a time from one thread);
it prints CPU milliseconds a request and each repeat's ratio of the CRD without its rules
to the CRD as generated. The generated CRD is applied again at the end.

    make cluster-up
    .venv/bin/python benchmarks/model_write_cost.py --models 1000 --repeats 2 \
        --json build/bench/model_write_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.child_write_cost import api_and_its_cpu  # noqa: E402
from benchmarks.operator_scale import (  # noqa: E402
    bench_model,
    create_namespace,
    delete_namespace,
    kubectl,
    log,
    measured_code,
    models_yaml,
)
from e2e import cluster  # noqa: E402
from specfleet.operator import kube  # noqa: E402
from specfleet.operator.api import GROUP, PLURAL, VERSION, SpeculativeModel  # noqa: E402
from specfleet.operator.fleet import status_json  # noqa: E402
from specfleet.operator.tuner import sync_with_spec  # noqa: E402

CRD = ROOT / "crds" / "specfleet.io_speculativemodels.yaml"
CRDS = ("generated", "no CEL rules")
# The API server swaps a CRD's validators some time after the CRD is written: a settle
# before the first request of each pass.
SETTLE_SECONDS = 5.0


def without_rules(node: Any) -> Any:
    """The schema with every x-kubernetes-validations (CEL rule) removed."""
    if isinstance(node, dict):
        return {k: without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [without_rules(v) for v in node]
    return node


def first_status(at: datetime) -> dict[str, Any]:
    """The status the operator writes first for a bench model, decided at `at`, as a
    write leaves it in the model."""
    manifest = bench_model("m0000")
    manifest["metadata"]["namespace"] = "bench"
    model = SpeculativeModel.model_validate(manifest)
    return dict(status_json(sync_with_spec(model.spec, model.status, at).status))


def one_pass(
    api: Any,
    crd: dict[str, Any],
    count: int,
    status: dict[str, Any],
    apiserver: Callable[[], float],
) -> dict[str, Any]:
    """`count` models applied under `crd`, then a status written to each: the API
    server's CPU milliseconds a request for each."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(crd))
    time.sleep(SETTLE_SECONDS)
    namespace = f"bench-model-write-{int(time.time())}"
    create_namespace(namespace)
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as models:
            models.write(models_yaml(namespace, count))
            models.flush()
            before = apiserver()
            kubectl("apply", "--server-side", "-f", models.name, "--request-timeout=60s")
            applied = apiserver()
        base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        for i in range(count):
            kube.call(api, "PATCH", f"{base}/m{i:04d}/status", {"status": status}, kube.MERGE)
        written = apiserver()
    finally:
        delete_namespace(namespace)
    return {
        "apply_ms": 1000 * (applied - before) / count,
        "status_ms": 1000 * (written - applied) / count,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    api, apiserver = api_and_its_cpu()
    generated = yaml.safe_load(CRD.read_text())
    crds = {"generated": generated, "no CEL rules": without_rules(generated)}
    status = first_status(datetime.now(UTC))
    runs: list[dict[str, Any]] = []
    try:
        for repeat in range(args.repeats):
            order = CRDS if repeat % 2 == 0 else CRDS[::-1]
            passes = {
                name: one_pass(api, crds[name], args.models, status, apiserver) for name in order
            }
            ratios = {
                f"{write}_ratio": passes["no CEL rules"][write] / passes["generated"][write]
                for write in ("apply_ms", "status_ms")
            }
            runs.append({"repeat": repeat + 1, "first": order[0], **passes, **ratios})
            log(f"repeat {repeat + 1} ({order[0]} first): {passes}")
    finally:
        cluster.install_crds()
    print(f"{args.models} models applied, then a status written to each, one request at a time")
    print("| repeat | first | CRD | model apply (ms CPU) | status write (ms CPU) |")
    print("|---|---|---|---|---|")
    for run in runs:
        for name in CRDS:
            cost = run[name]
            print(
                f"| {run['repeat']} | {run['first']} | {name} | "
                f"{cost['apply_ms']:.2f} | {cost['status_ms']:.2f} |"
            )
    for write in ("apply_ms", "status_ms"):
        each = [float(run[f"{write}_ratio"]) for run in runs]
        print(
            f"{write.removesuffix('_ms')}, no CEL rules / generated: median "
            f"{statistics.median(each):.2f}, spread {min(each):.2f}-{max(each):.2f} "
            f"over {len(each)} repeats"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {"code": measured_code(Path(__file__)), "models": args.models, "runs": runs}
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
