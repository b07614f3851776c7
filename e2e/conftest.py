"""Fixtures for tests against the real local control plane (see e2e/cluster.py).

The session uses a running cluster, or starts one and stops it at the end (set
SPECFLEET_KEEP_CLUSTER=1 to keep it). Each test gets a fresh namespace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from xdist.remote import Producer
from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

from e2e import cluster, cluster_share, podnet, scheduling, stages
from e2e.lws import LeaderWorkerSetController
from e2e.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).is_relative_to(REPO / "e2e"):
            item.add_marker(pytest.mark.e2e)
    # In the vLLM unit (e2e/scheduling.py): vLLM 0.33's checks, then real vLLM without the
    # cluster, then on it, where the tests that need the cluster alone have had its first
    # minutes; those tests first among the other e2e files.
    engine_modules = {item.fspath for item in items if item.get_closest_marker("real_engine")}
    items.sort(
        key=lambda item: (
            item.nodeid.startswith(scheduling.REAL_ENGINE_E2E),
            item.get_closest_marker("cluster_alone") is None,
            item.fspath in engine_modules,
        )
    )


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LoadGroupScheduling | None:
    if config.getvalue("dist") != "loadgroup":
        return None
    return scheduling.OneClusterScheduling(config, log)


# `make test` (SPECFLEET_STAGES set): the stages' table, each worker's end and each file's
# time and CPU (measured in the workers by stages.CpuMeter), printed before pytest's closing
# line and written beside the stages' file.
_timeline = stages.Timeline()


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(stages.CpuMeter(), "specfleet-cpu-meter")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _timeline.report(report)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: WorkerController, error: object) -> None:
    _timeline.worker_down(str(node.gateway.id))


@pytest.hookimpl(trylast=True)  # after --durations: the table is next to the last line
def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    path = stages.stages_path()
    if path is None or hasattr(config, "workerinput"):
        return
    lines = _timeline.lines(stages.read_stages(path))
    path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    terminalreporter.write_sep("=", f"make test's stages ({path.with_suffix('.txt')})")
    for line in lines:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[None]:
    """The cluster, shared with the other pytest worker (e2e/cluster_share.py)."""
    try:
        started = cluster_share.join()
    except podnet.Unavailable as missing:
        pytest.skip(f"the local cluster cannot run here: {missing}")
    yield
    stop = started and not os.environ.get("SPECFLEET_KEEP_CLUSTER")
    cluster_share.leave(stop)
    if stop:
        left = podnet.ours()
        assert left == ([], []), f"namespaces and links left after cluster down: {left}"


@pytest.fixture(autouse=True)
def cluster_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each e2e test shares the cluster, or has it alone where marked cluster_alone; a
    test that runs real vLLM on it takes the engine's turn first (one vLLM at a time)."""
    engine = request.node.get_closest_marker("real_engine") is not None
    with (
        cluster_share.engine_turn() if engine else contextlib.nullcontext(),
        cluster_share.turn(alone=request.node.get_closest_marker("cluster_alone") is not None),
    ):
        yield


@pytest.fixture(scope="session")
def api_client(control_plane: None) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig_path()))


@pytest.fixture(scope="session")
def crds(control_plane: None) -> None:
    cluster.install_crds()


@pytest.fixture(scope="session")
def monitoring_crds(control_plane: None) -> None:
    """prometheus-operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule, ...)."""
    cluster.install_monitoring_crds()


def _fresh_namespace(
    api_client: client.ApiClient, request: pytest.FixtureRequest, prefix: str
) -> Iterator[str]:
    test = request.node.name[:36].lower().replace("_", "-")
    name = "".join(c for c in f"{prefix}{test}" if c.isalnum() or c == "-").strip("-")
    name = f"{name}-{uuid.uuid4().hex[:5]}"
    core = client.CoreV1Api(api_client)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


@pytest.fixture
def namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(api_client, request, "t-")


# Each worker's session operator watches only namespaces with its prefix, so neither an
# operator installed by the chart tests in other namespaces, nor the other worker's
# session operator, nor that of another pytest session sharing the cluster (a second
# checkout's) competes with it.
MODEL_NAMESPACE_PREFIX = (
    f"t-op-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}{secrets.token_hex(2)}-"
)


@pytest.fixture
def model_namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _fresh_namespace(api_client, request, MODEL_NAMESPACE_PREFIX)


@pytest.fixture
def ha_namespace(api_client: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace no session operator watches, for tests that run their own replicas."""
    yield from _fresh_namespace(api_client, request, "t-ha-")


@pytest.fixture(scope="module")
def lws_controller(
    control_plane: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LeaderWorkerSetController]:
    """LeaderWorkerSet's controller for the tests of one file (e2e/lws.py), in turn with
    the other files that run it."""
    with cluster_share.leader_worker_set_turn():
        controller = LeaderWorkerSetController(tmp_path_factory.mktemp("lws"))
        try:
            controller.start()
            yield controller
        finally:
            controller.stop()


@pytest.fixture(scope="session")
def operator(crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    folder = tmp_path_factory.mktemp("operator")
    log, key = folder / "operator.log", folder / "schedule-key"
    key.write_text(secrets.token_hex(32))  # models with speculation.switching Hot
    process = OperatorProcess(
        [f"{MODEL_NAMESPACE_PREFIX}*"], log, extra_args=("--schedule-key-file", str(key))
    )
    process.start()
    yield process
    process.stop()
