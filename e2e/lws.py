"""LeaderWorkerSet v0.9.0 on the local cluster, built from its Go module by
e2e/build-lws.sh: its controller manager runs as a process beside the control plane, with
the admin kubeconfig (LeaderWorkerSet's RBAC is not what is under test) and its webhooks
(defaulting and validating LeaderWorkerSets, labelling and validating their pods) served
on loopback, where the API server reaches them.

Its own certificate management writes a Secret and patches the webhook configurations
for an in-cluster Service; here it is off, and the webhooks are LeaderWorkerSet's own
configurations (with the kustomize patches its release applies) pointed at the process
by URL, with the CA of a certificate made for it."""

from __future__ import annotations

import base64
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster, pki
from e2e.real_engine import free_port
from e2e.waiting import wait_for

# The configurations' names as LeaderWorkerSet's release prefixes them.
NAME_PREFIX = "lws-"
# The labels LeaderWorkerSet puts on a group's pods.
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def running_group(
    core: client.CoreV1Api, namespace: str, name: str
) -> dict[str, client.V1Pod] | None:
    """The first group's pods of LeaderWorkerSet `name` by worker index, once both run."""
    selector = f"{NAME_LABEL}={name},leaderworkerset.sigs.k8s.io/group-index=0"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    running = {
        pod.metadata.labels[WORKER_INDEX_LABEL]: pod
        for pod in pods
        if pod.status.phase == "Running" and pod.metadata.deletion_timestamp is None
    }
    return running if len(running) == 2 and len(pods) == 2 else None


def webhook_configurations(directory: Path, url: str, ca_bundle: str) -> list[dict[str, Any]]:
    """LeaderWorkerSet's webhook configurations with its release's patches (the pod
    webhooks only for pods of a LeaderWorkerSet), each webhook called at `url` + its path."""
    patches: list[dict[str, Any]] = []
    for name in ("mutating-patch.yaml", "validating-patch.yaml"):
        patches += yaml.safe_load((directory / name).read_text())
    configurations = [
        c for c in yaml.safe_load_all((directory / "manifests.yaml").read_text()) if c
    ]
    for configuration, patch in zip(configurations, patches, strict=True):
        # Each patch replaces one webhook: "replace /webhooks/N".
        assert patch["op"] == "replace" and patch["path"].startswith("/webhooks/"), patch
        configuration["webhooks"][int(patch["path"].rpartition("/")[2])] = patch["value"]
        configuration["metadata"]["name"] = NAME_PREFIX + configuration["metadata"]["name"]
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
    return configurations


class LeaderWorkerSetController:
    """The controller manager and its webhooks, for every namespace."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.configurations: list[dict[str, Any]] = []

    def start(self) -> None:
        built = cluster.build_lws()
        cluster.install_lws_crds()
        certs = self.directory / "lws-certs"
        pki.mutual_tls(certs, "lws-webhook", ("localhost", "127.0.0.1"))
        webhook_port, health_port = free_port(), free_port()
        config = self.directory / "lws-config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.lws.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
                    # Its metrics are served only to the API server's authenticated clients.
                    "metrics": {"bindAddress": "0"},
                }
            )
        )
        with (self.directory / "lws-controller.log").open("ab") as out:
            self.process = subprocess.Popen(
                [str(built / "bin" / "lws-controller"), f"--config={config}", "--zap-devel=false"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(cluster.kubeconfig_path())},
            )
        ca_bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
        self.configurations = webhook_configurations(
            built / "webhook", f"https://127.0.0.1:{webhook_port}", ca_bundle
        )
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(self.configurations))
        wait_for(
            "LeaderWorkerSet's controller and its webhooks to be ready",
            lambda: self._ready(f"http://127.0.0.1:{health_port}/readyz", webhook_port),
            timeout=60,
            context=lambda: (self.directory / "lws-controller.log").read_text()[-2000:],
        )

    def _ready(self, url: str, webhook_port: int) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"lws-controller exited with {self.process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status != 200:
                    return False
            # Its readyz is a ping, answered before the manager starts the webhook server;
            # a LeaderWorkerSet created in between is refused by the API server.
            with socket.create_connection(("127.0.0.1", webhook_port), timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        # Its pod webhooks fail closed: left behind, they would refuse the pods of any
        # LeaderWorkerSet created later.
        for configuration in self.configurations:
            cluster.kubectl(
                "delete",
                configuration["kind"].lower(),
                configuration["metadata"]["name"],
                "--ignore-not-found",
                check=False,
            )
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
