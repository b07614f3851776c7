"""Where `make test`'s time goes, printed by pytest before its closing line (CI reads that
line last): the stages before pytest (timed by e2e/stage.sh into $SPECFLEET_STAGES), then
pytest itself, when each of its workers was done, and each test file's time and CPU.

A plugin of e2e/conftest.py's (its hooks are there): under pytest-xdist the controller
sees every worker's reports, so the table is of the whole run.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Files under this many seconds are summed into one line instead of listed.
SHOWN_FILE_SECONDS = 5.0
# The user property in which a test report carries the CPU seconds of its phase.
CPU_PROPERTY = "cpu_seconds"


@dataclass
class Stage:
    name: str
    seconds: float
    status: int
    started: float  # epoch seconds


def read_stages(path: Path) -> list[Stage]:
    """The stages e2e/stage.sh wrote, in the order they ran; unreadable lines left out."""
    stages = []
    for line in path.read_text().splitlines() if path.exists() else []:
        parts = line.split("\t")
        try:
            stages.append(Stage(parts[0], float(parts[1]), int(parts[2]), float(parts[3])))
        except (IndexError, ValueError):
            continue
    return stages


def cpu_jiffies(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """The machine's CPU time since boot in clock ticks, (busy, all), from /proc/stat's
    first line; None where there is none (not Linux). Idle and iowait are not busy."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(value) for value in fields[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    total = sum(ticks[:8])
    return total - ticks[3] - ticks[4], total


def busy_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    """The share of all cores' time spent busy between two `cpu_jiffies` readings: how
    much room more workers would find."""
    if start is None or end is None or end[1] <= start[1]:
        return None
    return (end[0] - start[0]) / (end[1] - start[1])


def process_cpu_seconds() -> float:
    """This process's CPU time, user and system, with that of the children it has reaped
    (and of theirs): a child's time counts once it has exited and been waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuMeter:
    """In the process running the tests (an xdist worker): the CPU each phase of a test
    (setup, call, teardown) took, put in its report, which xdist carries to the controller.

    A plugin e2e/conftest.py registers: that file's own per-test hooks would see only the
    tests under e2e/."""

    def __init__(self) -> None:
        self.mark = 0.0
        self.session_ends = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, nextitem: pytest.Item | None) -> None:
        self.mark = process_cpu_seconds()  # not the worker's time between tests
        self.session_ends = nextitem is None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        now = process_cpu_seconds()
        # The last test's teardown also ends the session, which reaps what the session
        # started: the local cluster, if this worker started it, with its whole run's CPU.
        # Left out, so it stays in the table's line for the CPU outside the tests.
        if not (self.session_ends and call.when == "teardown"):
            report.user_properties.append((CPU_PROPERTY, now - self.mark))
        self.mark = now
        return report


@dataclass
class Timeline:
    """What the controller (or a run without workers) saw of the run."""

    started: float = field(default_factory=time.time)
    cpu_at_start: tuple[int, int] | None = field(default_factory=cpu_jiffies)
    # worker ("gw0"; "main" without xdist) -> file -> seconds (setup, call and teardown)
    files: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    done: dict[str, float] = field(default_factory=dict)  # worker -> seconds into the run
    # worker -> file -> seconds into the run its first test began: the order each ran in
    began: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    # worker -> file -> CPU seconds the worker spent on it (CpuMeter)
    cpu: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float))
    )
    stat: Path = Path("/proc/stat")  # read again for the table

    def report(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = str(node.gateway.id) if node is not None else "main"
        path = report.nodeid.split("::")[0]
        self.files[worker][path] += report.duration
        self.began[worker].setdefault(path, time.time() - report.duration - self.started)
        self.cpu[worker][path] += sum(
            value
            for name, value in report.user_properties
            if name == CPU_PROPERTY and isinstance(value, float)
        )

    def worker_down(self, worker: str) -> None:
        self.done[worker] = time.time() - self.started

    def lines(self, stages: list[Stage]) -> list[str]:
        now = time.time()
        first = min([s.started for s in stages] + [self.started])
        out = [f"{'stage':<20} {'seconds':>8}  notes"]
        for stage in stages:
            note = "" if stage.status == 0 else f"exit status {stage.status}"
            out.append(f"{stage.name:<20} {stage.seconds:8.1f}  {note}".rstrip())
        note = "to this table"
        cpu_at_end = cpu_jiffies(self.stat)
        busy = busy_share(self.cpu_at_start, cpu_at_end)
        if busy is not None:
            note += f"; {os.cpu_count()} cores {busy:.0%} busy"
        out.append(f"{'pytest':<20} {now - self.started:8.1f}  {note}")
        out.append(f"{'total':<20} {now - first:8.1f}  from the first stage")
        for worker in sorted(self.files):
            files = sorted(self.files[worker].items(), key=lambda item: -item[1])
            cpu = self.cpu[worker]
            done = self.done.get(worker)
            ended = f", done {done:.0f} s into pytest" if done is not None else ""
            total = sum(seconds for _, seconds in files)
            out.append(
                f"worker {worker}: {len(files)} files, {total:.0f} s of tests, "
                f"cpu {sum(cpu.values()):.1f} s{ended}"
            )
            shown = [(f, s) for f, s in files if s >= SHOWN_FILE_SECONDS]
            began = self.began[worker]
            out += [
                f"  {s:8.1f} s  cpu {cpu[name]:7.1f} s  {name} (from {began[name]:.0f} s)"
                for name, s in shown
            ]
            rest = files[len(shown) :]
            if rest:
                seconds = sum(s for _, s in rest)
                rest_cpu = sum(cpu[name] for name, _ in rest)
                files_under = "file" if len(rest) == 1 else "files"
                out.append(
                    f"  {seconds:8.1f} s  cpu {rest_cpu:7.1f} s  "
                    f"{len(rest)} {files_under} under {SHOWN_FILE_SECONDS:.0f} s"
                )
        if self.cpu_at_start is not None and cpu_at_end is not None:
            # The cores' busy time over pytest less the tests' CPU: all the rest, the
            # cluster's included, but also pytest's own collecting and the session's end,
            # and anything else that ran on this machine meanwhile.
            busy_seconds = (cpu_at_end[0] - self.cpu_at_start[0]) / os.sysconf("SC_CLK_TCK")
            tests = sum(sum(per_file.values()) for per_file in self.cpu.values())
            out.append(
                f"cpu outside the tests: {busy_seconds - tests:.1f} core-seconds (control "
                "plane, pods, node agent, pytest's start and end, anything else running)"
            )
        return out


def stages_path() -> Path | None:
    """Where e2e/stage.sh wrote the stages (`make test` sets it), if anywhere."""
    path = os.environ.get("SPECFLEET_STAGES")
    return Path(path) if path else None
