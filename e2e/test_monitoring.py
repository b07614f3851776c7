"""prometheus-operator v0.85.0, built from its Go module, reconciles the chart's
ServiceMonitor, PodMonitor and PrometheusRule into a Prometheus's configuration: the
scrape jobs keep the labels the alerts group by, and the rule file it writes is the
chart's alerts, valid for promtool. The story (e2e/test_story.py) runs that Prometheus
and sees the alerts fire and both monitors' targets up; here each reconciled piece is
checked on its own."""

from __future__ import annotations

import base64
import gzip
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e import cluster
from e2e.prometheus import (
    MONITOR_VALUES,
    NAME,
    OPERATOR_JOB,
    PrometheusOperator,
    as_json,
    prometheus_manifests,
)
from e2e.waiting import wait_for
from tests.test_chart import manifests, render

MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
RELEASE = "sf-mon"


@pytest.fixture
def prometheus_operator(monitoring_crds: None, namespace: str, tmp_path: Path) -> Iterator[None]:
    operator = PrometheusOperator(namespace, tmp_path)
    operator.start()
    try:
        yield
    finally:
        operator.stop()


def test_prometheus_operator_reconciles_the_charts_monitors_and_rules(
    prometheus_operator: None, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    text = render(namespace=namespace, release=RELEASE, set_json=as_json(MONITOR_VALUES)).stdout
    chart = [d for d in manifests(text) if d["kind"] in MONITORING_KINDS]
    assert {d["kind"] for d in chart} == MONITORING_KINDS
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump_all([*chart, *prometheus_manifests(namespace)]),
    )
    core = client.CoreV1Api(api_client)

    def generated() -> dict[str, Any] | None:
        secrets = core.list_namespaced_secret(
            namespace, field_selector=f"metadata.name=prometheus-{NAME}"
        ).items
        data = (secrets[0].data or {}) if secrets else {}
        if "prometheus.yaml.gz" not in data:
            return None
        config = yaml.safe_load(gzip.decompress(base64.b64decode(data["prometheus.yaml.gz"])))
        jobs = {job["job_name"]: job for job in config.get("scrape_configs") or []}
        wanted = {f"podMonitor/{namespace}/", f"serviceMonitor/{namespace}/"}
        found = {prefix for prefix in wanted for name in jobs if name.startswith(prefix)}
        return config if found == wanted else None

    config = wait_for("the operator's Prometheus configuration", generated, timeout=60)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    pods = next(j for n, j in jobs.items() if n.startswith(f"podMonitor/{namespace}/"))
    targets = {r.get("target_label") for r in pods["relabel_configs"]}
    assert {"model", "track", "namespace", "pod"} <= targets
    assert pods["kubernetes_sd_configs"][0]["role"] == "pod"
    operator = next(j for n, j in jobs.items() if n.startswith(f"serviceMonitor/{namespace}/"))
    assert operator["honor_labels"] is True
    assert any(
        r.get("target_label") == "job" and r.get("replacement") == OPERATOR_JOB
        for r in operator["relabel_configs"]
    )
    assert config["rule_files"], config

    def rule_files() -> dict[str, str] | None:
        maps = core.list_namespaced_config_map(
            namespace, label_selector=f"prometheus-name={NAME}"
        ).items
        files = {k: v for m in maps for k, v in (m.data or {}).items()}
        return files or None

    files = wait_for("the operator's rule files", rule_files, timeout=60)
    (rule,) = [d for d in chart if d["kind"] == "PrometheusRule"]
    written = [yaml.safe_load(body) for body in files.values()]
    alerts = {r["alert"] for f in written for g in f["groups"] for r in g["rules"] if "alert" in r}
    charted = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == charted and "SpecfleetNoLeader" in alerts
    for name, body in files.items():
        path = tmp_path / name
        path.write_text(body)
        checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
