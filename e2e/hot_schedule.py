"""Hot schedules on a real vLLM (the CPU build) started by e2e.real_engine.serve: the
operator's side of /specfleet/schedule, the K the engine measurably runs (from the
step-stats plugin's histogram), and the EngineCore process that must stay the same.

Used by tests/test_real_engine_hot_schedule.py and benchmarks/hot_schedule.py.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from e2e.real_engine import Server

TOKEN = "operator-only-test-credential"
# What a hot pod gets besides VLLM_ENV: the operator's credential (a Secret in a cluster).
HOT_ENV = {"SPECFLEET_SCHEDULE_TOKEN": TOKEN}
STEP_COUNT = "specfleet:step_duration_seconds_count"
STEP_SUM = "specfleet:step_duration_seconds_sum"


def call(
    server: Server, body: dict[str, Any] | None = None, token: str | None = TOKEN
) -> tuple[int, dict[str, Any]]:
    """GET (no body) or POST /specfleet/schedule; the HTTP status and the JSON answer."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(server.url + "/specfleet/schedule", data, headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(json.load(response))
    except urllib.error.HTTPError as error:
        return error.code, dict(json.loads(error.read() or b"{}"))


@dataclass(frozen=True)
class DecodeSteps:
    """Decode-only engine steps so far of one K and batch bucket, and their seconds."""

    count: float = 0.0
    seconds: float = 0.0

    def since(self, before: DecodeSteps) -> DecodeSteps:
        return DecodeSteps(self.count - before.count, self.seconds - before.seconds)


def decode_steps(metrics: str) -> dict[tuple[str, str], DecodeSteps]:
    """The step-stats histogram's decode-only steps by (K verified, batch bucket)."""
    fields = {STEP_COUNT: "count", STEP_SUM: "seconds"}
    found: dict[tuple[str, str], dict[str, float]] = {}
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name in fields and sample.labels.get("phase") == "decode":
                key = (sample.labels["k"], sample.labels["batch"])
                found.setdefault(key, {})[fields[sample.name]] = sample.value
    return {key: DecodeSteps(**values) for key, values in found.items()}


def decode_steps_by_k(metrics: str) -> dict[str, float]:
    """Decode-only engine steps so far per K verified, over every batch bucket."""
    steps: dict[str, float] = {}
    for (k, _batch), counted in decode_steps(metrics).items():
        steps[k] = steps.get(k, 0.0) + counted.count
    return steps


@dataclass
class Change:
    generation: int
    status: int
    answer: dict[str, Any]
    # Seconds from sending the change until the engine's answer (it applies it between two
    # steps before answering), and until /metrics showed a decode step verifying the new K
    # (the first step after the change drafts K tokens, the next verifies them).
    answered: float
    latency: float


def change_and_wait(
    server: Server, body: dict[str, Any], k: int, timeout: float = 10.0, poll: float = 0.05
) -> Change:
    """POST a change, then poll /metrics until the engine has run a decode step verifying
    K=k (under load: the caller keeps requests in flight; k differs from the K before)."""
    before = decode_steps_by_k(server.get("/metrics")).get(str(k), 0.0)
    sent = time.monotonic()
    status, answer = call(server, body)
    answered = time.monotonic() - sent
    change = Change(int(body["generation"]), status, answer, answered, float("inf"))
    while status == 200 and time.monotonic() - sent < timeout:
        if decode_steps_by_k(server.get("/metrics")).get(str(k), 0.0) > before:
            change.latency = time.monotonic() - sent
            break
        time.sleep(poll)
    return change


def engine_core_pids(root: int) -> list[int]:
    """The processes under `root` that vLLM titled as its EngineCore."""
    found, pending = [], [root]
    while pending:
        pid = pending.pop()
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        if b"EngineCore" in command:
            found.append(pid)
        pending += [int(child) for child in children]
    return sorted(found)
