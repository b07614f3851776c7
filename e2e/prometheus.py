"""Prometheus as prometheus-operator runs it, for the story's alerts and the tuner's
`metrics.source: Prometheus`: the operator (v0.85.0, built from its Go module by
e2e/build-monitoring.sh) runs outside the cluster against the local API server; it turns
a `Prometheus` into a StatefulSet whose pod the node agent runs from images built here
(Prometheus 3.5 and the operator's config reloader, both from their Go modules: Debian's
Prometheus has no Kubernetes service discovery), and reconciles the chart's
ServiceMonitor, PodMonitor and PrometheusRule into that pod's configuration."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster, images
from e2e.real_engine import free_port
from e2e.waiting import wait_for

NAME = "specfleet"  # the Prometheus, and the label it selects monitors and rules by
SELECTED = {"prometheus": NAME}
PORT = 9090  # the pod's `web` port, as prometheus-operator renders it
OPERATOR_JOB = "specfleet-operator"  # the chart's alerts.operatorJob
OPERATOR_USER = cluster.CLIENTS["prometheus-operator"]
# The chart's monitors and rules, labelled for our Prometheus and scraped every 2 s.
MONITOR_VALUES = [
    "serviceMonitor.enabled=true",
    "serviceMonitor.interval=2s",
    "serviceMonitor.scrapeTimeout=1s",
    f"serviceMonitor.labels.prometheus={NAME}",
    "podMonitor.enabled=true",
    "podMonitor.interval=2s",
    "podMonitor.scrapeTimeout=1s",
    f"podMonitor.labels.prometheus={NAME}",
    "prometheusRule.enabled=true",
    f"prometheusRule.labels.prometheus={NAME}",
]
# Short windows so the alerts can fire within a test; everything else is the default.
ALERT_VALUES = [
    "alerts.evaluationInterval=2s",
    "alerts.acceptanceBelowFloor.window=20s",
    "alerts.acceptanceBelowFloor.for=4s",
    "alerts.rollback.window=2m",
    "alerts.speculationInactive.window=20s",
    "alerts.speculationInactive.for=4s",
    "alerts.metricsUnavailable.for=10s",
    "alerts.operatorDown.for=10s",
]


def as_json(values: list[str]) -> list[str]:
    """`--set` values (path=value) as `--set-json` ones."""
    result = []
    for item in values:
        path, value = item.split("=", 1)
        result.append(
            f"{path}={json.dumps(value == 'true' if value in ('true', 'false') else value)}"
        )
    return result


class PrometheusOperator:
    """The operator as a process watching one namespace, authenticated by a client
    certificate whose user has the ClusterRole its project ships."""

    def __init__(self, namespace: str, directory: Path) -> None:
        self.namespace = namespace
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        built = cluster.build_monitoring()
        for image in images.monitoring_images(built):
            images.build_binary_image(image)
        cluster.kubectl("apply", "-f", str(built / "cluster-role.yaml"))
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(_binding()))
        pki = cluster.STATE / "pki"
        with (self.directory / "prometheus-operator.log").open("ab") as out:
            self.process = subprocess.Popen(
                [
                    str(built / "bin" / "prometheus-operator"),
                    f"--apiserver={cluster.SERVER}",
                    f"--ca-file={pki / 'ca.crt'}",
                    f"--cert-file={pki / 'prometheus-operator.crt'}",
                    f"--key-file={pki / 'prometheus-operator.key'}",
                    f"--namespaces={self.namespace}",
                    f"--prometheus-config-reloader={images.CONFIG_RELOADER_REF}",
                    f"--web.listen-address=127.0.0.1:{free_port()}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _binding() -> dict[str, Any]:
    return {
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


def prometheus_manifests(namespace: str) -> list[dict[str, Any]]:
    """A Prometheus selecting the chart's monitors and rules by label, and the
    ServiceAccount and RBAC its service discovery reads pods and endpoints with."""
    role = f"{namespace}-prometheus"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus"}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "services", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}],
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": NAME},
            "spec": {
                "image": images.PROMETHEUS_REF,
                "version": "v3.5.0",
                "serviceAccountName": "prometheus",
                "scrapeInterval": "2s",
                "evaluationInterval": "2s",
                "serviceMonitorSelector": {"matchLabels": SELECTED},
                "podMonitorSelector": {"matchLabels": SELECTED},
                "ruleSelector": {"matchLabels": SELECTED},
            },
        },
    ]


class Prometheus:
    """The operator, the Prometheus it runs in `namespace`, and that pod's HTTP API."""

    def __init__(self, api_client: client.ApiClient, namespace: str, directory: Path) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.operator = PrometheusOperator(namespace, directory)
        self.address: str | None = None

    def start(self) -> None:
        cluster.install_monitoring_crds()
        self.operator.start()
        cluster.kubectl(
            "apply",
            "-n",
            self.namespace,
            "-f",
            "-",
            input=yaml.safe_dump_all(prometheus_manifests(self.namespace)),
        )
        self.address = wait_for("the Prometheus pod to be Ready", self._ready, timeout=180)

    def _ready(self) -> str | None:
        pods = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"operator.prometheus.io/name={NAME}"
        ).items
        for pod in pods:
            ready = any(
                c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
            )
            if ready and pod.status.pod_ip:
                return f"{pod.status.pod_ip}:{PORT}"
        return None

    @property
    def url(self) -> str:
        if self.address is None:
            raise RuntimeError("Prometheus is not started")
        return f"http://{self.address}"

    def api(self, path: str, **query: str) -> Any:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = reply.read().decode()
        return json.loads(body) if path.startswith("/api/") else body

    def firing(self) -> set[str]:
        alerts = self.api("/api/v1/alerts")["data"]["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    def targets(self) -> list[dict[str, Any]]:
        """The targets Prometheus scrapes: `scrapePool` (one per monitor endpoint, as
        prometheus-operator names them), `labels`, `health`, `lastError`."""
        return list(self.api("/api/v1/targets")["data"]["activeTargets"])

    def stop(self) -> None:
        """Delete the Prometheus (its StatefulSet, pod, Service, Secrets and ConfigMaps go
        with it, by owner) while the operator still runs to release its finalizer, then
        stop the operator."""
        cluster.kubectl(
            "delete",
            "-n",
            self.namespace,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=60s",
            "-f",
            "-",
            input=yaml.safe_dump_all(prometheus_manifests(self.namespace)),
            check=False,
        )
        self.operator.stop()
