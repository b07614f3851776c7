"""Faults: the API server restarted, a pod serving garbage, timing out or serving a
hostile page, and the spec edited while a canary runs. The operator killed or frozen
mid-canary: e2e/test_leader_election.py."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from e2e import cluster
from e2e.api_faults import restart_api_server
from e2e.models import (
    apply,
    canary_running,
    canary_tokens,
    condition,
    get_model,
    history,
    sim_admin,
)
from e2e.operator_process import OperatorProcess
from e2e.story import FAILURE_LIMIT, INTERVAL_SECONDS, MODEL, story_model
from e2e.waiting import wait_for
from specfleet.operator.outcomes import ROLLBACK_ACTIONS


def _two_ready_stable_pods(api_client: client.ApiClient, namespace: str) -> list[tuple[str, str]]:
    """(name, IP) of the model's two stable pods, once both are Ready."""

    def ready() -> list[tuple[str, str]] | None:
        pods = (
            client.CoreV1Api(api_client)
            .list_namespaced_pod(namespace, label_selector="specfleet.io/track=stable")
            .items
        )
        found = [
            (p.metadata.name, p.status.pod_ip)
            for p in pods
            if p.status.pod_ip
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return found if len(found) == 2 else None

    return wait_for("two ready pods", ready, timeout=240)


def test_spec_edit_during_a_canary_drops_it_cleanly(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(story_model(), model_namespace)
    during = wait_for(
        "a canary", lambda: canary_running(api_client, model_namespace, MODEL), timeout=180
    )
    candidate = canary_tokens(during)
    assert candidate is not None
    ceiling = candidate - 1
    cluster.kubectl(
        "patch",
        "specmodel",
        MODEL,
        "-n",
        model_namespace,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"speculation": {"maxTokens": ceiling}}}),
    )

    def settled() -> dict[str, Any] | None:
        body = get_model(api_client, model_namespace, MODEL)
        status = body.get("status") or {}
        pending = canary_tokens(body)
        if status.get("observedGeneration") == 2 and (pending is None or pending <= ceiling):
            return body
        return None

    body = wait_for("the canary to be dropped", settled, timeout=60)
    assert body["status"]["speculation"]["tokens"] <= ceiling
    canary = client.AppsV1Api(api_client).read_namespaced_deployment(
        f"{MODEL}-canary", model_namespace
    )
    args = canary.spec.template.spec.containers[0].args
    assert (
        canary.spec.replicas == 0
        or int(args[args.index("--num-speculative-tokens") + 1]) <= ceiling
    )
    assert history(body)[: len(history(during))] == history(during)


def test_a_pod_serving_garbage_or_timing_out_causes_no_rollback(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    manifest = story_model()
    manifest["spec"]["replicas"] = 2
    manifest["spec"]["tuning"]["enabled"] = False
    manifest["spec"]["metrics"] = {"scrapeTimeout": "1s"}
    apply(manifest, model_namespace)

    (_, garbage_ip), (_, slow_ip) = _two_ready_stable_pods(api_client, model_namespace)
    sim_admin(garbage_ip, "/admin/garbage", {"enabled": True})
    sim_admin(slow_ip, "/admin/slow", {"seconds": 30})

    def measured_at() -> str | None:
        acceptance = (get_model(api_client, model_namespace, MODEL).get("status") or {}).get(
            "acceptance"
        )
        return (acceptance or {}).get("measuredAt")

    start = measured_at()

    # Windows with no good data at all, until the operator says so (MetricsAvailable False
    # after maxInconclusiveWindows in a row), and more of them than a rollback needs.
    def inconclusive(body: dict[str, Any]) -> int:
        return int(body["status"]["speculation"].get("inconclusiveWindows") or 0)

    before = inconclusive(get_model(api_client, model_namespace, MODEL))

    def no_data_said() -> dict[str, Any] | None:
        body = get_model(api_client, model_namespace, MODEL)
        available = condition(body, "MetricsAvailable")
        said = available is not None and available["status"] == "False"
        return body if said and inconclusive(body) > before + FAILURE_LIMIT else None

    body = wait_for("MetricsAvailable=False after windows of no good data", no_data_said, 120)
    assert measured_at() != start, "evaluations stopped"
    assert not ROLLBACK_ACTIONS & {h["action"] for h in history(body)}
    assert body["status"]["acceptance"]["conclusive"] is False
    assert body["status"]["speculation"]["sinceChange"]["failingWindows"] == 0
    available = condition(body, "MetricsAvailable")
    assert available is not None and available["status"] == "False"

    sim_admin(garbage_ip, "/admin/garbage", {"enabled": False})  # one pod recovers
    wait_for(
        "a conclusive window from the healthy pod",
        lambda: (get_model(api_client, model_namespace, MODEL)["status"]["acceptance"] or {}).get(
            "conclusive"
        ),
        timeout=60,
    )


@pytest.mark.cluster_alone
def test_operator_recovers_its_watches_after_an_api_server_restart(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    manifest = story_model()
    manifest["spec"]["tuning"]["enabled"] = False
    apply(manifest, model_namespace)
    wait_for(
        "Ready",
        lambda: (
            (condition(get_model(api_client, model_namespace, MODEL), "Ready") or {}).get("status")
            == "True"
        ),
        timeout=240,
    )

    restart_api_server()

    manifest["spec"]["replicas"] = 2
    apply(manifest, model_namespace)
    apps = client.AppsV1Api(api_client)
    wait_for(
        "the operator to roll out the edit made after the restart",
        lambda: apps.read_namespaced_deployment(MODEL, model_namespace).spec.replicas == 2,
        timeout=240,
    )


# One line of issue 13: a position no engine drafts. Read naively it made a million-entry
# per-position list, a status write the API server refused, and a frozen model.
HOSTILE_PAGE = (
    'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",engine="0",'
    'position="1000000"} 1\n'
)


def test_a_hostile_page_leaves_out_its_pod_while_the_healthy_pod_keeps_deciding(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    manifest = story_model()
    manifest["spec"]["replicas"] = 2
    manifest["spec"]["tuning"]["enabled"] = False
    apply(manifest, model_namespace)
    (bad, bad_ip), _ = _two_ready_stable_pods(api_client, model_namespace)
    sim_admin(bad_ip, "/admin/metrics", {"text": HOSTILE_PAGE})
    served = time.time()

    def status() -> dict[str, Any]:
        return dict(get_model(api_client, model_namespace, MODEL).get("status") or {})

    def measured_at(current: dict[str, Any]) -> float:
        stamp = str(current["acceptance"]["measuredAt"])
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    def conclusive_after(moment: float) -> dict[str, Any] | None:
        """Status once a conclusive window measured after `moment` is written."""
        current = status()
        window = current.get("acceptance") or {}
        if window.get("measuredAt") and window.get("conclusive"):
            return current if measured_at(current) > moment else None
        return None

    # The healthy pod keeps the model deciding, and status writes keep succeeding: a
    # window wholly after the page was served, then more.
    first = wait_for(
        "a conclusive window after the hostile page",
        lambda: conclusive_after(served + INTERVAL_SECONDS),
        timeout=90,
    )
    later = wait_for(
        "status writes to go on",
        lambda: conclusive_after(measured_at(first) + 3 * INTERVAL_SECONDS),
        timeout=60,
    )
    assert (
        later["speculation"]["sinceChange"]["windows"]
        >= first["speculation"]["sinceChange"]["windows"] + 2
    )
    window = later["acceptance"]
    assert len(window["perPosition"]) <= 6  # K at most maxTokens, never the page's position
    assert len(json.dumps(later)) < 20_000
    # The bad pod is named, with its reason, and only it.
    assert [(p["pod"], p["reason"]) for p in window["podsLeftOut"]] == [
        (bad, "ImpossibleCounters")
    ], window
    assert "1000000" in window["podsLeftOut"][0]["message"]
    body = get_model(api_client, model_namespace, MODEL)
    assert not ROLLBACK_ACTIONS & {h["action"] for h in history(body)}

    sim_admin(bad_ip, "/admin/metrics", {"text": None})  # the pod serves its counters again
    wait_for(
        "the pod to be read again",
        lambda: not (status().get("acceptance") or {}).get("podsLeftOut"),
        timeout=60,
    )
