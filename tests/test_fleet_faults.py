"""The fleet when the API server is not on its side: watch gaps (a relist sends no
DELETED), deletions while a reconcile runs, conflicting writers, and objects with a
child's name that the operator does not own (issue 29). Against tests/fake_cluster.py."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Any, cast

import kopf
import pytest
from prometheus_client import REGISTRY

from specfleet.operator import handlers, observability, tuner
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.fleet import Fleet
from specfleet.operator.kube import NotLeading
from specfleet.operator.status import ObservedChildren
from tests.fake_cluster import FakeCluster, ScriptedEvaluator
from tests.test_fleet import settle, started, tokens_in

KEY = ("team", "llama")


def reconcile(fleet: Fleet, key: tuple[str, str] = KEY) -> None:
    asyncio.run(fleet.reconcile(key))


def degraded(cluster: FakeCluster, name: str) -> dict[str, Any]:
    status = cluster.model(name)["status"]
    return dict(next(c for c in status["conditions"] if c["type"] == "Degraded"))


def scripted(fleet: Fleet) -> ScriptedEvaluator:
    assert isinstance(fleet.evaluator, ScriptedEvaluator)
    return fleet.evaluator


# ------------------------------------------------------------ watch gaps (1, 2)


def test_a_child_deleted_during_a_watch_gap_is_put_back_after_the_listing(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    cluster.delete("Deployment", "llama")
    cluster.lose_watch()  # 410 Gone: the relist has no DELETED for it
    reconcile(fleet)
    assert ("Deployment", "team", "llama") not in cluster.objects  # the cache still has it
    asyncio.run(fleet.resync())
    cluster.deliver(fleet)
    reconcile(fleet)
    assert ("Deployment", "team", "llama") in cluster.objects


def test_a_model_deleted_during_a_watch_gap_is_never_written_to_again(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """The model's DELETED is lost; the collector's deletions of its children arrive and
    wake it. Nothing is re-created, no status is written, and it is forgotten."""
    started(cluster, fleet, peagle_manifest)
    cluster.delete_model("llama")
    cluster.watch = [e for e in cluster.watch if e.body["kind"] != "SpeculativeModel"]
    applies, writes = len(cluster.applied), cluster.status_writes
    for _ in range(5):
        cluster.deliver(fleet)
        reconcile(fleet)
    assert len(cluster.applied) == applies
    assert cluster.status_writes == writes
    assert not [k for k in cluster.objects if k[0] == "Deployment"]
    assert KEY not in fleet.cache.models


def test_a_listing_forgets_a_model_that_is_gone(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    observability.SPECULATIVE_TOKENS.labels(*KEY, "stable").set(3)
    cluster.delete_model("llama")
    cluster.lose_watch()
    asyncio.run(fleet.resync())
    assert KEY not in fleet.cache.models and KEY not in fleet.cache.children
    assert series("specfleet_speculative_tokens", track="stable") is None


def test_a_listing_of_many_pages_forgets_only_what_no_page_holds(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """The listings come a page at a time (kube.PAGE objects; one here): a model or a
    child on a later page is not taken for gone, and one on no page is."""
    for name in ("alpha", "zeta"):
        manifest = copy.deepcopy(peagle_manifest)
        manifest["metadata"]["name"] = name
        cluster.create_model(manifest)
    started(cluster, fleet, peagle_manifest)
    for key in (("team", "alpha"), ("team", "zeta")):
        reconcile(fleet, key)
    cluster.deliver(fleet)
    cluster.delete_model("alpha")
    cluster.delete("Deployment", "zeta")
    cluster.lose_watch()
    cluster.page = 1
    cluster.requests.clear()
    asyncio.run(fleet.resync())
    assert set(fleet.cache.models) == {KEY, ("team", "zeta")}
    listed = [kind for verb, kind, _ in cluster.requests if verb == "list"]
    assert (listed.count("SpeculativeModel"), listed.count("Deployment")) == (2, 3)  # a page each
    zeta = {ref for ref in fleet.cache.children[("team", "zeta")] if ref[0] == "Deployment"}
    llama = {ref for ref in fleet.cache.children[KEY] if ref[0] == "Deployment"}
    assert zeta == {("Deployment", "zeta-canary")}, zeta  # the stable one is gone
    assert llama == {("Deployment", "llama"), ("Deployment", "llama-canary")}, llama


def test_a_listing_keeps_what_was_written_after_it(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A model created after the listing was taken is not in it, and not gone."""
    started(cluster, fleet, peagle_manifest)
    listing = asyncio.run(cluster.list_models("team"))
    later = copy.deepcopy(peagle_manifest)
    later["metadata"]["name"] = "later"
    cluster.create_model(later)
    cluster.deliver(fleet)
    listed = {body["metadata"]["name"] for body in listing.items}
    assert fleet.cache.models_listed("team", listed, listing.version) == set()


def test_a_404_on_a_status_write_forgets_the_model(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    started(cluster, fleet, peagle_manifest)
    del cluster.objects[("SpeculativeModel", "team", "llama")]  # gone, no event at all
    scripted(fleet).next_tokens = 4
    fleet.cache.models[KEY].next_evaluation = 0.0
    writes = cluster.status_writes
    reconcile(fleet)
    assert cluster.status_writes == writes + 1  # the decision's write: 404
    assert KEY not in fleet.cache.models
    for _ in range(3):
        reconcile(fleet)
    assert cluster.status_writes == writes + 1


def test_a_model_created_again_under_the_same_name_starts_afresh(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Deleted and created again while the watch was away: the new uid is a new model."""
    started(cluster, fleet, peagle_manifest)
    cluster.delete_model("llama")
    cluster.lose_watch()
    again = cluster.create_model(peagle_manifest)
    cluster.objects[("SpeculativeModel", "team", "llama")]["metadata"]["uid"] = "uid-2"
    again["metadata"]["uid"] = "uid-2"
    cluster.watch[-1].body["metadata"]["uid"] = "uid-2"
    settle(cluster, fleet)
    deployment = cluster.objects[("Deployment", "team", "llama")]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "uid-2"


# --------------------------------------------------- deleted mid-reconcile (6, 7)


class BlockingEvaluator(ScriptedEvaluator):
    """Holds each evaluation until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def evaluate(
        self, model: SpeculativeModel, children: ObservedChildren, now: datetime
    ) -> tuner.Decided:
        self.entered.set()
        await self.release.wait()
        return await super().evaluate(model, children, now)


def series(name: str, model: str = "llama", **labels: str) -> float | None:
    value: float | None = REGISTRY.get_sample_value(
        name, {"namespace": "team", "model": model, **labels}
    )
    return value


def test_a_model_deleted_while_its_reconcile_runs_stays_forgotten(
    cluster: FakeCluster, peagle_manifest: dict[str, Any]
) -> None:
    evaluator = BlockingEvaluator()
    fleet = Fleet(cluster, evaluator)  # type: ignore[arg-type]
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)

    async def scenario() -> None:
        reconciling = asyncio.create_task(fleet.reconcile(KEY))
        await evaluator.entered.wait()
        evaluator.next_tokens = 5
        cluster.delete_model("llama")
        cluster.deliver(fleet)  # DELETED: forget()
        evaluator.release.set()
        await reconciling

    asyncio.run(scenario())
    assert cluster.applied == [] and cluster.status_writes == 0 and cluster.events == []
    assert KEY not in fleet.cache.models
    assert series("specfleet_speculative_tokens", track="stable") is None
    assert series("specfleet_acceptance_floor") is None


def test_forgetting_a_model_drops_its_counters_too() -> None:
    observability.DECISIONS.labels("team", "gone", "Promote").inc()
    observability.SCRAPE_ERRORS.labels("team", "gone", "Timeout").inc()
    observability.ROLLBACKS.labels("team", "kept", "BelowFloor").inc()
    observability.forget_model("team", "gone")
    assert series("specfleet_decisions_total", model="gone", action="Promote") is None
    assert series("specfleet_scrape_errors_total", model="gone", reason="Timeout") is None
    assert series("specfleet_rollbacks_total", model="kept", reason="BelowFloor") == 1.0


# ------------------------------------------------------------- conflicts (5)


def test_a_scale_write_during_an_evaluation_loses_no_decision(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """An HPA writes /scale while the decision is made: the decision's write conflicts,
    is retried against the fresh model at once, and the new K is applied."""
    started(cluster, fleet, peagle_manifest)
    scripted(fleet).next_tokens = 5
    fleet.cache.models[KEY].next_evaluation = 0.0
    scaled = False

    def hpa() -> None:
        nonlocal scaled
        if not scaled:
            scaled = True
            cluster.scale("llama", 3)

    cluster.before_status_write = hpa
    reconcile(fleet)
    assert scaled
    model = cluster.model("llama")
    assert model["status"]["speculation"]["tokens"] == 5 and model["spec"]["replicas"] == 3
    assert tokens_in(cluster.stable_args("llama")) == 5
    assert [e["reason"] for e in cluster.events] == ["Promote"]


def test_a_scale_write_that_a_status_write_lands_on_is_still_reconciled(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """An HPA writes /scale just before a progress write: the write conflicts and goes
    onto the fresh model, spec.replicas 3 included. That version is the operator's own
    write, but not only its own: the next reconcile applies 3 replicas (issue 46: a
    reconcile's own writes are settled, someone else's change under them is not)."""
    started(cluster, fleet, peagle_manifest)
    cluster.set_child_status("Deployment", "llama", {"replicas": 1})
    cluster.deliver(fleet)
    scaled = False

    def hpa() -> None:
        nonlocal scaled
        if not scaled:
            scaled = True
            cluster.scale("llama", 3)

    cluster.before_status_write = hpa
    reconcile(fleet)
    assert scaled and cluster.model("llama")["status"]["replicas"] == 1
    cluster.deliver(fleet)
    reconcile(fleet)
    assert cluster.objects[("Deployment", "team", "llama")]["spec"]["replicas"] == 3
    assert cluster.model("llama")["status"]["observedGeneration"] == 2


def test_a_spec_edit_during_a_decision_rolls_the_pods_once(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A spec edit (an env var for the pods) lands between the evaluation and its status
    write: the write conflicts and is retried on the newer spec, the model is decided
    again from it, and the stable Deployment is applied once, with the new K and the new
    env (before: from the older spec, then the newer: every stable pod restarted twice)."""
    started(cluster, fleet, peagle_manifest)
    applied = len(cluster.applied)
    scripted(fleet).next_tokens = 5
    fleet.cache.models[KEY].next_evaluation = 0.0
    edited = False

    def add_env(spec: dict[str, Any]) -> None:
        spec["runtime"].setdefault("env", []).append({"name": "EXTRA", "value": "1"})

    def user() -> None:
        nonlocal edited
        if not edited:
            edited = True
            cluster.edit_spec("llama", add_env)

    cluster.before_status_write = user
    settle(cluster, fleet)
    assert edited
    stable = [
        a["spec"]["template"]["spec"]["containers"][0]
        for a in cluster.applied[applied:]
        if a["kind"] == "Deployment" and a["metadata"]["name"] == "llama"
    ]
    assert len(stable) == 1, [(tokens_in(c["args"]), c["env"][-1]) for c in stable]
    assert tokens_in(stable[0]["args"]) == 5
    assert {"name": "EXTRA", "value": "1"} in stable[0]["env"]
    assert [e["reason"] for e in cluster.events] == ["Promote"]


def test_no_event_for_a_decision_whose_write_lost_to_another_writer(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Someone else writes status while the decision is made: the decision is not in
    status, so no Event tells of it, and the model decides again."""
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    scripted(fleet).next_tokens = 5

    def other_writer() -> None:
        cluster.before_status_write = lambda: None
        body = cluster.objects[("SpeculativeModel", "team", "llama")]
        body["status"] = {"phase": "Pending"}
        body["metadata"]["resourceVersion"] = "99999"

    cluster.before_status_write = other_writer
    reconcile(fleet)
    assert cluster.events == []
    assert "speculation" not in cluster.model("llama")["status"]
    assert fleet.cache.models[KEY].next_evaluation is None  # decided again next time


# ------------------------------------------------------------- ownership (4)


def user_service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "namespace": "team",
            "name": name,
            "managedFields": [{"manager": "kubectl-create"}],
        },
        "spec": {"selector": {"app": "theirs"}, "ports": [{"port": 80}]},
    }


def test_a_users_service_with_the_models_name_is_left_untouched(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    cluster.create(user_service("llama"))
    before = copy.deepcopy(cluster.objects[("Service", "team", "llama")])
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    settle(cluster, fleet)
    assert cluster.objects[("Service", "team", "llama")] == before
    assert not [a for a in cluster.applied if a["kind"] == "Service"]
    condition = degraded(cluster, "llama")
    assert (condition["status"], condition["reason"]) == ("True", "ChildNotOwned")
    assert "Service team/llama" in condition["message"]
    assert "kubectl-create" in condition["message"]
    assert ("Deployment", "team", "llama") in cluster.objects  # what it owns is applied


def test_two_models_needing_one_child_name_do_not_take_it_from_each_other(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """`foo-canary`'s stable Deployment and `foo`'s canary Deployment share a name: the
    first model keeps it, the second is Degraded naming both."""
    first = copy.deepcopy(peagle_manifest)
    first["metadata"]["name"] = "foo-canary"
    cluster.create_model(first)
    cluster.deliver(fleet)
    reconcile(fleet, ("team", "foo-canary"))
    owned = copy.deepcopy(cluster.objects[("Deployment", "team", "foo-canary")])
    second = copy.deepcopy(peagle_manifest)
    second["metadata"]["name"] = "foo"
    cluster.create_model(second)
    for _ in range(3):
        cluster.deliver(fleet)
        reconcile(fleet, ("team", "foo"))
        reconcile(fleet, ("team", "foo-canary"))
    assert cluster.objects[("Deployment", "team", "foo-canary")]["spec"] == owned["spec"]
    refs = cluster.objects[("Deployment", "team", "foo-canary")]["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["foo-canary"]
    condition = degraded(cluster, "foo")
    assert condition["reason"] == "ChildNotOwned"
    assert (
        "Deployment team/foo-canary belongs to SpeculativeModel foo-canary"
        in (condition["message"])
    )
    assert ("Service", "team", "foo") in cluster.objects and ("Service", "team", "foo-canary") in (
        cluster.objects
    )
    assert degraded(cluster, "foo-canary")["status"] == "False"


def test_an_orphaned_child_of_the_model_is_adopted(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Children left by `kubectl delete --cascade=orphan` and a model created again:
    made by the operator for this model (its labels), owned by no one: taken back."""
    started(cluster, fleet, peagle_manifest)
    for kind in ("Deployment", "Service"):
        del cluster.objects[(kind, "team", "llama")]["metadata"]["ownerReferences"]
    cluster.delete("SpeculativeModel", "llama")
    cluster.lose_watch()
    fresh = Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    settle(cluster, fresh)
    assert degraded(cluster, "llama")["status"] == "False"
    service = cluster.objects[("Service", "team", "llama")]
    assert service["metadata"]["ownerReferences"][0]["name"] == "llama"


@pytest.fixture(autouse=True)
def _no_stray_series() -> Iterator[None]:
    yield
    for name in ("llama", "foo", "foo-canary", "later", "gone", "kept"):
        observability.forget_model("team", name)


def test_a_new_leader_lists_before_it_writes_and_again_after_a_relist(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any], monkeypatch: Any
) -> None:
    """A standby's cache may lack DELETED events (its watch was away): the fleet lists
    before its first reconcile, and again once a watch relists."""
    monkeypatch.setattr("specfleet.operator.fleet.RELIST_SETTLE_SECONDS", 0.0)
    started(cluster, fleet, peagle_manifest)
    cluster.delete_model("llama")
    cluster.lose_watch()
    applies, writes = len(cluster.applied), cluster.status_writes
    other = copy.deepcopy(peagle_manifest)
    other["metadata"]["name"] = "other"

    async def scenario() -> None:
        stop = asyncio.Event()
        running = asyncio.create_task(fleet.run(stop))
        await asyncio.sleep(0.2)
        assert KEY not in fleet.cache.models
        # The watch of models relists after a gap in which "other" came and went.
        cluster.create_model(other)
        cluster.deliver(fleet)
        del cluster.objects[("SpeculativeModel", "team", "other")]
        fleet.relisted()
        await asyncio.sleep(0.2)
        stop.set()
        await running

    asyncio.run(scenario())
    assert len(cluster.applied) == applies and cluster.status_writes == writes
    assert ("team", "other") not in fleet.cache.models


def test_the_handlers_find_their_fleet_in_kopfs_memo_and_report_a_relist(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Each operator run has its own fleet (kopf's memo, not class attributes), and a
    listed object (kopf's type None) asks that fleet for a listing of its own."""
    other = Fleet(cluster, ScriptedEvaluator())  # type: ignore[arg-type]
    memo = handlers.memo_for(handlers.Running(fleet))
    handlers.memo_for(handlers.Running(other))
    peagle_manifest["metadata"]["name"] = "llama"
    body = kopf.Body(cast(Any, cluster.create_model(peagle_manifest)))
    model_event = cast(Any, handlers.model_event)  # kopf types the decorated handler

    async def listed() -> bool:
        await model_event(type=None, body=body, memo=memo)
        try:
            await asyncio.wait_for(fleet._relisted.wait(), timeout=1)
        except TimeoutError:
            return False
        return True

    assert asyncio.run(listed())
    assert KEY in fleet.cache.models and KEY not in other.cache.models


def test_a_decision_written_before_its_children_keeps_its_event_when_the_summary_loses(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """The new K is written first, then the children applied; the summary's write then
    loses to another writer. The decision is in status: its Event is posted, and the
    model is not decided again before its interval."""
    started(cluster, fleet, peagle_manifest)
    scripted(fleet).next_tokens = 5
    fleet.cache.models[KEY].next_evaluation = 0.0
    writes = 0

    def other_writer_second() -> None:
        nonlocal writes
        writes += 1
        if writes == 2:
            body = cluster.objects[("SpeculativeModel", "team", "llama")]
            body["status"] = {**body["status"], "phase": "Pending"}
            body["metadata"]["resourceVersion"] = "99999"

    cluster.before_status_write = other_writer_second
    reconcile(fleet)
    assert cluster.model("llama")["status"]["speculation"]["tokens"] == 5
    assert [e["reason"] for e in cluster.events] == ["Promote"]
    assert fleet.cache.models[KEY].next_evaluation is not None


# ------------------------------------------- what a new model's children cost (issue 46)


def test_a_new_models_children_cost_one_request_each_and_no_read(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Seen by the watch and no relist since: each child is one create-only apply (as
    `kubectl apply --server-side` costs), no GET of the child or of the model."""
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    cluster.requests.clear()
    reconcile(fleet)
    children = [r for r in cluster.requests if r[1] != "SpeculativeModel/status"]
    assert sorted(children) == [
        ("patch", "Deployment", "llama"),
        ("patch", "Deployment", "llama-canary"),
        ("patch", "PodDisruptionBudget", "llama"),
        ("patch", "Service", "llama"),
    ]


def test_after_a_relist_the_model_is_confirmed_before_its_children_are_created(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A relist since the model was last seen: its DELETED may be lost, so the API
    server is asked before anything is created, and a model gone is forgotten."""
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    del cluster.objects[("SpeculativeModel", "team", "llama")]  # gone, its DELETED lost
    cluster.lose_watch()
    fleet.relisted()
    reconcile(fleet)
    assert ("get", "SpeculativeModel", "llama") in cluster.requests
    assert not cluster.applied and cluster.status_writes == 0
    assert KEY not in fleet.cache.models


def test_after_a_relist_a_child_the_cache_still_holds_is_not_applied_for_a_model_gone(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A watch gap: the model and its children were deleted; only the Service's DELETED
    arrived. The Deployments the cache still holds would be applied, which creates them
    (CI saw the operator re-create a gone model's Deployment 35 ms before the listing
    forgot it): after a relist the model is confirmed first, whatever the cache holds."""
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    reconcile(fleet)
    cluster.deliver(fleet)
    cluster.delete_model("llama")
    cluster.deliver(fleet, kinds=("Service",))
    cluster.lose_watch()
    fleet.relisted()
    cluster.requests.clear()
    reconcile(fleet)
    assert ("get", "SpeculativeModel", "llama") in cluster.requests
    assert not [r for r in cluster.requests if r[0] == "patch"], cluster.requests
    assert ("Deployment", "team", "llama") not in cluster.objects
    assert KEY not in fleet.cache.models


def serving(cluster: FakeCluster, fleet: Fleet, manifest: dict[str, Any]) -> str:
    """Model "llama" reconciled with one Ready pod, its status written: the pod's name."""
    manifest["metadata"]["name"] = "llama"
    cluster.create_model(manifest)
    cluster.deliver(fleet)
    reconcile(fleet)
    [pod] = cluster.run_pods("llama", ["10.0.0.1"])
    cluster.deliver(fleet)
    reconcile(fleet)
    return pod


def test_after_a_relist_no_status_is_written_to_a_model_gone(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A watch gap: the model was deleted, its DELETED lost; a pod's watch came back first
    with the pod no longer Ready. The children are as applied, so none is applied, but the
    status that pod calls for would go to a model gone (CI saw the operator's status
    PATCH answered 404 after a gap): the model is confirmed first."""
    pod = serving(cluster, fleet, peagle_manifest)
    del cluster.objects[("SpeculativeModel", "team", "llama")]
    cluster.lose_watch()
    fleet.relisted()
    cluster.set_child_status("Pod", pod, {"phase": "Running", "conditions": []})
    cluster.deliver(fleet)
    cluster.requests.clear()
    reconcile(fleet)
    assert cluster.requests == [("get", "SpeculativeModel", "llama")], cluster.requests
    assert KEY not in fleet.cache.models


def test_a_model_confirmed_after_a_relist_is_asked_about_once(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """Seen by the API server since the relist (before its Service was put back), the
    model's status write needs no GET."""
    pod = serving(cluster, fleet, peagle_manifest)
    fleet.relisted()
    cluster.delete("Service", "llama")
    cluster.set_child_status("Pod", pod, {"phase": "Running", "conditions": []})
    cluster.deliver(fleet)
    cluster.requests.clear()
    reconcile(fleet)
    assert cluster.requests.count(("get", "SpeculativeModel", "llama")) == 1, cluster.requests
    assert ("update", "SpeculativeModel/status", "llama") in cluster.requests
    assert ("Service", "team", "llama") in cluster.objects


def test_a_listing_after_the_relist_confirms_the_model_again(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    fleet.relisted()
    asyncio.run(fleet.resync())
    cluster.requests.clear()
    reconcile(fleet)
    assert not [r for r in cluster.requests if r[0] == "get"]
    assert ("Deployment", "team", "llama") in cluster.objects


def test_a_child_whose_name_is_taken_by_an_uncached_object_is_asked_about_once(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """The create-only apply finds the user's Service (not watched: no labels), then one
    GET names its owner; the object is not changed."""
    cluster.create(user_service("llama"))
    before = copy.deepcopy(cluster.objects[("Service", "team", "llama")])
    peagle_manifest["metadata"]["name"] = "llama"
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    cluster.requests.clear()
    reconcile(fleet)
    service = [r for r in cluster.requests if r[1] == "Service"]
    assert service == [("patch", "Service", "llama"), ("get", "Service", "llama")]
    assert cluster.objects[("Service", "team", "llama")] == before
    assert degraded(cluster, "llama")["reason"] == "ChildNotOwned"


# ------------------------------------------------------- the leader's fence


def test_a_write_that_meets_the_fence_closed_goes_again_at_the_next_renewal(
    cluster: FakeCluster, fleet: Fleet, peagle_manifest: dict[str, Any]
) -> None:
    """A leader whose renewals are answered late has its fence closed between two of them
    (e2e/test_api_faults.py): a reconcile that meets it is no failure of the model's, so
    it backs off nothing, and the Lease's next renewal runs it again: the Service deleted
    meanwhile is back at once, not after 5, 10, 20 s of back-off."""
    started(cluster, fleet, peagle_manifest)
    cluster.delete("Service", "llama")
    cluster.deliver(fleet)
    cluster.fence_open = False
    with pytest.raises(NotLeading):
        reconcile(fleet)
    record = fleet.cache.models[KEY]
    assert record.backoff is None
    assert ("Service", "team", "llama") not in cluster.objects
    cluster.fence_open = True
    fleet.fence_reopened()
    assert KEY in fleet.cache.queue.dirty
    reconcile(fleet)
    assert ("Service", "team", "llama") in cluster.objects
    assert not fleet.fenced
