"""The operator's state of the world and the loop that reconciles each SpeculativeModel.

kopf's watches feed `FleetCache` (models, their Deployments and pods). `Fleet.reconcile`
renders and applies children and writes status; the background loop runs it for every
model each period and, in between, for each model that was created, edited or whose
children changed. It is level-triggered: with nothing changed it changes nothing. Tuning
evaluations run on the same path when a model's `tuning.interval` has elapsed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from specfleet.operator import observability as metrics
from specfleet.operator import render
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
from specfleet.operator.conditions import set_condition
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.kube import Cluster
from specfleet.operator.status import Children, summarize, with_requested_speculation
from specfleet.operator.tuner import Action

log = logging.getLogger("specfleet.fleet")
Key = tuple[str, str]  # (namespace, name)
# resourceVersions of a model, its stable and canary Deployments, and its pods by name.
Inputs = tuple[str | None, str | None, str | None, frozenset[tuple[str, str | None]]]
# Reconciles in flight at once: enough to keep the API server busy, few enough that
# models finish in the order they arrived rather than all at the end of a burst.
CONCURRENT_RECONCILES = 16


def key_of(body: dict[str, Any]) -> Key:
    return (body["metadata"]["namespace"], body["metadata"]["name"])


@dataclass
class FleetCache:
    """The latest view of every model and child, kept current by kopf's watches."""

    models: dict[Key, dict[str, Any]] = field(default_factory=dict)
    deployments: dict[Key, dict[str, Any]] = field(default_factory=dict)
    pods: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)  # model -> pods
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
        self.models[key] = body
        if before is None or _outside_status(before) != _outside_status(body):
            self.wake(key)

    def remember_child(self, body: dict[str, Any], deleted: bool = False) -> None:
        """Keep what the fleet reads of a Deployment or pod and wake its model, unless
        this very version is cached already (a watch event echoing an apply's response)."""
        model = body["metadata"].get("labels", {}).get(render.MODEL_LABEL)
        if model is None:
            return
        owner = (body["metadata"]["namespace"], model)
        observed = _observed_part(body)
        if observed["kind"] == "Pod":
            changed = _replace(
                self.pods.setdefault(owner, {}), observed["metadata"]["name"], observed, deleted
            )
        else:
            changed = _replace(self.deployments, key_of(observed), observed, deleted)
        if changed:
            self.wake(owner)

    def inputs(self, key: Key) -> Inputs:
        """The versions a reconcile of `key` reads: equal inputs, equal outputs."""
        namespace, name = key
        return (
            _version_of(self.models.get(key)),
            _version_of(self.deployments.get((namespace, name))),
            _version_of(self.deployments.get((namespace, f"{name}-canary"))),
            frozenset((pod, _version_of(body)) for pod, body in self.pods.get(key, {}).items()),
        )

    def children(self, key: Key) -> Children:
        namespace, name = key
        return Children(
            stable=self.deployments.get((namespace, name)),
            canary=self.deployments.get((namespace, f"{name}-canary")),
            pods=list(self.pods.get(key, {}).values()),
        )


@dataclass(frozen=True)
class AppliedChildren:
    """What the operator last applied for a model, and the generation each Deployment
    had right after: a later generation means someone else changed it."""

    manifests: list[dict[str, Any]]
    generations: dict[Key, int]


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
        self.locks.pop(key, None)
        if self.evaluator is not None:
            self.evaluator.forget(key)
        metrics.forget_model(*key)

    # --------------------------------------------------------------- reconcile

    async def reconcile(self, key: Key) -> None:
        """Children and status of one model, after a tuning evaluation when one is due."""
        lock = self.locks.setdefault(key, asyncio.Lock())
        async with lock:
            body = self.cache.models.get(key)
            if body is None or body["metadata"].get("deletionTimestamp"):
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
            try:
                if model is None:
                    await self._refuse(body, datetime.now(UTC))
                else:
                    await self._reconcile(body, model, evaluate)
                metrics.RECONCILES.labels(handler, "success").inc()
            except Exception:
                metrics.RECONCILES.labels(handler, "error").inc()
                raise
            finally:
                metrics.RECONCILE_SECONDS.labels(handler).observe(time.perf_counter() - started)
            self.settled[key] = inputs

    async def _reconcile(
        self, body: dict[str, Any], model: SpeculativeModel, evaluate: bool
    ) -> None:
        key = key_of(body)
        now = datetime.now(UTC)
        model = model.model_copy(update={"status": with_requested_speculation(model)})
        actions: list[Action] = []
        if evaluate and self.evaluator is not None:
            decided = await self.evaluator.evaluate(model, self.cache.children(key), now)
            model = model.model_copy(update={"status": decided.status})
            actions = self.evaluator.count(model, decided.actions)
        await self._apply_children(key, model)
        status = summarize(model, self.cache.children(key), now)
        self._export(model, status)
        await self._write_status(body, status)
        actions += _new_failures(model.status, status)
        # Events come after the decision is safe in status; losing one loses no state.
        for action in actions:
            await self._post_event(model, action)

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

    async def _apply_children(self, key: Key, model: SpeculativeModel) -> None:
        manifests = render.children(model)
        if self._still_applied(key, manifests):
            return  # server-side apply would be a no-op anyway
        generations: dict[Key, int] = {}
        for manifest in manifests:
            applied = await asyncio.to_thread(self.cluster.apply, manifest)
            if applied["kind"] != "Deployment":
                continue
            generations[key_of(applied)] = applied["metadata"].get("generation", 0)
            if key_of(applied) not in self.cache.deployments:
                # A new child: its apply response lets the first status say "Progressing"
                # rather than "Pending" and a second write. Known children are left to
                # the watch, which delivers their versions in order.
                self.cache.remember_child(applied)
        self.applied[key] = AppliedChildren(manifests, generations)

    def _still_applied(self, key: Key, manifests: list[dict[str, Any]]) -> bool:
        """The same manifests were applied, and each Deployment is still there at the
        generation the apply left it: not deleted, scaled or edited by someone else."""
        applied = self.applied.get(key)
        if applied is None or applied.manifests != manifests:
            return False
        for child, generation in applied.generations.items():
            cached = self.cache.deployments.get(child)
            if cached is None or cached["metadata"].get("generation", 0) != generation:
                return False
        return True

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

    async def _write_status(self, body: dict[str, Any], status: SpeculativeModelStatus) -> None:
        new = status.model_dump(by_alias=True, mode="json")
        old = body.get("status") or {}
        if _without_nulls(new) == old:
            return
        namespace, name = key_of(body)
        written = await asyncio.to_thread(
            self.cluster.patch_status,
            namespace,
            name,
            new,
            body["metadata"].get("resourceVersion"),
        )
        if not written:
            # Someone wrote in between; the watch brings the new object and a retry.
            self.cache.wake(key_of(body))

    def _export(self, model: SpeculativeModel, status: SpeculativeModelStatus) -> None:
        labels = (model.metadata.namespace or "", model.metadata.name)
        speculation = status.speculation
        stable_k = 0 if speculation.disabled else (speculation.tokens or 0)
        metrics.SPECULATIVE_TOKENS.labels(*labels, "stable").set(stable_k)
        metrics.SPECULATIVE_TOKENS.labels(*labels, "canary").set(speculation.candidate_tokens or 0)
        metrics.ACCEPTANCE_FLOOR.labels(*labels).set(model.spec.rollback.min_acceptance)
        metrics.SPECULATION_DISABLED.labels(*labels).set(1 if speculation.disabled else 0)

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


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
