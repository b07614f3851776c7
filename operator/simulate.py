"""`specfleet simulate`: the real decision core against in-process simulated engines.

The engines are `specfleet.runtime.sim_model` (the same acceptance and step-time model
the sim pods serve); each window is drawn in aggregate (per-position binomial counts
over all of a pod's drafts) so a run of a thousand windows takes a fraction of a
second. Counters go through the real WindowTracker and the real `decide`, which sees
nothing the operator would not: counters, gauges and the clock. It uses its own default
step-cost model, not the scenario's, as it would on a cluster.

The scenario format is documented in docs/tuning.md.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from specfleet.operator.api import (
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    parse_duration,
)
from specfleet.operator.children import Track
from specfleet.operator.metrics import (
    Observation,
    PodSample,
    SpecDecodeCounters,
    WindowTracker,
)
from specfleet.operator.stats import expected_rollback_metric
from specfleet.operator.tuner import ROLLBACK_ACTIONS, decide
from specfleet.runtime.sim_model import (
    Seconds,
    SimProfile,
    goodput,
    jitter,
    sample_positions,
    step_seconds,
)

STATIC_BASELINES = (3, 5)
START = datetime(2026, 1, 1, tzinfo=UTC)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadStep(_Strict):
    """From `after` seconds on, each pod runs `concurrency` requests at a time."""

    after: Seconds
    concurrency: int = Field(ge=1)


class Scenario(_Strict):
    """A scenario file (YAML): engines, load over time, and the policy under test."""

    name: str
    description: str = ""
    duration: Seconds = Field(gt=0)
    replicas: int = Field(2, ge=1, description="stable pods; a canary adds one")
    method: str = Field("peagle", description="draft.method: peagle drafts in parallel")
    engine: SimProfile = Field(default_factory=SimProfile)
    concurrency: int = Field(8, ge=1, description="running requests per pod")
    load: list[LoadStep] = Field(default_factory=list)
    settle: Seconds = Field(600.0, description="time after each phase start not counted as steady")
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description="SpeculativeModel spec fields (camelCase): speculation, tuning, rollback",
    )


def load_scenario(path: Path) -> Scenario:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a scenario must be a YAML mapping")
    return Scenario.model_validate(data)


def scenario_spec(scenario: Scenario) -> SpeculativeModelSpec:
    manifest: dict[str, Any] = {
        "model": {"name": "sim/target"},
        "draft": {"method": scenario.method, "model": "sim/draft"},
        "replicas": scenario.replicas,
        **scenario.policy,
    }
    return SpeculativeModelSpec.model_validate(manifest)


@dataclass(frozen=True)
class Phase:
    start: float
    acceptance: list[float]
    concurrency: int


def phases(scenario: Scenario) -> list[Phase]:
    """Stretches of constant acceptance and load (drift and load steps cut them)."""
    starts = sorted(
        {0.0}
        | {s.after for s in scenario.engine.drift if s.after < scenario.duration}
        | {s.after for s in scenario.load if s.after < scenario.duration}
    )
    result = []
    for start in starts:
        acceptance, _ = scenario.engine.at(start)
        concurrency = scenario.concurrency
        for step in scenario.load:
            if step.after <= start:
                concurrency = step.concurrency
        result.append(Phase(start, list(acceptance), concurrency))
    return result


@dataclass
class WindowRecord:
    index: int
    start: float
    phase: int
    tokens: int  # K of the stable pods during the window (0: plain decoding)
    candidate: int | None
    goodput: float
    oracle: float
    acceptance: float | None
    actions: list[str] = field(default_factory=list)


@dataclass
class SimulationResult:
    scenario: str
    seed: int
    interval: float
    floor: float
    records: list[WindowRecord]
    phase_starts: list[float]
    oracle_tokens: list[int]
    goodput: dict[str, float]
    steady_goodput: dict[str, float]
    rollbacks: int
    false_rollbacks: int
    drift_to_rollback: list[int | None]
    decisions: list[dict[str, Any]]

    @property
    def steady_ratio(self) -> float:
        oracle = self.steady_goodput["oracle"]
        return self.steady_goodput["achieved"] / oracle if oracle else 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "windows": len(self.records),
            "interval_seconds": self.interval,
            "floor": self.floor,
            "goodput": {k: round(v, 2) for k, v in self.goodput.items()},
            "steady_state_goodput": {k: round(v, 2) for k, v in self.steady_goodput.items()},
            "steady_state_ratio_to_oracle": round(self.steady_ratio, 4),
            "oracle_tokens_per_phase": self.oracle_tokens,
            "rollbacks": self.rollbacks,
            "false_rollbacks": self.false_rollbacks,
            "windows_from_drift_to_rollback": self.drift_to_rollback,
            "final_tokens": self.records[-1].tokens if self.records else None,
            "decisions": self.decisions,
        }


def _engine_window(
    rng: random.Random,
    scenario: Scenario,
    previous: SpecDecodeCounters,
    acceptance: list[float],
    k: int,
    batch: int,
    seconds: float,
    parallel: bool,
) -> SpecDecodeCounters:
    """One pod's counters after `seconds` more at K=k (k=0: plain decoding, no series)."""
    steps = seconds / step_seconds(scenario.engine.cost, k, batch, parallel)
    drafts = round(steps * batch)
    if k == 0:
        return replace(
            previous,
            generation_tokens=previous.generation_tokens + drafts,
            requests_running=batch,
            speculation_exported=False,
        )
    conditional = jitter(rng, acceptance, scenario.engine.noise)
    counts = sample_positions(rng, conditional, k, drafts)
    old = previous.accepted_per_position
    return SpecDecodeCounters(
        drafts=previous.drafts + drafts,
        draft_tokens=previous.draft_tokens + drafts * k,
        accepted_tokens=previous.accepted_tokens + sum(counts),
        accepted_per_position=tuple(
            c + (old[i] if i < len(old) else 0.0) for i, c in enumerate(counts)
        ),
        generation_tokens=previous.generation_tokens + drafts + sum(counts),
        requests_running=batch,
        speculation_exported=True,
        process_start_time=previous.process_start_time,
    )


def simulate(scenario: Scenario, seed: int = 0) -> SimulationResult:
    """Run the scenario window by window through WindowTracker and decide."""
    spec = scenario_spec(scenario)
    parallel = spec.draft.method.parallel_drafting
    cost = scenario.engine.cost
    interval = parse_duration(spec.tuning.interval).total_seconds()
    floor = spec.rollback.min_acceptance
    rng = random.Random(seed)
    cuts = phases(scenario)
    low, high = spec.speculation.min_tokens, spec.speculation.max_tokens

    def good(p: Phase, k: int) -> float:
        return goodput(cost, p.acceptance, k, p.concurrency, parallel)

    allowed = [0, *range(low, high + 1)]
    oracle_k = [
        max(
            (
                k
                for k in allowed
                if k == 0
                or expected_rollback_metric(spec.rollback.metric, p.acceptance, k) >= floor
            ),
            key=lambda k: good(p, k),
        )
        for p in cuts
    ]
    free_k = [max(allowed, key=lambda k: good(p, k)) for p in cuts]

    status = SpeculativeModelStatus()
    tracker = WindowTracker()
    counters: dict[str, SpecDecodeCounters] = {}
    pod_k: dict[str, int] = {}
    records: list[WindowRecord] = []
    decisions: list[dict[str, Any]] = []
    totals = {name: 0.0 for name in ("achieved", "oracle", "unconstrained", "k3", "k5", "none")}
    steady = dict.fromkeys(totals, 0.0)
    rollbacks = false_rollbacks = 0
    drift_to_rollback: list[int | None] = []
    awaiting_rollback: int | None = None  # window index of a drift that broke the floor

    def pods() -> list[tuple[str, Track, int]]:
        sp = status.speculation
        stable_k = 0 if sp.disabled or sp.tokens is None else sp.tokens
        result: list[tuple[str, Track, int]] = [
            (f"stable-{i}", "stable", stable_k) for i in range(scenario.replicas)
        ]
        if sp.candidate_tokens is not None:
            result.append(("canary-0", "canary", sp.candidate_tokens))
        return result

    tracker.observe(
        [PodSample(name, track, 0.0, SpecDecodeCounters()) for name, track, _ in pods()],
        {track: k for _, track, k in pods()},
    )
    status = decide(spec, status, Observation(stable=None, canary=None), START).status
    windows = int(scenario.duration // interval)
    for index in range(windows):
        start = index * interval
        phase_index = max(i for i, p in enumerate(cuts) if p.start <= start)
        phase = cuts[phase_index]
        if phase.start == start and phase_index > 0:
            k_now = 0 if status.speculation.disabled else (status.speculation.tokens or 0)
            if (
                k_now
                and expected_rollback_metric(spec.rollback.metric, phase.acceptance, k_now) < floor
                and awaiting_rollback is None
            ):
                awaiting_rollback = index
        samples = []
        running = pods()
        for name, track, k in running:
            if pod_k.get(name) != k:
                # A rollout restarts the pod: a new process, its counters from zero.
                counters[name] = SpecDecodeCounters(process_start_time=start)
                pod_k[name] = k
            counters[name] = _engine_window(
                rng,
                scenario,
                counters[name],
                phase.acceptance,
                k,
                phase.concurrency,
                interval,
                parallel,
            )
            samples.append(PodSample(name, track, start + interval, counters[name]))
        observation = tracker.observe(samples, {track: k for _, track, k in running})
        now = START + timedelta(seconds=start + interval)
        stable_k = running[0][2]
        canary_k = running[-1][2] if running[-1][1] == "canary" else None
        achieved = (
            (scenario.replicas * good(phase, stable_k) + good(phase, canary_k))
            / (scenario.replicas + 1)
            if canary_k is not None
            else good(phase, stable_k)
        )
        values = {
            "achieved": achieved,
            "oracle": good(phase, oracle_k[phase_index]),
            "unconstrained": good(phase, free_k[phase_index]),
            "k3": good(phase, 3),
            "k5": good(phase, 5),
            "none": good(phase, 0),
        }
        is_steady = start >= phase.start + scenario.settle
        for key, value in values.items():
            totals[key] += value
            if is_steady:
                steady[key] += value
        decided = decide(spec, status, observation, now)
        status = decided.status
        kinds = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        for action in decided.actions:
            if action.kind == "Inconclusive":
                continue
            decisions.append(
                {
                    "window": index + 1,
                    "kind": action.kind,
                    "reason": action.reason,
                    "message": action.message,
                }
            )
            if action.kind in ROLLBACK_ACTIONS:
                rollbacks += 1
                if (
                    stable_k
                    and expected_rollback_metric(spec.rollback.metric, phase.acceptance, stable_k)
                    >= floor
                ):
                    false_rollbacks += 1
                if awaiting_rollback is not None:
                    drift_to_rollback.append(index + 1 - awaiting_rollback)
                    awaiting_rollback = None
        records.append(
            WindowRecord(
                index + 1,
                start,
                phase_index,
                stable_k,
                canary_k,
                achieved,
                values["oracle"],
                status.acceptance.rate,
                kinds,
            )
        )
    if awaiting_rollback is not None:
        drift_to_rollback.append(None)
    count = max(1, windows)
    steady_count = max(
        1, sum(1 for r in records if r.start >= cuts[r.phase].start + scenario.settle)
    )
    return SimulationResult(
        scenario=scenario.name,
        seed=seed,
        interval=interval,
        floor=floor,
        records=records,
        phase_starts=[p.start for p in cuts],
        oracle_tokens=oracle_k,
        goodput={k: v / count for k, v in totals.items()},
        steady_goodput={k: v / steady_count for k, v in steady.items()},
        rollbacks=rollbacks,
        false_rollbacks=false_rollbacks,
        drift_to_rollback=drift_to_rollback,
        decisions=decisions,
    )


LABELS = {
    "achieved": "achieved (tuner)",
    "oracle": "oracle, best fixed K per phase under the floor",
    "unconstrained": "oracle without the floor",
    "k3": "static K=3",
    "k5": "static K=5",
    "none": "no speculation",
}


def report(result: SimulationResult) -> str:
    """The human-readable summary of one run."""
    lines = [
        f"scenario {result.scenario} (seed {result.seed}): {len(result.records)} windows of "
        f"{result.interval:.0f}s, floor {result.floor}",
        f"{'goodput, tokens/s per pod':<50} {'run':>9} {'steady':>9}",
    ]
    for key, label in LABELS.items():
        lines.append(
            f"  {label:<48} {result.goodput[key]:>9.1f} {result.steady_goodput[key]:>9.1f}"
        )
    lines += [
        f"steady-state goodput / oracle: {result.steady_ratio:.3f}",
        f"oracle K per phase: {result.oracle_tokens}",
        f"rollbacks: {result.rollbacks} (false: {result.false_rollbacks}); "
        f"windows from drift to rollback: {result.drift_to_rollback or '-'}",
        "decisions:",
    ]
    lines += [
        f"  window {d['window']:>4}: {d['kind']} ({d['reason']}) {d['message']}"
        for d in result.decisions
    ]
    return "\n".join(lines)


def plot(result: SimulationResult, out: Path) -> None:
    """K, goodput and acceptance over time, with drift marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [(r.start + result.interval) / 60 for r in result.records]
    figure, (k_axis, g_axis, a_axis) = plt.subplots(3, 1, sharex=True, figsize=(10, 8))
    k_axis.step(minutes, [r.tokens for r in result.records], where="post", label="stable K")
    k_axis.step(
        minutes,
        [r.candidate if r.candidate is not None else float("nan") for r in result.records],
        where="post",
        label="canary K",
    )
    k_axis.set_ylabel("K")
    g_axis.plot(minutes, [r.goodput for r in result.records], label="achieved")
    g_axis.plot(minutes, [r.oracle for r in result.records], "--", label="oracle (floor)")
    g_axis.set_ylabel("tokens/s per pod")
    a_axis.plot(
        minutes,
        [r.acceptance if r.acceptance is not None else float("nan") for r in result.records],
        label="draft acceptance rate",
    )
    a_axis.axhline(result.floor, color="red", linestyle=":", label="floor")
    a_axis.set_ylabel("acceptance")
    a_axis.set_xlabel("minutes")
    for axis in (k_axis, g_axis, a_axis):
        for start in result.phase_starts[1:]:
            axis.axvline(start / 60, color="grey", linestyle="--", linewidth=0.8)
        axis.legend(loc="best", fontsize="small")
    figure.suptitle(f"{result.scenario} (seed {result.seed})")
    figure.tight_layout()
    figure.savefig(out)
    plt.close(figure)
