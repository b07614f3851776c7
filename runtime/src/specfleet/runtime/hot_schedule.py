"""Hot schedules: what a running engine's per-batch K schedule may be changed to, and who
may change it. The pure part, shared by the engine-side plugin (vllm_hot_schedule.py)
and the pod's HTTP endpoint (vllm_schedule_endpoint.py); no vLLM import.

A schedule is vLLM's `num_speculative_tokens_per_batch_size`: bands [start, end, K],
batch sizes inclusive, the first from 1, sorted and not overlapping (a gap or the tail
keeps the band before's K, as vLLM does). A single K is the one band [1, max_num_seqs, K].
K=0 bands are plain decoding at those batch sizes. vLLM silently clamps a K above the
ceiling (`num_speculative_tokens`, what the draft buffers were sized for); here it is
refused instead, so the operator never believes a K is in force that is not.

Every change carries a generation: a newer one replaces the schedule, the one in force
again with the same schedule is a no-op success (a retried request), and an older one, or
the same one with another schedule, is refused. The startup schedule is generation 0.
"""

from __future__ import annotations

import hmac
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Band = tuple[int, int, int]
Schedule = tuple[Band, ...]

# Where a pod finds the operator's per-model credential: a file (a mounted Secret, read
# on every request so a rotated Secret takes effect) or, failing that, the value itself.
ENV_TOKEN_FILE = "SPECFLEET_SCHEDULE_TOKEN_FILE"
ENV_TOKEN = "SPECFLEET_SCHEDULE_TOKEN"
# The vLLM plugin names (runtime/pyproject.toml): vLLM's VLLM_PLUGINS allowlist needs the
# endpoint's by name, and once set it filters every group, so it names ours all.
GENERAL_PLUGINS = ("specfleet_cpu_fix", "specfleet_hot_schedule", "specfleet_parallel_draft_fix")
STAT_LOGGER_PLUGIN = "specfleet_step_stats"
ENDPOINT_PLUGIN = "specfleet_schedule"
PATH = "/specfleet/schedule"
# Upper bounds of the step statistics' batch-size buckets (vllm_step_stats: the label is
# the bound, "+Inf" beyond the last); the operator reads a bucket as the batches between
# the bound before and its own.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def batch_bucket(batch: int) -> str:
    return next((str(bound) for bound in BATCH_BUCKETS if batch <= bound), "+Inf")


def bucket_middle(bound: int) -> float:
    """The middle batch of the bucket up to `bound` (one of BATCH_BUCKETS)."""
    before = max((b for b in BATCH_BUCKETS if b < bound), default=0)
    return (before + 1 + bound) / 2


# Set by the runtime when it turned vLLM's per-step details on for the step-stats plugin
# (not the user): the plugin then silences vLLM's per-step log lines.
ENV_STEP_STATS = "SPECFLEET_STEP_STATS"


class ScheduleRefused(ValueError):
    """A schedule the engine cannot take; the message says why, in one line."""

    def __init__(self, reason: str, status: int = 422) -> None:
        super().__init__(reason)
        self.status = status


def _integer(value: object, what: str) -> int:
    # bool is an int in Python; JSON true is not a batch size.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScheduleRefused(f"{what} {value!r} is not an integer")
    return value


def parse_schedule(value: object, ceiling: int) -> Schedule:
    """The bands of a request's `schedule` ([[start, end, K], ...]) or `k` (an integer:
    one band), normalized and checked against the engine's ceiling; ScheduleRefused
    with the reason otherwise."""
    if not isinstance(value, list) or not value:
        raise ScheduleRefused("a schedule is a non-empty list of [start, end, K] bands")
    bands: list[Band] = []
    for entry in value:
        if not isinstance(entry, list | tuple) or len(entry) != 3:
            raise ScheduleRefused(f"band {entry!r} is not [start, end, K]")
        start, end, k = (_integer(v, w) for v, w in zip(entry, ("start", "end", "K"), strict=True))
        if start < 1 or end < start:
            raise ScheduleRefused(f"band {list(entry)}: needs 1 <= start <= end")
        if k < 0:
            raise ScheduleRefused(f"band {list(entry)}: K must be >= 0")
        if k > ceiling:
            raise ScheduleRefused(
                f"band {list(entry)}: K={k} is above this engine's ceiling "
                f"(num_speculative_tokens={ceiling}); a higher ceiling needs a restart"
            )
        bands.append((start, end, k))
    bands.sort()
    if bands[0][0] != 1:
        raise ScheduleRefused("the first band must start at batch size 1")
    for before, after in itertools.pairwise(bands):
        if after[0] <= before[1]:
            raise ScheduleRefused(f"bands {list(before)} and {list(after)} overlap")
    return tuple(bands)


def requested_schedule(body: Mapping[str, Any], ceiling: int, max_num_seqs: int) -> Schedule:
    """A request body's schedule: `schedule` (bands) or `k` (one K for every batch size)."""
    if ("schedule" in body) == ("k" in body):
        raise ScheduleRefused("give exactly one of 'schedule' (bands) and 'k' (one K)")
    if "k" in body:
        return parse_schedule([[1, max_num_seqs, body["k"]]], ceiling)
    return parse_schedule(body["schedule"], ceiling)


def requested_generation(body: Mapping[str, Any]) -> int:
    generation = _integer(body.get("generation"), "generation")
    if generation < 1:
        raise ScheduleRefused("generation must be >= 1 (0 is the startup schedule)")
    return generation


def ks_in_force(lookup: Sequence[int]) -> list[int]:
    """The Ks a dense batch-size lookup (vLLM's, index 0 unused) schedules."""
    return sorted(set(lookup[1:]))


@dataclass
class ScheduleState:
    """The schedule in force and its generation, as the engine keeps it."""

    schedule: Schedule
    generation: int = 0
    # When the generation in force took effect (Unix seconds; 0: at startup): the
    # operator counts a window that began as it did at that generation, not cut.
    applied_at: float = 0.0

    def decide(self, generation: int, schedule: Schedule) -> bool:
        """Whether (generation, schedule) is a change to apply: False for a repeat of the
        one in force; ScheduleRefused (409) for an older generation or a reused one."""
        if generation < self.generation:
            raise ScheduleRefused(
                f"generation {generation} is older than {self.generation}, in force", 409
            )
        if generation == self.generation:
            if schedule != self.schedule:
                raise ScheduleRefused(
                    f"generation {generation} is in force with another schedule "
                    f"{[list(b) for b in self.schedule]}",
                    409,
                )
            return False
        return True


def expected_token(env: Mapping[str, str]) -> str | None:
    """The credential this pod accepts: the token file's content (stripped), else the
    token variable; None when neither is set (then nobody may change the schedule)."""
    path = env.get(ENV_TOKEN_FILE)
    if path:
        try:
            token = Path(path).read_text().strip()
        except OSError:
            return None
        return token or None
    return env.get(ENV_TOKEN) or None


def authorize(header: str | None, env: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """None if the Authorization header carries this pod's credential; else the HTTP
    status and reason: 401 without a bearer credential, 403 with a wrong one or when the
    pod has none configured. Compared in constant time."""
    expected = expected_token(os.environ if env is None else env)
    if expected is None:
        return 403, f"no schedule credential configured ({ENV_TOKEN_FILE} or {ENV_TOKEN})"
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, "a bearer credential is required"
    if not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return 403, "wrong credential"
    return None


def plugin_allowlist(current: str | None, discovered: Sequence[str]) -> str:
    """VLLM_PLUGINS for a pod that serves the schedule endpoint. vLLM loads an endpoint
    plugin only when VLLM_PLUGINS names it, and that variable filters every plugin group:
    unset before, it becomes every plugin installed (`discovered`, none of another
    endpoint) plus ours; set before, ours are added to it."""
    ours = [*GENERAL_PLUGINS, STAT_LOGGER_PLUGIN, ENDPOINT_PLUGIN]
    names = list(discovered) if current is None else [n for n in current.split(",") if n]
    return ",".join(dict.fromkeys([*names, *ours]))
