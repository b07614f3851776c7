"""`specfleet simulate`: the real decision core against in-process simulated engines.

The engines are `specfleet.runtime.sim_model` (the same acceptance and step-time model
the sim pods serve); each window is drawn in aggregate (per-position binomial counts
over all of a pod's drafts, the speed series from the window's jittered step time) so a
run of a thousand windows takes a fraction of a second. Counters go through the real
WindowTracker and the real `decide`, which sees nothing the operator would not:
counters, gauges and the clock. It is never given the engine's step cost: the tuner
fits its own from the step times the pods report, as it would on a cluster.

The scenario format (one scenario, or a matrix of `variants`) is documented in
docs/tuning.md.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specfleet.operator import hot_schedules, schedule
from specfleet.operator.api import (
    HotSchedule,
    Placement,
    RollbackMetric,
    ScheduledBand,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.children import TRACKS, Track
from specfleet.operator.counts import Counts
from specfleet.operator.observations import (
    HotTrack,
    Observation,
    PodSample,
    SpecDecodeCounters,
    StepTally,
    WindowTracker,
    tallies_sum,
)
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, ActionKind
from specfleet.operator.rollback_metrics import ROLLBACK_METRICS
from specfleet.operator.track_plan import TrackPlan, plan
from specfleet.operator.tuner import Decided, decide
from specfleet.runtime.config import Drafting, Method
from specfleet.runtime.hot_schedule import batch_bucket
from specfleet.runtime.sim_model import (
    Seconds,
    SimProfile,
    StepCost,
    goodput,
    jitter,
    sample_positions,
    step_jitter,
    step_seconds,
)

START = datetime(2026, 1, 1, tzinfo=UTC)
# What decides each window: the tuner's `decide`, or a script in the simulator's own tests.
Decider = Callable[[SpeculativeModelSpec, SpeculativeModelStatus, Observation, datetime], Decided]


@dataclass(frozen=True)
class EnginePart:
    """A share of one pod's window run at one K: `k` verified per draft, `drafted` drafted
    (more than k only where the engine trims verification), `share` of the window's time."""

    k: int
    share: float
    drafted: int


# A pod's window by load: (share of the window's time, the phase at that load, how its
# engine ran it), one per slice of the phase's load.
PodWindow = list[tuple[float, "Phase", list[EnginePart]]]

# How an engine runs the K its pod was started with (`configured`) for one window: the
# engine's own per-step rule (the peers in `specfleet.operator.peers`). Called with the
# pod's name, that K, the phase and the run's random source; None: the configured K all along.
EngineRule = Callable[[str, int, "Phase", random.Random], list[EnginePart]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LoadStep(_Strict):
    """From `after` seconds on, each pod runs `concurrency` requests at a time (0: no
    requests at all, an idle fleet), or, with `mix`, load that moves inside every window:
    each concurrency for its share of the window's time."""

    after: Seconds
    concurrency: int | None = Field(None, ge=0)
    mix: dict[int, float] | None = Field(
        None,
        description="requests in flight (at `replicas` stable pods, as `concurrency`) -> "
        "the share of each window's time at it; the shares sum to 1",
    )

    @model_validator(mode="after")
    def _one_load(self) -> LoadStep:
        if (self.concurrency is None) == (self.mix is None):
            raise ValueError("a load step sets `concurrency` or `mix`, one of them")
        if self.mix is not None:
            if any(c < 1 or share <= 0 for c, share in self.mix.items()):
                raise ValueError("a load step's `mix` maps concurrencies >= 1 to shares > 0")
            if abs(sum(self.mix.values()) - 1) > 1e-6:
                raise ValueError("a load step's `mix` shares must sum to 1")
        return self


class Slowdown(_Strict):
    """Every pod's step time times `factor` in [after, until): a noisy neighbour, a
    throttled GPU, a slow minute the tuner must not learn from."""

    after: Seconds
    until: Seconds
    factor: float = Field(gt=0)

    @model_validator(mode="after")
    def _ends_after_start(self) -> Slowdown:
        if self.until <= self.after:
            raise ValueError("a slowdown's `until` must be after its `after`")
        return self


class ScaleStep(_Strict):
    """From `after` seconds on, an autoscaler runs `replicas` stable pods (it writes
    spec.replicas). The fleet's load stays: each pod's share changes with the count."""

    after: Seconds
    replicas: int = Field(ge=1)


# The draft model a scenario's config change commits (the running one is "sim/draft").
NEW_HEAD = "sim/draft-next"


class ConfigChange(_Strict):
    """At `after` seconds a commit names a new draft head (spec.draft.model): the pods
    that run it draw from its own acceptance and drafting cost. The tuner is told nothing;
    it sees the spec change and the pods' counters."""

    after: Seconds
    acceptance: list[float] = Field(
        min_length=1, description="the new head's acceptance per position (conditional)"
    )
    draft_cost_scale: float = Field(
        1.0, gt=0, description="its drafting costs times this, over the scenario's engine"
    )
    expect: Literal["Promote", "Reject"] = Field(
        description="what the benchmark holds the config trial to"
    )
    within: int = Field(
        12, ge=1, description="windows after the change by which it must be decided"
    )


class Scenario(_Strict):
    """A scenario file (YAML): engines, load over time, and the policy under test."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str
    description: str = ""
    duration: Seconds = Field(gt=0)
    replicas: int = Field(2, ge=1, description="stable pods; a canary adds one")
    method: str = Field(
        "peagle",
        description="draft.method: its drafting style (parallel, sequential, lookup) sets "
        "the engine's step cost",
    )
    engine: SimProfile = Field(default_factory=SimProfile)
    draft_cost_scale: float = Field(
        1.0,
        gt=0,
        description="the engine's drafting costs times this: under 1 a cheaper draft, over 1 "
        "a dearer one, than the engine cost's",
    )
    concurrency: int = Field(
        8, ge=1, description="running requests per pod at `replicas` stable pods"
    )
    load: list[LoadStep] = Field(default_factory=list)
    scale: list[ScaleStep] = Field(
        default_factory=list,
        description="fleet size over time: the load per pod is concurrency x replicas "
        "spread over the pods there are",
    )
    settle: Seconds = Field(600.0, description="time after each phase start not counted as steady")
    slowdowns: list[Slowdown] = Field(
        default_factory=list,
        description="spans in which every pod's step time is multiplied (not steady state)",
    )
    startup_seconds: Seconds = Field(
        0.0,
        alias="startupSeconds",
        description="a restarted pod (a new K, a canary created) serves nothing this long",
    )
    policy: dict[str, Any] = Field(
        default_factory=dict,
        description="SpeculativeModel spec fields (camelCase): speculation, tuning, rollback",
    )
    config_change: ConfigChange | None = None

    @property
    def engine_cost(self) -> StepCost:
        """The step cost the engines run (never shown to the tuner)."""
        return scaled_drafting(self.engine.cost, self.draft_cost_scale)

    def with_policy(self, override: Mapping[str, Any]) -> Scenario:
        """This scenario with `override` merged into its policy, as a variant's is."""
        return self.model_copy(update={"policy": _merged(self.policy, override)})


# ----------------------------------------------------------------------------- files

VARIANT_LABEL = re.compile(r"[a-z0-9][a-z0-9.-]*")
VARIANT_SEPARATOR = "@"
# A variant names itself and cannot nest more variants.
_FIXED_FIELDS = frozenset({"name", "variants"})


class _ScenarioLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping: PyYAML would keep the last one
    silently, and a scenario (or a variant) would lose a setting without a word."""


def _unique_keys_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"{key!r} is given twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_ScenarioLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys_mapping
)


def _merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `override` on top: mappings merge key by key, anything else is replaced."""
    merged = dict(base)
    for key, value in override.items():
        old = merged.get(key)
        merged[key] = (
            _merged(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return merged


def _leaves(mapping: Mapping[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the values a mapping sets (lists count as one value)."""
    paths: set[str] = set()
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        paths |= _leaves(value, path + ".") if isinstance(value, dict) else {path}
    return paths


def _variant_axes(variants: Any) -> list[list[tuple[str, dict[str, Any]]]]:
    """The axes of a `variants` matrix as (label, scenario fields) lists, checked: labels
    that can name a scenario, fields as mappings, and no field set by two axes (the
    combination would depend on the axes' order)."""
    if not isinstance(variants, dict) or not variants:
        raise ValueError("variants must map axis names to mappings of labels to scenario fields")
    axes: list[list[tuple[str, dict[str, Any]]]] = []
    owner: dict[str, str] = {}  # field path -> the axis that sets it
    for axis, labels in variants.items():
        if not isinstance(labels, dict) or not labels:
            raise ValueError(f"variants.{axis} must map labels to scenario fields")
        entries: list[tuple[str, dict[str, Any]]] = []
        for label, fields in labels.items():
            if not isinstance(label, str) or not VARIANT_LABEL.fullmatch(label):
                raise ValueError(
                    f"variants.{axis}: label {label!r} must be lower-case letters, digits, "
                    "'.' and '-', starting with a letter or digit"
                )
            fields = {} if fields is None else fields
            if not isinstance(fields, dict):
                raise ValueError(f"variants.{axis}.{label} must be a mapping of scenario fields")
            fixed = sorted(_FIXED_FIELDS & fields.keys())
            if fixed:
                raise ValueError(f"variants.{axis}.{label} may not set {', '.join(fixed)}")
            for path in _leaves(fields):
                if owner.setdefault(path, axis) != axis:
                    raise ValueError(f"variants.{owner[path]} and variants.{axis} both set {path}")
            entries.append((label, fields))
        axes.append(entries)
    return axes


def expand(data: Mapping[str, Any]) -> list[Scenario]:
    """The scenarios a file declares: itself, or one per combination of its `variants`,
    named `name@label/label/...` (labels in the order of the axes)."""
    base = {key: value for key, value in data.items() if key != "variants"}
    if "variants" not in data:
        return [Scenario.model_validate(base)]
    scenarios = []
    for combination in itertools.product(*_variant_axes(data["variants"])):
        labels = "/".join(label for label, _ in combination)
        merged = base
        for _, fields in combination:
            merged = _merged(merged, fields)
        try:
            scenarios.append(
                Scenario.model_validate(
                    {**merged, "name": f"{base.get('name')}{VARIANT_SEPARATOR}{labels}"}
                )
            )
        except ValidationError as error:
            raise ValueError(f"variant {labels}: {error}") from None
    return scenarios


def load_scenarios(path: Path) -> list[Scenario]:
    """Every scenario a file declares (see `expand`)."""
    data = yaml.load(path.read_text(), Loader=_ScenarioLoader)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a scenario must be a YAML mapping")
    return expand(data)


def load_scenario(path: Path, variant: str | None = None) -> Scenario:
    """One scenario of a file: the file's only one, or its variant `variant` (the labels
    after the `@` of the variant's name)."""
    scenarios = load_scenarios(path)
    names = [s.name.partition(VARIANT_SEPARATOR)[2] for s in scenarios]
    if variant is None and names == [""]:
        return scenarios[0]
    if variant is not None and variant in names:
        return scenarios[names.index(variant)]
    raise ValueError(
        f"{path} declares {len(scenarios)} variants; choose one of: {', '.join(names)}"
        if variant is None
        else f"{path} has no variant {variant!r}; it has: {', '.join(names) or 'none'}"
    )


def scenario_spec(scenario: Scenario) -> SpeculativeModelSpec:
    manifest: dict[str, Any] = {
        "model": {"name": "sim/target"},
        "draft": {"method": scenario.method}
        | ({"model": "sim/draft"} if Method(scenario.method).needs_draft_model else {}),
        "replicas": scenario.replicas,
        **scenario.policy,
    }
    return SpeculativeModelSpec.model_validate(manifest)


@dataclass(frozen=True)
class Phase:
    start: float
    acceptance: list[float]
    concurrency: int  # per pod (with a mix: its time-weighted mean, rounded)
    replicas: int  # stable pods
    # Load moving inside each window: (concurrency per pod, share of the time); empty:
    # `concurrency` all along.
    mix: tuple[tuple[int, float], ...] = ()

    def slices(self) -> list[tuple[float, Phase]]:
        """The window's time by load: (share, this phase at one concurrency)."""
        if not self.mix:
            return [(1.0, self)]
        return [(share, replace(self, concurrency=c, mix=())) for c, share in self.mix]


def phases(scenario: Scenario) -> list[Phase]:
    """Stretches of constant acceptance, load and fleet size (drift, load and scale steps
    cut them)."""
    starts = sorted(
        {0.0}
        | {s.after for s in scenario.engine.drift if s.after < scenario.duration}
        | {s.after for s in scenario.load if s.after < scenario.duration}
        | {s.after for s in scenario.scale if s.after < scenario.duration}
        # A new draft head: a new stretch, whose trial and re-learned K settle first.
        | ({scenario.config_change.after} if scenario.config_change else set())
    )
    result = []
    for start in starts:
        acceptance, _ = scenario.engine.at(start)
        mix: dict[int, float] = {scenario.concurrency: 1.0}
        for step in scenario.load:
            if step.after <= start:
                mix = step.mix if step.mix is not None else {step.concurrency or 0: 1.0}
        replicas = scenario.replicas
        for scale in scenario.scale:
            if scale.after <= start:
                replicas = scale.replicas

        # Idle stays idle; any load gives each pod at least one request.
        shares = tuple(
            (c and max(1, round(c * scenario.replicas / replicas)), share)
            for c, share in mix.items()
        )
        mean = round(sum(c * share for c, share in shares))
        result.append(
            Phase(start, list(acceptance), mean, replicas, shares if len(shares) > 1 else ())
        )
    return result


@dataclass
class WindowRecord:
    index: int
    start: float
    phase: int
    tokens: int  # K of the stable pods during the window (0: plain decoding)
    candidate: int | None
    goodput: float
    best_static: float  # goodput of the phase's best static K, no floor
    acceptance: float | None  # the rollback metric: the figure the floor judges
    actions: list[str] = field(default_factory=list)
    stable_new_head: bool = False  # the stable pods ran the config change's new head
    # The stable pods alternated a trial's K with the running one, taken hot: a slice of
    # a measurement, not a change of the K they serve.
    alternating: bool = False


HOUR = 3600.0


@dataclass
class SimulationResult:
    scenario: str
    seed: int
    interval: float
    floor: float
    metric: str  # spec.rollback.metric: what `floor` judges and `acceptance` records
    records: list[WindowRecord]
    phase_starts: list[float]
    oracle_tokens: list[int]  # best static K per phase whose expected metric clears the floor
    best_static_tokens: list[int]  # best static K per phase, no floor (0: plain decoding)
    goodput: dict[str, float]
    steady_goodput: dict[str, float]
    rollbacks: int
    # Rollbacks while speculation at the stable K still paid and its first-position
    # acceptance (whether the draft still fits the target) cleared the floor.
    false_rollbacks: int
    wrong_disables: int  # speculation switched off in a phase whose best static K is > 0
    # Per drift after which speculation no longer pays: windows from the drift to the
    # decision that left plain decoding in effect (None: not within the phase).
    drift_to_plain: list[int | None]
    steady_k_changes: list[float]  # when the stable K changed in steady state (seconds)
    decisions: list[dict[str, Any]]
    pod_starts: list[float]  # when a pod's engine (re)started after the first window (seconds)
    # The config change's trial: PromoteConfig or RejectConfig (None: undecided), the
    # windows from the change to it, and windows the stable pods ran the new head before.
    config_outcome: str | None = None
    config_decided_after: int | None = None
    new_head_on_stable_before_promotion: int = 0

    @property
    def steady_ratio(self) -> float:
        """Steady-state goodput over the best static K's, no floor."""
        best = self.steady_goodput["unconstrained"]
        return self.steady_goodput["achieved"] / best if best else 1.0

    @property
    def max_k_changes_per_hour(self) -> int:
        """The most stable-K changes in any hour of steady state."""
        changes = self.steady_k_changes
        return max(
            (sum(1 for t in changes if start <= t < start + HOUR) for start in changes), default=0
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "windows": len(self.records),
            "interval_seconds": self.interval,
            "floor": self.floor,
            "metric": self.metric,
            "goodput": {k: round(v, 2) for k, v in self.goodput.items()},
            "steady_state_goodput": {k: round(v, 2) for k, v in self.steady_goodput.items()},
            "steady_state_ratio_to_best_static": round(self.steady_ratio, 4),
            "oracle_tokens_per_phase": self.oracle_tokens,
            "best_static_tokens_per_phase": self.best_static_tokens,
            "rollbacks": self.rollbacks,
            "false_rollbacks": self.false_rollbacks,
            "wrong_disables": self.wrong_disables,
            "windows_from_drift_to_plain_decoding": self.drift_to_plain,
            "steady_state_k_changes_seconds": self.steady_k_changes,
            "max_k_changes_per_hour": self.max_k_changes_per_hour,
            "pod_starts_seconds": self.pod_starts,
            "final_tokens": self.records[-1].tokens if self.records else None,
            "decisions": self.decisions,
        }


def _engine_window(
    rng: random.Random,
    engine: SimProfile,
    cost: StepCost,
    previous: SpecDecodeCounters,
    acceptance: list[float],
    k: int,
    batch: int,
    seconds: float,
    drafting: Drafting,
    configured: bool,
    drafted: int | None = None,
    share: float = 1.0,
    hot: bool = False,
) -> SpecDecodeCounters:
    """One pod's counters after serving `seconds` more at K=k (k=0: no drafting; the
    spec-decode series exist only if speculation is `configured`, e.g. a schedule's K=0
    band), its steps slowed to `share` of their speed; `hot`: its engine takes K hot and
    exports the runtime's step statistics. Per-position counts are sized for the ceiling
    the process started with (vLLM's `SpecDecodingStats`), so a schedule's or a hot
    pod's smaller K keeps what deeper Ks counted.
    Every engine step serves the whole batch: one draft and one inter-token latency
    observation per request, one iteration-tokens observation per step; with no request
    (batch 0) no step runs."""
    step = (
        step_seconds(cost, k, batch, drafting, drafted, configured=configured)
        * step_jitter(rng, engine.step_noise)
        / share
    )
    engine_steps = round(seconds / step) if batch else 0
    decode_steps = engine_steps * batch
    accepted = (
        sample_positions(rng, jitter(rng, acceptance, engine.noise), k, decode_steps) if k else []
    )
    total = previous + Counts(
        drafts=decode_steps if k else 0,
        draft_tokens=decode_steps * k,
        accepted_tokens=sum(accepted),
        accepted_per_position=tuple(accepted),
        generation_tokens=decode_steps + sum(accepted),
        decode_seconds=decode_steps * step,
        decode_steps=decode_steps,
        engine_steps=engine_steps,
    )
    tallies, bound = previous.step_tallies, batch_bucket(batch)
    if hot and engine_steps and bound.isdigit():  # the runtime's step statistics (hot pods)
        steps = StepTally(int(bound), k, engine_steps, engine_steps * step)
        tallies = tallies_sum([tallies, [steps]])
    return replace(
        previous.with_counts(total),
        requests_running=batch,
        speculation_exported=k > 0 or configured,
        step_tallies=tallies,
    )


def simulate(
    scenario: Scenario,
    seed: int = 0,
    decider: Decider = decide,
    engine_rule: EngineRule | None = None,
) -> SimulationResult:
    """Run the scenario window by window through WindowTracker and `decider`; the engines
    change K within a window only by `engine_rule`'s parts (no restart)."""
    run = _Simulation(scenario, seed, decider, engine_rule)
    for index in range(run.windows):
        run.window(index)
    return run.result()


class _Simulation:
    """One run of `simulate`: the engines, the tuner's status, and the accounts kept."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int,
        decider: Decider,
        engine_rule: EngineRule | None = None,
    ) -> None:
        self.scenario = scenario
        self.decider = decider
        self.engine_rule = engine_rule
        self.spec = spec = scenario_spec(scenario)
        self.drafting = spec.draft.method.runtime.drafting
        self.cost = scenario.engine_cost
        self.interval = spec.tuning.interval.length.total_seconds()
        self.floor = spec.rollback.min_acceptance
        self.rng = random.Random(seed)
        self.seed = seed
        self.cuts = cuts = phases(scenario)
        low, high = spec.speculation.min_tokens, spec.speculation.max_tokens
        self.allowed = allowed = [0, *range(low, high + 1)]
        metric = ROLLBACK_METRICS[spec.rollback.metric]
        self.oracle_k = [
            max(
                (k for k in allowed if k == 0 or metric.expected(p.acceptance, k) >= self.floor),
                key=lambda k: self.good(p, k),
            )
            for p in cuts
        ]
        self.free_k = [max(allowed, key=lambda k: self.good(p, k)) for p in cuts]
        for i, p in enumerate(cuts):
            if p.concurrency == 0 and i > 0:  # idle: no K is better, the last best stands
                self.oracle_k[i], self.free_k[i] = self.oracle_k[i - 1], self.free_k[i - 1]
        self.status = SpeculativeModelStatus()
        self.tracker = WindowTracker()
        self.counters: dict[str, SpecDecodeCounters] = {}
        # What each pod's process was started with: K, schedule and draft, or (taking K
        # hot: None) its draft alone. A pod restarts when it changes.
        self.pod_config: dict[str, tuple[int | None, tuple[ScheduledBand, ...], bool]] = {}
        self.ready_at: dict[str, float] = {}  # when a restarted pod serves again
        self.pod_starts: list[float] = []
        self.serving: dict[str, float] = {}  # each pod's share of this window it served
        change = scenario.config_change
        self.change_window = None if change is None else int(change.after // self.interval)
        self.head_cost = (
            None if change is None else scaled_drafting(self.cost, change.draft_cost_scale)
        )
        self.config_outcome: tuple[str, int] | None = None
        self.new_head_on_stable = 0
        self.records: list[WindowRecord] = []
        self.decisions: list[dict[str, Any]] = []
        names = ("achieved", "oracle", "unconstrained", "k3", "k5", "none")
        self.totals = {name: 0.0 for name in names}
        self.steady = dict.fromkeys(self.totals, 0.0)
        # Each K held for the whole run, for the best single K in hindsight.
        self.per_k = dict.fromkeys(allowed, 0.0)
        self.steady_per_k = dict.fromkeys(allowed, 0.0)
        self.rollbacks = self.false_rollbacks = self.wrong_disables = 0
        self.drift_to_plain: list[int | None] = []
        self.awaiting_plain: int | None = None  # window index of a drift after which nothing pays
        self.windows = int(scenario.duration // self.interval)
        self.spec = spec.model_copy(update={"replicas": cuts[0].replicas})  # as window() does
        first = self.pods()
        self.tracker.observe(
            [PodSample(name, track, 0.0, SpecDecodeCounters()) for name, track, _, _ in first],
            {track: k for _, track, k, _ in first},
        )
        observation = Observation(stable=None, canary=None)
        self.status = decider(spec, self.status, observation, START).status

    def good(self, p: Phase, k: int) -> float:
        """K held all window (the pods started with it): its goodput, time-weighted over
        the window's load."""
        return sum(
            share * goodput(self.cost, at.acceptance, k, at.concurrency, self.drafting)
            for share, at in self.slices_run(p, k)
        )

    def slices_run(self, p: Phase, ceiling: int) -> list[tuple[float, Phase]]:
        """The window's slices of load at the requests a pod started with `ceiling` runs:
        those its KV cache holds with the ceiling's lookahead each (the rest wait)."""
        fits = self.scenario.engine.capacity(ceiling)
        return [
            (share, replace(at, concurrency=min(at.concurrency, fits))) for share, at in p.slices()
        ]

    def new_head(self, track: Track) -> bool:
        """Whether a track's pods run the config change's new head (the config status
        says they run)."""
        if self.scenario.config_change is None:
            return False
        return plan(self.spec, self.status)[track].spec.draft.model == NEW_HEAD

    def engine_of(self, track: Track, p: Phase) -> tuple[StepCost, Phase]:
        """The step cost and acceptance a track's pods run in phase `p`."""
        change = self.scenario.config_change
        if change is None or self.head_cost is None or not self.new_head(track):
            return self.cost, p
        return self.head_cost, replace(p, acceptance=list(change.acceptance))

    def parts(self, name: str, k: int, p: Phase, ceiling: int) -> list[EnginePart]:
        """How a pod runs this window at K=k: its engine's rule (a peer's engine, started
        at k), or k all along. A parallel drafter below its engine's ceiling drafts every
        slot of the ceiling in its one pass and keeps the first K (vLLM sizes the slots
        once, by num_speculative_tokens: docs/runtime.md), whoever picks the K."""
        if self.engine_rule is None:
            found = [EnginePart(k, 1.0, k)]
        else:
            found, ceiling = self.engine_rule(name, k, p, self.rng), k
        if self.drafting is not Drafting.PARALLEL:
            return found
        return [
            replace(part, drafted=max(part.drafted, ceiling)) if part.k else part for part in found
        ]

    def good_parts(self, track: Track, window: PodWindow, configured: bool) -> float:
        """A pod's goodput over a window of parts, each weighted by its share of the time,
        on the engine its track runs (`configured`: started to speculate, so K=0 is taxed)."""
        total = 0.0
        for load_share, at, parts in window:
            cost, on = self.engine_of(track, at)
            total += load_share * sum(
                part.share
                * goodput(
                    cost,
                    on.acceptance,
                    part.k,
                    on.concurrency,
                    self.drafting,
                    part.drafted,
                    configured=configured,
                )
                for part in parts
            )
        return total

    def pays(self, p: Phase, k: int) -> bool:
        return k > 0 and self.good(p, k) > self.good(p, 0)

    def pods(self) -> list[tuple[str, Track, int, tuple[ScheduledBand, ...]]]:
        """Each pod's track, largest K and schedule (empty: that K at every load), as the
        tracks' plan says their pods run."""
        plans = plan(self.spec, self.status)
        return [
            (f"{track}-{i}", track, plans[track].tokens, tuple(plans[track].schedule or ()))
            for track in TRACKS
            for i in range(plans[track].replicas)
        ]

    def window(self, index: int) -> None:
        """One interval: the engines run, the goodputs are counted, the tuner decides."""
        start = index * self.interval
        phase_index = max(i for i, p in enumerate(self.cuts) if p.start <= start)
        phase = self.cuts[phase_index]
        if phase.start == start and phase_index > 0:
            self._phase_changed(index, phase_index)
        # What the scaler wrote: the decision core sees the spec it would read.
        self.spec = self.spec.model_copy(update={"replicas": phase.replicas})
        if index == self.change_window:  # the commit of a new draft head
            draft = self.spec.draft.model_copy(update={"model": NEW_HEAD})
            self.spec = self.spec.model_copy(update={"draft": draft})
        running = self.pods()
        plans = plan(self.spec, self.status)
        ceilings = {name: _ceiling(plans[track], k) for name, track, k, _ in running}
        parts: dict[str, PodWindow] = {
            name: [
                (
                    share,
                    at,
                    self.parts(name, _k_in_window(k, bands, at.concurrency), at, ceilings[name]),
                )
                for share, at in self.slices_run(phase, ceilings[name])
            ]
            for name, _, k, bands in running
        }
        observation = self._run_engines(running, phase, start, parts)
        now = START + timedelta(seconds=start + self.interval)
        # The K a record shows: the one in effect for most of the window.
        most = max(phase.slices(), key=lambda s: s[0])[1].concurrency
        stable_k = _k_in_window(running[0][2], running[0][3], most)
        canary_k = (
            _k_in_window(running[-1][2], running[-1][3], most)
            if running[-1][1] == "canary"
            else None
        )
        values = self._count_goodput(phase, phase_index, start, running, parts)
        # What the fleet measures of its pods (created to Ready) for the tuner to weigh.
        measured = self.scenario.startup_seconds or None
        self.status = self.status.model_copy(update={"startup_seconds": measured})
        stable_new_head = self.new_head("stable")
        trial = self.status.speculation.trial
        alternating = (
            plans["stable"].hot and trial is not None and trial.placement is not Placement.CANARY
        )
        if stable_new_head and not (self.config_outcome and self.config_outcome[0] == "Promote"):
            self.new_head_on_stable += 1
        decided = self.decider(self.spec, self.status, observation, now)
        self.status = decided.status
        kinds = [a.kind for a in decided.actions if a.kind != "Inconclusive"]
        self._count_actions(index, decided, phase, phase_index, stable_k)
        if self.awaiting_plain is not None and self.status.speculation.off is not None:
            self.drift_to_plain.append(index + 1 - self.awaiting_plain)
            self.awaiting_plain = None
        self.records.append(
            WindowRecord(
                index + 1,
                start,
                phase_index,
                stable_k,
                canary_k,
                values["achieved"],
                values["unconstrained"],
                self.status.acceptance.judged,
                kinds,
                stable_new_head,
                alternating,
            )
        )

    def _phase_changed(self, index: int, phase_index: int) -> None:
        """A drift after which no K pays starts the clock to plain decoding."""
        if self.awaiting_plain is not None:
            self.drift_to_plain.append(None)  # another phase came first
            self.awaiting_plain = None
        before, phase = self.cuts[phase_index - 1], self.cuts[phase_index]
        if (
            phase.acceptance != before.acceptance
            and self.free_k[phase_index - 1] > 0
            and self.free_k[phase_index] == 0
        ):
            if self.status.speculation.off is not None:
                self.drift_to_plain.append(0)
            else:
                self.awaiting_plain = index

    def _run_engines(
        self,
        running: list[tuple[str, Track, int, tuple[ScheduledBand, ...]]],
        phase: Phase,
        start: float,
        parts: Mapping[str, PodWindow],
    ) -> Observation:
        """Each pod's counters after one more interval (part by part), cut into windows by
        the tracker."""
        for gone in self.pod_config.keys() - {name for name, _, _, _ in running}:
            del self.pod_config[gone]  # scaled in: a pod of that name later is a new process
        samples = []
        end = start + self.interval
        hot = self.hot_schedule()
        for name, track, k, bands in running:
            cost, on = self.engine_of(track, phase)
            taken_hot = hot is not None and track == "stable"
            # A pod that takes K hot runs its engine on: only its draft restarts it.
            config = (
                (None, (), self.new_head(track)) if taken_hot else (k, bands, self.new_head(track))
            )
            if self.pod_config.get(name) != config:
                # A rollout restarts the pod: a new process, its counters from zero, and
                # (after the first window) nothing served until its weights are loaded.
                self.counters[name] = SpecDecodeCounters(process_start_time=start)
                self.pod_config[name] = config
                self.ready_at[name] = start + self.scenario.startup_seconds if start else 0.0
                if start:
                    self.pod_starts.append(start)
            served = max(0.0, end - max(start, self.ready_at[name]))
            self.serving[name] = served / self.interval
            # Smallest K first: vLLM's per-position counts end at the last K drafted.
            by_k = [(part, share, at) for share, at, ps in parts[name] for part in ps]
            for part, load_share, at in sorted(by_k, key=lambda run: run[0].k):
                self.counters[name] = _engine_window(
                    self.rng,
                    self.scenario.engine,
                    cost,
                    self.counters[name],
                    on.acceptance,
                    part.k,
                    at.concurrency,
                    served * load_share * part.share,
                    self.drafting,
                    k > 0,
                    part.drafted,
                    self.slowdown_share(start),
                    taken_hot,
                )
            if taken_hot and hot is not None:
                # Handed over right after the decision that made it: at this window's start.
                counters = self.counters[name]
                applied = (
                    counters.schedule_applied_at
                    if counters.schedule_generation == hot.generation
                    else start
                )
                self.counters[name] = replace(
                    counters, schedule_generation=hot.generation, schedule_applied_at=applied
                )
            samples.append(PodSample(name, track, start + self.interval, self.counters[name]))
        tokens = {track: k for _, track, k, _ in running}
        ceiling = self.spec.speculation.max_tokens
        hot_tracks: dict[Track, HotTrack] | None = (
            None if hot is None else {"stable": HotTrack(hot.generation, ceiling)}
        )
        return self.tracker.observe(samples, tokens, hot_tracks)

    def hot_schedule(self) -> HotSchedule | None:
        """The schedule the stable pods run hot (spec.speculation.switching Hot), if so."""
        hot = self.status.speculation.hot_schedule
        return hot if hot is not None and hot_schedules.in_effect(self.spec, self.status) else None

    def slowdown_share(self, start: float) -> float:
        """The share of its tokens a pod serves in the window from `start` under the
        scenario's slowdowns: time at a step `factor` times longer serves 1/factor."""
        end, share = start + self.interval, 1.0
        for slow in self.scenario.slowdowns:
            overlap = max(0.0, min(end, slow.until) - max(start, slow.after)) / self.interval
            share -= overlap * (1.0 - 1.0 / slow.factor)
        return share

    def in_steady_state(self, start: float, phase: Phase) -> bool:
        """Past the phase's settling time and outside every slowdown."""
        end = start + self.interval
        slowed = any(s.after < end and start < s.until for s in self.scenario.slowdowns)
        return start >= phase.start + self.scenario.settle and not slowed

    def _count_goodput(
        self,
        phase: Phase,
        phase_index: int,
        start: float,
        running: list[tuple[str, Track, int, tuple[ScheduledBand, ...]]],
        parts: Mapping[str, PodWindow],
    ) -> dict[str, float]:
        """This window's goodput: achieved (each pod on the engine its track's config runs,
        part by part, for the share of the window it served), the oracles', and each K's
        held all along (never restarted)."""
        share = self.slowdown_share(start)

        def good(k: int) -> float:
            return self.good(phase, k) * share

        achieved = sum(
            self.good_parts(track, parts[name], k > 0) * share * self.serving[name]
            for name, track, k, _ in running
        ) / len(running)
        values = {
            "achieved": achieved,
            "oracle": good(self.oracle_k[phase_index]),
            "unconstrained": good(self.free_k[phase_index]),
            "k3": good(3),
            "k5": good(5),
            "none": good(0),
        }
        is_steady = self.in_steady_state(start, phase)
        for key, value in values.items():
            self.totals[key] += value
            if is_steady:
                self.steady[key] += value
        for k in self.allowed:
            self.per_k[k] += good(k)
            if is_steady:
                self.steady_per_k[k] += good(k)
        return values

    def _count_actions(
        self, index: int, decided: Decided, phase: Phase, phase_index: int, stable_k: int
    ) -> None:
        """The decisions, and which rollbacks and disables were wrong."""
        for action in decided.actions:
            if action.kind == "Inconclusive":
                continue
            self.decisions.append(
                {
                    "window": index + 1,
                    "kind": action.kind,
                    "reason": action.reason,
                    "message": action.message,
                }
            )
            outcome = _CONFIG_OUTCOMES.get(action.kind)
            if outcome and self.config_outcome is None and self.change_window is not None:
                self.config_outcome = (outcome, index - self.change_window)
            if action.kind in ROLLBACK_ACTIONS:
                self.rollbacks += 1
                first = ROLLBACK_METRICS[RollbackMetric.FIRST_POSITION_ACCEPTANCE]
                first_position = first.expected(phase.acceptance, stable_k)
                if self.pays(phase, stable_k) and first_position >= self.floor:
                    self.false_rollbacks += 1
            if (
                action.kind in (ActionKind.DISABLE, ActionKind.STOP_SPECULATION)
                and self.free_k[phase_index] > 0
            ):
                self.wrong_disables += 1

    def result(self) -> SimulationResult:
        if self.awaiting_plain is not None:
            self.drift_to_plain.append(None)
        cuts, records = self.cuts, self.records

        def in_steady_state(record: WindowRecord) -> bool:
            return self.in_steady_state(record.start, cuts[record.phase])

        steady_k_changes = [
            record.start
            for previous, record, excursion in _k_changes(records)
            if not excursion and record.phase == previous.phase and in_steady_state(record)
        ]
        count = max(1, self.windows)
        steady_count = max(1, sum(1 for r in records if in_steady_state(r)))
        self.totals["single"] = max(self.per_k.values())
        self.steady["single"] = max(self.steady_per_k.values())
        return SimulationResult(
            scenario=self.scenario.name,
            seed=self.seed,
            interval=self.interval,
            floor=self.floor,
            metric=self.spec.rollback.metric.value,
            records=records,
            phase_starts=[p.start for p in cuts],
            oracle_tokens=self.oracle_k,
            best_static_tokens=self.free_k,
            goodput={k: v / count for k, v in self.totals.items()},
            steady_goodput={k: v / steady_count for k, v in self.steady.items()},
            rollbacks=self.rollbacks,
            false_rollbacks=self.false_rollbacks,
            wrong_disables=self.wrong_disables,
            drift_to_plain=self.drift_to_plain,
            steady_k_changes=steady_k_changes,
            decisions=self.decisions,
            pod_starts=self.pod_starts,
            config_outcome=self.config_outcome[0] if self.config_outcome else None,
            config_decided_after=self.config_outcome[1] if self.config_outcome else None,
            new_head_on_stable_before_promotion=self.new_head_on_stable,
        )


def _k_changes(records: list[WindowRecord]) -> Iterator[tuple[WindowRecord, WindowRecord, bool]]:
    """Each change of the stable K (the window before, the window after) and whether it
    only ends an excursion: an aborted in-place trial going back to the K before it. Such
    a trial is one decision (two restarts, which the goodput counts), so it is one change
    in the bar's count, made when it started. A hot trial's alternation changes nothing:
    only its promotion does."""
    before = None  # the K before the last change
    served = [record for record in records if not record.alternating]
    for previous, record in itertools.pairwise(served):
        if record.tokens == previous.tokens:
            continue
        yield previous, record, ActionKind.ABORT in previous.actions and record.tokens == before
        before = previous.tokens


_CONFIG_OUTCOMES: dict[str, str] = {
    ActionKind.PROMOTE_CONFIG: "Promote",
    ActionKind.REJECT_CONFIG: "Reject",
}


def scaled_drafting(cost: StepCost, scale: float) -> StepCost:
    """`cost` with its drafting costs times `scale` (a cheaper or dearer draft)."""
    return cost.model_copy(
        update={
            "draft_ms_per_token": cost.draft_ms_per_token * scale,
            "parallel_draft_ms": cost.parallel_draft_ms * scale,
            "parallel_draft_ms_per_token": cost.parallel_draft_ms_per_token * scale,
        }
    )


def _ceiling(track: TrackPlan, k: int) -> int:
    """The K a pod's engine was started with: the ceiling where it takes K hot, else the
    largest K it runs (0: plain decoding)."""
    return track.spec.speculation.max_tokens if track.hot else k


def _k_in_window(k: int, bands: tuple[ScheduledBand, ...], concurrency: int) -> int:
    # A slice of a window runs at one concurrency, so a schedule gives it one K.
    return schedule.k_at(bands, concurrency) if bands else k


LABELS = {
    "achieved": "achieved (tuner)",
    "unconstrained": "best static K per phase, no floor",
    "single": "best single K for the whole run",
    "oracle": "best static K per phase under the floor",
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
        f"steady-state goodput / best static K's: {result.steady_ratio:.3f}",
        f"best static K per phase: {result.best_static_tokens} "
        f"(under the floor: {result.oracle_tokens})",
        f"rollbacks: {result.rollbacks} (false: {result.false_rollbacks}); "
        f"speculation switched off where it paid: {result.wrong_disables}; "
        f"windows from a drift to plain decoding: {result.drift_to_plain or '-'}",
        f"stable K changes in steady state: {len(result.steady_k_changes)} "
        f"(at most {result.max_k_changes_per_hour} in an hour)",
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
    g_axis.plot(minutes, [r.best_static for r in result.records], "--", label="best static K")
    g_axis.set_ylabel("tokens/s per pod")
    a_axis.plot(
        minutes,
        [r.acceptance if r.acceptance is not None else float("nan") for r in result.records],
        label=result.metric,
    )
    a_axis.axhline(result.floor, color="red", linestyle=":", label=f"floor ({result.metric})")
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
