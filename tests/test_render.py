"""The renderer: golden files per method, and the properties every child must have."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel
from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.vllm_args import vllm_argv
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "render"
UPDATE = os.environ.get("SPECFLEET_UPDATE_GOLDEN") == "1"
EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def model_from(manifest: dict[str, Any], **status: Any) -> SpeculativeModel:
    body = {
        **manifest,
        "metadata": {
            **manifest["metadata"],
            "namespace": "serving",
            "uid": "uid-1",
            "generation": 1,
        },
    }
    if status:
        body["status"] = status
    return SpeculativeModel.model_validate(body)


def example(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_children_match_golden_files(path: Path) -> None:
    rendered = yaml.safe_dump_all(render.manifests(model_from(example(path))), sort_keys=False)
    golden = GOLDEN / f"{path.stem}.yaml"
    if UPDATE:
        golden.write_text(rendered)
    assert golden.exists(), f"missing {golden}; run with SPECFLEET_UPDATE_GOLDEN=1"
    assert rendered == golden.read_text(), f"{golden} differs; review and update"


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    return dict(manifest["spec"]["template"]["spec"]["containers"][0])


def _arg(container: dict[str, Any], flag: str) -> str | None:
    args = container["args"]
    return args[args.index(flag) + 1] if flag in args else None


def _vllm_listener(host: str | None) -> socket.socket:
    """The socket vLLM 0.33's API server listens on for `--host` (None: not given), as
    vllm/entrypoints/launchers/launcher.py makes it (setup_server, create_server_socket):
    one socket, IPv6 if the host is an IPv6 address, bound to (host or "", port)."""
    address = host or ""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, 0))
    listener.listen()
    return listener


@pytest.mark.parametrize(
    ("pod_ip", "loopback"), [("198.51.100.7", "127.0.0.1"), ("2001:db8::7", "::1")]
)
def test_vllm_listens_on_the_pods_loopback_for_port_forward(
    peagle_manifest: dict[str, Any], pod_ip: str, loopback: str
) -> None:
    """`kubectl port-forward` connects to localhost in the pod's network namespace (the
    container runtime tries 127.0.0.1, then ::1): vLLM must listen there, not only on the
    pod's IP. The rendered container, its $(VAR)s expanded from POD_IP as the kubelet does,
    gives vLLM a --host (or none) whose listener takes the loopback of the pod's family;
    with `--host $(POD_IP)`, as rendered before, the bind alone fails here (the pod's IP
    is no address of this machine)."""
    stable, *_ = render.manifests(model_from(peagle_manifest))
    container = _container(stable)
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        container["env"]
    )
    env = {"POD_IP": pod_ip}
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), a) for a in container["args"]]
    argv = vllm_argv(parse_serve_args(args, env)[0])
    host = argv[argv.index("--host") + 1] if "--host" in argv else None
    with _vllm_listener(host) as listener:
        port = listener.getsockname()[1]
        with socket.create_connection((loopback, port), timeout=5):
            pass


def test_peagle_renders_runtime_contract(peagle_manifest: dict[str, Any]) -> None:
    stable, canary, service, budget = render.manifests(model_from(peagle_manifest))
    container = _container(stable)
    assert container["command"] == ["specfleet-runtime", "serve"]
    assert _arg(container, "--method") == "peagle"
    # speculation.switching Auto (the default) restarts a parallel drafter for each K.
    assert _arg(container, "--num-speculative-tokens") == "3"
    assert "--hot-schedule" not in container["args"]
    assert _arg(container, "--host") is None  # every address of the pod: see below
    assert container["args"][-3:] == ["--", "--max-model-len", "8192"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    for child in (stable, canary, service, budget):
        assert child["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
        assert child["metadata"]["ownerReferences"][0]["controller"] is True
    assert stable["spec"]["replicas"] == 2 and canary["spec"]["replicas"] == 0
    assert service["spec"]["selector"] == {render.MODEL_LABEL: "llama-8b"}
    # A drain evicts one stable pod at a time, and any pod not Ready.
    assert budget["kind"] == "PodDisruptionBudget" and budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["name"] == "llama-8b"
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": render.pod_selector(model_from(peagle_manifest), "stable")},
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


def test_canary_runs_the_candidate_on_one_pod(peagle_manifest: dict[str, Any]) -> None:
    trial = {"tokens": 5, "startedAt": "2026-01-01T00:00:00Z", "stableReplicas": 2}
    peagle_manifest["spec"]["speculation"]["switching"] = "Restart"  # a canary restarts
    model = model_from(peagle_manifest, speculation={"tokens": 3, "trial": trial})
    stable, canary, *_ = render.manifests(model)
    assert canary["metadata"]["name"] == "llama-8b-canary"
    assert canary["spec"]["replicas"] == 1
    assert _arg(_container(canary), "--num-speculative-tokens") == "5"
    assert _arg(_container(stable), "--num-speculative-tokens") == "3"
    assert canary["spec"]["selector"]["matchLabels"][render.TRACK_LABEL] == "canary"


def test_a_canary_of_plain_decoding_runs_without_a_draft(peagle_manifest: dict[str, Any]) -> None:
    trial = {"tokens": 0, "startedAt": "2026-01-01T00:00:00Z", "stableReplicas": 2}
    peagle_manifest["spec"]["speculation"]["switching"] = "Restart"  # a canary restarts
    model = model_from(peagle_manifest, speculation={"tokens": 3, "trial": trial})
    stable, canary, *_ = render.manifests(model)
    assert canary["spec"]["replicas"] == 1
    container = _container(canary)
    assert _arg(container, "--method") == "none"
    assert "--num-speculative-tokens" not in container["args"]
    assert "--draft-model" not in container["args"]
    assert canary["spec"]["template"]["metadata"]["annotations"][render.TOKENS_ANNOTATION] == "0"
    assert _arg(_container(stable), "--num-speculative-tokens") == "3"
    assert _arg(_container(stable), "--method") == "peagle"


def test_disabled_speculation_runs_plain_decoding(peagle_manifest: dict[str, Any]) -> None:
    off = {"reason": "NoKClearsFloor", "message": "stale", "reprobeAt": "2026-01-01T00:00:00Z"}
    model = model_from(peagle_manifest, speculation={"tokens": 3, "off": off})
    container = _container(render.manifests(model)[0])
    assert _arg(container, "--method") == "none"
    assert "--num-speculative-tokens" not in container["args"]
    assert "--draft-model" not in container["args"]


def test_ngram_renders_prompt_lookup() -> None:
    container = _container(
        render.manifests(model_from(example(REPO / "examples/qwen-ngram.yaml")))[0]
    )
    assert _arg(container, "--prompt-lookup-min") == "2"
    assert _arg(container, "--prompt-lookup-max") == "5"
    assert "--draft-model" not in container["args"]


@given(k1=st.integers(1, 8), k2=st.integers(1, 8), switching=st.sampled_from(["Auto", "Hot"]))
def test_config_hash_changes_exactly_when_k_changes(k1: int, k2: int, switching: str) -> None:
    manifest = example(REPO / "examples/llama-peagle.yaml")
    manifest["spec"]["speculation"]["switching"] = switching
    hashes = [
        render.manifests(model_from(manifest, speculation={"tokens": k}))[0]["spec"]["template"][
            "metadata"
        ]["annotations"][render.CONFIG_HASH_ANNOTATION]
        for k in (k1, k2)
    ]
    # Hot pods take a new K with no new template; Auto restarts P-EAGLE's.
    assert (hashes[0] == hashes[1]) == (k1 == k2 or switching == "Hot")


def test_rendering_is_deterministic(peagle_manifest: dict[str, Any]) -> None:
    assert render.manifests(model_from(peagle_manifest)) == render.manifests(
        model_from(peagle_manifest)
    )


def test_render_cli_prints_children() -> None:

    from specfleet.operator.cli import app

    result = CliRunner().invoke(app, ["render", str(REPO / "examples/llama-peagle.yaml")])
    assert result.exit_code == 0, result.output
    kinds = [d["kind"] for d in yaml.safe_load_all(result.output)]
    assert kinds == ["Deployment", "Deployment", "Service", "PodDisruptionBudget"]
