"""Where `make test`'s time goes, printed by pytest before its closing line (CI reads that
line last): the stages before pytest (timed by e2e/stage.sh into $SPECFLEET_STAGES), then
pytest itself, when each of its workers was done, and each test file's time.

A plugin of e2e/conftest.py's (its hooks are there): under pytest-xdist the controller
sees every worker's reports, so the table is of the whole run.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Files under this many seconds are summed into one line instead of listed.
SHOWN_FILE_SECONDS = 5.0


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

    def report(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        worker = str(node.gateway.id) if node is not None else "main"
        path = report.nodeid.split("::")[0]
        self.files[worker][path] += report.duration
        self.began[worker].setdefault(path, time.time() - report.duration - self.started)

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
        busy = busy_share(self.cpu_at_start, cpu_jiffies())
        if busy is not None:
            note += f"; {os.cpu_count()} cores {busy:.0%} busy"
        out.append(f"{'pytest':<20} {now - self.started:8.1f}  {note}")
        out.append(f"{'total':<20} {now - first:8.1f}  from the first stage")
        for worker in sorted(self.files):
            files = sorted(self.files[worker].items(), key=lambda item: -item[1])
            done = self.done.get(worker)
            ended = f", done {done:.0f} s into pytest" if done is not None else ""
            total = sum(seconds for _, seconds in files)
            out.append(f"worker {worker}: {len(files)} files, {total:.0f} s of tests{ended}")
            shown = [(f, s) for f, s in files if s >= SHOWN_FILE_SECONDS]
            began = self.began[worker]
            out += [f"  {s:8.1f}  {name} (from {began[name]:.0f} s)" for name, s in shown]
            rest = files[len(shown) :]
            if rest:
                seconds = sum(s for _, s in rest)
                files_under = "file" if len(rest) == 1 else "files"
                out.append(
                    f"  {seconds:8.1f}  {len(rest)} {files_under} under {SHOWN_FILE_SECONDS:.0f} s"
                )
        return out


def stages_path() -> Path | None:
    """Where e2e/stage.sh wrote the stages (`make test` sets it), if anywhere."""
    path = os.environ.get("SPECFLEET_STAGES")
    return Path(path) if path else None
