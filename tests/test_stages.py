"""`make test`'s stage plan: e2e/stage.sh times a stage without changing what it prints or
returns, pytest prints the stages' table before its closing line (which CI reads last),
and docs/development.md lists the stages the Makefile times."""

from __future__ import annotations

import json
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


def _report(
    nodeid: str, duration: float, cpu: float | None = None, worker: str | None = None
) -> pytest.TestReport:
    """A test report as the controller gets it, with stages.CpuMeter's figure if any."""
    return cast(
        pytest.TestReport,
        SimpleNamespace(
            nodeid=nodeid,
            duration=duration,
            user_properties=[] if cpu is None else [(stages.CPU_PROPERTY, cpu)],
            node=None if worker is None else SimpleNamespace(gateway=SimpleNamespace(id=worker)),
        ),
    )


def test_each_file_shows_when_its_first_test_began() -> None:
    timeline = stages.Timeline(started=time.time() - 100)
    for nodeid, duration in [("tests/a.py::one", 30.0), ("tests/a.py::two", 20.0)]:
        timeline.report(_report(nodeid, duration))
    lines = timeline.lines([])
    shown = next(line for line in lines if "tests/a.py" in line)
    match = re.fullmatch(r"\s*50\.0 s  cpu\s+0\.0 s  tests/a\.py \(from (\d+) s\)", shown)
    assert match is not None, shown
    assert 65 <= float(match[1]) <= 75, shown  # 100 s ago, the first test's 30 s back from its end


def test_each_file_shows_its_workers_cpu_on_it_and_the_rest_is_outside(tmp_path: Path) -> None:
    tick = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\n")
    timeline = stages.Timeline(
        started=time.time() - 100, cpu_at_start=stages.cpu_jiffies(stat), stat=stat
    )
    for report in [
        _report("tests/a.py::one", 30.0, cpu=9.5, worker="gw0"),
        _report("tests/a.py::two", 20.0, cpu=3.0, worker="gw0"),
        _report("tests/b.py::one", 2.0, cpu=1.5, worker="gw0"),
        _report("tests/c.py::one", 1.0, cpu=0.5, worker="gw0"),
        _report("e2e/d.py::one", 40.0, cpu=4.0, worker="gw1"),
        _report("e2e/d.py::one", 0.5, worker="gw1"),  # the session's end: no figure
    ]:
        timeline.report(report)
    # 100 core-seconds busy since the start (and 50 idle)
    stat.write_text(f"cpu  {100 + 60 * tick} 0 {50 + 40 * tick} {800 + 50 * tick} 50 0 0 0 0 0\n")
    lines = timeline.lines([])
    gw0 = lines.index(next(line for line in lines if line.startswith("worker gw0")))
    expected = [
        r"worker gw0: 3 files, 53 s of tests, cpu 14\.5 s",  # 9.5 + 3.0 + 1.5 + 0.5
        r"\s+50\.0 s  cpu\s+12\.5 s  tests/a\.py \(from \d+ s\)",
        r"\s+3\.0 s  cpu\s+2\.0 s  2 files under 5 s",
        r"worker gw1: 1 files, 40 s of tests, cpu 4\.0 s",
        r"\s+40\.5 s  cpu\s+4\.0 s  e2e/d\.py \(from \d+ s\)",
    ]
    shown = lines[gw0 : gw0 + len(expected)]
    assert all(re.fullmatch(p, line) for p, line in zip(expected, shown, strict=True)), shown
    # 100 busy less the workers' 14.5 and 4.0
    assert lines[-1].startswith("cpu outside the tests: 81.5 core-seconds ("), lines


def test_the_cpu_meter_puts_each_phases_cpu_children_included_in_its_report(
    tmp_path: Path,
) -> None:
    """Tests outside the folder whose conftest registers the meter are measured too, and
    the session's end (the last teardown) is left out of the tests' figures."""
    reports = tmp_path / "reports.jsonl"
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "conftest.py").write_text(
        "import json\n"
        "from e2e import stages\n"
        "class Record:\n"
        "    def pytest_runtest_logreport(self, report):\n"
        f"        with open({str(reports)!r}, 'a') as out:\n"
        "            properties = dict(report.user_properties)\n"
        "            out.write(json.dumps([report.nodeid, report.when, properties]) + '\\n')\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(stages.CpuMeter())\n"
        "    config.pluginmanager.register(Record())\n"
    )
    burn = "import time\nend = time.process_time() + 0.2\nwhile time.process_time() < end: pass\n"
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "test_burn.py").write_text(
        f"import subprocess, sys\nBURN = {burn!r}\n"
        "def test_burns(): exec(BURN)\n"
        "def test_child_burns(): subprocess.run([sys.executable, '-c', BURN], check=True)\n"
        "def test_idle(): pass\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "plugin", "work"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    cpu = {
        (nodeid.split("::")[1], when): properties.get(stages.CPU_PROPERTY)
        for nodeid, when, properties in map(json.loads, reports.read_text().splitlines())
    }
    assert cpu[("test_burns", "call")] >= 0.2, cpu
    assert cpu[("test_child_burns", "call")] >= 0.2, cpu
    assert cpu[("test_idle", "call")] < 0.1, cpu
    assert cpu.pop(("test_idle", "teardown")) is None, cpu
    assert len(cpu) == 8 and all(seconds is not None for seconds in cpu.values()), cpu


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
