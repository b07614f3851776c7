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
