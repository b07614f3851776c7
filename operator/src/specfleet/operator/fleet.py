"""The operator's state of the world and the reconciler of each SpeculativeModel.

Watches feed `FleetCache` (kopf's of the models, child_watches.py's of their children); a
listing of its own after each relist and every `resync_period` removes what vanished
while a watch was away, for a relist sends no DELETED for it. `Fleet.reconcile` renders
and applies children and writes status; `WorkQueue` runs it for every model each period
and, in between, for each model that was created, edited or whose children changed. It
is level-triggered: with nothing changed it changes nothing. Tuning evaluations run on
the same path when a model's `tuning.interval` has elapsed.

All the fleet keeps about a model is one `ModelRecord`; forgetting a model drops it, and
a reconcile still in flight for it writes nothing more.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import orjson
from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from specfleet.operator import (
    allocator,
    hot_handoff,
    hot_schedules,
    observability,
    pod_reading,
    render,
    track_plan,
    tuner,
)
from specfleet.operator.api import (
    API_VERSION,
    KIND,
    ConditionType,
    Phase,
    SpeculativeModel,
    SpeculativeModelStatus,
)
from specfleet.operator.children import (
    CHILD_KINDS,
    DEPLOYMENT,
    LEADER_WORKER_SET,
    POD,
    REPLICA_SET,
    TRACKS,
    child_kind,
    owned_pods,
    owned_workers,
)
from specfleet.operator.conditions import set_condition
from specfleet.operator.configs import FORCE_CONFIG_ANNOTATION
from specfleet.operator.durations import parse_duration
from specfleet.operator.errors import validation_errors
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.keys import Key, key_of, key_of_model, model_key
from specfleet.operator.kube import Cluster, Conflict, Exists, Gone, NotLeading, Page
from specfleet.operator.outcomes import Action
from specfleet.operator.pod_policy import NOTHING_MORE, PodPolicy
from specfleet.operator.status import (
    ObservedChildren,
    PodStart,
    ReconcileFailure,
    bounded,
    observe_start,
    summarize,
)
from specfleet.operator.workqueue import Backoff, Priority, WorkQueue, backed_off, without_slot

log = logging.getLogger("specfleet.fleet")
ChildRef = tuple[str, str]  # (kind, name) of a child within its model's namespace
# resourceVersions of a model and of each of its children.
Inputs = tuple[str | None, frozenset[tuple[ChildRef, str | None]]]
# Seconds between listings that catch what the watches missed (controller-runtime's
# SyncPeriod), and the pause after a relist starts, so its burst of events is in first.
RESYNC_SECONDS = 120.0
RELIST_SETTLE_SECONDS = 2.0
# Least seconds between two status writes of a model that only report what its children
# did (replicas, readiness): the changes of a rollout's first seconds (the Deployment's
# replicas, the pod scheduled, Running, Ready) go out as one write. The first write of a
# generation, a decision, a failure and an evaluation's status are never held back.
STATUS_INTERVAL_SECONDS = 2.0
# While new models keep coming (a user's apply of many, a GitOps sync), those never
# reconciled wait for it to pause this long, and at most BURST_LIMIT_SECONDS after each was
# first seen: the user's apply then runs as it does with no operator, whose requests for
# the children would crowd the API server it waits on (at 300 models, 15.6-17.5 s instead
# of 2.0-2.4 s); the children are the same requests, made after it.
BURST_QUIET_SECONDS = 0.5
BURST_LIMIT_SECONDS = 20.0
# The uids of deleted models kept, so that a late event cannot bring one back.
REMEMBERED_DELETIONS = 10_000
# The labels of every child the operator creates (render.labels); the watches select them.
MANAGED_BY = ("app.kubernetes.io/managed-by", "specfleet")
CHILD_SELECTOR = f"{render.MODEL_LABEL},{MANAGED_BY[0]}={MANAGED_BY[1]}"


# What a model's children are rendered from when nothing was decided since the model was
# read: its resourceVersion, the hot-schedule credential, the tracks whose workloads of the
# kind it left are present (render.retired_tracks).
RenderSource = tuple[str | None, str | None, tuple[str, ...]]


@dataclass(frozen=True)
class AppliedChildren:
    """What the operator last applied for a model (a digest of the manifests: the
    manifests themselves, pod templates and all, were the largest thing kept per model),
    each child's edit marker right after (see ChildKind.edit_marker): another marker
    means someone else changed it; and what they were rendered from, if known: the same
    source renders the same manifests, so a reconcile of it renders nothing."""

    digest: bytes
    markers: dict[ChildRef, Any]
    source: RenderSource | None = None


@dataclass
class ModelRecord:
    """Everything the fleet keeps about one model."""

    # The newest version seen, by a watch or a write's response, as compact JSON (`keep`):
    # the model as its reconcile reads it less status (`_outside_status`), and its status.
    # A thousand bodies kept as dicts held 19 MB where their JSON holds 3: each is
    # hundreds of small objects, made anew at every status write among the replies decoded
    # and dropped around them, whose memory they then kept pinned. A reconcile decodes
    # it once (`body`); a new version that changes `outside` is told by comparing bytes.
    outside: bytes
    status: bytes = b"{}"
    # Read from the body as it is kept: what is looked at without decoding it.
    version: str | None = None
    uid: str | None = None
    generation: int | None = None
    observed_generation: int | None = None
    nodes_per_replica: int = 1
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # time.monotonic() of the next tuning evaluation; None: at the next reconcile.
    next_evaluation: float | None = None
    applied: AppliedChildren | None = None
    # The inputs of the last complete reconcile: a tick with the same inputs and no
    # evaluation due would change nothing, so it is skipped.
    settled: Inputs | None = None
    # What the running reconcile's own writes left in the cache, in order: (None, the
    # version written onto, the version written) of each status write, (ref, None, its
    # version) of each child created. Their echoes are no new input.
    own_writes: list[tuple[ChildRef | None, str | None, str | None]] = field(default_factory=list)
    backoff: Backoff | None = None
    # FleetCache.relists when a watch event or a listing last showed the model: older
    # than the cache's count, a relist came since, and its DELETED may have been lost.
    seen_at_relist: int = 0
    # time.monotonic() of the last status write that reached the API server.
    status_written: float = float("-inf")
    # Forgotten (deleted, or found gone): a reconcile in flight stops before its next write.
    gone: bool = False
    # time.monotonic() when the fleet first saw it (Fleet._after_the_burst).
    first_seen: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, body: dict[str, Any], seen_at_relist: int = 0) -> ModelRecord:
        record = cls(b"", seen_at_relist=seen_at_relist)
        record.keep(body)
        return record

    def keep(self, body: dict[str, Any]) -> None:
        metadata, status = body["metadata"], body.get("status") or {}
        self.outside = _packed({**_outside_status(body), "apiVersion": body.get("apiVersion")})
        self.status = _packed(status)
        self.version = metadata.get("resourceVersion")
        self.uid = metadata.get("uid")
        self.generation = metadata.get("generation")
        self.observed_generation = status.get("observedGeneration")
        self.nodes_per_replica = _nodes_per_replica(body)

    @property
    def body(self) -> dict[str, Any]:
        """The body kept, decoded: a new copy at each call."""
        body: dict[str, Any] = orjson.loads(self.outside)
        body["kind"] = KIND
        body["metadata"]["resourceVersion"] = self.version
        body["status"] = orjson.loads(self.status)
        return body


class Forgotten(Exception):
    """The model was forgotten while its reconcile ran."""


class PodPolicyRefused(Exception):
    """The model's pods would hold what the operator's install does not allow."""


@dataclass
class FleetCache:
    """The latest view of every model and child, kept current by the watches, the
    fleet's own listings and the responses of the operator's own writes."""

    models: dict[Key, ModelRecord] = field(default_factory=dict)
    # model -> (kind, name) -> what the fleet reads of each child, applied ones and pods.
    children: dict[Key, dict[ChildRef, dict[str, Any]]] = field(default_factory=dict)
    queue: WorkQueue = field(default_factory=WorkQueue)
    deleted: OrderedDict[str, None] = field(default_factory=OrderedDict)  # uids
    # time.monotonic() when a model was last seen for the first time.
    last_new_model: float = float("-inf")
    # model -> pod uid -> its latest start, as seen by every pod event in turn: a start's
    # first Ready is told from a readiness flap only by having seen what came before.
    starts: dict[Key, dict[str, PodStart]] = field(default_factory=dict)
    # Called with each forgotten model's key: what others keep about it goes too.
    on_forget: Callable[[Key], None] = lambda key: None
    # Relists of a watch so far: events may have been lost before each.
    relists: int = 0

    def wake(self, key: Key) -> None:
        self.queue.add(key)

    def body(self, key: Key) -> dict[str, Any] | None:
        record = self.models.get(key)
        return None if record is None else record.body

    def version(self, key: Key) -> str | None:
        record = self.models.get(key)
        return None if record is None else record.version

    def remember_model(self, body: dict[str, Any], relists: int | None = None) -> None:
        """Keep the newest body; wake the model unless only its status moved (the echo
        of the operator's own status write would re-run it to no effect). `relists`: the
        relist count when the body was read (a listing's start), if not now."""
        seen_at = self.relists if relists is None else relists
        key = key_of(body)
        record = self.models.get(key)
        metadata = body["metadata"]
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if (
            record is not None
            and version is not None
            and (version, uid)
            == (
                record.version,
                record.uid,
            )
        ):
            # What the cache holds already (the echo of a status write whose response
            # it took, or a listing's copy): keeping it spares a copy of every model
            # body at each listing, which left the operator's memory larger for good.
            record.seen_at_relist = max(record.seen_at_relist, seen_at)
            return
        if uid is not None and uid in self.deleted:
            return  # a late event of a deleted model
        if record is not None and uid != record.uid:
            self.forget(key)  # deleted and created again while a watch was away
            record = None
        body = _model_part(body)
        if record is None:
            record = self.models[key] = ModelRecord.of(body, seen_at_relist=seen_at)
            self.last_new_model = record.first_seen
            self.wake(key)
            return
        record.seen_at_relist = max(record.seen_at_relist, seen_at)
        if _older(version, record.version):
            # A watch event from before a status write whose response is cached: taking
            # it would hand the next reconcile the status that write replaced.
            return
        before = record.outside
        record.keep(body)
        if record.outside != before:
            self.wake(key)

    def forget(self, key: Key, uid: str | None = None) -> None:
        """Drop all that is kept about a model: one record (only if its uid is `uid`,
        when given: a DELETED of an earlier model of the same name leaves a newer one)."""
        record = self.models.get(key)
        if record is not None and uid is not None and record.uid != uid:
            self._remember_deletion(uid)
            return
        self.models.pop(key, None)
        self.queue.discard(key)
        if record is not None:
            record.gone = True
            self._remember_deletion(record.uid)
        self.on_forget(key)

    def _remember_deletion(self, uid: str | None) -> None:
        if uid is None:
            return
        self.deleted[uid] = None
        while len(self.deleted) > REMEMBERED_DELETIONS:
            self.deleted.popitem(last=False)

    def remember_child(self, body: dict[str, Any], deleted: bool = False) -> None:
        """Keep what the fleet reads of a child and wake its model, unless that is what
        the cache holds already: an echo of an apply's response, or one of the status
        writes of a rollout that change nothing the fleet reads (a ReplicaSet's counts,
        a Deployment's availableReplicas or a condition's lastUpdateTime, a disruption
        budget's status). Those keep the cached version, so the model's inputs stay
        equal and its next sweep is skipped too."""
        model = body["metadata"].get("labels", {}).get(render.MODEL_LABEL)
        if model is None:
            return
        owner = model_key(body["metadata"].get("namespace"), model)
        observed = _observed_part(body)
        children = self.children.setdefault(owner, {})
        ref = (observed["kind"], observed["metadata"]["name"])
        changed = _replace(children, ref, observed, deleted)
        if not children:
            del self.children[owner]
        if ref[0] == POD.kind:
            self._observe_start(owner, observed, deleted)
        if changed:
            self.wake(owner)

    def _observe_start(self, owner: Key, pod: dict[str, Any], deleted: bool) -> None:
        starts = self.starts.setdefault(owner, {})
        uid = str(pod["metadata"].get("uid"))
        if deleted:
            starts.pop(uid, None)
        else:
            starts[uid] = observe_start(starts.get(uid), pod)
        if not starts:
            del self.starts[owner]

    def namespaces(self) -> set[str]:
        return {namespace for namespace, _ in [*self.models, *self.children]}

    def models_listed(self, namespace: str, listed: set[str], version: str) -> set[Key]:
        """After a listing of the models in `namespace` (the names it held, at
        resourceVersion `version`; each listed body remembered page by page): the keys
        of cached models it lacked, which are gone (unless cached from after it)."""
        return {
            key
            for key, record in self.models.items()
            if key[0] == namespace and key[1] not in listed and not _older(version, record.version)
        }

    def children_listed(self, namespace: str, kind: str, listed: set[str], version: str) -> None:
        """After a listing of one child kind in `namespace` (the names it held; each
        listed body remembered page by page): what it lacked is deleted."""
        for (owner_namespace, _), children in list(self.children.items()):
            if owner_namespace != namespace:
                continue
            for ref, body in list(children.items()):
                if ref[0] == kind and ref[1] not in listed and not _newer_than(body, version):
                    self.remember_child(body, deleted=True)

    def inputs(self, key: Key) -> Inputs:
        """The versions a reconcile of `key` reads: equal inputs, equal outputs."""
        children = self.children.get(key, {})
        return (
            self.version(key),
            frozenset((ref, _version_of(body)) for ref, body in children.items()),
        )

    def observed(self, key: Key) -> ObservedChildren:
        """The model's Deployments (or LeaderWorkerSets) and its own pods (`owned_pods`): a
        pod someone else labelled as the model's is neither scraped nor counted in status."""
        name = key[1]
        children = self.children.get(key, {})
        record = self.models.get(key)
        kind = render.workload_kind(1 if record is None else record.nodes_per_replica)
        stable = children.get(render.workload_ref(name, kind, "stable"))
        canary = children.get(render.workload_ref(name, kind, "canary"))
        labelled = [body for (kind, _), body in children.items() if kind == POD.kind]
        pods = owned_pods(
            None if record is None else record.uid,
            (stable, canary),
            [body for (kind, _), body in children.items() if kind == REPLICA_SET.kind],
            labelled,
        )
        starts = self.starts.get(key, {})
        return ObservedChildren(
            stable=stable,
            canary=canary,
            pods=pods,
            workers=owned_workers(labelled, pods),
            starts=[
                starts[uid] for pod in pods if (uid := str(pod["metadata"].get("uid"))) in starts
            ],
        )


@dataclass(frozen=True)
class Outcome:
    """How a reconcile ended: a failure to put children in place, whether its status is
    written (False: someone wrote first), and whether its decision is (it may have been
    written on its own, before the children; if not, the model is decided again)."""

    failure: ReconcileFailure | None = None
    written: bool = True
    decided: bool = True


class Fleet:
    """The reconciler: for one model, the tuning pipeline, the children's applies, the
    status write and the Events; `WorkQueue` says which model and when."""

    def __init__(
        self,
        cluster: Cluster,
        evaluator: Evaluator | None = None,
        period: float = 5.0,
        resync_period: float = RESYNC_SECONDS,
        schedule_key: bytes | None = None,
        pod_policy: PodPolicy = NOTHING_MORE,
        status_interval: float = 0.0,
        burst_quiet: float = 0.0,
        burst_limit: float = BURST_LIMIT_SECONDS,
    ) -> None:
        self.cluster = cluster
        self.status_interval = status_interval
        # 0: a new model is reconciled as soon as a slot is free (_after_the_burst).
        self.burst_quiet, self.burst_limit = burst_quiet, burst_limit
        self.pod_policy = pod_policy
        # Derives each model's credential for its pods' hot-schedule endpoint; without
        # it, models asking for hot switching fall back to restarts.
        self.schedule_key = schedule_key
        self.cache = FleetCache(on_forget=self._drop_series)
        self.evaluator = evaluator
        self.period = period
        self.resync_period = resync_period
        self._relisted = asyncio.Event()
        # Models whose writes met the leader's fence closed, tried again at the next
        # renewal of the Lease (`fence_reopened`).
        self.fenced: set[Key] = set()

    # ---------------------------------------------------------------- watches

    def remember_model(self, body: dict[str, Any], deleted: bool = False) -> None:
        if deleted:
            self.cache.forget(key_of(body), body["metadata"].get("uid"))
        else:
            self.cache.remember_model(body)

    def forget(self, key: Key) -> None:
        self.cache.forget(key)

    def _drop_series(self, key: Key) -> None:
        if self.evaluator is not None:
            self.evaluator.forget(key)
        observability.forget_model(*key)

    def _forget_record(self, key: Key, record: ModelRecord) -> None:
        """Forget the model `record` is about, and not a newer one of the same name."""
        record.gone = True
        if self.cache.models.get(key) is record:
            self.forget(key)

    def relisted(self) -> None:
        """A watch listed its objects again: what vanished meanwhile has no event."""
        self.cache.relists += 1
        self._relisted.set()

    async def resync(self) -> None:
        """List models and children in every namespace the cache knows and take the
        listings: what is gone is forgotten, as a DELETED event would have it."""
        for namespace in sorted(self.cache.namespaces()):
            relists = self.cache.relists
            listed, version = await _take_listing(
                partial(self.cluster.list_models, namespace),
                partial(self.cache.remember_model, relists=relists),
            )
            for key in self.cache.models_listed(namespace, listed, version):
                log.info("%s/%s: gone (found by a listing); forgetting it", *key)
                self.forget(key)
            for kind in CHILD_KINDS:
                listed, version = await _take_listing(
                    partial(self.cluster.list_children, kind.kind, namespace, CHILD_SELECTOR),
                    self.cache.remember_child,
                )
                self.cache.children_listed(namespace, kind.kind, listed, version)

    # --------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> None:
        """Children and status of one model, after a tuning evaluation when one is due."""
        record = self.cache.models.get(key)
        if record is None:
            return
        async with record.lock:
            body = record.body
            if record.gone or body["metadata"].get("deletionTimestamp"):
                return
            generation = body["metadata"].get("generation")
            if record.backoff is not None and record.backoff.holds(generation):
                return
            inputs = self.cache.inputs(key)
            if record.settled == inputs and not _evaluation_pending(record):
                return
            started = time.perf_counter()
            record.own_writes = []
            try:
                model: SpeculativeModel | None = SpeculativeModel.model_validate(body)
            except ValidationError:
                model = None
            evaluate = model is not None and _evaluation_due(record, model)
            handler = "evaluate" if evaluate else "reconcile"
            try:
                if model is None:
                    outcome = await self._refuse(record, body, datetime.now(UTC))
                else:
                    outcome = await self._reconcile(record, body, model, evaluate)
            except Forgotten:
                return
            except NotLeading:
                # The fence closed between two renewals of the Lease (one answered late),
                # or the Lease is lost and the operator stops: no fault of the model's, so
                # no back-off: it is tried again as soon as the Lease is renewed.
                self.fenced.add(key)
                raise
            except Exception:
                observability.RECONCILES.labels(handler, "error").inc()
                record.backoff = backed_off(record.backoff, generation)
                raise
            finally:
                observability.RECONCILE_SECONDS.labels(handler).observe(
                    time.perf_counter() - started
                )
                if record.gone and key not in self.cache.models:
                    self._drop_series(key)  # exported while the model was being forgotten
            if outcome.failure is not None:
                observability.RECONCILES.labels(handler, "error").inc()
                record.backoff = backed_off(record.backoff, generation)
                delay = record.backoff.retry_at - time.monotonic()
                log.warning("%s/%s: %s; retrying in %.0fs", *key, outcome.failure.message, delay)
                return
            if not outcome.written:
                if evaluate and not outcome.decided:
                    record.next_evaluation = None  # the decision was not recorded: decide again
                return
            observability.RECONCILES.labels(handler, "success").inc()
            record.backoff = None
            record.settled = self._settled(key, record, inputs)

    def _settled(self, key: Key, record: ModelRecord, started: Inputs) -> Inputs:
        """The inputs a complete reconcile that started from `started` leaves settled:
        the inputs now, if all that changed since is its own writes (the status it wrote,
        the children it created), for a reconcile of those would change nothing more;
        else `started`, and whatever else came is reconciled next."""
        now = self.cache.inputs(key)
        writes, record.own_writes = record.own_writes, []
        # The model's version, followed through the status writes made onto it: one
        # made onto a version someone else wrote (a retry after a conflict) ends the
        # chain, for that version is an input this reconcile did not start from.
        version = started[0]
        for ref, onto, written in writes:
            if ref is None and onto == version:
                version = written
        created = {(ref, written) for ref, _, written in writes if ref is not None}
        model = now[0] == version
        children = {ref for ref, _ in started[1]} <= {ref for ref, _ in now[1]} and all(
            child in created for child in now[1] - started[1]
        )
        return now if model and children else started

    async def _reconcile(
        self, record: ModelRecord, body: dict[str, Any], model: SpeculativeModel, evaluate: bool
    ) -> Outcome:
        key = key_of(body)
        now = datetime.now(UTC)
        recorded = model
        model, actions = _synced(model, now)
        if evaluate and self.evaluator is not None:
            decided = await self.evaluator.evaluate(model, self.cache.observed(key), now)
            model = model.model_copy(update={"status": decided.status})
            actions += decided.actions
        model = self._keyed(model)
        credential = self._credential(model)
        # A new hot schedule is handed to the pods once it is in status: a generation
        # the pods took but status lost would be reused for another schedule.
        new_schedule = _new_schedule(recorded, model)
        failure: ReconcileFailure | None = None
        in_status = False  # the decision is written
        try:
            self._check_pod_policy(model)
            source = self._render_source(key, body, recorded, model, credential)
            # Rendered from this very model when last applied, and each child as that
            # apply left it: rendering again would only find the same digest.
            if source is None or not self._applied_from(record, key, source):
                manifests = self._rendered(key, model, credential)
                if new_schedule or self._changes_children(
                    key, recorded, model, manifests, credential
                ):
                    # Record the decision before acting on it: children applied from a
                    # status that is not written yet would be undone by the next reconcile.
                    # Not summarized: Ready and observedGeneration must not claim children
                    # that are not applied yet.
                    written = await self._write_status(record, body, model.status)
                    if written is None:  # someone wrote status in between: decide again
                        return Outcome(written=False, decided=False)
                    if _outside_status(written) != _outside_status(body):
                        # Written onto a newer spec (the first try conflicted with an edit):
                        # decide again from it, on the decision now in status, so that the
                        # children are applied once, not from the older spec and then again.
                        model, more = _synced(SpeculativeModel.model_validate(written), now)
                        actions += more
                        model = self._keyed(model)
                        credential = self._credential(model)
                        self._check_pod_policy(model)
                        manifests = self._rendered(key, model, credential)
                        written = await self._write_status(record, written, model.status)
                        if written is None:  # status written in between: the next reconcile
                            return Outcome(written=False)
                    body, in_status = written, True
                failure = await self._apply_children(record, key, body, manifests, source)
            if credential is not None and failure is None:
                # Every reconcile (a pod turned Ready, a decision): a repeat is a no-op.
                model = await self._hand_schedule(model, credential)
        except PodPolicyRefused as error:
            failure = ReconcileFailure("PodPolicyRefused", str(error))
        except ValueError as error:  # the model's config does not render
            failure = ReconcileFailure("RenderFailed", _one_line(str(error)))
        except ApiException as error:
            if not _refused(error):
                raise
            failure = ReconcileFailure("ChildrenRefused", _api_message(error))
        status = summarize(model, self.cache.observed(key), now, failure)
        if not (evaluate or in_status or actions or failure) and self._held_back(
            record, body, status
        ):
            return Outcome(written=False)
        summarized = await self._write_status(record, body, status) is not None
        if not (summarized or in_status):
            return Outcome(failure, written=False, decided=False)
        # Counted and told (Events) once the decision is safe in status; losing an Event
        # loses no state.
        if self.evaluator is not None:
            actions = self.evaluator.count(model, actions)
        if summarized:
            self._export(record, model, status)
            actions += _new_failures(model.status, status)
        for action in actions:
            await self._post_event(record, model, action)
        return Outcome(failure, written=summarized)

    def _held_back(
        self, record: ModelRecord, body: dict[str, Any], status: SpeculativeModelStatus
    ) -> bool:
        """Whether a summary that only reports the children's progress waits: this
        generation is in status already and the last write is under `status_interval`
        old. The model is woken when the interval is up, to write what it then sees."""
        written = body.get("status") or {}
        if written.get("observedGeneration") != body["metadata"].get("generation"):
            return False
        wait = record.status_written + self.status_interval - time.monotonic()
        if wait <= 0 or status_json(status) == written:
            return False
        asyncio.get_running_loop().call_later(wait, self.cache.wake, key_of(body))
        return True

    def _keyed(self, model: SpeculativeModel) -> SpeculativeModel:
        """The model as this operator can serve it: hot switching only with a key."""
        status = hot_schedules.keyed(model.spec, model.status, self.schedule_key is not None)
        return model if status is model.status else model.model_copy(update={"status": status})

    def _credential(self, model: SpeculativeModel) -> str | None:
        """The credential the model's stable pods accept, where they take K hot."""
        if self.schedule_key is None or not hot_schedules.in_effect(model.spec, model.status):
            return None
        return hot_schedules.credential(self.schedule_key, *key_of_model(model), model.metadata.uid)

    async def _hand_schedule(self, model: SpeculativeModel, credential: str) -> SpeculativeModel:
        """Hand the stable pods the schedule status asks for; a pod that cannot take it
        hot turns the model back to restarts (its reason in status)."""
        hot = model.status.speculation.hot_schedule
        assert hot is not None
        reading = pod_reading.read(model, self.cache.observed(key_of_model(model)))
        handoff = await hot_handoff.hand_off(reading.targets, hot, credential)
        if handoff.fallback is None:
            return model
        log.warning("%s/%s: %s; K changes restart the pods", *key_of_model(model), handoff.fallback)
        return model.model_copy(
            update={"status": hot_schedules.fell_back(model.status, handoff.fallback)}
        )

    def _changes_children(
        self,
        key: Key,
        recorded: SpeculativeModel,
        decided: SpeculativeModel,
        manifests: list[dict[str, Any]],
        credential: str | None,
    ) -> bool:
        """The decided status renders other children than the recorded one, and there
        are children to change."""
        if (
            decided.status.speculation == recorded.status.speculation
            and decided.status.config == recorded.status.config  # what each track runs
        ):
            return False
        before = self._rendered(key, recorded, credential)
        return bool(self.cache.children.get(key)) and manifests != before

    def _rendered(
        self, key: Key, model: SpeculativeModel, credential: str | None
    ) -> list[dict[str, Any]]:
        """The children to apply: the rendered ones, and the previous kind's workloads
        the cache holds, scaled to 0 (render.retired_workloads)."""
        present = self.cache.children.get(key, {}).keys()
        return render.manifests(model, credential) + render.retired_workloads(model, present)

    async def _post_event(
        self, record: ModelRecord, model: SpeculativeModel, action: Action
    ) -> None:
        if record.gone:
            return
        involved = {
            "apiVersion": API_VERSION,
            "name": model.metadata.name,
            "namespace": model.metadata.namespace,
            "uid": model.metadata.uid,
        }
        try:
            await self.cluster.post_event(
                involved, KIND, action.kind, action.message, action.warning
            )
        except Exception:
            log.exception("posting the %s event of %s failed", action.kind, model.metadata.name)

    def _render_source(
        self,
        key: Key,
        body: dict[str, Any],
        recorded: SpeculativeModel,
        model: SpeculativeModel,
        credential: str | None,
    ) -> RenderSource | None:
        """What the children are rendered from, if that is the model as read (nothing
        decided since: the same status), else None."""
        if model.status != recorded.status:
            return None
        present = self.cache.children.get(key, {}).keys()
        return (_version_of(body), credential, tuple(render.retired_tracks(model, present)))

    def _applied_from(self, record: ModelRecord, key: Key, source: RenderSource) -> bool:
        """The children were last applied from `source`, and are still as it left them."""
        applied = record.applied
        return applied is not None and applied.source == source and self._as_left(applied, key)

    async def _apply_children(
        self,
        record: ModelRecord,
        key: Key,
        body: dict[str, Any],
        manifests: list[dict[str, Any]],
        source: RenderSource | None,
    ) -> ReconcileFailure | None:
        """Apply each child this model owns or may create; leave alone any object of a
        child's name that belongs to someone else, and say so. `source`: what the
        manifests were rendered from, if known."""
        last, digest = record.applied, _digest(manifests)
        if last is not None and last.digest == digest and self._as_left(last, key):
            record.applied = replace(last, source=source)
            return None  # server-side apply would be a no-op anyway
        uid = body["metadata"].get("uid")
        markers: dict[ChildRef, Any] = {}
        strangers: list[str] = []
        confirmed = False
        # A relist since the model was last seen: its DELETED may be lost.
        relisted = record.seen_at_relist < self.cache.relists
        for manifest in manifests:
            ref = (manifest["kind"], manifest["metadata"]["name"])
            found = self.cache.children.get(key, {}).get(ref)
            if found is not None and not _ours(found, uid, key[1]):
                # Cached as someone else's: the API server says who has the name now.
                found = await self.cluster.get_child(*ref_in(manifest))
                if found is not None and not _ours(found, uid, key[1]):
                    strangers.append(_stranger(found, key[1]))
                    continue
            missing = found is None and record.applied is not None
            if not confirmed and (relisted or missing):
                # The cache cannot say the model is still there (a relist since it was
                # last seen, or a child it had is missing: deleted by the collector after
                # a lost DELETED?): children of a model that is gone would only feed the
                # collector. After a relist even a child the cache still holds may be
                # gone (the listing not taken yet), and applying it would create it.
                await self._confirm_exists(record, key, uid)
                confirmed = True
            if record.gone:
                raise Forgotten
            try:
                # Not in the cache (only labelled objects are watched): created only if
                # no object has the name.
                applied = await self.cluster.apply(manifest, found is None)
            except Exists:
                # Someone has the name: the API server says who.
                found = await self.cluster.get_child(*ref_in(manifest))
                if found is not None and not _ours(found, uid, key[1]):
                    strangers.append(_stranger(found, key[1]))
                    continue
                if record.gone:
                    raise Forgotten from None
                # Ours after all (the watch had not brought it yet), or gone again.
                applied = await self.cluster.apply(manifest)
            markers[ref] = _edit_marker(applied)
            if ref not in self.cache.children.get(key, {}):
                # A new child: its apply response lets the first status say "Progressing"
                # rather than "Pending" and a second write. Known children are left to
                # the watch, which delivers their versions in order.
                self.cache.remember_child(applied)
                record.own_writes.append((ref, None, _version_of(applied)))
        if strangers:
            return ReconcileFailure("ChildNotOwned", _one_line("; ".join(strangers)))
        record.applied = AppliedChildren(digest, markers, source)
        return None

    async def _confirm_exists(self, record: ModelRecord, key: Key, uid: str | None) -> None:
        """Ask the API server whether the model is still there; forgotten if not. Seen
        there, it needs no asking again until the next relist."""
        relists = self.cache.relists
        current = await self.cluster.get_model(*key)
        if current is None or current["metadata"].get("uid") != uid:
            log.info("%s/%s: gone (found by asking before a write); forgetting it", *key)
            self._forget_record(key, record)
        if record.gone:
            raise Forgotten
        record.seen_at_relist = max(record.seen_at_relist, relists)

    def _as_left(self, applied: AppliedChildren, key: Key) -> bool:
        """Each child is still there as the last apply left it: not deleted, scaled or
        edited by someone else."""
        children = self.cache.children.get(key, {})
        for ref, marker in applied.markers.items():
            cached = children.get(ref)
            if cached is None or _edit_marker(cached) != marker:
                return False
        return True

    def _check_pod_policy(self, model: SpeculativeModel) -> None:
        """PodPolicyRefused if a track's pods would hold what the install does not allow:
        as the spec says, or as the last good config status keeps says (the stable pods
        are rendered from status.config.running.pods while a new config is on trial or
        rejected, and whoever may patch status could put anything there)."""
        refused = self.pod_policy.refusals(model.spec)
        plans = track_plan.plan(model.spec, model.status)
        for track in TRACKS:
            runs = plans[track].spec
            if runs != model.spec:
                refused += [
                    f"status.config.running.pods ({track} pods): {words}"
                    for words in self.pod_policy.refusals(runs)
                    if words not in refused
                ]
        if refused:
            raise PodPolicyRefused(_one_line("; ".join(dict.fromkeys(refused))))

    async def _refuse(self, record: ModelRecord, body: dict[str, Any], now: datetime) -> Outcome:
        """A spec the API server admitted but the models refuse (e.g. an older CRD):
        say why in status instead of crashing or rendering something half-valid."""
        message = "; ".join(validation_errors(body))[:1000]
        try:
            status = SpeculativeModelStatus.model_validate(body.get("status") or {})
        except ValidationError:
            status = SpeculativeModelStatus()
        conditions = set_condition(
            status.conditions,
            ConditionType.DEGRADED,
            "True",
            "InvalidSpec",
            message,
            now,
            body["metadata"].get("generation"),
        )
        status = status.model_copy(update={"conditions": conditions, "phase": Phase.DEGRADED})
        written = await self._write_status(record, body, status)
        return Outcome(written=written is not None)

    async def _write_status(
        self, record: ModelRecord, body: dict[str, Any], status: SpeculativeModelStatus
    ) -> dict[str, Any] | None:
        """Write status unless unchanged; the model as it now is (cached at once, so the
        next reconcile reads this status even before the watch echoes it). On a conflict
        the write is tried once more against the model as it now is, if the status it
        was decided from is still there (a /scale write, a label edit); None when someone
        else wrote status in between (the model is woken to decide again). Forgotten
        when the model is gone: it is never written to again."""
        key = key_of(body)
        cut: list[str] = []
        new = without_nulls(bounded(status.model_dump(by_alias=True, mode="json"), cut))
        if new == (body.get("status") or {}):
            return body
        for text in cut:
            log.info("%s/%s: in full (status holds it cut): %s", *key, text)
        try:
            written = await self._replace_status(record, key, new, body)
        except Conflict:
            fresh = await self.cluster.get_model(*key)
            if fresh is None or fresh["metadata"].get("uid") != body["metadata"].get("uid"):
                self._forget_record(key, record)
                raise Forgotten from None
            self.cache.remember_model(fresh)
            if (fresh.get("status") or {}) != (body.get("status") or {}):
                self.cache.wake(key)
                return None
            try:
                written = await self._replace_status(record, key, new, fresh)
            except Conflict:
                self.cache.wake(key)
                return None
        self.cache.remember_model(written)
        return written

    async def _replace_status(
        self, record: ModelRecord, key: Key, status: dict[str, Any], base: dict[str, Any]
    ) -> dict[str, Any]:
        if record.seen_at_relist < self.cache.relists:
            # A relist since the model was last seen: its DELETED may be lost, and a write
            # to a model gone is one the API server refuses but the operator still sent.
            await self._confirm_exists(record, key, base["metadata"].get("uid"))
        if record.gone:
            raise Forgotten
        try:
            written = await self.cluster.replace_status(
                *key, status, base["metadata"]["resourceVersion"]
            )
            record.status_written = time.monotonic()
            record.own_writes.append((None, _version_of(base), _version_of(written)))
            return written
        except Gone:
            log.info("%s/%s: gone (its status write found no model); forgetting it", *key)
            self._forget_record(key, record)
            raise Forgotten from None

    def _export(
        self, record: ModelRecord, model: SpeculativeModel, status: SpeculativeModelStatus
    ) -> None:
        if record.gone:
            return
        labels = key_of_model(model)
        speculation, canary = status.speculation, status.canary_run
        observability.SPECULATIVE_TOKENS.labels(*labels, "stable").set(speculation.stable_k)
        observability.SPECULATIVE_TOKENS.labels(*labels, "canary").set(canary[0] if canary else 0)
        observability.ACCEPTANCE_FLOOR.labels(*labels).set(model.spec.rollback.min_acceptance)
        observability.export_acceptance_metric(*labels, model.spec.rollback.metric)
        off = speculation.off is not None
        observability.SPECULATION_DISABLED.labels(*labels).set(1 if off else 0)
        observability.PLAIN_DECODING_CHOSEN.labels(*labels).set(
            1 if speculation.plain_decoding_chosen else 0
        )
        rejected = status.config is not None and status.config.rejected is not None
        observability.CONFIG_REJECTED.labels(*labels).set(1 if rejected else 0)
        if status.startup_seconds is not None:
            observability.POD_STARTUP_SECONDS.labels(*labels).set(status.startup_seconds)

    # ------------------------------------------------------------------- loop

    async def run(self, stop: asyncio.Event) -> None:
        """Reconcile through the work queue until `stop`; list first (a standby that
        just took over may have missed deletions), then after each relist and every
        `resync_period`."""
        await self._resync_logged()
        resyncing = asyncio.create_task(self._resync_loop(stop))
        try:
            await self.cache.queue.run(
                stop, self.period, self.cache.models.keys, self._tick, self._priority
            )
        finally:
            resyncing.cancel()

    def _priority(self, key: Key) -> Priority:
        """URGENT for what a user waits on: a model never reconciled yet (its children),
        or whose new spec status does not show yet; ROUTINE for a status refresh of a
        settled model."""
        record = self.cache.models.get(key)
        if record is not None and (
            record.settled is None or record.observed_generation != record.generation
        ):
            return Priority.URGENT
        return Priority.ROUTINE

    async def _resync_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(self._relisted.wait(), timeout=self.resync_period)
                await asyncio.sleep(RELIST_SETTLE_SECONDS)  # the rest of the relist first
            except TimeoutError:
                pass
            self._relisted.clear()
            await self._resync_logged()

    async def _resync_logged(self) -> None:
        try:
            await self.resync()
        except Exception:
            log.exception("listing models and children failed; the watches carry on")
        allocator.give_back()  # what the listing's replies left free in malloc's arenas

    def fence_reopened(self) -> None:
        """The Lease was renewed: the models whose writes met the fence closed go again."""
        for key in self.fenced:
            self.cache.wake(key)
        self.fenced.clear()

    async def _after_the_burst(self, key: Key) -> None:
        """A model never reconciled waits, without its slot, while new models keep coming:
        until none came for `burst_quiet` seconds, or `burst_limit` after it was first
        seen. A lone new model waits `burst_quiet`; a settled one never does. It has
        started nothing: it takes a slot again as new models do, after the reconciles
        half done."""
        record = self.cache.models.get(key)
        if record is None or record.settled is not None or self.burst_quiet <= 0:
            return
        async with without_slot(Priority.URGENT):
            while True:
                ends = min(
                    self.cache.last_new_model + self.burst_quiet,
                    record.first_seen + self.burst_limit,
                )
                wait = ends - time.monotonic()
                if wait <= 0:
                    return
                await asyncio.sleep(wait)

    async def _tick(self, key: Key) -> None:
        try:
            await self._after_the_burst(key)
            await self.reconcile(key)
        except NotLeading:
            log.info("%s/%s: not reconciled: this replica no longer holds the Lease", *key)
        except Exception:
            log.exception("reconciling %s/%s failed", *key)


async def _take_listing(
    list_page: Callable[[str], Awaitable[Page]], take: Callable[[dict[str, Any]], None]
) -> tuple[set[str], str]:
    """Hand each object of a listing to `take`, a page at a time (a reply's memory stays
    bounded); the names it held and its resourceVersion."""
    names: set[str] = set()
    start = ""
    while True:
        page = await list_page(start)
        for body in page.items:
            take(body)
            names.add(body["metadata"]["name"])
        if not page.next:
            return names, page.version
        start = page.next


def _new_schedule(recorded: SpeculativeModel, decided: SpeculativeModel) -> bool:
    """Whether this reconcile decided a new hot schedule for the stable pods."""
    hot = decided.status.speculation.hot_schedule
    if hot is None or hot.fallback is not None:
        return False
    return hot != recorded.status.speculation.hot_schedule


def _synced(model: SpeculativeModel, now: datetime) -> tuple[SpeculativeModel, list[Action]]:
    """The model with its status brought in line with its spec, and what that did."""
    synced = tuner.sync_with_spec(
        model.spec,
        model.status,
        now,
        generation=model.metadata.generation,
        forced_config=model.metadata.annotations.get(FORCE_CONFIG_ANNOTATION),
    )
    return model.model_copy(update={"status": synced.status}), list(synced.actions)


def ref_in(manifest: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a manifest."""
    metadata = manifest["metadata"]
    return (manifest["kind"], metadata["namespace"], metadata["name"])


def _evaluation_pending(record: ModelRecord) -> bool:
    due = record.next_evaluation
    return due is None or time.monotonic() >= due


def _evaluation_due(record: ModelRecord, model: SpeculativeModel) -> bool:
    """Whether to evaluate now; if so, when the next evaluation is due."""
    if not _evaluation_pending(record):
        return False
    # The first evaluation only takes the baseline scrape of each pod.
    interval = parse_duration(model.spec.tuning.interval).total_seconds()
    record.next_evaluation = time.monotonic() + interval
    return True


def _controller(body: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (ref for ref in body["metadata"].get("ownerReferences") or [] if ref.get("controller")),
        None,
    )


def _ours(body: dict[str, Any], uid: str | None, model: str) -> bool:
    """The object is this model's child: controlled by it, or created for it by the
    operator and orphaned since (adopted, as controller-runtime adopts orphans)."""
    controller = _controller(body)
    if controller is not None:
        return uid is not None and controller.get("uid") == uid
    labels = body["metadata"].get("labels") or {}
    return labels.get(MANAGED_BY[0]) == MANAGED_BY[1] and labels.get(render.MODEL_LABEL) == model


def _stranger(body: dict[str, Any], model: str) -> str:
    """Why an object with a child's name is left alone, naming it and its owner."""
    metadata = body["metadata"]
    what = f"{body['kind']} {metadata.get('namespace')}/{metadata['name']}"
    controller = _controller(body)
    if controller is None:
        managers = sorted({m.get("manager", "?") for m in metadata.get("managedFields") or []})
        owner = f"is not the operator's (managed by {', '.join(managers) or 'no one'})"
        return f"{what} {owner}: left untouched; rename or delete it, or rename the model"
    owner = f"{controller.get('kind')} {controller.get('name')}"
    if controller.get("kind") == KIND and controller.get("name") != model:
        return (
            f"{what} belongs to {owner}: models {model} and {controller.get('name')} "
            "need a child of the same name; rename one of them"
        )
    if controller.get("kind") == KIND:
        return (
            f"{what} belongs to an earlier {owner} (uid {controller.get('uid')}): left "
            "untouched until the garbage collector deletes it"
        )
    return f"{what} belongs to {owner}: left untouched"


# What the fleet reads of a child, and all it keeps: the watches take any object with the
# model label, which anyone who may create one in a namespace can set, so whatever else
# it carries (250 KiB of annotations, thousands of labels, managedFields) is dropped
# before it is cached, model or no model. The rendered spec is recomputed from the model,
# never read back.
_KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
)
_KEPT_LABELS = (render.MODEL_LABEL, render.TRACK_LABEL, MANAGED_BY[0], render.WORKER_INDEX_LABEL)
_KEPT_ANNOTATIONS = (render.CONFIG_HASH_ANNOTATION,)
_KEPT_OWNER_FIELDS = ("kind", "name", "uid", "controller")
# The status fields read of each kind: pods' (status.py, evaluation.py) and workloads'
# (rollout, readiness; the conditions of the types below). A ReplicaSet is read for its
# owner only, a Service and a disruption budget not at all: their status is not kept.
_KEPT_STATUS = {
    POD.kind: ("phase", "podIP", "conditions", "containerStatuses"),
    **dict.fromkeys(
        (DEPLOYMENT.kind, LEADER_WORKER_SET.kind),
        ("replicas", "readyReplicas", "updatedReplicas", "observedGeneration", "conditions"),
    ),
}
# A Deployment's ReplicaFailure (a canary that cannot be created), a LeaderWorkerSet's
# UpdateInProgress: their other conditions (Available, Progressing, whose lastUpdateTime
# moves with every step of a rollout) are not read.
_KEPT_WORKLOAD_CONDITIONS = ("ReplicaFailure", "UpdateInProgress")


def _kept(mapping: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: mapping[k] for k in keys if k in mapping} if isinstance(mapping, dict) else {}


def _observed_part(body: dict[str, Any]) -> dict[str, Any]:
    """What the fleet reads of a child (the _KEPT_ fields above): its controller among
    its owners, the operator's labels, the config hash, a few status fields."""
    source = body["metadata"]
    metadata = _kept(source, _KEPT_METADATA)
    metadata["labels"] = _kept(source.get("labels"), _KEPT_LABELS)
    annotations = _kept(source.get("annotations"), _KEPT_ANNOTATIONS)
    if annotations:
        metadata["annotations"] = annotations
    controller = _controller(body)
    if controller is not None:
        metadata["ownerReferences"] = [_kept(controller, _KEPT_OWNER_FIELDS)]
    status = _kept(body.get("status"), _KEPT_STATUS.get(body["kind"], ()))
    if body["kind"] != POD.kind and "conditions" in status:
        conditions = status.pop("conditions")
        read = [
            c
            for c in (conditions if isinstance(conditions, list) else [])
            if isinstance(c, dict) and c.get("type") in _KEPT_WORKLOAD_CONDITIONS
        ]
        if read:
            status["conditions"] = read
    return {"kind": body["kind"], "metadata": metadata, "status": status}


# What the fleet reads of a model's metadata. Spec and status are kept whole: the spec is
# validated and rendered, and a status write nulls what the cached status holds and the
# new one lacks. The rest (kubectl's last-applied copy of the spec, managedFields, labels,
# other owners) is the author's, and dropped before it is cached.
_KEPT_MODEL_ANNOTATIONS = (FORCE_CONFIG_ANNOTATION,)


def _model_part(body: dict[str, Any]) -> dict[str, Any]:
    """What the fleet reads and writes back of a model (the fields above)."""
    source = body["metadata"]
    metadata = _kept(source, _KEPT_METADATA)
    annotations = _kept(source.get("annotations"), _KEPT_MODEL_ANNOTATIONS)
    if annotations:
        metadata["annotations"] = annotations
    return {**_kept(body, ("apiVersion", "kind", "spec", "status")), "metadata": metadata}


def _nodes_per_replica(body: dict[str, Any] | None) -> int:
    """runtime.parallelism.nodesPerReplica of a model's body as the API server holds it
    (defaulted there), read without validating the whole model on every look."""
    spec = (body or {}).get("spec") or {}
    parallelism = (spec.get("runtime") or {}).get("parallelism") or {}
    return int(parallelism.get("nodesPerReplica") or 1)


def _version_of(body: dict[str, Any] | None) -> str | None:
    return None if body is None else body["metadata"].get("resourceVersion")


def _newer_than(body: dict[str, Any], version: str) -> bool:
    """`body` was written after a listing at `version` (so the listing could not hold it)."""
    return _older(version, _version_of(body))


def _older(version: str | None, than: str | None) -> bool:
    """`version` is an older resourceVersion than `than`. resourceVersions are opaque by
    contract but etcd revisions in practice; if either is not a number the newest
    arrival wins, as it would without this check."""
    if version is None or than is None or not (version.isdigit() and than.isdigit()):
        return False
    return int(version) < int(than)


def _edit_marker(body: dict[str, Any]) -> Any:
    marker = child_kind(body["kind"]).edit_marker
    return None if marker is None else body["metadata"].get(marker)


def _refused(error: ApiException) -> bool:
    """The API server refused the request itself (invalid, forbidden): retrying the
    same request cannot succeed. Conflicts, throttling and server errors can."""
    return (
        error.status is not None
        and 400 <= error.status < 500
        and error.status
        not in (
            404,
            409,
            429,
        )
    )


def _api_message(error: ApiException) -> str:
    """The API server's own message from an error response, on one line."""
    try:
        message = str(orjson.loads(error.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        message = f"{error.status} {error.reason}"
    return _one_line(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]


def _replace(
    cached: dict[Any, dict[str, Any]], name: Any, body: dict[str, Any], deleted: bool
) -> bool:
    """Put `body` in (or take it out of) `cached`; False, and `cached` left as it was, if
    what it holds reads the same."""
    if deleted:
        return cached.pop(name, None) is not None
    before = cached.get(name)
    if before is not None and _reads_the_same(before, body):
        return False
    cached[name] = body
    return True


def _reads_the_same(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Two cached versions of a child differ in nothing the fleet reads: all but the
    resourceVersion, unless that is how edits of the kind are told (a Service's)."""
    if child_kind(after["kind"]).edit_marker == "resourceVersion":
        return before == after
    return _but_version(before) == _but_version(after)


def _but_version(body: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in body["metadata"].items() if k != "resourceVersion"}
    return {**body, "metadata": metadata}


def _packed(value: Any) -> bytes:
    return orjson.dumps(value)


def _outside_status(body: dict[str, Any]) -> dict[str, Any]:
    """A model as its reconcile reads it, less status and the write's own bookkeeping."""
    metadata = {
        k: v for k, v in body["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return {"metadata": metadata, "spec": body.get("spec")}


def _new_failures(before: SpeculativeModelStatus, after: SpeculativeModelStatus) -> list[Action]:
    """A Warning Event when Degraded turns True (a preflight failure, a crash loop).
    Speculation disabled by rollback has its own Event, from the decision."""
    was = next((c for c in before.conditions if c.type is ConditionType.DEGRADED), None)
    now = next((c for c in after.conditions if c.type is ConditionType.DEGRADED), None)
    if now is None or now.status != "True" or (was is not None and was.status == "True"):
        return []
    if now.reason == "SpeculationDisabled":
        return []
    return [Action(kind=now.reason, reason=now.reason, message=now.message, warning=True)]


def _digest(manifests: list[dict[str, Any]]) -> bytes:
    """Equal for equal manifests (key order aside), different otherwise."""
    text = orjson.dumps(manifests, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(text, digest_size=20).digest()


def status_json(status: SpeculativeModelStatus) -> Any:
    """Status as a write would leave it in the model."""
    return without_nulls(bounded(status.model_dump(by_alias=True, mode="json"), []))


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value
