"""Fixtures for tests against the real local control plane (see e2e/cluster.py).

The session uses a running cluster, or starts one and stops it at the end (set
SPECFLEET_KEEP_CLUSTER=1 to keep it). Each test gets a fresh namespace.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from e2e import cluster

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(REPO / "e2e"):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[None]:
    started = False
    if not cluster.is_up():
        cluster.up()
        started = True
    yield
    if started and not os.environ.get("SPECFLEET_KEEP_CLUSTER"):
        cluster.down()


@pytest.fixture(scope="session")
def api_client(control_plane: None) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig_path()))


@pytest.fixture(scope="session")
def crds(control_plane: None) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/speculativemodels.specfleet.io",
    )


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
