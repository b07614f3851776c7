"""A real Prometheus server on loopback, scraping the sim pods and the operator and
evaluating the chart's alert rules (rendered with short windows)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.real_engine import free_port

# Short windows so the alerts can fire within a test; everything else is the default.
ALERT_VALUES = [
    "prometheusRule.enabled=true",
    "alerts.evaluationInterval=2s",
    "alerts.acceptanceBelowFloor.window=20s",
    "alerts.acceptanceBelowFloor.for=4s",
    "alerts.rollback.window=2m",
    "alerts.speculationInactive.window=20s",
    "alerts.speculationInactive.for=4s",
    "alerts.metricsUnavailable.for=10s",
    "alerts.operatorDown.for=10s",
]
OPERATOR_JOB = "specfleet-operator"


def alert_rules(helm: str, chart: Path) -> dict[str, Any]:
    """The chart's PrometheusRule groups as a plain rules file."""
    args = [helm, "template", "alerts", str(chart)]
    for value in ALERT_VALUES:
        args += ["--set", value]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    for document in yaml.safe_load_all(rendered):
        if document and document.get("kind") == "PrometheusRule":
            return {"groups": document["spec"]["groups"]}
    raise RuntimeError("the chart rendered no PrometheusRule")


class Prometheus:
    def __init__(self, directory: Path, helm: str, chart: Path) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed: run e2e/install-debian-packages.sh")
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.targets_file = directory / "targets.json"
        (directory / "rules.yaml").write_text(yaml.safe_dump(alert_rules(helm, chart)))
        self.set_targets([], None)
        config = {
            "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
            "rule_files": [str(directory / "rules.yaml")],
            "scrape_configs": [
                {
                    "job_name": "specfleet-pods",
                    "file_sd_configs": [
                        {"files": [str(self.targets_file)], "refresh_interval": "2s"}
                    ],
                },
                {
                    "job_name": OPERATOR_JOB,
                    "honor_labels": True,  # keep the operator's own namespace/model labels
                    "file_sd_configs": [
                        {"files": [str(directory / "operator.json")], "refresh_interval": "2s"}
                    ],
                },
            ],
        }
        (directory / "prometheus.yaml").write_text(yaml.safe_dump(config))
        self.process: subprocess.Popen[bytes] | None = None

    def set_targets(self, pods: list[dict[str, Any]], operator_address: str | None) -> None:
        """Scrape these pods (labelled as the chart's PodMonitor labels them)."""
        groups = [
            {
                "targets": [f"{pod['status']['podIP']}:{pod['port']}"],
                "labels": {
                    "namespace": pod["metadata"]["namespace"],
                    "pod": pod["metadata"]["name"],
                    "model": pod["metadata"]["labels"]["specfleet.io/model"],
                    "track": pod["metadata"]["labels"]["specfleet.io/track"],
                },
            }
            for pod in pods
            if pod.get("status", {}).get("podIP")
        ]
        _write_atomically(self.targets_file, json.dumps(groups))
        operator = [{"targets": [operator_address]}] if operator_address else []
        _write_atomically(self.directory / "operator.json", json.dumps(operator))

    def start(self) -> None:
        with (self.directory / "prometheus.log").open("ab") as out:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={self.directory / 'prometheus.yaml'}",
                    f"--storage.tsdb.path={self.directory / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.api("/-/ready")
                return
            except OSError:
                time.sleep(0.5)
        raise TimeoutError(f"prometheus not ready; see {self.directory / 'prometheus.log'}")

    def api(self, path: str, **query: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = reply.read().decode()
        return json.loads(body) if path.startswith("/api/") else body

    def firing(self) -> set[str]:
        alerts = self.api("/api/v1/alerts")["data"]["alerts"]
        return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)
