"""Failover time of two operator replicas behind a Lease, on the local control plane.

    .venv/bin/python benchmarks/failover.py [--runs 10] [--json build/bench/failover.json]

Needs the local control plane (`make cluster-up`). In a fresh namespace (`bench-failover-*`,
deleted afterwards) one model (the story's, on the simulated engine, evaluated every 5 s)
runs under two replicas with the default election settings (15 s Lease, 10 s renew deadline,
2 s retry). Each run SIGKILLs the leader and measures, from the kill:

- takeover: the standby's first write the API server accepted (its Lease update), read from
  the API server's audit log by the replica's user agent;
- first model write: its first write to the model (a status patch after its first
  evaluation window).

The killed replica is then started again as the new standby, so each run kills the replica
that took over in the previous one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from e2e import cluster  # noqa: E402
from e2e.models import apply  # noqa: E402
from e2e.operator_process import OperatorProcess, replica  # noqa: E402
from e2e.story import story_model  # noqa: E402
from e2e.waiting import wait_for  # noqa: E402
from specfleet.operator.kube import user_agent  # noqa: E402


def log(message: str) -> None:
    print(f"[failover {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def first_write_after(namespace: str, name: str, after: datetime, resource: str = "") -> float:
    """Seconds from `after` to the first accepted write by replica `name` (to `resource`)."""
    write = cluster.first_accepted_write(user_agent(name), namespace, after, resource, timeout=90)
    return (write.received - after).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/failover.json")
    args = parser.parse_args()
    cluster.install_crds()
    namespace = f"bench-failover-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    logs = Path(tempfile.mkdtemp(prefix="specfleet-failover-"))
    started = 0

    def new_replica() -> OperatorProcess:
        nonlocal started
        started += 1
        process = replica(namespace, logs, f"op-{started}")
        process.start()
        return process

    leader = new_replica()
    standby: OperatorProcess | None = None
    runs: list[dict[str, Any]] = []
    try:
        wait_for("a leader", leader.leading, timeout=30)
        standby = new_replica()
        apply(story_model(), namespace)
        for run in range(args.runs):
            time.sleep(8)  # a few renews and evaluations in steady state
            assert leader.leading() and not standby.leading()
            killed = datetime.now(UTC)
            leader.kill()
            successor = standby.identity
            assert successor is not None
            takeover = first_write_after(namespace, successor, killed)
            model_write = first_write_after(namespace, successor, killed, "speculativemodels")
            runs.append({"takeover_seconds": takeover, "first_model_write_seconds": model_write})
            log(f"run {run + 1}: takeover {takeover:.1f} s, first model write {model_write:.1f} s")
            leader, standby = standby, new_replica()
        takeovers = [r["takeover_seconds"] for r in runs]
        model_writes = [r["first_model_write_seconds"] for r in runs]
        summary = {
            "runs": len(runs),
            "takeover_median": statistics.median(takeovers),
            "takeover_max": max(takeovers),
            "takeover_min": min(takeovers),
            "first_model_write_median": statistics.median(model_writes),
            "first_model_write_max": max(model_writes),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))
        print(
            f"| {len(runs)} SIGKILLs | takeover median {summary['takeover_median']:.1f} s, "
            f"min {summary['takeover_min']:.1f}, max {summary['takeover_max']:.1f} | first "
            f"model write median {summary['first_model_write_median']:.1f} s, max "
            f"{summary['first_model_write_max']:.1f} |"
        )
    finally:
        for process in (leader, standby):
            if process is not None:
                process.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


if __name__ == "__main__":
    main()
