"""KEDA v2.21.0 on the local cluster, built from its Go module by e2e/build-keda.sh: its
operator and its metrics API server run as processes beside the control plane, the
server registered with the API server's aggregation layer as
v1beta1.external.metrics.k8s.io, as KEDA's own manifests register it.

Both use the admin kubeconfig (KEDA's RBAC is not what is under test) and one
certificate for their gRPC link, as KEDA's --cert-dir expects (ca.crt, tls.crt,
tls.key). The APIService's Service is an ExternalName for localhost: a Service here can
have no endpoints at loopback addresses, and the aggregator proxies to an ExternalName
Service's name."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e import cluster, pki
from e2e.real_engine import free_port
from e2e.waiting import wait_for

NAMESPACE = "keda"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
METRICS_SERVICE = "keda-metrics-apiserver"


class Keda:
    """The operator and the metrics API server, watching one namespace."""

    def __init__(self, watched: str, directory: Path) -> None:
        self.watched = watched
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        built = cluster.build_keda()
        cluster.install_keda_crds()
        certs = self.directory / "keda-certs"
        # The aggregator checks the server's name as the Service's DNS name.
        service_name = f"{METRICS_SERVICE}.{NAMESPACE}.svc"
        pki.mutual_tls(certs, "keda", ("localhost", "127.0.0.1", service_name))
        grpc, secure = free_port(), free_port()
        kubeconfig = str(cluster.kubeconfig_path())
        env = {
            "PATH": "/usr/bin:/bin",
            "KUBECONFIG": kubeconfig,
            "WATCH_NAMESPACE": self.watched,
            "POD_NAMESPACE": NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        }
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        self._run(
            "keda-operator",
            [
                str(built / "bin" / "keda"),
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{free_port()}",
                f"--metrics-service-bind-address=127.0.0.1:{grpc}",
                f"--cert-dir={certs}",
                "--enable-cert-rotation=false",
                "--enable-webhook-patching=false",
                "--enable-apiservice-patching=false",
                "--zap-log-level=info",
            ],
            env,
        )
        self._run(
            "keda-metrics-apiserver",
            [
                str(built / "bin" / "keda-adapter"),
                "--bind-address=127.0.0.1",
                f"--secure-port={secure}",
                f"--port={free_port()}",
                f"--cert-dir={certs}",
                f"--tls-cert-file={certs / 'tls.crt'}",
                f"--tls-private-key-file={certs / 'tls.key'}",
                f"--metrics-service-address=localhost:{grpc}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--zap-log-level=info",
            ],
            env,
        )
        ca_bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
        cluster.kubectl(
            "apply", "-f", "-", input=yaml.safe_dump_all(_registration(secure, ca_bundle))
        )
        wait_for("KEDA's external metrics API to be available", _available, timeout=90)

    def _run(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with (self.directory / f"{name}.log").open("ab") as out:
            self.processes.append(
                subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
            )

    def stop(self) -> None:
        cluster.kubectl("delete", "apiservice", API_SERVICE, "--ignore-not-found", check=False)
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


def _registration(port: int, ca_bundle: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": METRICS_SERVICE, "namespace": NAMESPACE},
            "spec": {
                "type": "ExternalName",
                "externalName": "localhost",
                "ports": [{"name": "https", "port": port}],
            },
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": API_SERVICE},
            "spec": {
                "service": {"name": METRICS_SERVICE, "namespace": NAMESPACE, "port": port},
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def _available() -> bool:
    got = cluster.kubectl(
        "get",
        "apiservice",
        API_SERVICE,
        "-o",
        "jsonpath={.status.conditions[0].status}",
        check=False,
    )
    return got.stdout.strip() == "True"
