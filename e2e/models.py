"""SpeculativeModel manifests for tests on the cluster: the examples, run on the sim."""

from __future__ import annotations

import copy
import json
import urllib.request
from typing import Any

import yaml
from kubernetes import client

from e2e import cluster
from specfleet.operator.api import GROUP, PLURAL, VERSION

EXAMPLE = cluster.REPO / "examples" / "llama-peagle.yaml"


def sim_model(name: str = "llama", replicas: int = 1, **spec: Any) -> dict[str, Any]:
    """The P-EAGLE example on the simulated engine (`SPECFLEET_ENGINE=sim`), no hub token,
    with `spec` keys merged over it (one level deep)."""
    manifest: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    manifest["metadata"] = {"name": name}
    body = manifest["spec"]
    body["replicas"] = replicas
    body["runtime"] = {
        "gpus": 1,
        "env": [{"name": "SPECFLEET_ENGINE", "value": "sim"}],
    }
    # Restart: these tests follow canaries and rollouts; a test of hot K changes asks
    # for switching Auto (the default) or Hot.
    body["speculation"] = {**body.get("speculation", {}), "switching": "Restart"}
    for field, value in spec.items():
        if isinstance(value, dict) and isinstance(body.get(field), dict):
            body[field] = {**body[field], **copy.deepcopy(value)}
        else:
            body[field] = copy.deepcopy(value)
    return manifest


def sim_admin(pod_ip: str, path: str, payload: Any) -> None:
    """POST to a sim pod's admin endpoint (/admin/profile, /admin/garbage,
    /admin/metrics, /admin/slow)."""
    request = urllib.request.Request(
        f"http://{pod_ip}:8000{path}",
        data=json.dumps(payload).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5):
        pass


def schedule_generation(pod_ip: str) -> int | None:
    """The hot schedule generation a sim pod reports on its /metrics page (None: none, or
    the pod does not answer yet)."""
    try:
        with urllib.request.urlopen(f"http://{pod_ip}:8000/metrics", timeout=5) as response:
            page = response.read().decode()
    except OSError:
        return None
    for line in page.splitlines():
        if line.startswith("specfleet:schedule_generation "):
            return int(float(line.split()[1]))
    return None


def apply(manifest: dict[str, Any], namespace: str, *extra: str) -> str:
    result = cluster.kubectl(
        "apply", "-n", namespace, *extra, "-f", "-", input=yaml.safe_dump(manifest)
    )
    return result.stdout


def get_model(api_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api_client)
    return dict(custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name))


def condition(body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return None


def history(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list((body.get("status") or {}).get("history") or [])


def canary_trial(body: dict[str, Any]) -> dict[str, Any] | None:
    """The trial of a candidate K on a canary pod (status.speculation.trial), if one runs."""
    speculation = (body.get("status") or {}).get("speculation") or {}
    trial = speculation.get("trial")
    return trial if trial and not trial.get("inPlace") else None


def canary_tokens(body: dict[str, Any]) -> int | None:
    """K on the canary pod: a K trial's candidate, or a config trial's K (None: no canary)."""
    trial = canary_trial(body)
    if trial is not None:
        return int(trial["tokens"])
    config = ((body.get("status") or {}).get("config") or {}).get("trial")
    return int(config["tokens"]) if config and not config.get("inPlace") else None


def speculation_off(body: dict[str, Any]) -> bool:
    """Speculation switched off (status.speculation.off): the stable pods decode plainly."""
    speculation = (body.get("status") or {}).get("speculation") or {}
    return speculation.get("off") is not None


def canary_running(
    api_client: client.ApiClient, namespace: str, name: str
) -> dict[str, Any] | None:
    """The model while a canary runs, else None."""
    body = get_model(api_client, namespace, name)
    return body if canary_trial(body) else None
