"""Failover time of the chart's two operator replicas behind their Lease, on the local
control plane.

    .venv/bin/python benchmarks/failover.py [--fault kill|cut] [--runs 10] [--json FILE]

Needs the local control plane (`make cluster-up`). In a fresh namespace (`bench-failover-*`,
deleted afterwards) the chart runs its two replicas as pods from the operator image built
here, with its default election settings (15 s Lease, 10 s renew deadline, 2 s retry), and
one model (the story's, on the simulated engine, evaluated every 5 s). Each run, in steady
state, faults the leader and measures, from the fault:

- takeover: the next leader's first write the API server accepted (its Lease update), read
  from the API server's audit log by the replica's user agent (its pod's name);
- first model write: its first write to the model (a status patch after its first
  evaluation window).

`--fault kill` SIGKILLs the leader's container. The node agent restarts it at once (after
its first back-off, 2.5 s), as a kubelet does, and the restarted operator, named by its pod,
takes its own Lease back; the run says which replica led next. `--fault cut` takes the
leader's veth down: the standby takes over once the Lease expires; the old leader is joined
again and waited for as a standby before the next run, which cuts the new leader.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from e2e import cluster, operator_pods  # noqa: E402
from e2e.models import apply  # noqa: E402
from e2e.story import install_chart, story_model  # noqa: E402
from e2e.waiting import wait_for  # noqa: E402
from specfleet.operator.kube import user_agent  # noqa: E402


def log(message: str) -> None:
    print(f"[failover {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def first_write_after(namespace: str, name: str, after: datetime, resource: str = "") -> float:
    """Seconds from `after` to the first accepted write by replica `name` (to `resource`)."""
    write = cluster.first_accepted_write(user_agent(name), namespace, after, resource, timeout=90)
    return (write.received - after).total_seconds()


def one_run(api_client: client.ApiClient, namespace: str, fault: str) -> dict[str, Any]:
    """Fault the leader; measure who leads next and when (see the module's docstring)."""
    current = wait_for(
        "one leader", lambda: operator_pods.leader(api_client, namespace), timeout=240
    )
    (standby,) = [
        r for r in operator_pods.replicas(api_client, namespace).values() if r.name != current.name
    ]
    faulted = datetime.now(UTC)
    if fault == "kill":
        current.signal("KILL")
    else:
        current.connect(False)

    def successor() -> str | None:
        for name in (standby.name, current.name):
            if cluster.accepted_writes(user_agent(name), namespace, faulted):
                return name
        return None

    name = wait_for("a new leader's write", successor, timeout=90)
    result = {
        "next_leader": "standby" if name == standby.name else "restarted",
        "takeover_seconds": first_write_after(namespace, name, faulted),
        "first_model_write_seconds": first_write_after(
            namespace, name, faulted, "speculativemodels"
        ),
    }
    if fault == "cut":
        current.connect(True)

        def back_as_standby() -> bool:
            now = operator_pods.replicas(api_client, namespace).get(current.name)
            return now is not None and bool(now.runc_id) and now.answers() and not now.leading()

        wait_for("the old leader back as a standby", back_as_standby, timeout=240)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault", choices=("kill", "cut"), default="kill")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/failover.json")
    args = parser.parse_args()
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig_path()))
    namespace = f"bench-failover-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    runs: list[dict[str, Any]] = []

    try:
        install_chart(namespace)
        apply(story_model(), namespace)
        for run in range(args.runs):
            time.sleep(8)  # a few renews and evaluations in steady state
            runs.append(one_run(api_client, namespace, args.fault))
            log(
                f"run {run + 1}: {args.fault}; next leader: the {runs[-1]['next_leader']}; "
                f"takeover {runs[-1]['takeover_seconds']:.1f} s, first model write "
                f"{runs[-1]['first_model_write_seconds']:.1f} s"
            )
        takeovers = [r["takeover_seconds"] for r in runs]
        model_writes = [r["first_model_write_seconds"] for r in runs]
        summary = {
            "fault": args.fault,
            "runs": len(runs),
            "next_leader_standby": sum(r["next_leader"] == "standby" for r in runs),
            "takeover_median": statistics.median(takeovers),
            "takeover_max": max(takeovers),
            "takeover_min": min(takeovers),
            "first_model_write_median": statistics.median(model_writes),
            "first_model_write_max": max(model_writes),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"runs": runs, "summary": summary}, indent=2))
        print(
            f"| {len(runs)} x {args.fault} | next leader the standby in "
            f"{summary['next_leader_standby']} | takeover median "
            f"{summary['takeover_median']:.1f} s, min {summary['takeover_min']:.1f}, max "
            f"{summary['takeover_max']:.1f} | first model write median "
            f"{summary['first_model_write_median']:.1f} s, max "
            f"{summary['first_model_write_max']:.1f} |"
        )
    finally:
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


if __name__ == "__main__":
    main()
