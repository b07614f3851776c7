"""What the CRD's CEL rules on the spec add to a model's status write (issue 46).

On a status write the API server evaluates every `x-kubernetes-validations` rule of the
object, the spec's included, and only then drops the errors of unchanged fields
(validation ratcheting). N bench models are applied once; then, round after round, the
CRD is applied in each variant (as generated; without the duration rules; without the
rules that match a regular expression; without any rule on the spec) and every model
gets a status PUT, one at a time, the API server's CPU read around them. The CRD as
generated is applied again at the end. Prints CPU milliseconds a write for each
variant and round, and each variant's median ratio to the CRD as generated.

    make cluster-up
    .venv/bin/python benchmarks/status_write_rules.py --models 300 --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.child_write_cost import api_and_its_cpu  # noqa: E402
from benchmarks.model_write_cost import first_status  # noqa: E402
from benchmarks.operator_scale import (  # noqa: E402
    create_namespace,
    delete_namespace,
    kubectl,
    log,
)
from benchmarks.scale_report import markdown_table  # noqa: E402
from benchmarks.status_write_cost import apply_models, write  # noqa: E402

CRD = ROOT / "crds" / "specfleet.io_speculativemodels.yaml"
Rule = dict[str, Any]
# Which of the spec's rules each variant keeps.
VARIANTS: dict[str, Callable[[Rule], bool]] = {
    "as generated": lambda rule: True,
    "no duration rules": lambda rule: "duration(self)" not in rule["rule"],
    "no regex rules": lambda rule: "matches(" not in rule["rule"],
    "no spec rules": lambda rule: False,
}


def _keep_rules(node: Any, keep: Callable[[Rule], bool]) -> int:
    """Drop the rules `keep` refuses, in place, under `node`; the number kept."""
    kept = 0
    if isinstance(node, dict):
        if "x-kubernetes-validations" in node:
            rules = [rule for rule in node["x-kubernetes-validations"] if keep(rule)]
            kept += len(rules)
            if rules:
                node["x-kubernetes-validations"] = rules
            else:
                del node["x-kubernetes-validations"]
        kept += sum(_keep_rules(child, keep) for child in node.values())
    elif isinstance(node, list):
        kept += sum(_keep_rules(child, keep) for child in node)
    return kept


def variant(crd: dict[str, Any], keep: Callable[[Rule], bool]) -> tuple[dict[str, Any], int]:
    """The CRD with only the spec rules `keep` takes, and how many those are."""
    changed, kept = copy.deepcopy(crd), 0
    for version in changed["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        kept = _keep_rules(spec, keep)
    return changed, kept


def apply_crd(crd: dict[str, Any]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as file:
        yaml.safe_dump(crd, file)
        file.flush()
        kubectl("apply", "--server-side", "--force-conflicts", "-f", file.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    generated = yaml.safe_load(CRD.read_text())
    api, apiserver = api_and_its_cpu()
    namespace = f"bench-status-rules-{int(time.time())}"
    create_namespace(namespace)
    costs: list[dict[str, Any]] = []
    try:
        versions = apply_models(namespace, args.models)
        start, writes = datetime.now(UTC), 0
        for number in range(args.rounds):
            for name, keep in VARIANTS.items():
                crd, rules = variant(generated, keep)
                apply_crd(crd)
                time.sleep(5)  # the API server takes up the new schema
                writes += 1
                status = first_status(start + timedelta(minutes=writes))
                before = apiserver()
                for model in sorted(versions):
                    versions[model] = write(api, "PUT", namespace, model, versions[model], status)
                milliseconds = 1000 * (apiserver() - before) / len(versions)
                costs.append(
                    {"round": number + 1, "variant": name, "spec_rules": rules, "ms": milliseconds}
                )
                log(f"round {number + 1}, {name} ({rules} spec rules): {milliseconds:.2f} ms")
    finally:
        apply_crd(generated)
        delete_namespace(namespace)
    print(f"{args.models} models, a status PUT each a round and variant, one at a time")
    generated_ms = {c["round"]: c["ms"] for c in costs if c["variant"] == "as generated"}
    rows = []
    for name in VARIANTS:
        mine = [c for c in costs if c["variant"] == name]
        ratios = [c["ms"] / generated_ms[c["round"]] for c in mine]
        each = ", ".join(f"{c['ms']:.2f}" for c in mine)
        rows.append([name, str(mine[0]["spec_rules"]), each, f"{statistics.median(ratios):.2f}"])
    header = ["variant", "spec rules", "ms CPU a write, each round", "median ratio to as generated"]
    print(markdown_table(header, rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"models": args.models, "costs": costs}, indent=1))


if __name__ == "__main__":
    main()
