"""The engine's turn: one vLLM at a time on the 2 cores (e2e/cluster_share.py)."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest

from e2e import cluster_share
from tests.conftest import REPO


def test_every_file_that_starts_vllm_exists() -> None:
    """A path that names no file would take no turn, and its vLLM would run beside another."""
    missing = [path for path in cluster_share.VLLM_TESTS if not (REPO / path).is_file()]
    assert missing == []


def test_the_engines_turn_is_held_by_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_share, "SHARE", tmp_path)
    results: list[str] = []

    def try_to_take() -> None:
        with (tmp_path / "engine.lock").open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                results.append("held")
            else:
                results.append("free")
                fcntl.flock(handle, fcntl.LOCK_UN)

    with cluster_share.engine_turn():
        other = threading.Thread(target=try_to_take)
        other.start()
        other.join()
    try_to_take()
    assert results == ["held", "free"]


def test_the_vllm_unit_goes_first_then_the_e2e_files_as_collected() -> None:
    """The vLLM unit first: behind the e2e files it started 566 s into a run, and its
    real vLLM on the cluster set the run's end."""
    queued = ["tests/test_b.py", "e2e/test_shared.py", cluster_share.VLLM_UNIT, "e2e/test_alone.py"]
    first_seen = {"e2e/test_alone.py": 0, "tests/test_b.py": 1, "e2e/test_shared.py": 2}
    first_seen[cluster_share.VLLM_UNIT] = 3
    assert cluster_share.work_order(queued, first_seen) == [
        cluster_share.VLLM_UNIT,
        "e2e/test_alone.py",
        "e2e/test_shared.py",
        "tests/test_b.py",
    ]
    # Once the vLLM unit is taken, the e2e files still lead.
    assert cluster_share.work_order(["tests/test_b.py", "e2e/test_shared.py"], first_seen) == [
        "e2e/test_shared.py",
        "tests/test_b.py",
    ]
