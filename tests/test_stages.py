"""`make test`'s stage plan: e2e/stage.sh times a stage without changing what it prints or
returns, pytest prints the stages' table before its closing line (which CI reads last),
and docs/development.md lists the stages the Makefile times."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from e2e import stages
from tests.conftest import REPO

STAGE_SH = REPO / "e2e" / "stage.sh"


def test_a_stage_keeps_its_output_and_exit_status_and_is_written_down(tmp_path: Path) -> None:
    table = tmp_path / "build" / "stages.tsv"
    env = {**os.environ, "SPECFLEET_STAGES": str(table)}
    done = subprocess.run(
        [str(STAGE_SH), "first", "bash", "-c", "echo the path; echo progress >&2; exit 3"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (3, "the path\n", "progress\n")
    subprocess.run([str(STAGE_SH), "second", "true"], env=env, check=True)
    read = stages.read_stages(table)
    assert [(s.name, s.status) for s in read] == [("first", 3), ("second", 0)]
    assert all(s.seconds >= 0 for s in read) and read[0].started <= read[1].started
    lines = stages.Timeline().lines(read)
    assert lines[1].startswith("first") and lines[1].endswith("exit status 3"), lines
    assert lines[2].split() == ["second", f"{read[1].seconds:.1f}"], lines


def test_each_file_shows_when_its_first_test_began() -> None:
    timeline = stages.Timeline(started=time.time() - 100)
    for nodeid, duration in [("tests/a.py::one", 30.0), ("tests/a.py::two", 20.0)]:
        timeline.report(cast(pytest.TestReport, SimpleNamespace(nodeid=nodeid, duration=duration)))
    lines = timeline.lines([])
    shown = next(line for line in lines if "tests/a.py" in line)
    match = re.fullmatch(r"\s*50\.0  tests/a\.py \(from (\d+) s\)", shown)
    assert match is not None, shown
    assert 65 <= float(match[1]) <= 75, shown  # 100 s ago, the first test's 30 s back from its end


def test_the_cores_busy_share_leaves_out_idle_and_iowait(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 50 0 0 0 7 0\ncpu0 1 2 3\n")
    start = stages.cpu_jiffies(stat)
    assert start == (150, 1000)
    stat.write_text("cpu  400 0 150 1200 250 0 0 0 7 0\n")
    end = stages.cpu_jiffies(stat)
    assert stages.busy_share(start, end) == 400 / 1000  # 400 busy of 1,000 ticks
    assert stages.busy_share(end, start) is None  # no time passed between them
    assert stages.cpu_jiffies(tmp_path / "absent") is None
    timeline = stages.Timeline(cpu_at_start=start)
    pytest_line = next(line for line in timeline.lines([]) if line.startswith("pytest"))
    assert re.search(r"to this table; \d+ cores \d+% busy$", pytest_line), pytest_line


def test_without_a_stages_file_a_stage_only_runs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPECFLEET_STAGES"}
    done = subprocess.run(
        [str(STAGE_SH), "alone", "pwd"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert (done.returncode, done.stdout) == (0, f"{tmp_path}\n")
    assert list(tmp_path.iterdir()) == []


def test_pytest_prints_the_stages_before_its_closing_line(tmp_path: Path) -> None:
    """What CI reads: the last line is still pytest's summary, the table just above it."""
    table = tmp_path / "stages.tsv"
    table.write_text("lint\t3.5\t0\t1700000000.0\nimages\t61.2\t0\t1700000004.0\n")
    env = {**os.environ, "SPECFLEET_STAGES": str(table)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "e2e", "-k", "no_such_test"],
        cwd=REPO, capture_output=True, text=True, env=env, check=False, timeout=300,
    )  # fmt: skip
    lines = done.stdout.rstrip("\n").splitlines()
    assert re.fullmatch(r"=+ \d+ deselected in [\d.]+s.* =+", lines[-1]), lines[-5:]
    header = next(i for i, line in enumerate(lines) if "make test's stages" in line)
    assert lines[header + 2].split() == ["lint", "3.5"], lines[header:]
    assert lines[header + 3].split() == ["images", "61.2"], lines[header:]
    assert lines[header + 4].startswith("pytest"), lines[header:]
    assert (tmp_path / "stages.txt").read_text().splitlines()[1].split() == ["lint", "3.5"]


def test_the_development_page_lists_every_stage_the_makefile_times() -> None:
    timed = set(re.findall(r"\$\(STAGE\) ([a-z0-9.-]+) ", (REPO / "Makefile").read_text()))
    page = (REPO / "docs" / "development.md").read_text()
    listed = set(re.findall(r"^\| `([a-z0-9.-]+)` \|", page, flags=re.MULTILINE))
    assert timed and timed == listed, (timed - listed, listed - timed)
