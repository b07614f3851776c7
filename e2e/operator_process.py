"""Run `specfleet operator` as a local process against the test control plane."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from e2e import cluster
from e2e.real_engine import free_port

LEASE = "specfleet-operator"


class OperatorProcess:
    """One operator process; `kill` and `start` again to test resuming from status."""

    def __init__(
        self,
        namespaces: list[str],
        log_file: Path,
        period: float = 1.0,
        lease: tuple[str, str] | None = None,
        identity: str | None = None,
        extra_args: tuple[str, ...] = (),
        kubeconfig: Path | None = None,
    ) -> None:
        """`lease`: (namespace, name) of the leader Lease to stand for; `identity`: the
        replica's name (as the chart's POD_ID), in the Lease and in its user agent;
        `kubeconfig`: whom it talks to, and as whom (default: the admin, directly)."""
        self.namespaces = namespaces
        self.log_file = log_file
        self.period = period
        self.lease = lease
        self.identity = identity
        self.extra_args = extra_args
        self.kubeconfig = kubeconfig or cluster.kubeconfig_path()
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [
            str(Path(sys.executable).parent / "specfleet"),
            "operator",
            f"--metrics-port={self.metrics_port}",
            f"--health-port={self.health_port}",
            f"--period={self.period}",
        ]
        for namespace in self.namespaces:
            argv.append(f"--namespace={namespace}")
        if self.lease is not None:
            argv += ["--leader-elect", f"--lease-namespace={self.lease[0]}"]
            argv.append(f"--lease-name={self.lease[1]}")
        argv += self.extra_args
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        if self.identity is not None:
            env["POD_ID"] = self.identity
        with self.log_file.open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"operator exited: {self.log_file.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/healthz", timeout=1
                ):
                    return
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"operator not healthy; see {self.log_file}")

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a node failure or OOM kill would leave things."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            return str(reply.read().decode())

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` of the log, for a failure message."""
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def leading(self) -> bool:
        return "specfleet_leader 1.0" in self.metrics()


def replica(
    namespace: str, logs: Path, name: str, *extra_args: str, kubeconfig: Path | None = None
) -> OperatorProcess:
    """One of several replicas watching `namespace`, behind a Lease there."""
    return OperatorProcess(
        [namespace],
        logs / f"{name}.log",
        lease=(namespace, LEASE),
        identity=name,
        extra_args=extra_args,
        kubeconfig=kubeconfig,
    )
