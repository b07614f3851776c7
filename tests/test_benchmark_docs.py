"""docs/benchmarks.md's operator-scale figures are the ones in docs/benchmarks-scale.json
(the runs `benchmarks/scale_report.py --docs` copied from build/bench), with the commit
they were measured on (issue 46)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks import scale_report

ROOT = Path(__file__).resolve().parent.parent


def test_the_scale_figures_in_the_docs_are_those_of_the_json() -> None:
    data = json.loads(scale_report.DOCS_JSON.read_text())
    block = scale_report.current_block(scale_report.DOCS.read_text())
    assert block == scale_report.docs_block(data), (
        "docs/benchmarks.md differs from docs/benchmarks-scale.json: "
        "run .venv/bin/python benchmarks/scale_report.py --docs"
    )
    for commit in scale_report.measured_on(data):
        assert f"commit {commit}" in block or commit in block


def test_the_json_names_the_commit_of_every_run() -> None:
    runs = json.loads(scale_report.DOCS_JSON.read_text())["runs"]
    assert runs and all(run.get("commit") for run in runs)


def test_a_run_that_changed_changes_the_table() -> None:
    """The docs are compared as text: one run's figure moved is a difference."""
    data = json.loads(scale_report.DOCS_JSON.read_text())
    block = scale_report.docs_block(data)
    data["runs"][0]["operator"]["seconds"] += 1.0
    assert scale_report.docs_block(data) != block


def test_the_machine_table_shows_each_process_of_both_phases() -> None:
    """What the cores did: a process seen in one phase only is a row, '-' where it did not
    run; one run's figure moved is a difference."""
    phase: dict[str, Any] = {
        "seconds": 30.0,
        "machine_cpu": {"busy_share": 0.8, "seconds": {"etcd": 5.0}},
    }
    run: dict[str, Any] = {"count": 10, "baseline": phase, "operator": copy.deepcopy(phase)}
    run["baseline"]["machine_cpu"]["seconds"]["kubectl (reaped)"] = 7.5
    run["operator"]["machine_cpu"]["seconds"]["operator"] = 15.25
    table = scale_report.machine_cpu_table({"runs": [run]})
    assert table is not None
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    assert rows["kubectl (reaped), CPU (s)"].endswith("| 7.5 | - |")
    assert rows["operator, CPU (s)"].endswith("| - | 15.2 |")
    assert rows["cores busy (%)"].endswith("| 80 | 80 |")
    run["operator"]["machine_cpu"]["seconds"]["etcd"] = 6.0
    assert scale_report.machine_cpu_table({"runs": [run]}) != table
    del run["baseline"]["machine_cpu"]
    assert scale_report.machine_cpu_table({"runs": [run]}) is None


def test_the_check_command_runs() -> None:
    """`scale_report.py --check` reads the committed docs and JSON; a mismatch would be
    reported on stderr and exit 1 (staleness is the command's to report, not CI's:
    another engineer's change to the request path must not fail their tests)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale_report.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert "differs from" not in result.stderr, result.stderr
