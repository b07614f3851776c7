"""Memory and CPU of one simulated-engine pod, idle and under real HTTP load.

    .venv/bin/python benchmarks/sim_footprint.py [--seconds 20]

Starts `specfleet-runtime serve --engine sim` on 127.0.0.1 as a real process, then for
each phase measures its RSS (VmRSS) and CPU (utime+stime from /proc) over a window:
idle (no built-in load), 10 requests/s of /v1/completions sent by this script (and no
built-in load), and the default profile's built-in demo load. /metrics is scraped every
5 s in every phase, as a Prometheus would. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

RUNTIME = str(Path(sys.executable).with_name("specfleet-runtime"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
IDLE_PROFILE = "load: {requests_per_second: 0}"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(profile: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [RUNTIME, "serve", "--model", "org/target", "--method", "peagle",
            "--draft-model", "org/draft", "--num-speculative-tokens", "3", "--engine", "sim",
            "--host", "127.0.0.1", "--port", str(port), "--seed", "1",
            "--termination-log", "/dev/null"]  # fmt: skip
    if profile is not None:
        args += ["--sim-profile", profile]
    process = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/health", timeout=1).close()
            return process, url
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the sim did not start") from None
            time.sleep(0.1)


async def drive(url: str, seconds: float, rate: float) -> int:
    """Scrape every 5 s and, at `rate` > 0, send that many completions per second."""
    completed = 0

    async def one(session: aiohttp.ClientSession) -> None:
        nonlocal completed
        body = {"prompt": "benchmark prompt", "max_tokens": 128}
        async with session.post(url + "/v1/completions", json=body) as response:
            await response.read()
            completed += response.status == 200

    async with aiohttp.ClientSession() as session:
        pending: set[asyncio.Task[None]] = set()
        started = time.monotonic()
        sent, next_scrape = 0, started
        while (now := time.monotonic()) - started < seconds:
            if now >= next_scrape:
                async with session.get(url + "/metrics") as response:
                    await response.read()
                next_scrape += 5
            while rate > 0 and sent < (now - started) * rate:
                task = asyncio.create_task(one(session))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
            await asyncio.sleep(0.02)
        await asyncio.gather(*pending)
    return completed


def measure(name: str, profile: str | None, rate: float, seconds: float) -> str:
    process, url = start(profile)
    try:
        asyncio.run(drive(url, 3.0, rate))  # warm up: imports done, batch filled
        cpu_before, wall_before = cpu_seconds(process.pid), time.monotonic()
        completed = asyncio.run(drive(url, seconds, rate))
        cpu = (cpu_seconds(process.pid) - cpu_before) / (time.monotonic() - wall_before)
        rss = rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)
    served = f"{completed / seconds:.1f} req/s answered" if rate else "-"
    return f"| {name} | {rss:.1f} | {100 * cpu:.2f} | {served} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window per phase")
    seconds = parser.parse_args().seconds
    rows = [
        measure("idle (no load)", IDLE_PROFILE, 0, seconds),
        measure("10 requests/s over HTTP (max_tokens 128)", IDLE_PROFILE, 10, seconds),
        measure("default built-in demo load (10 req/s, 384 tokens)", None, 0, seconds),
    ]
    print(f"| phase ({seconds:.0f} s window) | RSS (MB) | CPU (% of one core) | HTTP |")
    print("| --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
