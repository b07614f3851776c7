"""prometheus-operator v0.85.0, built from its Go module, reconciles the chart's
ServiceMonitor, PodMonitor and PrometheusRule into a Prometheus's configuration: the
scrape jobs keep the labels the alerts group by, and the rule file it writes is the
chart's alerts, valid for promtool.

Not covered here: running the Prometheus pod that configuration is for (the node agent
cannot run its image); the story's alerts still run in a Prometheus configured by
e2e/prometheus.py."""

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
from e2e.real_engine import free_port
from e2e.waiting import wait_for
from tests.test_chart import manifests, render

OPERATOR_USER = cluster.CLIENTS["prometheus-operator"]
SELECTED = {"prometheus": "specfleet"}  # the label our Prometheus selects monitors by
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
RELEASE = "sf-mon"


@pytest.fixture
def prometheus_operator(monitoring_crds: None, namespace: str, tmp_path: Path) -> Iterator[None]:
    """The operator as a process, scoped to the test's namespace, with the ClusterRole its
    project ships bound to its client certificate's user."""
    built = cluster.build_monitoring()
    cluster.kubectl("apply", "-f", str(built / "cluster-role.yaml"))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "prometheus-operator"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "prometheus-operator",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}
        ],
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    pki = cluster.STATE / "pki"
    with (tmp_path / "prometheus-operator.log").open("wb") as out:
        process = subprocess.Popen(
            [
                str(built / "bin" / "prometheus-operator"),
                f"--apiserver={cluster.SERVER}",
                f"--ca-file={pki / 'ca.crt'}",
                f"--cert-file={pki / 'prometheus-operator.crt'}",
                f"--key-file={pki / 'prometheus-operator.key'}",
                f"--namespaces={namespace}",
                f"--web.listen-address=127.0.0.1:{free_port()}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def prometheus(namespace: str) -> dict[str, Any]:
    """A Prometheus that selects the chart's monitors and rules by their label, for
    Debian's Prometheus (2.42)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {"name": "specfleet", "namespace": namespace},
        "spec": {
            "version": "v2.42.0",
            "serviceMonitorSelector": {"matchLabels": SELECTED},
            "podMonitorSelector": {"matchLabels": SELECTED},
            "ruleSelector": {"matchLabels": SELECTED},
        },
    }


def test_prometheus_operator_reconciles_the_charts_monitors_and_rules(
    prometheus_operator: None, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    labels = [
        f'{kind}.labels={{"prometheus":"specfleet"}}'
        for kind in ("serviceMonitor", "podMonitor", "prometheusRule")
    ]
    text = render(
        namespace=namespace,
        release=RELEASE,
        set_json=[
            "serviceMonitor.enabled=true",
            "podMonitor.enabled=true",
            "prometheusRule.enabled=true",
            *labels,
        ],
    ).stdout
    chart = [d for d in manifests(text) if d["kind"] in MONITORING_KINDS]
    assert {d["kind"] for d in chart} == MONITORING_KINDS
    cluster.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=yaml.safe_dump_all([*chart, prometheus(namespace)]),
    )
    core = client.CoreV1Api(api_client)

    def generated() -> dict[str, Any] | None:
        secrets = core.list_namespaced_secret(
            namespace, field_selector="metadata.name=prometheus-specfleet"
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
        r.get("target_label") == "job" and r.get("replacement") == "specfleet-operator"
        for r in operator["relabel_configs"]
    )
    assert config["rule_files"], config

    def rule_files() -> dict[str, str] | None:
        maps = core.list_namespaced_config_map(
            namespace, label_selector="prometheus-name=specfleet"
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
