"""The product's story on the local control plane, as a user meets it.

`helm install` the chart (the operator runs as the chart's pod, from the operator image
built here, under its own ServiceAccount) -> `kubectl apply` a P-EAGLE SpeculativeModel
on the simulated engine -> the tuner raises K through a canary -> acceptance drifts
below the floor -> the operator rolls back -> uninstall leaves nothing behind. The
end-to-end test asserts on it; `make demo` narrates it.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster, images
from e2e.models import apply, canary_tokens, get_model, sim_admin, sim_model, speculation_off
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, ActionKind
from specfleet.operator.status import pod_ready

MODEL = "llama"
RELEASE = "specfleet"
INTERVAL_SECONDS = 5
FAILURE_LIMIT = 2
# Code-like traffic: the draft is accepted often even at long K.
HIGH_ACCEPTANCE = [0.96, 0.94, 0.92, 0.90, 0.88, 0.86, 0.84, 0.82]
# Traffic the draft fits less well: block acceptance (first position) under the 0.75
# floor, but deep drafts still pay, so the fastest K stays and the alert fires.
BELOW_FLOOR_ACCEPTANCE = [0.6, 0.85, 0.85, 0.85]
# The chart's default metrics.port: each pod has its own network, so no port is taken.
OPERATOR_METRICS_PORT = 8080
# A stale draft: speculation no longer pays, so plain decoding comes.
STALE_ACCEPTANCE = [0.05, 0.02]


def sim_profile(acceptance: list[float]) -> dict[str, Any]:
    # A light load (a batch of about 2 on the default step cost) where longer drafts pay;
    # at a batch of 32 the verification cost eats the gain and the tuner rightly keeps K.
    return {"acceptance": acceptance, "noise": 0.01, "load": {"requests_per_second": 3}}


def story_model(profile_file: Path | None = None) -> dict[str, Any]:
    """The story's model. With `profile_file` the sims read their profile from that file
    (the node agent's pods see this machine's files), so a drift written there also
    reaches pods started after it; otherwise the profile is inline."""
    profile = str(profile_file) if profile_file else json.dumps(sim_profile(HIGH_ACCEPTANCE))
    manifest = sim_model(
        MODEL,
        replicas=1,
        speculation={"tokens": 2, "minTokens": 1, "maxTokens": 6},
        tuning={
            "interval": f"{INTERVAL_SECONDS}s",
            "minDraftTokens": 1000,
            "cooldown": "10s",
            "canaryWindows": 2,
            "minImprovement": 0.03,
        },
        # Block acceptance, the default, stated: the example it starts from floors the
        # draft acceptance rate.
        rollback={
            "minAcceptance": 0.75,
            "metric": "FirstPositionAcceptance",
            "failureLimit": FAILURE_LIMIT,
            "reprobeAfter": "10m",
        },
    )
    manifest["spec"]["runtime"]["env"] += [
        {"name": "SPECFLEET_SIM_PROFILE", "value": profile},
        {"name": "SPECFLEET_SIM_SEED", "value": "7"},
    ]
    return manifest


@dataclass
class Frame:
    """One look at the model, for the live view and the plot."""

    seconds: float
    tokens: int | None
    candidate: int | None
    acceptance: float | None  # the draft acceptance rate
    mean_length: float | None
    phase: str
    last_decision: str
    judged: float | None = None  # the figure the floor judges: kubectl's ACCEPT


@dataclass
class Story:
    api_client: client.ApiClient
    namespace: str
    profile_file: Path | None  # the sims' profile; None for real vLLM (e2e/demo_vllm.py)
    show: Callable[[Frame], None] = lambda frame: None
    on_tick: Callable[[], None] = lambda: None
    frames: list[Frame] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    drift_at: float | None = None  # wall-clock time, to compare with status.history
    drift_seconds: float | None = None  # since the story started, for the plot
    rollback_at: float | None = None
    interval_seconds: float = INTERVAL_SECONDS

    # ----------------------------------------------------------------- steps

    def install_chart(self, values: Sequence[str] = ()) -> None:
        """The chart as a user installs it (see `install_chart`), one replica, with
        `values` on top: the story reads that operator's metrics. The chart's two
        replicas failing over: e2e/test_leader_election.py."""
        install_chart(self.namespace, ["replicas=1", *values])

    def uninstall(self) -> list[str]:
        """Delete the model and the release; return whatever is left behind."""
        cluster.kubectl(
            "delete", "specmodel", MODEL, "-n", self.namespace, "--wait=true", check=False
        )
        helm = str(cluster.build_binaries() / "helm")
        _run(
            helm,
            "uninstall",
            RELEASE,
            "--namespace",
            self.namespace,
            "--wait",
            "--kubeconfig",
            str(cluster.kubeconfig_path()),
        )
        deadline = time.monotonic() + 120
        left: list[str] = []
        while time.monotonic() < deadline:
            left = cluster.kubectl(
                "get",
                "specmodel,deploy,rs,svc,pods,sa,role,rolebinding,configmap",
                "-n",
                self.namespace,
                "-o",
                "name",
            ).stdout.split()
            left = [
                n for n in left if n not in ("serviceaccount/default", "configmap/kube-root-ca.crt")
            ]
            if not left:
                break
            time.sleep(1)
        return left

    def apply_model(self) -> None:
        assert self.profile_file is not None
        self.profile_file.write_text(yaml.safe_dump(sim_profile(HIGH_ACCEPTANCE)))
        apply(story_model(self.profile_file), self.namespace)

    def model(self) -> dict[str, Any]:
        return get_model(self.api_client, self.namespace, MODEL)

    def pods(self, **labels: str) -> list[dict[str, Any]]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        items = client.CoreV1Api(self.api_client).list_namespaced_pod(
            self.namespace, label_selector=selector
        )
        pods = [self.api_client.sanitize_for_serialization(p) for p in items.items]
        return [{**p, "port": 8000} for p in pods]

    def model_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods(**{"specfleet.io/model": MODEL}) if p["status"].get("podIP")]

    def operator_address(self) -> str | None:
        pods = self.pods(
            **{"app.kubernetes.io/instance": RELEASE, "app.kubernetes.io/component": "operator"}
        )
        ips = [p["status"].get("podIP") for p in pods if p["status"].get("podIP")]
        return f"{ips[0]}:{OPERATOR_METRICS_PORT}" if ips else None

    def operator_metrics(self) -> str:
        address = self.operator_address()
        if address is None:
            raise RuntimeError("no operator pod")
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
            return str(reply.read().decode())

    def watch(
        self, until: Callable[[dict[str, Any]], bool], what: str, timeout: float
    ) -> dict[str, Any]:
        """Record frames every second until `until(model)` holds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = self.model()
            self.record(body)
            self.on_tick()
            if until(body):
                return body
            time.sleep(1)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")

    def linger(self, seconds: float) -> None:
        """Keep recording frames for a while, expecting nothing in particular."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.record(self.model())
            self.on_tick()
            time.sleep(1)

    def record(self, body: dict[str, Any]) -> None:
        status = body.get("status") or {}
        speculation = status.get("speculation") or {}
        acceptance = status.get("acceptance") or {}
        history = status.get("history") or []
        last = history[-1] if history else None
        frame = Frame(
            seconds=time.monotonic() - self.started,
            tokens=0 if speculation_off(body) else speculation.get("tokens"),
            candidate=canary_tokens(body),
            acceptance=acceptance.get("rate"),
            judged=acceptance.get("judged"),
            mean_length=acceptance.get("meanLength"),
            phase=str(status.get("phase", "")),
            last_decision=f"{last['action']} {last.get('fromTokens')}->{last.get('toTokens')}"
            if last
            else "",
        )
        self.frames.append(frame)
        self.show(frame)

    def wait_until_serving(self, timeout: float = 180) -> dict[str, Any]:
        return self.watch(
            lambda b: (b.get("status") or {}).get("phase") == "Ready", "Ready", timeout
        )

    def wait_for_promotion(self, timeout: float = 300) -> dict[str, Any]:
        def promoted(body: dict[str, Any]) -> bool:
            history = (body.get("status") or {}).get("history") or []
            return any(h["action"] == ActionKind.PROMOTE and h["toTokens"] > 2 for h in history)

        return self.watch(promoted, "a canary to be promoted above K=2", timeout)

    def serving_pods(self) -> list[dict[str, Any]]:
        """Ready pods that are not on their way out."""
        return [
            p
            for p in self.model_pods()
            if not p["metadata"].get("deletionTimestamp") and pod_ready(p)
        ]

    def drift(self, acceptance: list[float]) -> None:
        """The traffic changes: running sims switch now, new ones start that way."""
        assert self.profile_file is not None
        self.profile_file.write_text(yaml.safe_dump(sim_profile(acceptance)))
        for pod in self.serving_pods():
            sim_admin(pod["status"]["podIP"], "/admin/profile", {"acceptance": acceptance})
        self.mark_drift()

    def mark_drift(self) -> None:
        """The traffic changed now: rollback is measured from here."""
        self.drift_at = time.time()
        self.drift_seconds = time.monotonic() - self.started

    def wait_for_rollback(
        self, timeout: float = 120, actions: frozenset[str] = ROLLBACK_ACTIONS
    ) -> dict[str, Any]:
        """The model once it decided one of `actions` after the last drift."""

        def rolled_back(body: dict[str, Any]) -> bool:
            return self.rollback_decision(body, actions) is not None

        body = self.watch(rolled_back, f"one of {sorted(actions)} after the drift", timeout)
        decision = self.rollback_decision(body, actions)
        assert decision is not None
        self.rollback_at = _epoch(decision["time"])
        return body

    def rollback_decision(
        self, body: dict[str, Any], actions: frozenset[str] = ROLLBACK_ACTIONS
    ) -> dict[str, Any] | None:
        assert self.drift_at is not None
        for entry in (body.get("status") or {}).get("history") or []:
            if entry["action"] in actions and _epoch(entry["time"]) >= self.drift_at:
                return dict(entry)
        return None

    def windows_to_rollback(self) -> int:
        """Evaluation windows from the drift to the rollback decision (rounded up)."""
        assert self.drift_at is not None and self.rollback_at is not None
        return math.ceil((self.rollback_at - self.drift_at) / self.interval_seconds)

    def events(self) -> list[str]:
        items = (
            client.CoreV1Api(self.api_client)
            .list_namespaced_event(
                self.namespace,
                field_selector=f"involvedObject.name={MODEL},involvedObject.kind=SpeculativeModel",
            )
            .items
        )
        return [e.reason for e in items]


def install_chart(namespace: str, values: Sequence[str] = ()) -> None:
    """`helm install` the chart into `namespace`, watching it, with `values` (`--set`) on
    top; its operator pods run the operator image built here (the node agent runs it with
    runc, in the pod's own network), so the Deployment the chart renders is what runs."""
    helm = str(cluster.build_binaries() / "helm")
    images.build_all()
    cluster.install_crds()
    result = _run(
        helm,
        "install",
        RELEASE,
        str(cluster.REPO / "charts" / "specfleet"),
        "--namespace",
        namespace,
        "--kubeconfig",
        str(cluster.kubeconfig_path()),
        "--set",
        f"watch.namespaces[0]={namespace}",
        "--set",
        "image.pullPolicy=Never",
        "--set-json",
        'extraArgs=["--period", "1"]',
        *(argument for value in values for argument in ("--set", value)),
        "--wait",
        "--timeout",
        "3m",
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm install failed: {result.stderr}")


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)
