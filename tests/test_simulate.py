from __future__ import annotations

import copy
import functools
import itertools
import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from benchmarks.step_cost_shape import published_profiles
from benchmarks.tuner import evaluate
from specfleet.operator.api import Off, OffReason, SpeculativeModelSpec, SpeculativeModelStatus
from specfleet.operator.cli import app
from specfleet.operator.observations import (
    Observation,
    PodSample,
    SpecDecodeCounters,
    WindowTracker,
)
from specfleet.operator.outcomes import Action, ActionKind
from specfleet.operator.peers import PEERS, hold, started_at_their_k
from specfleet.operator.simulate import (
    START,
    Decider,
    Scenario,
    SimulationResult,
    _engine_window,
    expand,
    load_scenario,
    load_scenarios,
    phases,
    simulate,
)
from specfleet.operator.tuner import Decided, decide
from specfleet.runtime.config import Drafting
from specfleet.runtime.sim_model import SimProfile, StepCost, step_seconds

SCENARIOS = Path(__file__).parent.parent / "scenarios"
STALE_DRAFT = [0.3, 0.2]  # the stale-draft drift's profile: no K pays with it
BROKEN_DRAFT = [0.12, 0.1]  # scenarios/floor/broken-draft.yaml: far under the floor
CODE, CHAT = published_profiles()["code"], published_profiles()["chat"]


def shipped() -> Iterator[Scenario]:
    for path in sorted(SCENARIOS.glob("**/*.yaml")):
        yield from load_scenarios(path)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("**/*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_load(path: Path) -> None:
    for scenario in load_scenarios(path):
        assert phases(scenario)[0].start == 0


def test_shipped_scenario_names_are_unique_and_profiles_published() -> None:
    scenarios = list(shipped())
    names = [s.name for s in scenarios]
    assert len(names) == len(set(names))
    assert len([n for n in names if n.startswith("steady@")]) == 27
    published = [*published_profiles().values(), STALE_DRAFT, BROKEN_DRAFT]
    for scenario in scenarios:
        for acceptance in [
            scenario.engine.acceptance,
            *(d.acceptance for d in scenario.engine.drift),
            *([scenario.config_change.acceptance] if scenario.config_change else []),
        ]:
            assert acceptance in published, (scenario.name, acceptance)


# ----------------------------------------------------------------------------- variants

BASE: dict[str, Any] = {
    "name": "tiny",
    "duration": "1h",
    "engine": {"acceptance": [0.9, 0.7], "noise": 0.01},
    "variants": {
        "workload": {"high": None, "low": {"engine": {"acceptance": [0.5]}}},
        "concurrency": {"c1": {"concurrency": 1}, "c8": {"concurrency": 8}},
    },
}


def test_variants_expand_to_every_combination_merged_into_the_base() -> None:
    scenarios = expand(BASE)
    assert [s.name for s in scenarios] == [
        "tiny@high/c1",
        "tiny@high/c8",
        "tiny@low/c1",
        "tiny@low/c8",
    ]
    high_c1, _, low_c1, low_c8 = scenarios
    assert high_c1.engine.acceptance == [0.9, 0.7] and high_c1.concurrency == 1
    # A nested mapping merges key by key: the base's noise stays.
    assert low_c8.engine.acceptance == [0.5] and low_c8.engine.noise == 0.01
    assert low_c8.concurrency == 8 and low_c1.duration == 3600
    assert expand({k: v for k, v in BASE.items() if k != "variants"})[0].name == "tiny"


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ({"concurrency": {"c1": {"concurency": 1}}}, "(?s)variant c1:.*concurency"),  # a typo
        ({"cost": {"c1": {"engine": {"cost": {"target_ms": 3}}}}}, "(?s)variant c1:.*target_ms"),
        ({"concurrency": {"C1": {"concurrency": 1}}}, "label 'C1'"),
        ({"concurrency": {"a/b": {"concurrency": 1}}}, "label 'a/b'"),
        ({"concurrency": [1, 8]}, "variants.concurrency must map labels"),
        ({"concurrency": {}}, "variants.concurrency must map labels"),
        ({"concurrency": {"c1": 1}}, "variants.concurrency.c1 must be a mapping"),
        ({"concurrency": {"c1": {"name": "x"}}}, "may not set name"),
        ({"a": {"x": {"concurrency": 1}}, "b": {"y": {"concurrency": 8}}}, "both set concurrency"),
        ([{"concurrency": 1}], "variants must map axis names"),
    ],
)
def test_bad_variants_are_refused_by_name(variants: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand({**BASE, "variants": variants})


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("name: x\nduration: 1h\nvariants:\n  c: {c8: {concurrency: 8}, c8: {}}\n")
    with pytest.raises(yaml.YAMLError, match="'c8' is given twice"):
        load_scenarios(path)


def test_one_variant_of_a_file_is_chosen_by_its_labels(tmp_path: Path) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(BASE))
    assert load_scenario(path, "low/c8").name == "tiny@low/c8"
    with pytest.raises(ValueError, match="choose one of: high/c1, high/c8, low/c1, low/c8"):
        load_scenario(path)
    with pytest.raises(ValueError, match="no variant 'low/c2'"):
        load_scenario(path, "low/c2")
    single = tmp_path / "single.yaml"
    single.write_text("name: single\nduration: 1h\n")
    assert load_scenario(single).name == "single"
    with pytest.raises(ValueError, match="no variant 'c8'"):
        load_scenario(single, "c8")


# ----------------------------------------------------------------------------- engines


@pytest.mark.parametrize("k", [0, 3])
@pytest.mark.parametrize("batch", [1, 8, 32])
def test_an_engine_window_times_every_step_of_the_batch(k: int, batch: int) -> None:
    """What the operator reads from a simulated pod: decoding requests per engine step is
    the batch, decode seconds per decode step the engine's step time (no jitter here)."""
    import random

    engine, cost = SimProfile(acceptance=CHAT, step_noise=0.0), StepCost()
    rng, tracker = random.Random(1), WindowTracker()
    counters = SpecDecodeCounters(process_start_time=0.0)
    for at in (60.0, 120.0):
        counters = _engine_window(
            rng, engine, cost, counters, CHAT, k, batch, 60.0, Drafting.PARALLEL, k > 0
        )
        observation = tracker.observe([PodSample("p", "stable", at, counters)], {"stable": k})
    window = observation.stable
    assert window is not None
    assert window.batch_per_pod == batch
    assert window.step_seconds == pytest.approx(step_seconds(cost, k, batch, Drafting.PARALLEL))
    assert window.engine_steps == round(60.0 / step_seconds(cost, k, batch, Drafting.PARALLEL))
    assert window.drafts == (window.decode_steps if k else 0)


def test_a_schedule_pod_keeps_the_deeper_positions_it_counted() -> None:
    """A pod restarted with a schedule (K=7 at low load, K=3 above) drafts at both Ks in
    one process; vLLM sizes its per-position counts by the ceiling, so a window at K=3
    after one at K=7 is a true reading. Cut to K=3's positions, every window of the pod
    after the load rose was left out as impossible counters, and a schedule's canary
    measured nothing from then on."""
    import random

    engine, cost = SimProfile(acceptance=CHAT), StepCost()
    rng, tracker = random.Random(3), WindowTracker()
    counters = SpecDecodeCounters(process_start_time=0.0)
    for at, k, batch in ((60.0, 7, 2), (120.0, 7, 2), (180.0, 3, 8)):
        counters = _engine_window(
            rng, engine, cost, counters, CHAT, k, batch, 60.0, Drafting.PARALLEL, True
        )
        observation = tracker.observe([PodSample("p", "canary", at, counters)], {"canary": 7})
    assert not observation.errors
    assert len(counters.accepted_per_position) == 7
    assert sum(counters.accepted_per_position) == pytest.approx(counters.accepted_tokens)
    last = observation.canary  # the window at K=3, after the load rose
    assert last is not None and last.batch_per_pod == 8
    assert last.accepted_per_position[3:] == pytest.approx([0.0] * 4)  # K=3 drafted none


def test_step_noise_jitters_each_window_around_the_model() -> None:
    import random

    engine, cost = SimProfile(acceptance=CHAT, step_noise=0.05), StepCost()
    rng, seconds = random.Random(2), step_seconds(cost, 3, 8, Drafting.PARALLEL)
    steps = []
    for _ in range(200):
        c = _engine_window(
            rng, engine, cost, SpecDecodeCounters(), CHAT, 3, 8, 60.0, Drafting.PARALLEL, True
        )
        steps.append(c.decode_seconds / c.decode_steps)
    assert len(set(steps)) > 100  # every window its own
    assert sum(steps) / len(steps) == pytest.approx(seconds, rel=0.01)
    assert min(steps) < 0.95 * seconds < 1.05 * seconds < max(steps)


def test_draft_cost_scale_scales_only_the_draft() -> None:
    scenario = Scenario(name="x", duration=60, draft_cost_scale=2)
    cost, base = scenario.engine_cost, StepCost()
    assert cost.parallel_draft_ms == 2 * base.parallel_draft_ms
    assert cost.draft_ms_per_token == 2 * base.draft_ms_per_token
    assert cost.parallel_draft_ms_per_token == 2 * base.parallel_draft_ms_per_token
    assert cost.target_forward_ms == base.target_forward_ms
    assert cost.verify_ms_per_token == base.verify_ms_per_token


# ----------------------------------------------------------------------------- accounting


def scripted(plan: Mapping[int, tuple[ActionKind, int | None]]) -> Decider:
    """A decider that takes the planned action after window N (1-based) and nothing else:
    the accounting is checked against decisions known in advance, whatever the tuner does."""
    calls = itertools.count()

    def decider(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        window = next(calls)  # 0: the baseline before the first window
        status = status.model_copy(deep=True)
        sp = status.speculation
        if sp.tokens is None:
            sp.tokens = spec.speculation.tokens
        if window not in plan:
            return Decided(status)
        kind, tokens = plan[window]
        off = Off(reason=OffReason.NO_K_CLEARS_FLOOR, message="Scripted", reprobe_at=now)
        sp.off = off if kind is ActionKind.DISABLE else None
        sp.tokens = sp.tokens if tokens is None else tokens
        return Decided(status, [Action(kind, "Scripted", f"after window {window}")])

    return decider


def tiny(**fields: Any) -> Scenario:
    """Code traffic at 8 requests per pod (best static K=3), a stale draft after 20
    minutes (best K=0), 1-minute windows, 10 minutes of settling per phase."""
    base: dict[str, Any] = {
        "name": "tiny",
        "duration": "60m",
        "concurrency": 8,
        "settle": "10m",
        "engine": {
            "acceptance": CODE,
            "noise": 0,
            "drift": [{"after": "20m", "acceptance": STALE_DRAFT}],
        },
        "policy": {
            "speculation": {"tokens": 3},
            "rollback": {"metric": "FirstPositionAcceptance", "minAcceptance": 0.6},
        },
    }
    return Scenario.model_validate({**base, **fields})


def run(plan: Mapping[int, tuple[ActionKind, int | None]], **fields: Any) -> SimulationResult:
    return simulate(tiny(**fields), seed=0, decider=scripted(plan))


def test_plain_decoding_is_timed_from_the_drift_that_stopped_speculation_paying() -> None:
    result = run({22: (ActionKind.DISABLE, None)})  # windows 21 and 22 after the drift
    assert result.best_static_tokens == [3, 0]
    assert result.drift_to_plain == [2]
    assert result.wrong_disables == 0 and result.false_rollbacks == 0
    assert result.rollbacks == 1
    assert run({}).drift_to_plain == [None]  # never switched off
    # Already plain at the drift: zero windows.
    assert run({5: (ActionKind.DISABLE, None)}).drift_to_plain == [0]


def test_no_drift_is_timed_where_speculation_still_pays_after_it() -> None:
    chat = {"engine": {"acceptance": CODE, "drift": [{"after": "20m", "acceptance": CHAT}]}}
    result = run({}, **chat)
    assert result.best_static_tokens == [3, 3]
    assert result.drift_to_plain == []


def test_switching_speculation_off_where_it_pays_is_wrong() -> None:
    result = run({5: (ActionKind.DISABLE, None)})
    assert result.wrong_disables == 1
    # The draft still fit (first position 0.83 over the floor) and K=3 paid: false too.
    assert result.false_rollbacks == 1


def test_a_rollback_is_false_only_while_the_draft_fits_and_speculation_pays() -> None:
    assert run({5: (ActionKind.STEP_DOWN, 1)}).false_rollbacks == 1
    assert run({25: (ActionKind.STEP_DOWN, 1)}).false_rollbacks == 0  # stale: nothing pays
    # Paying, but its first position under the floor: the draft no longer fits.
    assert (
        run(
            {5: (ActionKind.STEP_DOWN, 1)},
            policy={
                "speculation": {"tokens": 3},
                "rollback": {"metric": "FirstPositionAcceptance", "minAcceptance": 0.9},
            },
        ).false_rollbacks
        == 0
    )
    # A canary abort or a promotion is no rollback at all.
    assert run({5: (ActionKind.PROMOTE, 4), 7: (ActionKind.ABORT, None)}).rollbacks == 0


def test_k_changes_count_in_steady_state_only_and_per_hour() -> None:
    long = {"duration": "4h", "engine": {"acceptance": CODE}}
    # After window 5 (settling), then windows 20, 50 and 75 (steady; 20-75 spans 55 min),
    # then 150: one alone in its hour.
    plan = {w: (ActionKind.PROMOTE, k) for w, k in ((5, 4), (20, 5), (50, 4), (75, 5), (150, 4))}
    result = run(plan, **long)
    assert result.steady_k_changes == [w * 60.0 for w in (20, 50, 75, 150)]
    assert result.max_k_changes_per_hour == 3
    spaced = {w: (ActionKind.PROMOTE, 3 + i % 2) for i, w in enumerate((20, 81, 142, 203))}
    assert run(spaced, **long).max_k_changes_per_hour == 1


def test_an_aborted_in_place_trial_is_one_k_change_not_two() -> None:
    """There and back (StartInPlace, Abort to the K before) is one decision in the bar's
    count; a change to a third K after an abort, or back after a promotion, is not."""
    long = {"duration": "4h", "engine": {"acceptance": CODE}}
    plan = {
        w: (kind, k)
        for w, kind, k in (
            (20, ActionKind.START_IN_PLACE, 5),
            (30, ActionKind.ABORT, 3),
            (90, ActionKind.START_IN_PLACE, 5),
            (100, ActionKind.ABORT, 4),
        )
    }
    assert run(plan, **long).steady_k_changes == [w * 60.0 for w in (20, 90, 100)]
    promoted = {20: (ActionKind.PROMOTE, 5), 30: (ActionKind.PROMOTE, 3)}
    assert run(promoted, **long).steady_k_changes == [1200.0, 1800.0]


def test_goodput_is_measured_against_the_best_static_k_without_the_floor() -> None:
    result = run({})  # K=3 throughout: best before the drift, a loss after it
    assert result.best_static_tokens == [3, 0] and result.oracle_tokens == [3, 0]
    steady = result.steady_goodput
    assert steady["unconstrained"] > steady["achieved"]
    assert result.steady_ratio == pytest.approx(steady["achieved"] / steady["unconstrained"])


def test_concurrency_one_runs() -> None:
    result = run({}, concurrency=1)
    assert result.best_static_tokens == [8, 0]
    assert all(r.goodput > 0 for r in result.records)


def test_the_benchmark_bars_follow_the_accounting() -> None:
    def missed(plan: Mapping[int, tuple[ActionKind, int | None]], **fields: Any) -> set[str]:
        scenario = tiny(**fields)
        return set(evaluate(scenario, [simulate(scenario, 0, scripted(plan))]).missed)

    timely = {22: (ActionKind.DISABLE, None)}  # 2 windows after the drift; limit 2 + 1
    assert missed(timely) == set()
    assert missed({24: (ActionKind.DISABLE, None)}) == {"b"}  # 4 windows: too late
    assert missed({}) == {"a", "b"}  # never plain: and K=3 costs goodput after the drift
    assert missed({**timely, 5: (ActionKind.DISABLE, None)}) >= {"b", "d"}  # wrong, false
    flapping = {**timely, 15: (ActionKind.PROMOTE, 4), 18: (ActionKind.PROMOTE, 3)}
    assert missed(flapping) == {"c"}


# ----------------------------------------------------------------------------- the command


def test_simulate_json_reports_what_the_bars_need(tmp_path: Path) -> None:
    plot = tmp_path / "stale.png"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--scenario",
            str(SCENARIOS / "stale-draft.yaml"),
            "--variant",
            "c8/published",
            "--seed",
            "3",
            "--json",
            "--plot",
            str(plot),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["scenario"] == "stale-draft@c8/published"
    goodput = report["steady_state_goodput"]
    assert set(goodput) == {"achieved", "oracle", "unconstrained", "single", "k3", "k5", "none"}
    assert goodput["unconstrained"] >= goodput["oracle"] >= goodput["none"]
    # One K for the whole run is at best as good as the best per phase, and no worse
    # than any particular K.
    assert goodput["unconstrained"] >= goodput["single"] >= max(goodput["k3"], goodput["none"])
    assert report["best_static_tokens_per_phase"] == [3, 0]
    for key in (
        "false_rollbacks",
        "wrong_disables",
        "windows_from_drift_to_plain_decoding",
        "steady_state_k_changes_seconds",
        "max_k_changes_per_hour",
    ):
        assert key in report
    assert plot.stat().st_size > 0


def test_simulate_is_deterministic_per_seed() -> None:
    scenario = load_scenario(SCENARIOS / "load-surge.yaml", "to-c8")
    assert simulate(scenario, 7).to_json() == simulate(scenario, 7).to_json()
    assert simulate(scenario, 7).to_json() != simulate(scenario, 8).to_json()


def test_bad_scenario_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nduration: 1h\nengine: {acceptance: [1.5]}\n")
    assert CliRunner().invoke(app, ["simulate", "--scenario", str(bad)]).exit_code == 2
    many = SCENARIOS / "steady.yaml"
    result = CliRunner().invoke(app, ["simulate", "--scenario", str(many)])
    assert result.exit_code == 2 and "chat/c8/published" in result.output


def test_each_tuned_method_settles_at_its_own_best_k() -> None:
    """Code traffic at one request in flight under each drafting style: the tuner starts
    from the style's prior and settles near the best static K of each, and the styles' best
    Ks differ (a parallel or looked-up draft goes deeper than a sequential one)."""
    path = SCENARIOS / "methods.yaml"
    settled: dict[str, int] = {}
    for method in ("dflash", "dspark", "mtp", "draft-model", "ngram"):
        result = simulate(load_scenario(path, f"{method}/c1"), seed=0)
        # Within the 3% minImprovement of the best static K: closer is not worth a canary.
        assert result.steady_ratio >= 0.97, (method, result.steady_ratio)
        settled[method] = result.records[-1].tokens
    assert settled["mtp"] == settled["draft-model"]  # both sequential
    assert settled["dflash"] > settled["mtp"] and settled["ngram"] > settled["mtp"]


def test_a_scale_out_mid_canary_restarts_the_trial_at_the_new_load() -> None:
    """scale-out.yaml: the fleet grows from 2 to 16 pods while a K=3 canary (proposed at 8
    requests per pod) runs. The canary is ended unjudged at the scale and K=8, the best at
    1 request per pod, stays; when the fleet scales back in, K=3 is tried and promoted.
    One K (mode Off): a schedule for both loads is load-flip.yaml's story."""
    scenario = load_scenario(SCENARIOS / "scale-out.yaml")
    # One K, and its trial on a canary pod.
    scenario = scenario.with_policy(
        {"speculation": {"schedule": {"mode": "Off"}, "switching": "Restart"}}
    )
    assert [p.concurrency for p in phases(scenario)] == [8, 1, 8]
    for seed in range(3):
        result = simulate(scenario, seed)
        kinds = [(d["kind"], d["reason"]) for d in result.decisions]
        assert kinds[:2] == [("StartCanary", "PredictedGain"), ("Abort", "FleetScaled")], kinds
        scaled_at = [p.start // result.interval for p in phases(scenario)[1:]]
        started = None
        for decision in result.decisions:
            if decision["kind"] == "StartCanary":
                started = decision["window"]
            if decision["kind"] == "Promote":
                assert started is not None
                # No scale between the trial's start and its promotion.
                assert not any(started <= at < decision["window"] for at in scaled_at)
        assert [r.tokens for r in result.records if r.phase == 1][-1] == 8
        assert result.records[-1].tokens == result.best_static_tokens[-1] == 3
        assert result.steady_ratio >= 0.97


def test_slowdowns_idle_load_and_startup_are_read_in_the_issue_format() -> None:
    scenario = expand(
        {
            "name": "format",
            "duration": "2h",
            "slowdowns": [{"after": "60m", "until": "61m", "factor": 3}],
            "load": [{"after": "30m", "concurrency": 0}, {"after": "90m", "concurrency": 4}],
            "startupSeconds": 300,
        }
    )[0]
    assert scenario.slowdowns[0].after == 3600 and scenario.slowdowns[0].until == 3660
    assert scenario.startup_seconds == 300
    assert [p.concurrency for p in phases(scenario)] == [8, 0, 4]
    with pytest.raises(ValidationError, match="until"):
        expand(
            {"name": "x", "duration": "1h", "slowdowns": [{"after": 60, "until": 60, "factor": 2}]}
        )


def test_a_slowdown_slows_every_pod_and_is_not_steady_state() -> None:
    base = {"name": "slow", "duration": "2h", "settle": "10m", "concurrency": 8}
    calm = simulate(expand(base)[0], 0)
    slow = simulate(
        expand({**base, "slowdowns": [{"after": "60m", "until": "70m", "factor": 10}]})[0], 0
    )
    during = [r for r in slow.records if 3600 <= r.start < 4200]
    assert during and all(
        r.best_static == pytest.approx(c.best_static / 10, rel=0.01)
        for r, c in zip(during, calm.records[60:70], strict=True)
    )
    # the slow windows are left out of steady state, the rest is the calm run's
    assert slow.steady_goodput["unconstrained"] == pytest.approx(
        calm.steady_goodput["unconstrained"], rel=0.01
    )


def test_an_idle_fleet_serves_nothing_and_decides_nothing() -> None:
    scenario = expand(
        {"name": "idle", "duration": "90m", "load": [{"after": "30m", "concurrency": 0}]}
    )[0]
    result = simulate(scenario, 0)
    idle = [r for r in result.records if r.start >= 1800]
    assert idle and all(r.goodput == 0 for r in idle)
    # Told (an idle fleet's metrics say nothing), but nothing decided on no traffic.
    decided = [d["kind"] for d in result.decisions if d["window"] > 32]
    assert set(decided) <= {ActionKind.METRICS_UNAVAILABLE}


def test_a_restarted_pod_serves_nothing_for_startup_seconds() -> None:
    base = {
        "name": "restart",
        "duration": "1h",
        "concurrency": 1,
        "replicas": 1,
        "policy": {
            "speculation": {"tokens": 1, "minTokens": 1, "maxTokens": 16, "switching": "Restart"},
            "tuning": {"strategy": "InPlace"},
        },
    }
    free = simulate(expand(base)[0], 0)
    charged = simulate(expand({**base, "startupSeconds": 300})[0], 0)
    changes = [r for prev, r in itertools.pairwise(charged.records) if r.tokens != prev.tokens]
    assert changes, "K=1 at one request is far from the best K: the tuner changes it"
    first = charged.records.index(changes[0])
    assert all(r.goodput == 0 for r in charged.records[first : first + 5])
    assert charged.goodput["achieved"] < free.goodput["achieved"]


@pytest.mark.parametrize("variant", ["x3-1m/c1", "x10-10m/c1"])
def test_a_slow_stretch_is_held_as_perturbed_not_learnt(variant: str) -> None:
    """The issue's cases: code-like traffic at one request per pod, every step x3 for a
    minute or x10 for ten. Before: StopSpeculation and 0.59-0.85 of the best static K."""
    scenario = load_scenario(SCENARIOS / "slow-minute.yaml", variant)
    held: list[datetime] = []

    def deciding(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        decided = decide(spec, status, observation, now)
        if decided.status.acceptance.reason == "Perturbed":
            held.append(now)
        return decided

    result = simulate(scenario, 0, deciding)
    kinds = {d["kind"] for d in result.decisions}
    assert not kinds & {ActionKind.STOP_SPECULATION, ActionKind.DISABLE}
    minutes = [(t - START).total_seconds() / 60 for t in held]
    assert minutes and all(60 < m <= 71 for m in minutes), minutes
    assert result.steady_ratio >= 0.95


def restart_cost(method: str) -> Scenario:
    """restart-cost.yaml (startupSeconds 300, one pod, in-place trials) with `method`."""
    return load_scenario(SCENARIOS / "restart-cost.yaml").model_copy(update={"method": method})


@functools.cache
def restart_cost_run(method: str, seed: int) -> SimulationResult:
    """restart-cost run by the operator's tuner: the tests below share its runs (a
    simulated six hours each; the tests only read them)."""
    return simulate(restart_cost(method), seed)


def test_k_changes_only_when_the_gain_repays_the_restart() -> None:
    """startupSeconds 300, one pod, in-place trials: the tuner that weighs the restart
    (status.startupSeconds) changes K less often and serves more tokens than one blind to
    it."""
    scenario = restart_cost("peagle")

    def blind(
        spec: SpeculativeModelSpec,
        status: SpeculativeModelStatus,
        observation: Observation,
        now: datetime,
    ) -> Decided:
        return decide(spec, status.model_copy(update={"startup_seconds": None}), observation, now)

    def changes(result: SimulationResult) -> int:
        return sum(1 for a, b in itertools.pairwise(result.records) if a.tokens != b.tokens)

    # Over seeds: one run is one draw of the noise, and a blind tuner's exploration may
    # land on a better K by luck.
    seeds = range(4)
    weighed = [restart_cost_run("peagle", seed) for seed in seeds]
    unweighed = [simulate(scenario, seed, blind) for seed in seeds]
    assert sum(map(changes, weighed)) * 3 <= sum(map(changes, unweighed))
    # In-place trials start at most once an hour either way; the rule still spares the
    # restarts of the small gains (seeds 0-3: 1 change each in six hours against 7, 4, 8
    # and 5 unweighed, +7.3% tokens).
    served = sum(r.goodput["achieved"] for r in weighed)
    assert served > 1.03 * sum(r.goodput["achieved"] for r in unweighed)


@pytest.mark.parametrize("variant", ["c1", "c8"])
@pytest.mark.parametrize("requested", [3, 1])
def test_a_recovered_draft_is_back_at_a_good_k_within_the_documented_bound(
    variant: str, requested: int
) -> None:
    """draft-recovers: a stale draft from 60m, fixed at 90m. docs/tuning.md's bound: the
    back-off still to wait when the draft recovers, plus canaryWindows + 2 windows (the
    re-probe's window, its canary windows, the promotion). Even when the user asked for
    K=1, the re-probe tries the K predicted best for the draft as it last cleared the
    floor, so the stable K is back within 0.95 of the best static K inside that bound."""
    base = yaml.safe_load((SCENARIOS / "draft-recovers.yaml").read_text())
    base["policy"]["speculation"]["tokens"] = requested
    scenario = next(s for s in expand(base) if s.name.endswith(variant))
    result = simulate(scenario, 0)
    fixed = result.phase_starts[-1]
    disabled = next(d["window"] for d in result.decisions if d["kind"] == ActionKind.DISABLE)
    reprobe_at = disabled * result.interval + 30 * 60  # rollback.reprobeAfter, no doubling
    bound = max(0.0, reprobe_at - fixed) + (3 + 2) * result.interval
    back = next(
        r.start + result.interval - fixed
        for r in result.records
        if r.start >= fixed and r.goodput >= 0.95 * r.best_static
    )
    assert back <= bound, (back, bound)
    assert result.steady_ratio >= 0.95


@pytest.mark.parametrize(("method", "hot_over_restart"), [("eagle3", 1.01), ("peagle", None)])
def test_k_changes_taken_hot_restart_no_pod_and_serve_more_where_auto_takes_them(
    method: str, hot_over_restart: float | None
) -> None:
    """restart-cost with speculation.switching Hot: the stable pod takes each new K
    between two steps (its process never restarts after the first), so the 5-minute
    restarts are not paid. A sequential drafter (EAGLE-3) drafts the K of each step and
    the run serves more than with K changes by restart; a parallel one (P-EAGLE) drafts
    every slot of its ceiling (maxTokens 16) at every K and serves less: why Auto, the
    default, takes the first hot and restarts the second."""
    restart = restart_cost(method)
    hot = restart.with_policy({"speculation": {"switching": "Hot"}})
    auto = copy.deepcopy(hot.policy)
    del auto["speculation"]["switching"]
    seeds = range(3)
    by_restart = [restart_cost_run(method, seed) for seed in seeds]
    taken_hot = [simulate(hot, seed) for seed in seeds]
    changed = [
        sum(1 for a, b in itertools.pairwise(r.records) if a.tokens != b.tokens) for r in taken_hot
    ]
    assert all(changed), changed  # K did change, hot
    for run in taken_hot:
        assert all(record.goodput > 0 for record in run.records[1:])  # never a restart's gap
        assert run.pod_starts == []
    served = sum(r.goodput["achieved"] for r in taken_hot)
    restarted = sum(r.goodput["achieved"] for r in by_restart)
    default = simulate(hot.model_copy(update={"policy": auto}), 0)
    if hot_over_restart is not None:
        assert served > hot_over_restart * restarted
        assert default.decisions == taken_hot[0].decisions
    else:
        assert served < restarted
        assert default.decisions == by_restart[0].decisions


def test_a_k0_band_is_taxed_on_an_engine_started_to_speculate() -> None:
    """vLLM's K=0 step under a speculative config is slower than a plain one (the draft
    keeps its cache): the simulated engines charge it, plain pods do not."""
    cost = StepCost()
    plain = step_seconds(cost, 0, 32, Drafting.PARALLEL)
    banded = step_seconds(cost, 0, 32, Drafting.PARALLEL, configured=True)
    assert banded == pytest.approx(plain * (1 + cost.k0_tax + 32 * cost.k0_tax_per_request))
    assert step_seconds(cost, 3, 32, Drafting.PARALLEL, configured=True) == step_seconds(
        cost, 3, 32, Drafting.PARALLEL
    )


@pytest.mark.parametrize("variant", ["c1-c32/restart/auto/s0", "c2-c8/hot/auto/s120"])
def test_the_default_policy_follows_load_flipping_faster_than_a_trial(variant: str) -> None:
    """Issue 47's bar on load-flip.yaml with the default policy (schedule mode Auto): at
    least 0.95 of the best single static choice over the run and 0.90 of the best per
    phase, where one K chasing the load (mode Off) serves about 0.6 at 1<->32."""
    scenario = load_scenario(SCENARIOS / "schedule" / "load-flip.yaml", variant)
    goodput = simulate(scenario, 0).goodput
    assert goodput["achieved"] / goodput["single"] >= 0.95
    assert goodput["achieved"] / goodput["unconstrained"] >= 0.90


@pytest.mark.parametrize(
    ("variant", "seed"),
    [("c2-c8/restart/auto/s0", 0), ("c2-c8/restart/auto/s120", 1), ("c2-c8/hot/auto/s0", 0)],
)
def test_load_flipping_between_2_and_8_comes_within_3_percent_of_vllms_table(
    variant: str, seed: int
) -> None:
    """Issue 47's peer bar where the whole prize is small: a per-batch table gains 3.4%
    over the best single K, and about nothing once a parallel drafter pays its ceiling's
    slots at every K, as vLLM's table does. The default policy (switching Auto: Restart
    for P-EAGLE, whose hot pods draft every slot of maxTokens) is the restart row,
    decision for decision; hot pods come within 3% with maxTokens the deepest K the load
    needs (the scenario's hot variants: 8; at 16 they serve 0.89 of the per-phase best,
    the tuner not weighing the ceiling)."""
    scenario = load_scenario(SCENARIOS / "schedule" / "load-flip.yaml", variant)
    ours = simulate(scenario, seed)
    speculation = dict(scenario.policy["speculation"])
    if speculation.pop("switching") == "Restart":  # Auto, the default, is Restart here
        policy = {**scenario.policy, "speculation": speculation}
        default = simulate(scenario.model_copy(update={"policy": policy}), seed)
        assert default.decisions == ours.decisions
    [table] = [p for p in PEERS if p.name == "vLLM per-batch K"]
    started = started_at_their_k(scenario)
    theirs = simulate(started, seed, hold(table.tokens), table.rule(started))
    best = ours.goodput["unconstrained"]
    assert ours.goodput["achieved"] / best >= theirs.goodput["achieved"] / best - 0.03


def test_a_k0_band_at_the_published_tax_is_measured_and_kept() -> None:
    """k0-tax.yaml: the tuner learns a schedule with K=0 at 20 in flight. Once that band
    runs where plain decoding was never measured, plain decoding is measured beside it;
    where the published tax holds, the band stays (plain pods lose over the load). On the
    default pods (Auto: P-EAGLE restarts); hot at ceiling 8 the tuner, blind to the
    ceiling's slots a hot parallel drafter drafts, keeps K=1 there instead."""
    scenario = load_scenario(SCENARIOS / "schedule" / "k0-tax.yaml", "published/restart")
    result = simulate(scenario, 0)
    measured = [d for d in result.decisions if "a K=0 band runs at batch" in d["message"]]
    assert measured and measured[0]["kind"] == "StartCanary", result.decisions
    assert not any(d["kind"] == "StopSpeculation" for d in result.decisions)


def test_a_k0_band_dearer_than_the_prior_does_not_last() -> None:
    """Where a K=0 step really costs twice a plain one, a schedule with that band serves
    0.72 of plain decoding at 20 in flight: the tuner either measures the band and leaves
    it for plain pods, or never promotes it (its trial judged on pairs at matched load
    prefers K=1 there, the best choice on this engine), and serves at least 0.85 of the
    best static K per phase (0.82 when the band was measured and left)."""
    scenario = load_scenario(SCENARIOS / "schedule" / "k0-tax.yaml", "twice-plain/hot")
    result = simulate(scenario, 0)
    windows = [d["window"] for d in result.decisions]
    band_from = [
        d["window"]
        for d in result.decisions
        if d["kind"] == "Promote" and "K=0 above" in d["message"].split(" vs ")[0]
    ]
    left = [d["window"] for d in result.decisions if d["kind"] == "StopSpeculation"]
    for promoted in band_from:
        assert any(w > promoted for w in left), (promoted, windows)
    assert result.steady_ratio >= 0.85, result.decisions
