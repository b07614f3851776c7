"""K without a restart (speculation.switching Hot): what the stable pods are started
with, the schedule and generation status hands them, the windows counted only at that
generation, and the handoff against the simulated engine's real endpoint."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from specfleet.operator import hot_handoff, hot_schedules, render, track_plan, trial_engine, tuner
from specfleet.operator.api import (
    Decision,
    HotSchedule,
    InPlace,
    KSwitching,
    RollbackMetric,
    ScheduledBand,
    SinceChange,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
    Trial,
    TuningStrategy,
)
from specfleet.operator.children import Track
from specfleet.operator.observations import (
    HotTrack,
    PodSample,
    ScrapeTarget,
    SpecDecodeCounters,
    WindowTracker,
)
from specfleet.operator.outcomes import ActionKind, WindowVerdict
from specfleet.operator.run import Run
from specfleet.operator.simulate import load_scenario, simulate
from specfleet.operator.stats import Estimate
from specfleet.operator.windows import Judged
from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.hot_schedule import ENV_TOKEN
from specfleet.runtime.sim_model import StepCost, load_profile
from specfleet.runtime.sim_server import SimServer, build_app
from tests.conftest import REPO
from tests.decisions import window

NOW = datetime(2026, 12, 2, tzinfo=UTC)
KEY = b"operator-key"


def _model(switching: KSwitching = KSwitching.HOT, **speculation: Any) -> SpeculativeModel:
    manifest = yaml.safe_load((REPO / "examples/llama-peagle.yaml").read_text())
    manifest["metadata"] |= {"namespace": "serving", "uid": "uid-1", "generation": 1}
    manifest["spec"]["speculation"] = {
        **manifest["spec"].get("speculation", {}),
        "switching": switching.value,
    }
    model = SpeculativeModel.model_validate(manifest)
    if speculation:
        status = model.status.model_copy(
            update={"speculation": model.status.speculation.model_copy(update=speculation)}
        )
        model = model.model_copy(update={"status": status})
    return model


def _run(model: SpeculativeModel) -> Run:
    """The tuner's working state for one decision on `model` (its generation 1)."""
    return Run(model.spec, model.status, NOW, 1, track_plan.plan(model.spec, model.status))


def _stable(model: SpeculativeModel, credential: str | None = None) -> dict[str, Any]:
    return dict(render.deployment(model, "stable", credential)["spec"]["template"])


def _args(template: dict[str, Any]) -> list[str]:
    return list(template["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("switching", "method", "data", "hot"),
    [
        ("Auto", "eagle3", 1, True),  # the default: hot where a hot pod costs no more
        ("Auto", "mtp", 1, True),
        ("Auto", "peagle", 1, False),  # a parallel drafter drafts its ceiling's slots
        ("Auto", "eagle3", 2, False),  # vLLM drops the per-batch schedule with DP > 1
        ("Auto", "suffix", 1, False),  # suffix decoding sets its own draft length
        ("Restart", "peagle", 1, False),
        ("Hot", "peagle", 1, True),
    ],
)
def test_auto_switching_is_hot_where_the_engine_schedules_k(
    switching: str, method: str, data: int, hot: bool
) -> None:
    manifest = yaml.safe_load((REPO / "examples/llama-peagle.yaml").read_text())
    spec = manifest["spec"]
    spec["speculation"]["switching"] = switching
    spec["draft"]["method"] = method
    if method == "suffix":
        spec["draft"].pop("model", None)
        spec["speculation"] = {"switching": switching, "tokens": 8, "minTokens": 8, "maxTokens": 8}
    spec["runtime"] = {**spec.get("runtime", {}), "gpus": data, "parallelism": {"data": data}}
    model = SpeculativeModel.model_validate(manifest)
    assert hot_schedules.wanted(model.spec) is hot
    args = _args(_stable(model))
    assert ("--hot-schedule" in args) is hot


def test_hot_stable_pods_start_at_the_ceiling_and_a_new_k_keeps_their_template() -> None:
    at_three, at_five = _model(tokens=3), _model(tokens=5)
    args = _args(_stable(at_three))
    ceiling = str(at_three.spec.speculation.max_tokens)
    assert args[args.index("--num-speculative-tokens") + 1] == ceiling
    assert "--hot-schedule" in args
    assert "--batch-schedule" not in args  # it starts at the ceiling, until handed one
    assert _stable(at_three) == _stable(at_five)  # no rollout for a new K
    # Nor for a new K in the spec: the tuner's K and the spec's are handed over alike.
    spec_edit = at_three.model_copy(deep=True)
    spec_edit.spec.speculation.tokens = 2
    assert _stable(spec_edit) == _stable(at_three)
    restart = _model(KSwitching.RESTART, tokens=3)
    assert _stable(restart) != _stable(_model(KSwitching.RESTART, tokens=5))


def test_the_credential_is_in_the_pods_environment_but_not_in_the_config_hash() -> None:
    model = _model(tokens=3)
    token = hot_schedules.credential(KEY, "serving", model.metadata.name, "uid-1")
    with_token, without = _stable(model, token), _stable(model)
    env = {e["name"]: e.get("value") for e in with_token["spec"]["containers"][0]["env"]}
    assert env[ENV_TOKEN] == token
    annotation = render.CONFIG_HASH_ANNOTATION
    assert (
        with_token["metadata"]["annotations"][annotation]
        == (without["metadata"]["annotations"][annotation])
    )
    # Another model, or the same name re-created, gets another credential.
    assert token != hot_schedules.credential(KEY, "serving", model.metadata.name, "uid-2")
    assert token != hot_schedules.credential(KEY, "other", model.metadata.name, "uid-1")


def test_a_fallback_renders_the_k_in_the_template_again() -> None:
    hot = HotSchedule(generation=2, schedule=[ScheduledBand(tokens=3)], fallback="no plugin")
    args = _args(_stable(_model(tokens=4, hot_schedule=hot)))
    assert args[args.index("--num-speculative-tokens") + 1] == "4"
    assert "--hot-schedule" not in args


def _planned(spec: SpeculativeModelSpec, status: SpeculativeModelStatus) -> HotSchedule | None:
    return hot_schedules.planned(spec, status)


def test_a_new_schedule_gets_the_next_generation_and_the_same_one_keeps_it() -> None:
    model = _model(tokens=3)
    first = _planned(model.spec, model.status)
    assert first == HotSchedule(generation=1, schedule=[ScheduledBand(tokens=3)])
    kept = model.status.model_copy(
        update={"speculation": model.status.speculation.model_copy(update={"hot_schedule": first})}
    )
    assert _planned(model.spec, kept) is first
    moved = kept.model_copy(
        update={"speculation": kept.speculation.model_copy(update={"tokens": 5})}
    )
    second = _planned(model.spec, moved)
    assert second is not None
    assert (second.generation, second.schedule) == (2, [ScheduledBand(tokens=5)])
    # Restart asked for again: nothing to hand; a fallback stays until then.
    restart = _model(KSwitching.RESTART)
    assert _planned(restart.spec, moved) is None
    fell = hot_schedules.fell_back(moved, "no plugin")
    assert _planned(model.spec, fell) == HotSchedule(
        generation=1, schedule=[ScheduledBand(tokens=3)], fallback="no plugin"
    )


def test_a_k_change_taken_hot_costs_no_restart_in_the_required_gain() -> None:
    hot, restart = _model(tokens=3), _model(KSwitching.RESTART, tokens=3)
    for model in (hot, restart):
        model.status.startup_seconds = 1800.0  # half of the switch horizon
    assert _run(hot).restart_cost() == 0.0
    assert _run(restart).restart_cost() == 0.5


def _sample(
    pod: str,
    at: float,
    generation: int,
    drafts: float,
    per_position: tuple[float, ...],
    applied_at: float | None = None,
) -> PodSample:
    counters = SpecDecodeCounters(
        drafts=drafts,
        draft_tokens=drafts * 3,
        accepted_tokens=sum(per_position),
        accepted_per_position=per_position,
        generation_tokens=drafts * 2 + sum(per_position),
        requests_running=4,
        speculation_exported=True,
        process_start_time=1.0,
        schedule_generation=generation,
        schedule_applied_at=applied_at,
    )
    return PodSample(pod, "stable", at, counters)


def test_windows_count_only_at_the_generation_status_asks_for_and_are_cut_at_a_change() -> None:
    tracker = WindowTracker()
    tokens: dict[Track, int] = {"stable": 3, "canary": 0}
    hot: dict[Track, HotTrack] = {"stable": HotTrack(generation=1, ceiling=8)}
    # Positions 3..7 hold what an earlier K=8 counted in this process: cumulative, kept.
    earlier = (50.0, 40.0, 30.0, 20.0, 10.0, 5.0, 2.0, 1.0)
    base = tracker.observe([_sample("a", 0.0, 1, 100, earlier)], tokens, hot)
    assert base.stable is None and not base.errors
    grown = tuple(v + d for v, d in zip(earlier, (60.0, 45.0, 30.0, 0, 0, 0, 0, 0), strict=True))
    window = tracker.observe([_sample("a", 60.0, 1, 200, grown)], tokens, hot).stable
    assert window is not None
    assert window.accepted_per_position == (60.0, 45.0, 30.0)  # the deeper ones trimmed
    # The pod took generation 2 between two readings: that interval ran two schedules.
    cut = tracker.observe([_sample("a", 120.0, 2, 300, grown)], tokens, {"stable": HotTrack(2, 8)})
    assert cut.stable is None and not cut.errors
    # A pod still at generation 2 while status asks for 3 is left out, and says why.
    late = tracker.observe([_sample("a", 180.0, 2, 400, grown)], tokens, {"stable": HotTrack(3, 8)})
    assert late.stable is None
    assert late.errors["a"].reason.value == "ScheduleNotInForce"


@pytest.mark.parametrize(("applied_at", "counted"), [(120.5, True), (119.0, True), (150.0, False)])
def test_a_window_whose_new_generation_took_effect_at_its_start_counts(
    applied_at: float, counted: bool
) -> None:
    """The operator hands a schedule over right after the decision, at a window's start:
    a pod that says its new generation took effect then (within 5% of the window, either
    way: two clocks) ran it for the whole window, which counts; half-way, it is cut."""
    tracker = WindowTracker()
    tokens: dict[Track, int] = {"stable": 3, "canary": 0}
    per_position = (50.0, 40.0, 30.0)
    tracker.observe([_sample("a", 120.0, 1, 100, per_position)], tokens, {"stable": HotTrack(1, 8)})
    grown = (110.0, 85.0, 60.0)
    after = [_sample("a", 180.0, 2, 200, grown, applied_at)]
    window = tracker.observe(after, tokens, {"stable": HotTrack(2, 8)}).stable
    assert (window is not None) is counted
    if window is not None:
        assert window.drafts == 100


def test_a_hot_trial_alternates_on_the_stable_pods_and_pairs_windows_at_matched_load() -> None:
    """load-flip.yaml, one K taken hot: every trial of a K runs on the stable pods (no
    canary, no restart), each side's windows paired with the other's at a matched batch,
    so the pairs hold as many windows on each side, none pooled across 1 and 32."""
    scenario = load_scenario(REPO / "scenarios/schedule/load-flip.yaml", "c1-c32/hot/one-k/s0")
    result = simulate(scenario, 0)
    trials = [d for d in result.decisions if d["kind"] in ("StartCanary", "StartInPlace")]
    of_k = [d for d in trials if d["reason"] != "PlainPredicted"]
    assert of_k and all(d["kind"] == "StartInPlace" for d in of_k), of_k
    assert all("alternating with" in d["message"] for d in of_k)
    judged = [d for d in result.decisions if d["kind"] in ("Promote", "Abort")]
    assert judged
    assert result.goodput["achieved"] / result.goodput["single"] >= 0.85


def test_a_pair_at_mismatched_batches_is_not_compared() -> None:
    """An interleaved trial's window at 1 in flight and the other side's at 32 make no
    pair: the earlier is dropped and the later waits for its match."""
    model = _model(tokens=3)
    trial = Trial(
        tokens=6,
        started_at=NOW,
        in_place=InPlace(previous_tokens=3, switched=True, interleaved=True),
        stable_replicas=model.spec.replicas,
    )
    model.status.speculation.trial = trial
    model.status.speculation.hot_schedule = HotSchedule(
        generation=1, schedule=[ScheduledBand(tokens=6)]
    )
    cost = _run(model).cost
    engine = StepCost()
    for batch, side_windows in ((1, (0, 0)), (32, (0, 0)), (32, (1, 1))):
        conditional = [0.8, 0.7, 0.6, 0.5, 0.4, 0.3]
        assert trial.in_place is not None
        k, other = (6, 3) if trial.in_place.switched else (3, 6)
        measured = window(conditional, k, batch=batch, engine=engine)
        judged = Judged(measured, True, WindowVerdict.CONCLUSIVE)
        before = trial.model_dump()
        alternation = trial_engine.alternate(trial, judged, cost)
        assert trial.model_dump() == before  # a value: the trial it was given is as it was
        assert alternation is not None and alternation.turn.tokens == other
        trial = alternation.record
        assert (trial.canary.windows, trial.stable.windows) == side_windows, batch


def test_an_interleaved_trial_ends_below_the_floor_on_its_candidate_s_windows_only() -> None:
    """Interleaved, the stable pods run the candidate every other window: a window below a
    floor that caps K ends the trial on the candidate's turn, while on the turn of the K
    it is compared with that window is the K's own (counted against the floor as the
    stable K's), and the trial goes on."""
    for candidate_turn in (True, False):
        model = _model(tokens=3)
        rollback = model.spec.rollback.model_copy(
            update={"metric": RollbackMetric.DRAFT_ACCEPTANCE_RATE}
        )
        model = model.model_copy(
            update={"spec": model.spec.model_copy(update={"rollback": rollback})}
        )
        place = InPlace(previous_tokens=3, switched=candidate_turn, interleaved=True)
        model.status.speculation.trial = Trial(
            tokens=6, started_at=NOW, in_place=place, stable_replicas=model.spec.replicas
        )
        run = _run(model)
        measured = window([0.3, 0.2, 0.1, 0.1, 0.1, 0.1], 6 if candidate_turn else 3)
        failing = Judged(measured, True, WindowVerdict.CONCLUSIVE, metric=Estimate(0.2, 0.1, 0.3))
        assert tuner._floor_decided(run, failing) is candidate_turn
        assert (run.sp.trial is None) is candidate_turn, run.actions


async def _sim_pod(args: list[str]) -> tuple[web.AppRunner, SimServer, ScrapeTarget]:
    config, _ = parse_serve_args(["--model", "org/target", *args], env={})
    server = SimServer(config, load_profile("tick: 50ms\nnoise: 0\n"))
    runner = web.AppRunner(build_app(server))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    return runner, server, ScrapeTarget("pod-a", "stable", f"http://127.0.0.1:{port}/metrics")


HOT_POD = ["--method", "eagle3", "--draft-model", "org/head", "--num-speculative-tokens", "8"]


def test_the_handoff_changes_a_running_engines_k_and_a_pod_that_cannot_is_a_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = hot_schedules.credential(KEY, "serving", "m", "uid-1")
    monkeypatch.setenv(ENV_TOKEN, token)
    schedule = HotSchedule(
        generation=1, schedule=[ScheduledBand(up_to_batch=4, tokens=5), ScheduledBand(tokens=2)]
    )

    async def test() -> None:
        runner, server, target = await _sim_pod([*HOT_POD, "--hot-schedule"])
        try:
            assert server.k_scheduled(2) == 8  # the startup schedule: the ceiling
            wrong = await hot_handoff.hand_off([target], schedule, "another-models-token")
            assert wrong == hot_handoff.Handoff((), None)  # refused, and no fallback
            assert server.k_scheduled(2) == 8
            done = await hot_handoff.hand_off([target], schedule, token)
            assert done == hot_handoff.Handoff(("pod-a",), None)
            assert (server.k_scheduled(2), server.k_scheduled(9)) == (5, 2)
        finally:
            await runner.cleanup()
        runner, server, target = await _sim_pod(HOT_POD)  # started without --hot-schedule
        try:
            refused = await hot_handoff.hand_off([target], schedule, token)
            assert refused.in_force == ()
            assert refused.fallback is not None and "restart" in refused.fallback
        finally:
            await runner.cleanup()

    asyncio.run(asyncio.wait_for(test(), timeout=60))


def test_an_example_with_hot_switching_validates(tmp_path: Path) -> None:
    manifest = yaml.safe_load((REPO / "examples/llama-peagle.yaml").read_text())
    manifest["spec"]["speculation"] = {"switching": "Hot"}
    assert SpeculativeModel.model_validate(manifest).spec.speculation.switching is KSwitching.HOT


def test_in_place_trials_taken_hot_wait_for_the_cooldown_only() -> None:
    """In place with restarts, a trial starts at most once per switch horizon (each one
    restarts the serving pods); taken hot, the cooldown alone spaces them."""
    started = Decision(
        time=NOW - timedelta(minutes=20), action=ActionKind.START_IN_PLACE, reason="Explore: K=4"
    )
    for switching, cooled in ((KSwitching.HOT, True), (KSwitching.RESTART, False)):
        model = _model(
            switching, tokens=3, since_change=SinceChange(at=NOW - timedelta(minutes=10))
        )
        model.spec.tuning.strategy = TuningStrategy.IN_PLACE
        model.status.history = [started]
        assert tuner._cooled(_run(model)) is cooled, switching


def test_without_a_key_hot_switching_falls_back_and_comes_back_with_one() -> None:
    model = _model(tokens=3)
    planned = _planned(model.spec, model.status)
    status = model.status.model_copy(
        update={
            "speculation": model.status.speculation.model_copy(update={"hot_schedule": planned})
        }
    )
    without = hot_schedules.keyed(model.spec, status, has_key=False)
    assert without.speculation.hot_schedule is not None
    assert without.speculation.hot_schedule.fallback == hot_schedules.NO_KEY
    assert hot_schedules.keyed(model.spec, without, has_key=True) == status
    assert hot_schedules.keyed(model.spec, status, has_key=True) is status
    # A pod's own refusal is not the key's: a key does not undo it.
    refused = hot_schedules.fell_back(status, "no plugin")
    assert hot_schedules.keyed(model.spec, refused, has_key=True) is refused
