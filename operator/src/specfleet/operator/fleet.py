"""The operator's state of the world and the loop that reconciles each SpeculativeModel.

kopf's watches feed `FleetCache` (models, their Deployments and pods). `Fleet.reconcile`
renders and applies children and writes status; the background loop runs it for every
model each period and, in between, for each model that was created, edited or whose
children changed. It is level-triggered: with nothing changed it changes nothing. Tuning
evaluations run on the same path when a model's `tuning.interval` has elapsed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.rest import ApiException
from pydantic import ValidationError

from specfleet.operator import observability, render, tuner
from specfleet.operator.api import (
    API_VERSION,
    KIND,
    ConditionType,
    Phase,
    SpeculativeModel,
    SpeculativeModelStatus,
    parse_duration,
    validation_errors,
)
from specfleet.operator.children import DEPLOYMENT, POD, child_kind
from specfleet.operator.conditions import set_condition
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.kube import Cluster, NotLeading
from specfleet.operator.status import ObservedChildren, ReconcileFailure, summarize
from specfleet.operator.tuner import Action

log = logging.getLogger("specfleet.fleet")
Key = tuple[str, str]  # (namespace, name)
ChildRef = tuple[str, str]  # (kind, name) of a child within its model's namespace
# resourceVersions of a model and of each of its children.
Inputs = tuple[str | None, frozenset[tuple[ChildRef, str | None]]]
# Reconciles in flight at once: enough to keep the API server busy, few enough that
# models finish in the order they arrived rather than all at the end of a burst.
CONCURRENT_RECONCILES = 16
# A model whose children cannot be put in place is retried after 5 s, 10 s, ... at
# most 5 minutes apart, or at once when its spec changes: not every 5 s sweep.
BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 300.0


def key_of(body: dict[str, Any]) -> Key:
    return (body["metadata"]["namespace"], body["metadata"]["name"])


@dataclass
class FleetCache:
    """The latest view of every model and child, kept current by kopf's watches and by
    the responses of the operator's own writes."""

    models: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # model -> (kind, name) -> what the fleet reads of each child, applied ones and pods.
    children: dict[Key, dict[ChildRef, dict[str, Any]]] = field(default_factory=dict)
    # Models to re-run before the next sweep: new or edited models and models whose
    # children changed. A burst of N events costs O(N) reconciles, not O(N^2).
    dirty: set[Key] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self, key: Key) -> None:
        self.dirty.add(key)
        self.changed.set()

    def remember_model(self, body: dict[str, Any]) -> None:
        """Keep the newest body; wake the model unless only its status moved (the echo
        of the operator's own status write would re-run it to no effect)."""
        key = key_of(body)
        before = self.models.get(key)
        if before is not None and _older(body, before):
            # A watch event from before a status write whose response is cached: taking
            # it would hand the next reconcile the status that write replaced.
            return
        self.models[key] = body
        if before is None or _outside_status(before) != _outside_status(body):
            self.wake(key)

    def remember_child(self, body: dict[str, Any], deleted: bool = False) -> None:
        """Keep what the fleet reads of a child and wake its model, unless this very
        version is cached already (a watch event echoing an apply's response)."""
        model = body["metadata"].get("labels", {}).get(render.MODEL_LABEL)
        if model is None:
            return
        owner = (body["metadata"]["namespace"], model)
        observed = _observed_part(body)
        children = self.children.setdefault(owner, {})
        ref = (observed["kind"], observed["metadata"]["name"])
        changed = _replace(children, ref, observed, deleted)
        if not children:
            del self.children[owner]
        if changed:
            self.wake(owner)

    def inputs(self, key: Key) -> Inputs:
        """The versions a reconcile of `key` reads: equal inputs, equal outputs."""
        children = self.children.get(key, {})
        return (
            _version_of(self.models.get(key)),
            frozenset((ref, _version_of(body)) for ref, body in children.items()),
        )

    def observed(self, key: Key) -> ObservedChildren:
        name = key[1]
        children = self.children.get(key, {})
        return ObservedChildren(
            stable=children.get((DEPLOYMENT.kind, name)),
            canary=children.get((DEPLOYMENT.kind, render.canary_name(name))),
            pods=[body for (kind, _), body in children.items() if kind == POD.kind],
        )


@dataclass(frozen=True)
class AppliedChildren:
    """What the operator last applied for a model, and each child's edit marker right
    after (see ChildKind.edit_marker): another marker means someone else changed it."""

    manifests: list[dict[str, Any]]
    markers: dict[ChildRef, Any]


@dataclass(frozen=True)
class Backoff:
    """A model whose last reconcile failed: when to try again, unless its spec (its
    generation) changes first."""

    failures: int
    retry_at: float  # time.monotonic()
    generation: int | None


class Fleet:
    def __init__(
        self,
        cluster: Cluster,
        evaluator: Evaluator | None = None,
        period: float = 5.0,
    ) -> None:
        self.cluster = cluster
        self.cache = FleetCache()
        self.evaluator = evaluator
        self.period = period
        self.locks: dict[Key, asyncio.Lock] = {}
        self.next_evaluation: dict[Key, float] = {}
        self.applied: dict[Key, AppliedChildren] = {}
        # The inputs of each model's last complete reconcile: a tick with the same inputs
        # and no evaluation due would change nothing, so it is skipped.
        self.settled: dict[Key, Inputs] = {}
        self.queued: set[Key] = set()  # waiting for a reconcile slot
        self.backoff: dict[Key, Backoff] = {}
        self.slots = asyncio.Semaphore(CONCURRENT_RECONCILES)

    # ---------------------------------------------------------------- watches

    def remember_model(self, body: dict[str, Any], deleted: bool = False) -> None:
        if deleted:
            self.forget(key_of(body))
        else:
            self.cache.remember_model(body)

    def forget(self, key: Key) -> None:
        self.cache.models.pop(key, None)
        self.cache.dirty.discard(key)
        self.next_evaluation.pop(key, None)
        self.applied.pop(key, None)
        self.settled.pop(key, None)
        self.backoff.pop(key, None)
        self.locks.pop(key, None)
        if self.evaluator is not None:
            self.evaluator.forget(key)
        observability.forget_model(*key)

    # --------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> None:
        """Children and status of one model, after a tuning evaluation when one is due."""
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            body = self.cache.models.get(key)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return
            if self._backing_off(key, body):
                return
            inputs = self.cache.inputs(key)
            if self.settled.get(key) == inputs and not self._evaluation_pending(key):
                return
            started = time.perf_counter()
            try:
                model: SpeculativeModel | None = SpeculativeModel.model_validate(body)
            except ValidationError:
                model = None
            evaluate = model is not None and self._evaluation_due(key, model)
            handler = "evaluate" if evaluate else "reconcile"
            failure: ReconcileFailure | None = None
            try:
                if model is None:
                    await self._refuse(body, datetime.now(UTC))
                else:
                    failure = await self._reconcile(body, model, evaluate)
            except Exception:
                observability.RECONCILES.labels(handler, "error").inc()
                self._back_off(key, body)
                raise
            finally:
                observability.RECONCILE_SECONDS.labels(handler).observe(
                    time.perf_counter() - started
                )
            if failure is not None:
                observability.RECONCILES.labels(handler, "error").inc()
                delay = self._back_off(key, body)
                log.warning("%s/%s: %s; retrying in %.0fs", *key, failure.message, delay)
                return
            observability.RECONCILES.labels(handler, "success").inc()
            self.backoff.pop(key, None)
            self.settled[key] = inputs

    async def _reconcile(
        self, body: dict[str, Any], model: SpeculativeModel, evaluate: bool
    ) -> ReconcileFailure | None:
        key = key_of(body)
        now = datetime.now(UTC)
        recorded = model
        synced = tuner.sync_with_spec(
            model.spec, model.status, now, generation=model.metadata.generation
        )
        model = model.model_copy(update={"status": synced.status})
        actions = list(synced.actions)
        if evaluate and self.evaluator is not None:
            decided = await self.evaluator.evaluate(model, self.cache.observed(key), now)
            model = model.model_copy(update={"status": decided.status})
            actions += decided.actions
        if self.evaluator is not None:
            actions = self.evaluator.count(model, actions)
        failure: ReconcileFailure | None = None
        try:
            manifests = render.manifests(model)
            if self._changes_children(key, recorded, model, manifests):
                # Record the decision before acting on it: children applied from a
                # status that is not written yet would be undone by the next reconcile.
                # Not summarized: Ready and observedGeneration must not claim children
                # that are not applied yet.
                written = await self._write_status(body, model.status)
                if written is None:
                    return None  # someone wrote in between: decide again from theirs
                body = written
            await self._apply_children(key, manifests)
        except ValueError as error:  # the model's config does not render
            failure = ReconcileFailure("RenderFailed", _one_line(str(error)))
        except ApiException as error:
            if not _refused(error):
                raise
            failure = ReconcileFailure("ChildrenRefused", _api_message(error))
        status = summarize(model, self.cache.observed(key), now, failure)
        self._export(model, status)
        await self._write_status(body, status)
        actions += _new_failures(model.status, status)
        # Events come after the decision is safe in status; losing one loses no state.
        for action in actions:
            await self._post_event(model, action)
        return failure

    def _changes_children(
        self,
        key: Key,
        recorded: SpeculativeModel,
        decided: SpeculativeModel,
        manifests: list[dict[str, Any]],
    ) -> bool:
        """The decided status renders other children than the recorded one, and there
        are children to change."""
        if decided.status.speculation == recorded.status.speculation:
            return False
        return bool(self.cache.children.get(key)) and manifests != render.manifests(recorded)

    async def _post_event(self, model: SpeculativeModel, action: Action) -> None:
        involved = {
            "apiVersion": API_VERSION,
            "name": model.metadata.name,
            "namespace": model.metadata.namespace,
            "uid": model.metadata.uid,
        }
        try:
            await asyncio.to_thread(
                self.cluster.post_event, involved, KIND, action.kind, action.message, action.warning
            )
        except Exception:
            log.exception("posting the %s event of %s failed", action.kind, model.metadata.name)

    async def _apply_children(self, key: Key, manifests: list[dict[str, Any]]) -> None:
        if self._still_applied(key, manifests):
            return  # server-side apply would be a no-op anyway
        markers: dict[ChildRef, Any] = {}
        for manifest in manifests:
            applied = await asyncio.to_thread(self.cluster.apply, manifest)
            ref = (applied["kind"], applied["metadata"]["name"])
            markers[ref] = _edit_marker(applied)
            if ref not in self.cache.children.get(key, {}):
                # A new child: its apply response lets the first status say "Progressing"
                # rather than "Pending" and a second write. Known children are left to
                # the watch, which delivers their versions in order.
                self.cache.remember_child(applied)
        self.applied[key] = AppliedChildren(manifests, markers)

    def _still_applied(self, key: Key, manifests: list[dict[str, Any]]) -> bool:
        """The same manifests were applied, and each child is still there as the apply
        left it: not deleted, scaled or edited by someone else."""
        applied = self.applied.get(key)
        if applied is None or applied.manifests != manifests:
            return False
        children = self.cache.children.get(key, {})
        for ref, marker in applied.markers.items():
            cached = children.get(ref)
            if cached is None or _edit_marker(cached) != marker:
                return False
        return True

    def _back_off(self, key: Key, body: dict[str, Any]) -> float:
        """Remember a failed reconcile; the seconds until the next try."""
        failures = (self.backoff[key].failures if key in self.backoff else 0) + 1
        # The exponent is capped so that a model failing for days never overflows a float.
        delay = min(BACKOFF_SECONDS * 2.0 ** min(failures - 1, 16), MAX_BACKOFF_SECONDS)
        generation = body["metadata"].get("generation")
        self.backoff[key] = Backoff(failures, time.monotonic() + delay, generation)
        return delay

    def _backing_off(self, key: Key, body: dict[str, Any]) -> bool:
        backoff = self.backoff.get(key)
        return (
            backoff is not None
            and time.monotonic() < backoff.retry_at
            and backoff.generation == body["metadata"].get("generation")
        )

    async def _refuse(self, body: dict[str, Any], now: datetime) -> None:
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
        await self._write_status(body, status)

    async def _write_status(
        self, body: dict[str, Any], status: SpeculativeModelStatus
    ) -> dict[str, Any] | None:
        """Write status unless unchanged; the model as it now is (cached at once, so the
        next reconcile reads this status even before the watch echoes it), or None
        when someone wrote in between."""
        new = status.model_dump(by_alias=True, mode="json")
        old = body.get("status") or {}
        if without_nulls(new) == old:
            return body
        namespace, name = key_of(body)
        written = await asyncio.to_thread(
            self.cluster.patch_status,
            namespace,
            name,
            new,
            body["metadata"].get("resourceVersion"),
        )
        if written is None:
            # Someone wrote in between; the watch brings the new object and a retry.
            self.cache.wake(key_of(body))
            return None
        self.cache.remember_model(written)
        return written

    def _export(self, model: SpeculativeModel, status: SpeculativeModelStatus) -> None:
        labels = (model.metadata.namespace or "", model.metadata.name)
        speculation = status.speculation
        stable_k = 0 if speculation.disabled else (speculation.tokens or 0)
        observability.SPECULATIVE_TOKENS.labels(*labels, "stable").set(stable_k)
        observability.SPECULATIVE_TOKENS.labels(*labels, "canary").set(
            speculation.candidate_tokens or 0
        )
        observability.ACCEPTANCE_FLOOR.labels(*labels).set(model.spec.rollback.min_acceptance)
        observability.export_acceptance_metric(*labels, model.spec.rollback.metric)
        observability.SPECULATION_DISABLED.labels(*labels).set(1 if speculation.disabled else 0)
        observability.PLAIN_DECODING_CHOSEN.labels(*labels).set(
            1 if speculation.plain_decoding_chosen else 0
        )

    # ------------------------------------------------------------------- loop

    async def run(self, stop: asyncio.Event) -> None:
        """Tick every model every `period` seconds and, in between, each model that was
        woken, as soon as a slot is free; on stop, finish the ticks in flight."""
        next_sweep = 0.0
        ticks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            now = time.monotonic()
            if now >= next_sweep:
                keys = list(self.cache.models)
                next_sweep = now + self.period
            else:
                keys = [k for k in self.cache.dirty if k in self.cache.models]
            self.cache.dirty.clear()
            self.cache.changed.clear()
            for key in keys:
                if key not in self.queued:  # a queued tick will read the newest state
                    self.queued.add(key)
                    tick = asyncio.create_task(self._tick(key))
                    ticks.add(tick)
                    tick.add_done_callback(ticks.discard)
            waiters = [
                asyncio.ensure_future(self.cache.changed.wait()),
                asyncio.ensure_future(stop.wait()),
            ]
            try:
                await asyncio.wait(
                    waiters,
                    timeout=max(0.0, next_sweep - time.monotonic()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                for waiter in waiters:
                    waiter.cancel()
        await asyncio.gather(*ticks)

    async def _tick(self, key: Key) -> None:
        async with self.slots:
            self.queued.discard(key)
            try:
                await self.reconcile(key)
            except NotLeading:
                log.info("%s/%s: not reconciled: this replica no longer holds the Lease", *key)
            except Exception:
                log.exception("reconciling %s/%s failed", *key)

    def _evaluation_pending(self, key: Key) -> bool:
        due = self.next_evaluation.get(key)
        return due is None or time.monotonic() >= due

    def _evaluation_due(self, key: Key, model: SpeculativeModel) -> bool:
        """Whether to evaluate now; if so, when the next evaluation is due."""
        if not self._evaluation_pending(key):
            return False
        # The first evaluation only takes the baseline scrape of each pod.
        interval = parse_duration(model.spec.tuning.interval).total_seconds()
        self.next_evaluation[key] = time.monotonic() + interval
        return True


def _observed_part(body: dict[str, Any]) -> dict[str, Any]:
    """What the fleet reads of a child: kind, metadata without managedFields, status.
    Whole Deployments and pods (pod templates, managedFields) would cost memory per
    model for nothing: the rendered spec is recomputed from the model, never read back."""
    metadata = {k: v for k, v in body["metadata"].items() if k != "managedFields"}
    return {"kind": body["kind"], "metadata": metadata, "status": body.get("status") or {}}


def _version_of(body: dict[str, Any] | None) -> str | None:
    return None if body is None else body["metadata"].get("resourceVersion")


def _older(body: dict[str, Any], than: dict[str, Any]) -> bool:
    """`body` is an older version of the same object than `than`. resourceVersions are
    opaque by contract but etcd revisions in practice; if either is not a number the
    newest arrival wins, as it would without this check."""
    new, old = _version_of(body), _version_of(than)
    if new is None or old is None or not (new.isdigit() and old.isdigit()):
        return False
    return int(new) < int(old)


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
        message = str(json.loads(error.body or "")["message"])
    except (ValueError, KeyError, TypeError):
        message = f"{error.status} {error.reason}"
    return _one_line(message)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]


def _replace(
    cached: dict[Any, dict[str, Any]], name: Any, body: dict[str, Any], deleted: bool
) -> bool:
    """Put `body` in (or take it out of) `cached`; False if this very version was there."""
    if deleted:
        return cached.pop(name, None) is not None
    before = cached.get(name)
    cached[name] = body
    version = _version_of(body)
    return before is None or version is None or _version_of(before) != version


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


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value
