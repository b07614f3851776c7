"""A config change on the real control plane (simulated engines): a new draft head runs on
the canary pod while the stable pods keep the running one; a head that turns out poor is
rejected (condition, Warning Event, the REJECTED column) and the stable pods never run it;
the next commit is promoted and the stable pods roll to it."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from e2e import cluster
from e2e.models import apply, condition, get_model, sim_admin, sim_model
from e2e.operator_process import OperatorProcess
from e2e.story import HIGH_ACCEPTANCE, STALE_ACCEPTANCE, sim_profile
from e2e.waiting import wait_for

NAME = "heads"
RUNNING_HEAD = "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"


def _model(head: str, **rollout: Any) -> dict[str, Any]:
    manifest = sim_model(
        NAME,
        draft={"model": head},
        tuning={"enabled": False, "interval": "5s", "minDraftTokens": 1000},
        rollout={"windows": 2, "timeout": "10m", **rollout},
    )
    manifest["spec"]["runtime"]["env"] += [
        {"name": "SPECFLEET_SIM_PROFILE", "value": json.dumps(sim_profile(HIGH_ACCEPTANCE))},
    ]
    return manifest


def _draft(api_client: client.ApiClient, namespace: str, deployment: str) -> str:
    found = client.AppsV1Api(api_client).read_namespaced_deployment(deployment, namespace)
    args: list[str] = found.spec.template.spec.containers[0].args
    return args[args.index("--draft-model") + 1]


def _config(api_client: client.ApiClient, namespace: str) -> dict[str, Any]:
    return dict((get_model(api_client, namespace, NAME).get("status") or {}).get("config") or {})


def test_a_poor_head_is_rejected_and_the_next_one_promoted(
    operator: OperatorProcess, api_client: client.ApiClient, model_namespace: str
) -> None:
    apply(_model(RUNNING_HEAD), model_namespace)
    wait_for(
        "the running config in status",
        lambda: _config(api_client, model_namespace).get("running"),
        timeout=240,
    )

    apply(_model("team/poor-head"), model_namespace)
    core = client.CoreV1Api(api_client)

    def canary_pod() -> Any:
        pods = core.list_namespaced_pod(
            model_namespace, label_selector=f"specfleet.io/model={NAME},specfleet.io/track=canary"
        ).items
        ready = [
            p
            for p in pods
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return ready[0] if ready else None

    pod = wait_for("the canary pod of the new head", canary_pod, timeout=240)
    assert _draft(api_client, model_namespace, f"{NAME}-canary") == "team/poor-head"
    assert _draft(api_client, model_namespace, NAME) == RUNNING_HEAD
    # The new head turns out poor: its engine accepts like a stale draft.
    sim_admin(pod.status.pod_ip, "/admin/profile", {"acceptance": STALE_ACCEPTANCE})

    def rejected() -> dict[str, Any] | None:
        found = condition(get_model(api_client, model_namespace, NAME), "ConfigRejected")
        return found if found and found["status"] == "True" else None

    found = wait_for("ConfigRejected=True", rejected, timeout=180)
    config = _config(api_client, model_namespace)
    assert config["rejected"]["hash"] in found["message"]
    assert config["running"]["draftModel"] == RUNNING_HEAD
    assert _draft(api_client, model_namespace, NAME) == RUNNING_HEAD
    table = cluster.kubectl("get", "specmodel", NAME, "-n", model_namespace).stdout
    header, row = table.strip().splitlines()
    assert row.split()[header.split().index("REJECTED")] == config["rejected"]["hash"]

    def reject_events() -> list[Any]:
        return list(
            core.list_namespaced_event(
                model_namespace, field_selector=f"involvedObject.name={NAME},reason=RejectConfig"
            ).items
        )

    # The Event is posted after the status write that carries the condition.
    events = wait_for("the RejectConfig Event", reject_events, timeout=30)
    assert [e.type for e in events] == ["Warning"]

    # The next commit, as fast as the running head and allowed to be 10% slower: promoted.
    apply(_model("team/retrained-head", minGain=-0.1), model_namespace)

    def promoted() -> dict[str, Any] | None:
        config = _config(api_client, model_namespace)
        return config if config["running"]["draftModel"] == "team/retrained-head" else None

    wait_for("the retrained head promoted", promoted, timeout=240)
    # Status says so first; the stable Deployment follows in the same reconcile.
    wait_for(
        "the stable Deployment on the retrained head",
        lambda: _draft(api_client, model_namespace, NAME) == "team/retrained-head",
        timeout=30,
    )
    cleared = condition(get_model(api_client, model_namespace, NAME), "ConfigRejected")
    assert cleared is not None and cleared["status"] == "False"
