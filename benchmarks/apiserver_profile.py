"""Where the local API server's CPU goes while something runs: CPU profiles taken back to
back (Go's pprof, `/debug/pprof/profile`), and their samples summed by the kind of work
each stack does.

The local control plane serves profiles only when started with them:

    .venv/bin/python -m e2e.cluster down
    SPECFLEET_APISERVER_PROFILING=1 make cluster-up

`operator_scale.py --apiserver-profile DIR` profiles each phase of its runs with it; on
its own, `apiserver_profile.py summarize FILE...` sums profiles taken before. Summing
needs `go tool pprof` (Go builds the control plane, so it is on the machine).

A sample counts for the first kind its stack matches, in the order of `KINDS`; the
cross-cutting costs (`ACROSS`: CEL rules, managed fields, JSON) are counted beside them,
wherever they occur. The API server stores in a goroutine of its own, so a stack names
the storage step (the patch, the update, the create) rather than the handler."""

from __future__ import annotations

import argparse
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# (kind, a pattern of the stack), the first match wins.
KINDS = [
    ("apply or patch", r"patchResource|PatchResource"),
    (
        "update of a custom resource (status writes)",
        r"(?s)\A(?=.*UpdateResource)(?=.*apiextensions)",
    ),
    ("update of a built-in object", r"UpdateResource"),
    ("create", r"createHandler|CreateResource|etcd3\.\(\*store\)\.Create"),
    ("list or get", r"ListResource|GetResource|getResourceHandler"),
    ("watches served", r"handleWatch|WatchServer|cacheWatcher|dispatchEvent"),
    ("garbage collection", r"runtime\.gc|gcBgMarkWorker"),
    ("TLS and HTTP/2", r"crypto/tls|http2"),
]
ACROSS = [
    ("CEL rules", r"schema/cel\.|cel-go"),
    ("managed fields", r"managedfields"),
    ("JSON", r"encoding/json|serializer/json|sigs\.k8s\.io/json"),
]
_SEPARATOR = "-----------+-------------------------------------------------------"
_VALUE = re.compile(r"([0-9.]+)(ns|us|ms|s)$")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _seconds(token: str) -> float | None:
    found = _VALUE.match(token)
    return float(found.group(1)) * _UNITS[found.group(2)] if found else None


def summarize(files: list[Path]) -> dict[str, Any]:
    """CPU seconds sampled in `files`, in all and by kind (`KINDS`, then "other") and
    by cross-cutting cost (`ACROSS`)."""
    traces = ""
    if files:
        traces = subprocess.run(
            ["go", "tool", "pprof", "-traces", *map(str, files)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return {"profiles": len(files), **summarize_traces(traces)}


def summarize_traces(traces: str) -> dict[str, Any]:
    """`summarize` of the text `go tool pprof -traces` prints: a sample's value and its
    stack, innermost frame first, between separator lines."""
    kinds = {name: 0.0 for name, _ in [*KINDS, ("other", "")]}
    across = {name: 0.0 for name, _ in ACROSS}
    total = 0.0
    for block in traces.split(_SEPARATOR):
        lines = [line for line in block.splitlines() if line.strip()]
        value = _seconds(lines[0].split()[0]) if lines and lines[0].strip() else None
        if value is None:
            continue
        stack = "\n".join(lines)
        total += value
        kind = next((name for name, pattern in KINDS if re.search(pattern, stack)), "other")
        kinds[kind] += value
        for name, pattern in ACROSS:
            if re.search(pattern, stack):
                across[name] += value
    return {
        "cpu_seconds": round(total, 2),
        "by_kind": {name: round(value, 2) for name, value in kinds.items()},
        "across": {name: round(value, 2) for name, value in across.items()},
    }


@dataclass
class Profiler:
    """Profiles of `seconds` each, back to back, into `directory` while running; those
    wholly inside a window (`window`) are its."""

    directory: Path
    kubectl: list[str]
    seconds: int = 5
    taken: list[tuple[float, float, Path]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Profiler:
        served = subprocess.run(
            [*self.kubectl, "get", "--raw", "/debug/pprof/"], capture_output=True
        )
        if served.returncode != 0:
            raise RuntimeError(
                "the API server serves no profile: start the control plane with "
                "SPECFLEET_APISERVER_PROFILING=1 (see benchmarks/apiserver_profile.py)"
            )
        self.directory.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="apiserver-profile", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.seconds + 30)

    def window(self, start: float, end: float) -> list[Path]:
        return [path for began, ended, path in self.taken if began >= start and ended <= end]

    def _run(self) -> None:
        url = f"/debug/pprof/profile?seconds={self.seconds}"
        while not self._stop.is_set():
            began = time.time()
            path = self.directory / f"apiserver-{began:.0f}.pprof"
            with path.open("wb") as out:
                done = subprocess.run(
                    [*self.kubectl, "get", "--raw", url], stdout=out, stderr=subprocess.DEVNULL
                )
            if done.returncode == 0:
                self.taken.append((began, time.time(), path))
            else:  # another profile under way, or the API server restarting
                path.unlink()
                self._stop.wait(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    summing = commands.add_parser("summarize", help="sum profiles taken before")
    summing.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    summary = summarize(args.files)
    print(f"{summary['cpu_seconds']:.2f} CPU seconds in {summary['profiles']} profiles")
    for group in ("by_kind", "across"):
        for name, value in summary[group].items():
            share = value / summary["cpu_seconds"] if summary["cpu_seconds"] else 0.0
            print(f"  {name:45s} {value:7.2f} s {share:6.1%}")


if __name__ == "__main__":
    main()
