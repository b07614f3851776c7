"""The operator's memory sampled from inside its process for the scale benchmark
(benchmarks/memory_trace/sitecustomize.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.memory_trace import sitecustomize as memory_trace


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and glibc")
def test_each_line_holds_the_resident_size_and_the_allocators_share(tmp_path: Path) -> None:
    trace = tmp_path / "memory.jsonl"
    memory_trace.sample(str(trace), seconds=0.01, lines=3)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(lines) == 3
    for line in lines:
        assert 0 < line["VmRSS"] <= line["VmHWM"], line
        assert line["malloc_in_use_mb"] <= line["malloc_arenas_mb"], line
        assert line["python_blocks"] > 1000, line
    assert [("gc_types" in line) for line in lines] == [False, False, True]
    assert dict(lines[2]["gc_types"])["dict"] > 0


def test_only_the_operator_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "orig_argv", ["python", ".venv/bin/specfleet", "operator", "-n", "x"])
    assert memory_trace.is_operator()
    monkeypatch.setattr(sys, "orig_argv", ["python", "-m", "e2e.node_agent", "--nodes=4"])
    assert not memory_trace.is_operator()
