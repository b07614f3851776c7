"""The whole product in one run: chart, tuning up through a canary, drift, rollback,
alerts in a real Prometheus run by prometheus-operator from the chart's monitors and
rules, and an uninstall that leaves nothing behind."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e import cluster
from e2e.prometheus import ALERT_VALUES, MONITOR_VALUES, OPERATOR_JOB, Prometheus
from e2e.story import (
    BELOW_FLOOR_ACCEPTANCE,
    FAILURE_LIMIT,
    MODEL,
    OPERATOR_METRICS_PORT,
    RELEASE,
    STALE_ACCEPTANCE,
    Story,
)
from e2e.waiting import wait_for
from specfleet.operator.metrics import query_prometheus
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, ActionKind


def test_tuning_drift_rollback_and_alerts(
    api_client: client.ApiClient, crds: None, namespace: str, tmp_path: Path
) -> None:
    prometheus = Prometheus(api_client, namespace, tmp_path)
    story = Story(api_client, namespace, tmp_path / "profile.yaml")
    seen_firing: set[str] = set()

    def tick() -> None:
        seen_firing.update(prometheus.firing())

    story.on_tick = tick
    try:
        prometheus.start()
        story.install_chart([*MONITOR_VALUES, *ALERT_VALUES])
        # The chart's pod, with the chart's RBAC, holds the chart's Lease under its pod name.
        operator_pods = client.CoreV1Api(api_client).list_namespaced_pod(
            namespace, label_selector="app.kubernetes.io/component=operator"
        )
        leases = client.CoordinationV1Api(api_client)

        def holder() -> str | None:
            found = leases.list_namespaced_lease(
                namespace, field_selector=f"metadata.name={RELEASE}"
            )
            return found.items[0].spec.holder_identity if found.items else None

        leader = wait_for("the operator pod to hold the Lease", holder, timeout=30)
        assert [p.metadata.name for p in operator_pods.items] == [leader]
        story.apply_model()
        story.wait_until_serving()

        promoted = story.wait_for_promotion()
        tokens = promoted["status"]["speculation"]["tokens"]
        assert tokens > 2
        table = cluster.kubectl("get", "specmodel", MODEL, "-n", namespace).stdout.splitlines()
        assert table[1].split()[1] == str(tokens)  # the K column
        stable = client.AppsV1Api(api_client).read_namespaced_deployment(MODEL, namespace)
        args = stable.spec.template.spec.containers[0].args
        assert args[args.index("--num-speculative-tokens") + 1] == str(tokens)

        story.wait_until_serving()  # the stable pods run the promoted K

        def wait_firing(alert: str) -> None:
            deadline = time.monotonic() + 90
            while alert not in seen_firing and time.monotonic() < deadline:
                tick()
                time.sleep(1)
            assert alert in seen_firing, f"alerts seen firing: {seen_firing}"

        # Block acceptance falls under the floor, but speculation still pays: the fastest
        # K stays, the condition and the alert say so.
        story.drift(BELOW_FLOOR_ACCEPTANCE)
        kept = story.wait_for_rollback(actions=frozenset({ActionKind.KEEP_FASTEST}))
        assert kept["status"]["speculation"].get("off") is None
        conditions = {c["type"]: c for c in kept["status"]["conditions"]}
        assert conditions["AcceptanceBelowFloor"]["status"] == "True"
        assert "over plain decoding" in conditions["AcceptanceBelowFloor"]["message"]
        wait_firing("SpecfleetAcceptanceBelowFloor")

        # The chart's ServiceMonitor and PodMonitor, reconciled by prometheus-operator,
        # scrape the operator (through its Service's endpoints, which the controller
        # manager keeps at the operator pod's IP) and the model's pods.
        targets = prometheus.targets()
        up = {t["scrapePool"]: t for t in targets if t["health"] == "up"}
        runtime = f"podMonitor/{namespace}/{RELEASE}-runtime/0"
        operator = f"serviceMonitor/{namespace}/{RELEASE}/0"
        assert {runtime, operator} <= up.keys(), targets
        assert up[runtime]["labels"]["model"] == MODEL
        assert up[operator]["labels"]["job"] == OPERATOR_JOB
        (operator_pod,) = operator_pods.items
        address = f"{operator_pod.status.pod_ip}:{OPERATOR_METRICS_PORT}"
        assert up[operator]["labels"]["instance"] == address
        # metrics.source Prometheus: the tuner's query reads the same pods' counters.
        samples = asyncio.run(query_prometheus(prometheus.url, namespace, MODEL, timeout=5))
        serving = {p["metadata"]["name"] for p in story.serving_pods()}
        read = {s.pod for s in samples if s.counters is not None and s.track == "stable"}
        assert serving & read, (serving, samples)
        # The stable pods draft; a canary measuring plain decoding under the floor does not.
        stable = [s for s in samples if s.pod in serving and s.counters and s.track == "stable"]
        assert stable and all(s.counters.draft_tokens > 0 for s in stable if s.counters), samples

        # The draft goes stale: speculation no longer pays, plain decoding within
        # failureLimit + 1 windows.
        story.drift(STALE_ACCEPTANCE)
        rolled_back = story.wait_for_rollback()
        assert story.windows_to_rollback() <= FAILURE_LIMIT + 1
        decision = story.rollback_decision(rolled_back)
        assert decision is not None and decision["action"] == ActionKind.DISABLE, decision
        assert "no longer pays" in decision["reason"]
        # The Event is posted after the status write that the wait above saw.
        wait_for(
            "a rollback Event",
            lambda: ROLLBACK_ACTIONS & set(story.events()) or None,
            timeout=30,
        )

        families = {f.name: f for f in text_string_to_metric_families(story.operator_metrics())}
        rollbacks = sum(
            s.value for s in families["specfleet_rollbacks"].samples if s.name.endswith("_total")
        )
        assert rollbacks >= 1
        wait_firing("SpecfleetRollback")
    finally:
        prometheus.stop()
    assert story.uninstall() == []
