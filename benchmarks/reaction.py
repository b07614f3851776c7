"""Reaction latency: acceptance drops -> rollback decision, in windows and in seconds.

    .venv/bin/python benchmarks/reaction.py [--rounds 3] [--models 2]
        [--json build/bench/reaction.json]

Needs the local control plane (`make cluster-up`). Runs `specfleet operator` (period
1 s, as the end-to-end story's chart install does) on a namespace of its own
(`bench-reaction-*`, deleted afterwards). Each round applies `--models` fresh
SpeculativeModels on the simulated engine, on the real node agent's nodes (real sim
processes): K=3, the story's high-acceptance profile, tuning off (so no canary is in
flight when the drift comes), 5 s windows, minDraftTokens 1000, floor 0.75,
failureLimit 2. Once each has had two conclusive windows above the floor, every pod
gets the story's low-acceptance profile (POST /admin/profile) and the benchmark polls
the model (every 0.2 s) until a Rollback / StepDown / Disable decision appears in
`status.history`. Per model: seconds from the drift to the decision's timestamp and to
when the decision was seen in status, and windows = evaluations (distinct
`status.acceptance.measuredAt`) that ended after the drift, up to the decision.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubernetes import client, config  # noqa: E402

from e2e import cluster  # noqa: E402
from e2e.models import apply, get_model, sim_admin, sim_model  # noqa: E402
from e2e.operator_process import OperatorProcess  # noqa: E402
from e2e.story import HIGH_ACCEPTANCE, STALE_ACCEPTANCE  # noqa: E402
from e2e.waiting import wait_for  # noqa: E402
from specfleet.operator.outcomes import ROLLBACK_ACTIONS  # noqa: E402

INTERVAL_SECONDS = 5
FAILURE_LIMIT = 2


def log(message: str) -> None:
    print(f"[reaction {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def model(name: str, seed: int) -> dict[str, Any]:
    profile = {"acceptance": HIGH_ACCEPTANCE, "noise": 0.01, "load": {"requests_per_second": 3}}
    manifest = sim_model(
        name,
        replicas=1,
        speculation={"tokens": 3, "minTokens": 1, "maxTokens": 6},
        tuning={
            "enabled": False,
            "interval": f"{INTERVAL_SECONDS}s",
            "minDraftTokens": 1000,
            "cooldown": "10s",
        },
        rollback={"minAcceptance": 0.75, "failureLimit": FAILURE_LIMIT, "reprobeAfter": "10m"},
    )
    manifest["spec"]["runtime"]["env"] += [
        {"name": "SPECFLEET_SIM_PROFILE", "value": json.dumps(profile)},
        {"name": "SPECFLEET_SIM_SEED", "value": str(seed)},
    ]
    return manifest


def serving_pod_ips(core: Any, namespace: str, name: str) -> list[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"specfleet.io/model={name}").items
    return [
        p.status.pod_ip
        for p in pods
        if p.status.pod_ip
        and not p.metadata.deletion_timestamp
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def drift(ips: list[str]) -> None:
    for ip in ips:
        sim_admin(ip, "/admin/profile", {"acceptance": STALE_ACCEPTANCE})


def run_round(
    api: Any, namespace: str, round_: int, models: int, timeout: float
) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    names = [f"r{round_}-m{i}" for i in range(models)]
    for i, name in enumerate(names):
        apply(model(name, seed=7 + 10 * round_ + i), namespace)

    def healthy(name: str) -> bool:
        status = get_model(api, namespace, name).get("status") or {}
        windows = status.get("speculation", {}).get("sinceChange", {}).get("windows") or 0
        rate = (status.get("acceptance") or {}).get("rate")
        return status.get("phase") == "Ready" and rate is not None and rate > 0.8 and windows >= 2

    for name in names:
        wait_for(f"{name} serving with two conclusive windows", partial(healthy, name), timeout)
    drifted: dict[str, float] = {}
    for name in names:
        drift(serving_pod_ips(core, namespace, name))
        drifted[name] = time.time()
    log(f"round {round_}: drifted {', '.join(names)}")
    measured: dict[str, set[str]] = {name: set() for name in names}
    found: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(names) and time.monotonic() < deadline:
        for name in names:
            if name in found:
                continue
            status = get_model(api, namespace, name).get("status") or {}
            at = (status.get("acceptance") or {}).get("measuredAt")
            if at and epoch(at) >= drifted[name]:
                measured[name].add(at)
            for entry in status.get("history") or []:
                if entry["action"] in ROLLBACK_ACTIONS and epoch(entry["time"]) >= drifted[name]:
                    # The decision's own window ends at the decision time.
                    measured[name].add(entry["time"])
                    found[name] = {
                        "model": name,
                        "action": entry["action"],
                        "from": entry.get("fromTokens"),
                        "to": entry.get("toTokens"),
                        "decision_seconds": epoch(entry["time"]) - drifted[name],
                        "seen_seconds": time.time() - drifted[name],
                        "windows": len(measured[name]),
                    }
                    break
        time.sleep(0.2)
    if len(found) < len(names):
        raise TimeoutError(f"no rollback within {timeout:.0f}s for {set(names) - set(found)}")
    for name in names:
        cluster.kubectl("delete", "specmodel", name, "-n", namespace, "--wait=true")
    return [found[name] for name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=180.0, help="per wait")
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/reaction.json")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    namespace = f"bench-reaction-{int(time.time()) % 100000}"
    cluster.install_crds()
    cluster.kubectl("create", "namespace", namespace)
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path()))
    operator = OperatorProcess([namespace], args.json.parent / "reaction-operator.log", period=1.0)
    results: list[dict[str, Any]] = []
    try:
        operator.start()
        for round_ in range(args.rounds):
            for result in run_round(api, namespace, round_, args.models, args.timeout):
                log(
                    f"{result['model']}: {result['action']} {result['from']}->{result['to']} "
                    f"after {result['windows']} windows, {result['decision_seconds']:.1f} s "
                    f"(seen in status at {result['seen_seconds']:.1f} s)"
                )
                results.append(result)
    finally:
        operator.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=true", check=False)
    summary = {
        "interval_seconds": INTERVAL_SECONDS,
        "failure_limit": FAILURE_LIMIT,
        "samples": len(results),
        **{
            f"{key}_{name}": fn([r[key] for r in results])
            for key in ("windows", "decision_seconds", "seen_seconds")
            for name, fn in (("median", statistics.median), ("min", min), ("max", max))
        },
    }
    args.json.write_text(json.dumps({"results": results, "summary": summary}, indent=2))
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
