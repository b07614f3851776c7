"""The fleet loop against a fake API server: what it applies, writes and reports, and in
which order, when watch events arrive late, children vanish, specs change or the API
server refuses a child."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.configs import FORCE_CONFIG_ANNOTATION
from specfleet.operator.fleet import Fleet
from specfleet.runtime.config import ConfigError
from tests.fake_cluster import FakeCluster, ScriptedEvaluator

KEY = ("team", "llama")


def tokens_in(args: list[str]) -> int:
    return int(args[args.index("--num-speculative-tokens") + 1])


def settle(cluster: FakeCluster, fleet: Fleet) -> None:
    """Deliver every watch event and reconcile until nothing more is written."""
    for _ in range(10):
        cluster.deliver(fleet)
        asyncio.run(fleet.reconcile(KEY))
        if not cluster.watch:
            return
    raise AssertionError("the fleet kept writing")


def started(cluster: FakeCluster, fleet: Fleet, manifest: dict[str, Any]) -> None:
    manifest["metadata"]["name"] = "llama"
    cluster.create_model(manifest)
    settle(cluster, fleet)
    assert tokens_in(cluster.stable_args("llama")) == 3


def test_a_decision_is_never_undone_by_a_child_event_before_the_status_echo(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    evaluator = fleet.evaluator
    assert isinstance(evaluator, ScriptedEvaluator)
    evaluator.next_tokens = 5
    fleet.cache.models[KEY].next_evaluation = 0.0  # an evaluation is due
    asyncio.run(fleet.reconcile(KEY))
    assert tokens_in(cluster.stable_args("llama")) == 5
    # The Deployment's events arrive; the model's status echo is still on its way.
    cluster.deliver(fleet, kinds=("Deployment", "Service"))
    asyncio.run(fleet.reconcile(KEY))
    assert [
        tokens_in(a["spec"]["template"]["spec"]["containers"][0]["args"])
        for a in cluster.applied
        if a["kind"] == "Deployment" and a["metadata"]["name"] == "llama"
    ][-1] == 5
    assert tokens_in(cluster.stable_args("llama")) == 5
    # The stale echo of an earlier status write must not bring K=3 back either.
    settle(cluster, fleet)
    assert tokens_in(cluster.stable_args("llama")) == 5
    assert cluster.model("llama")["status"]["speculation"]["tokens"] == 5


def test_the_decision_is_in_status_before_its_children_are_applied(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    seen: list[int] = []
    apply = cluster.apply

    async def recording_apply(
        manifest: dict[str, Any], create_only: bool = False
    ) -> dict[str, Any]:
        seen.append(cluster.model("llama")["status"]["speculation"]["tokens"])
        return await apply(manifest, create_only)

    cluster.apply = recording_apply  # type: ignore[method-assign]
    evaluator = fleet.evaluator
    assert isinstance(evaluator, ScriptedEvaluator)
    evaluator.next_tokens = 6
    fleet.cache.models[KEY].next_evaluation = 0.0
    asyncio.run(fleet.reconcile(KEY))
    assert seen and set(seen) == {6}


def test_a_new_k_in_the_spec_is_recorded_and_reported(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    cluster.edit_spec("llama", lambda spec: spec["speculation"].update(tokens=5))
    settle(cluster, fleet)
    status = cluster.model("llama")["status"]
    assert status["speculation"]["tokens"] == 5
    assert status["history"][-1]["action"] == "SpecChanged"
    assert [e["reason"] for e in cluster.events] == ["SpecChanged"]
    assert tokens_in(cluster.stable_args("llama")) == 5


def test_a_new_k_in_the_spec_re_enables_speculation_after_a_disable(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    peagle_manifest["metadata"]["name"] = "llama"
    body = cluster.create_model(peagle_manifest)
    body["status"] = {
        "speculation": {
            "tokens": 1,
            "requestedTokens": 3,
            "disabled": True,
            "disabledReason": "NoKClearsFloor",
        }
    }
    cluster.objects[("SpeculativeModel", "team", "llama")]["status"] = body["status"]
    cluster.watch[-1].body["status"] = body["status"]
    settle(cluster, fleet)
    assert "--num-speculative-tokens" not in cluster.stable_args("llama")  # plain decoding
    cluster.edit_spec("llama", lambda spec: spec["speculation"].update(tokens=4))
    settle(cluster, fleet)
    assert tokens_in(cluster.stable_args("llama")) == 4
    # Written in today's shape: the flat fields of the status it read are gone.
    speculation = cluster.model("llama")["status"]["speculation"]
    assert "off" not in speculation and "disabled" not in speculation


def test_a_deleted_service_is_put_back(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    cluster.delete("Service", "llama")
    settle(cluster, fleet)
    assert ("Service", "team", "llama") in cluster.objects


def test_a_refused_child_degrades_the_model_once_and_backs_off(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    def deny_a_label(manifest: dict[str, Any]) -> str | None:
        """A check admission of the model cannot make: the cluster's own policy."""
        labels = manifest["spec"].get("template", {}).get("metadata", {}).get("labels", {})
        if "policy.example.com/denied" in labels:
            return (
                'deployments.apps "llama" is forbidden: ValidatingAdmissionPolicy "deny" '
                "denied request: the cluster's policy denies pods labelled "
                "policy.example.com/denied"
            )
        return None

    cluster.refuse = deny_a_label
    peagle_manifest["spec"]["runtime"]["pod"] = {"labels": {"policy.example.com/denied": "x"}}
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(KEY))
    status = cluster.model("llama")["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert status["phase"] == "Degraded"
    assert (degraded["status"], degraded["reason"]) == ("True", "ChildrenRefused")
    assert "the cluster's policy denies pods labelled" in degraded["message"]
    assert [(e["reason"], e["warning"]) for e in cluster.events] == [("ChildrenRefused", True)]
    # Ticks during the back-off (the status echo included) try nothing.
    applies = len(cluster.applied)
    for _ in range(3):
        cluster.deliver(fleet)
        asyncio.run(fleet.reconcile(KEY))
    assert len(cluster.applied) == applies and len(cluster.events) == 1
    # A fixed spec is tried at once and clears the condition.
    cluster.edit_spec("llama", lambda spec: spec["runtime"].pop("pod"))
    settle(cluster, fleet)
    status = cluster.model("llama")["status"]
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "False" and status["phase"] != "Degraded"


def test_a_config_that_does_not_render_degrades_the_model(
    cluster: FakeCluster,
    fleet: Fleet,
    peagle_manifest: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unrenderable(
        model: SpeculativeModel, schedule_credential: str | None = None
    ) -> list[dict[str, Any]]:
        raise ConfigError("--draft-tensor-parallel-size must be 1 or the --tensor-parallel-size")

    monkeypatch.setattr(render, "manifests", unrenderable)
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(KEY))
    degraded = next(
        c for c in cluster.model("llama")["status"]["conditions"] if c["type"] == "Degraded"
    )
    assert degraded["reason"] == "RenderFailed" and "draft-tensor-parallel" in degraded["message"]
    assert cluster.applied == []


def test_a_decision_written_first_does_not_claim_the_new_generation(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Until the children of generation 2 are applied, status must not say that
    generation 2 is observed (and Ready): a client waiting for it would read old pods."""
    started(cluster, fleet, peagle_manifest)
    seen: list[int | None] = []
    apply = cluster.apply

    async def recording_apply(
        manifest: dict[str, Any], create_only: bool = False
    ) -> dict[str, Any]:
        seen.append(cluster.model("llama")["status"].get("observedGeneration"))
        return await apply(manifest, create_only)

    cluster.apply = recording_apply  # type: ignore[method-assign]
    cluster.edit_spec("llama", lambda spec: spec["speculation"].update(tokens=2))
    settle(cluster, fleet)
    assert seen and set(seen) == {1}
    assert cluster.model("llama")["status"]["observedGeneration"] == 2


def _draft(cluster: FakeCluster, name: str) -> str:
    deployment = cluster.objects[("Deployment", "team", name)]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--draft-model") + 1]


def test_a_new_draft_runs_on_the_canary_until_the_annotation_forces_it(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    running = _draft(cluster, "llama")
    cluster.edit_spec("llama", lambda spec: spec["draft"].update(model="team/retrained-head"))
    settle(cluster, fleet)
    # The stable pods keep the running draft; the canary pod runs the commit's.
    assert _draft(cluster, "llama") == running
    assert _draft(cluster, "llama-canary") == "team/retrained-head"
    assert cluster.objects[("Deployment", "team", "llama-canary")]["spec"]["replicas"] == 1
    assert [e["reason"] for e in cluster.events] == ["StartConfigTrial"]
    config = cluster.model("llama")["status"]["config"]
    assert config["running"]["draftModel"] == running
    assert config["trial"]["config"]["draftModel"] == "team/retrained-head"
    # The annotation names the new config's hash: it runs without a trial.
    cluster.annotate("llama", FORCE_CONFIG_ANNOTATION, config["trial"]["config"]["hash"])
    settle(cluster, fleet)
    assert _draft(cluster, "llama") == "team/retrained-head"
    assert cluster.objects[("Deployment", "team", "llama-canary")]["spec"]["replicas"] == 0
    assert [e["reason"] for e in cluster.events][-1] == "AdoptConfig"
    assert "trial" not in cluster.model("llama")["status"]["config"]


def test_a_rejected_config_is_exported_and_keeps_the_stable_pods(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    running = _draft(cluster, "llama")
    cluster.edit_spec("llama", lambda spec: spec["draft"].update(model="team/poor-head"))
    settle(cluster, fleet)
    body = cluster.model("llama")
    trial = body["status"]["config"].pop("trial")
    body["status"]["config"]["rejected"] = {
        "hash": trial["config"]["hash"],
        "reason": "NoGain",
        "message": "goodput -12.0%",
        "at": "2026-01-01T00:00:00Z",
    }
    cluster.write_status("llama", body["status"])
    settle(cluster, fleet)
    assert _draft(cluster, "llama") == running
    assert cluster.objects[("Deployment", "team", "llama-canary")]["spec"]["replicas"] == 0
    labels = {"namespace": "team", "model": "llama"}
    assert REGISTRY.get_sample_value("specfleet_config_rejected", labels) == 1


def test_a_models_progress_is_written_at_most_once_an_interval_and_its_spec_at_once(
    cluster: FakeCluster, peagle_manifest: dict[str, Any]
) -> None:
    """Issue 46: what the children did since the last write (here the Deployment's
    replicas) waits for `status_interval` after it, then goes out in one write; the
    first write of a new generation does not wait."""
    fleet = Fleet(cluster, ScriptedEvaluator(), status_interval=0.2)  # type: ignore[arg-type]
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)

    async def scenario() -> tuple[int, int, bool, int, int]:
        await fleet.reconcile(KEY)
        cluster.deliver(fleet)
        await fleet.reconcile(KEY)
        first = cluster.status_writes
        cluster.set_child_status("Deployment", "llama", {"replicas": 1})
        cluster.deliver(fleet)
        fleet.cache.queue.dirty.clear()
        await fleet.reconcile(KEY)
        held = cluster.status_writes
        await asyncio.sleep(0.4)
        woken = KEY in fleet.cache.queue.dirty
        await fleet.reconcile(KEY)
        after = cluster.status_writes
        cluster.edit_spec("llama", lambda spec: spec["speculation"].update(tokens=2))
        cluster.deliver(fleet)
        await fleet.reconcile(KEY)
        return first, held, woken, after, cluster.status_writes

    first, held, woken, after, edited = asyncio.run(scenario())
    assert (held, woken, after) == (first, True, first + 1)
    assert cluster.model("llama")["status"]["replicas"] == 1
    assert edited > after
    assert cluster.model("llama")["status"]["observedGeneration"] == 2


def test_the_echoes_of_a_reconciles_own_writes_do_not_run_it_again(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Issue 46: a new model's reconcile creates its children and writes its status; the
    watch then brings back those very versions, and the version its status write left
    is already cached. Nothing there is new: the next tick is skipped, as a quiet sweep
    is. Someone else's change after that (the Deployment's replicas) is reconciled."""
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    full: list[tuple[str, str]] = []
    reconcile = fleet._reconcile

    async def counted(*args: Any) -> Any:
        full.append(KEY)
        return await reconcile(*args)

    fleet._reconcile = counted  # type: ignore[method-assign,assignment]

    async def scenario() -> None:
        await fleet.reconcile(KEY)
        assert (len(full), cluster.status_writes) == (1, 1)
        cluster.deliver(fleet)  # the children's ADDED and the status write's echo
        await fleet.reconcile(KEY)
        assert len(full) == 1
        cluster.set_child_status("Deployment", "llama", {"replicas": 1})
        cluster.deliver(fleet)
        await fleet.reconcile(KEY)
        assert len(full) == 2

    asyncio.run(scenario())
    assert cluster.model("llama")["status"]["replicas"] == 1


def test_a_childs_change_that_arrives_during_a_reconcile_is_reconciled_after_it(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """The other side of skipping a reconcile's own echoes: what someone else changed
    while it ran (here the Deployment's replicas, seen just before its status write) is
    not taken as settled, and the next tick writes it."""
    started(cluster, fleet, peagle_manifest)
    cluster.set_child_status("Deployment", "llama", {"replicas": 1})
    cluster.deliver(fleet)
    fleet.cache.models[KEY].next_evaluation = 0.0  # an evaluation is due: a status write

    def meanwhile() -> None:
        cluster.before_status_write = lambda: None
        cluster.set_child_status("Deployment", "llama", {"replicas": 2})
        cluster.deliver(fleet)

    cluster.before_status_write = meanwhile
    asyncio.run(fleet.reconcile(KEY))
    assert cluster.model("llama")["status"]["replicas"] == 1  # read before the change
    asyncio.run(fleet.reconcile(KEY))
    assert cluster.model("llama")["status"]["replicas"] == 2


def test_a_child_status_change_renders_nothing_and_an_edit_is_still_put_back(
    cluster: FakeCluster, peagle_manifest: dict[str, Any], monkeypatch: Any
) -> None:
    """Issue 46: once the children were applied (or found applied) from this very model
    (its version, nothing decided since), a reconcile for a Deployment's replicas renders
    nothing: the digest it would compute is the one applied. (Progress is held back
    here, so the model's version stays.) Someone scaling that Deployment by hand moves
    its generation, and the next reconcile renders and puts it back."""
    fleet = Fleet(cluster, ScriptedEvaluator(), status_interval=3600.0)  # type: ignore[arg-type]
    started(cluster, fleet, peagle_manifest)
    rendered: list[str] = []
    manifests = render.manifests

    def counted(model: SpeculativeModel, credential: str | None = None) -> Any:
        rendered.append(model.metadata.name)
        return manifests(model, credential)

    monkeypatch.setattr(render, "manifests", counted)
    for replicas in (1, 2):
        cluster.set_child_status("Deployment", "llama", {"replicas": replicas})
        cluster.deliver(fleet)
        asyncio.run(fleet.reconcile(KEY))
    assert rendered == ["llama"]  # the first found the children applied from the model
    scaled = dict(cluster.objects[("Deployment", "team", "llama")])
    replicas = scaled["spec"]["replicas"]
    scaled["spec"] = {**scaled["spec"], "replicas": replicas + 3}
    scaled["metadata"] = {**scaled["metadata"], "generation": scaled["metadata"]["generation"] + 1}
    cluster.create(scaled)
    cluster.deliver(fleet)
    asyncio.run(fleet.reconcile(KEY))
    assert rendered == ["llama", "llama"]
    assert cluster.objects[("Deployment", "team", "llama")]["spec"]["replicas"] == replicas
