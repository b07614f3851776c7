"""Which watch events wake a model: the rules that keep a burst of events O(N)."""

from __future__ import annotations

import copy
from typing import Any

from specfleet.operator.configs import FORCE_CONFIG_ANNOTATION
from specfleet.operator.fleet import FleetCache
from specfleet.operator.render import MODEL_LABEL

KEY = ("team", "m")


def model(
    version: str = "1", generation: int = 1, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "specfleet.io/v1alpha1",
        "kind": "SpeculativeModel",
        "metadata": {
            "namespace": "team",
            "name": "m",
            "generation": generation,
            "resourceVersion": version,
            "managedFields": [{"manager": "kubectl", "time": version}],
        },
        "spec": {"replicas": generation},
        "status": status or {},
    }


def child(kind: str, name: str, version: str, ready: int = 0) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {
            "namespace": "team",
            "name": name,
            "resourceVersion": version,
            "labels": {MODEL_LABEL: "m"},
            "managedFields": [{"manager": "kube-controller-manager"}],
        },
        "spec": {"template": {"spec": {"containers": [{"name": "vllm"}]}}},
        "status": {"readyReplicas": ready},
    }


def woken(cache: FleetCache) -> set[tuple[str, str]]:
    dirty = set(cache.queue.dirty)
    cache.queue.dirty.clear()
    cache.queue.changed.clear()
    return dirty


def test_a_new_model_and_a_spec_edit_wake_it() -> None:
    cache = FleetCache()
    cache.remember_model(model("1"))
    assert woken(cache) == {KEY} and cache.models[KEY].body["metadata"]["resourceVersion"] == "1"
    cache.remember_model(model("2", generation=2))
    assert woken(cache) == {KEY}


def test_a_status_only_change_is_kept_but_does_not_wake() -> None:
    """The echo of the operator's own status write: stored (its resourceVersion is the
    next write's precondition), not re-run."""
    cache = FleetCache()
    cache.remember_model(model("1"))
    woken(cache)
    cache.remember_model(model("2", status={"phase": "Ready"}))
    assert woken(cache) == set()
    assert cache.models[KEY].body["status"] == {"phase": "Ready"}
    assert not cache.queue.changed.is_set()


def test_a_change_of_what_the_fleet_reads_wakes_the_model() -> None:
    """The force-config annotation and a deletion are read; the model's labels and other
    annotations are not (and are not cached): changing them wakes nothing."""
    cache = FleetCache()
    cache.remember_model(model("1"))
    woken(cache)
    edited = model("2")
    edited["metadata"]["labels"] = {"team": "search"}
    edited["metadata"]["annotations"] = {"example.com/owner": "search"}
    cache.remember_model(edited)
    assert woken(cache) == set()
    edited = model("3")
    edited["metadata"]["annotations"] = {FORCE_CONFIG_ANNOTATION: "abc"}
    cache.remember_model(edited)
    assert woken(cache) == {KEY}
    edited = model("4")
    edited["metadata"]["annotations"] = {FORCE_CONFIG_ANNOTATION: "abc"}
    edited["metadata"]["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    cache.remember_model(edited)
    assert woken(cache) == {KEY}


def test_children_wake_their_model_once_per_version() -> None:
    cache = FleetCache()
    deployment = child("Deployment", "m", "10")
    cache.remember_child(deployment)
    assert woken(cache) == {KEY}
    cache.remember_child(copy.deepcopy(deployment))  # the watch echoing the apply response
    assert woken(cache) == set()
    cache.remember_child(child("Deployment", "m", "11", ready=1))
    assert woken(cache) == {KEY}
    stable = cache.observed(KEY).stable
    assert stable is not None and stable["status"] == {"readyReplicas": 1}


def test_children_are_cached_without_spec_or_managed_fields() -> None:
    cache = FleetCache()
    cache.remember_child(child("Pod", "m-abc", "5"))
    pod = cache.children[KEY][("Pod", "m-abc")]
    assert set(pod) == {"kind", "metadata", "status"}
    assert "managedFields" not in pod["metadata"]


def test_deleting_a_child_wakes_its_model_and_forgets_it() -> None:
    cache = FleetCache()
    cache.remember_child(child("Pod", "m-abc", "5"))
    cache.remember_child(child("Deployment", "m-canary", "6"))
    woken(cache)
    cache.remember_child(child("Pod", "m-abc", "7"), deleted=True)
    assert woken(cache) == {KEY}
    assert cache.observed(KEY).pods == []
    cache.remember_child(child("Deployment", "m-canary", "8"), deleted=True)
    assert woken(cache) == {KEY}
    assert cache.observed(KEY).canary is None
    # A deletion of something never cached changes nothing.
    cache.remember_child(child("Pod", "m-zzz", "9"), deleted=True)
    assert woken(cache) == set()


def test_objects_without_the_model_label_are_ignored() -> None:
    cache = FleetCache()
    stray = child("Pod", "other", "1")
    del stray["metadata"]["labels"][MODEL_LABEL]
    cache.remember_child(stray)
    assert woken(cache) == set() and cache.children == {}


def test_inputs_change_with_anything_the_reconcile_reads() -> None:
    """Equal inputs let the loop skip a tick: each change of what it reads must change
    them (a new version that changes nothing read: the next test)."""
    cache = FleetCache()
    cache.remember_model(model("1"))
    cache.remember_child(child("Deployment", "m", "10"))
    cache.remember_child(child("Pod", "m-abc", "20"))
    last = cache.inputs(KEY)
    assert cache.inputs(KEY) == last

    def changed() -> bool:
        nonlocal last
        before, last = last, cache.inputs(KEY)
        return last != before

    cache.remember_model(model("2", status={"phase": "Ready"}))  # status echoes count too
    assert changed()
    cache.remember_child(child("Deployment", "m", "11", ready=1))
    assert changed()
    cache.remember_child(child("Deployment", "m-canary", "12"))
    assert changed()
    running = child("Pod", "m-abc", "21")
    running["status"] = {"phase": "Running"}
    cache.remember_child(running)
    assert changed()
    cache.remember_child(child("Pod", "m-def", "22"))
    assert changed()
    cache.remember_child(child("Pod", "m-def", "22"), deleted=True)
    assert changed()
    other = child("Pod", "n-abc", "30")  # another model's pod
    other["metadata"]["labels"][MODEL_LABEL] = "n"
    cache.remember_child(other)
    assert not changed()


def test_an_older_model_event_never_replaces_a_newer_cached_write() -> None:
    """The status write's response is cached; a watch event from before it that arrives
    later must not hand the next reconcile the status it replaced."""
    cache = FleetCache()
    cache.remember_model(model("7", status={"speculation": {"tokens": 5}}))
    cache.remember_model(model("5", status={"speculation": {"tokens": 3}}))
    assert cache.models[KEY].body["status"] == {"speculation": {"tokens": 5}}
    cache.remember_model(model("7", status={"speculation": {"tokens": 5}}))  # the echo
    cache.remember_model(model("9", generation=2))
    assert cache.models[KEY].body["metadata"]["resourceVersion"] == "9"


def test_services_are_children_too() -> None:
    cache = FleetCache()
    cache.remember_child(child("Service", "m", "3"))
    assert woken(cache) == {KEY}
    before = cache.inputs(KEY)
    cache.remember_child(child("Service", "m", "3"), deleted=True)
    assert woken(cache) == {KEY} and cache.inputs(KEY) != before


def test_a_status_write_that_changes_nothing_read_neither_wakes_nor_changes_inputs() -> None:
    """Issue 46: most status writes of a rollout (a ReplicaSet's counts, a Deployment's
    availableReplicas and its Progressing condition's lastUpdateTime, a disruption
    budget's status) change nothing the fleet reads: they no longer re-run the model,
    now or at the next sweep. What it reads still does, and so does any new version of
    a Service (its resourceVersion is how an edit of it is told)."""
    cache = FleetCache()
    deployment = child("Deployment", "m", "10")
    replica_set = child("ReplicaSet", "m-abc", "11")
    budget = child("PodDisruptionBudget", "m", "12")
    service = child("Service", "m", "13")
    for body in (deployment, replica_set, budget, service):
        cache.remember_child(copy.deepcopy(body))
    woken(cache)
    inputs = cache.inputs(KEY)

    def progressed(body: dict[str, Any], version: str, **status: Any) -> dict[str, Any]:
        newer = copy.deepcopy(body)
        newer["metadata"]["resourceVersion"] = version
        newer["status"] = {**newer["status"], **status}
        return newer

    progressing = {"type": "Progressing", "status": "True", "lastUpdateTime": "T1"}
    cache.remember_child(progressed(deployment, "20", availableReplicas=1))
    cache.remember_child(progressed(deployment, "21", conditions=[progressing]))
    cache.remember_child(progressed(replica_set, "22", replicas=1, fullyLabeledReplicas=1))
    cache.remember_child(progressed(budget, "23", currentHealthy=1, observedGeneration=1))
    assert woken(cache) == set() and cache.inputs(KEY) == inputs

    failure = {"type": "ReplicaFailure", "status": "True", "lastTransitionTime": "T2"}
    cache.remember_child(progressed(deployment, "24", conditions=[progressing, failure]))
    assert woken(cache) == {KEY} and cache.inputs(KEY) != inputs
    stable = cache.observed(KEY).stable
    assert stable is not None and stable["status"]["conditions"] == [failure]
    inputs = cache.inputs(KEY)
    cache.remember_child(progressed(deployment, "25", readyReplicas=1))
    assert woken(cache) == {KEY} and cache.inputs(KEY) != inputs
    inputs = cache.inputs(KEY)
    cache.remember_child(progressed(service, "26"))
    assert woken(cache) == {KEY} and cache.inputs(KEY) != inputs


def test_a_model_of_the_version_cached_keeps_the_cached_body() -> None:
    """A listing's copy of every model, or the echo of a status write whose response is
    cached, is the body the cache holds: it keeps that one (the listing's copies, taken
    in, left the operator's memory larger for good), and still counts it as seen."""
    cache = FleetCache()
    cache.remember_model(model("1"))
    woken(cache)
    cached = cache.models[KEY].status
    cache.relists = 1
    cache.remember_model(model("1"))
    assert cache.models[KEY].status is cached and woken(cache) == set()
    assert cache.models[KEY].seen_at_relist == 1
    recreated = model("1")
    recreated["metadata"]["uid"] = "another"  # deleted and created again: not the same
    cache.remember_model(recreated)
    assert cache.models[KEY].body["metadata"]["uid"] == "another" and woken(cache) == {KEY}


def test_a_model_is_kept_as_its_json_and_each_read_is_a_fresh_copy() -> None:
    """The cache keeps a model's body as compact JSON (a thousand bodies as dicts held six
    times the memory): what a reconcile reads is its own copy, and what is looked at
    without decoding it (version, uid, generations) follows each new version."""
    cache = FleetCache()
    cache.remember_model(model("1", status={"observedGeneration": 1}))
    record = cache.models[KEY]
    read = record.body
    read["spec"]["replicas"] = 7
    read["status"]["phase"] = "Ready"
    assert record.body["spec"] == {"replicas": 1} and record.body["status"] == {
        "observedGeneration": 1
    }
    assert (record.version, record.generation, record.observed_generation) == ("1", 1, 1)
    cache.remember_model(model("2", generation=2, status={"observedGeneration": 1}))
    assert (record.version, record.generation, record.observed_generation) == ("2", 2, 1)
    assert "managedFields" not in record.body["metadata"]
    assert len(record.outside) + len(record.status) < len(repr(record.body))  # no spaces
