"""The README's quickstart ("Installing on a real cluster"), its commands run as written,
one by one with bash, on the local control plane.

What the local cluster cannot be is added around the commands, not into them: KUBECONFIG
points kubectl and helm at it, and the chart's two operator replicas (each in its own
network namespace) run the operator image `make images` built. HF_TOKEN is a dummy. The
model's pods cannot serve Llama here; the test checks that every command succeeds, that
the operator takes the model up (its Deployment and status appear) and that `kubectl get
specmodel` shows the columns the README names.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import cluster, images
from e2e.waiting import wait_for

README = cluster.REPO / "README.md"
RELEASE, OPERATOR_NAMESPACE, NAMESPACE, MODEL = "specfleet", "specfleet-system", "ml", "llama-8b"


def quickstart() -> list[str]:
    """The commands of the README's first shell block after its install heading."""
    text = README.read_text().split("## Installing on a real cluster", 1)[1]
    block = re.search(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    assert block, "README.md: no ```sh block under 'Installing on a real cluster'"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_quickstart_is_the_one_this_test_runs() -> None:
    commands = quickstart()
    assert commands[0].startswith("kubectl apply --server-side -f crds/")
    assert any(c.startswith(f"kubectl create namespace {NAMESPACE}") for c in commands)
    assert any("examples/llama-peagle.yaml" in c for c in commands)


@pytest.fixture
def environment(control_plane: None) -> Iterator[dict[str, str]]:
    for namespace in (OPERATOR_NAMESPACE, NAMESPACE):
        existing = cluster.kubectl("get", "namespace", namespace, check=False)
        assert existing.returncode != 0, f"namespace {namespace} exists: the test needs it fresh"
    images.build_all()
    helm = cluster.build_binaries() / "helm"
    kubectl_dir = Path(cluster.kubectl_binary()).parent
    yield {
        **os.environ,
        "PATH": f"{helm.parent}:{kubectl_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig_path()),
        "HF_TOKEN": "hf_dummy_token_for_the_quickstart_test",
    }
    subprocess.run(
        [str(helm), "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait"],
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig_path())},
        capture_output=True,
        check=False,
    )
    for namespace in (NAMESPACE, OPERATOR_NAMESPACE):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.cluster_alone
def test_the_readme_quickstart_runs_as_written(environment: dict[str, str]) -> None:
    outputs = []
    for command in quickstart():
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=cluster.REPO,
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
        outputs.append(result.stdout)
    header = outputs[-1].splitlines()[0].split()
    assert header[:9] == [
        "NAME",
        "K",
        "ACCEPT",
        "FLOOR",
        "ALEN",
        "PHASE",
        "READY",
        "REJECTED",
        "AGE",
    ]
    assert outputs[-1].splitlines()[1].split()[0] == MODEL
    secret = cluster.kubectl(
        "get", "secret", "hf-token", "-n", NAMESPACE, "-o", "jsonpath={.data.token}"
    )
    assert secret.stdout, "the Secret has no key `token`, which the example reads"
    # The operator (the chart's pod) takes the model up: its Deployment and its status.
    wait_for(
        "the model's Deployment",
        lambda: (
            cluster.kubectl("get", "deployment", MODEL, "-n", NAMESPACE, check=False).returncode
            == 0
        ),
        timeout=180,
    )
    phase = wait_for(
        "the model's status.phase",
        lambda: cluster.kubectl(
            "get", "specmodel", MODEL, "-n", NAMESPACE, "-o", "jsonpath={.status.phase}"
        ).stdout.strip(),
        timeout=120,
    )
    assert phase in {"Pending", "Progressing", "Degraded", "Ready"}
    floor = cluster.kubectl(
        "get",
        "specmodel",
        MODEL,
        "-n",
        NAMESPACE,
        "-o",
        "custom-columns=F:.spec.rollback.minAcceptance",
    ).stdout.split()[-1]
    assert floor == "0.75"
