"""kopf handlers: each hands what it is given to the fleet.

kopf watches the models; the children have watches of their own (child_watches.py),
started here once this replica leads. Only event handlers: the fleet is level-triggered
(it compares the rendered children and status with what is there), so kopf's change
detection, with its bookkeeping annotations written on every SpeculativeModel, would add
a write per change and nothing else. The operator never writes a model outside its
status.
No finalizers: children are deleted by the garbage collector through owner
references, so an uninstalled operator never leaves objects stuck in deletion.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import kopf

from specfleet.operator.api import GROUP, PLURAL, VERSION
from specfleet.operator.child_watches import ChildWatches
from specfleet.operator.fleet import Fleet
from specfleet.operator.leadership import Election

log = logging.getLogger("specfleet.handlers")


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds a diff base (a deep copy of the body) for every event it sees, for
    change-detecting handlers to diff against. With event handlers only, nothing reads
    it (building it was 6.5% of the operator's CPU samples at 1,000 models)."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


@dataclass
class Running:
    """What one operator run shares between its handlers, kept in kopf's `memo` (the
    handlers get the memo given to `kopf.operator`, so two runs in one process, as in
    tests, never share a fleet)."""

    fleet: Fleet
    # With leader election, the fleet runs only while this replica holds the Lease.
    election: Election | None = None
    # The children's watches (none in tests that hand the fleet its events), followed
    # once this replica leads (`following_children`).
    child_watches: ChildWatches | None = None
    following_children: bool = False
    # The namespaces watched, as given (globs included); None: every namespace.
    namespaces: tuple[str, ...] | None = None
    # Seconds any request of kopf's own (not its watch streams) may take, as the fleet's.
    request_timeout: float | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    election_task: asyncio.Task[None] | None = None
    loop_task: asyncio.Task[None] | None = None

    def scanning_namespaces(self) -> bool:
        """Namespace globs (e.g. "team-*") need kopf to list and watch Namespaces."""
        return self.namespaces is not None and any(_glob(n) for n in self.namespaces)


def memo_for(running: Running) -> kopf.Memo:
    """The memo to start kopf with."""
    return kopf.Memo(running=running)


def running(memo: kopf.Memo) -> Running:
    found = memo.get("running")
    if not isinstance(found, Running):
        raise RuntimeError("specfleet operator was started without a fleet")
    return found


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    run = running(memo)
    settings.persistence.diffbase_storage = NoDiffBase()
    # Without timeouts a watch can go quiet forever behind a dropped connection.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 10
    # kopf's own requests (lists, its annotation patches, Events) time out like the
    # fleet's, so none of them can land long after this replica's fence has closed.
    if run.request_timeout is not None:
        settings.networking.request_timeout = run.request_timeout
        settings.networking.connect_timeout = run.request_timeout
    settings.posting.level = logging.WARNING
    # The chart grants no access to Namespaces (least privilege); with plain namespace
    # names or cluster-wide watching kopf takes them as given instead of scanning.
    settings.scanning.disabled = not run.scanning_namespaces()
    run.loop_task = asyncio.create_task(lead_then_run(settings, run))


def follow_children(run: Running) -> None:
    """Watch the children cluster-wide, or in each namespace named plainly; those of a
    glob in each namespace a model was seen in so far, and in the next ones as their
    models come (model_event)."""
    run.following_children = True
    if run.child_watches is None:
        return
    if run.namespaces is None:
        run.child_watches.follow(None)
        return
    for namespace in run.namespaces:
        if not _glob(namespace):
            run.child_watches.follow(namespace)
    if run.scanning_namespaces():
        for namespace in sorted({namespace for namespace, _ in run.fleet.cache.models}):
            run.child_watches.follow(namespace)


def _glob(namespace: str) -> bool:
    """A namespace pattern of kopf's (`team-*`, `!team-x`, `a,b`), not a name."""
    return any(c in namespace for c in "*?[!,")


async def lead_then_run(settings: kopf.OperatorSettings, run: Running) -> None:
    """Watch the children and run the fleet; with leader election, only once this replica
    holds the Lease. Until then only the models are watched, and kopf posts no Events: a
    new leader lists every model and child before its first write anyway (Fleet.run), so
    a standby's watches of the children would cost the leader's API server and the
    machine for nothing it uses."""
    election = run.election
    if election is not None:
        settings.posting.enabled = False
        election.on_fence_open = run.fleet.fence_reopened
        run.election_task = asyncio.create_task(election.run(run.stop))
        leading = asyncio.ensure_future(election.acquired.wait())
        await asyncio.wait([leading, run.election_task], return_when=asyncio.FIRST_COMPLETED)
        leading.cancel()
        if not election.may_write():
            return  # stopped (or lost) before leading
        settings.posting.enabled = True
    follow_children(run)
    await run.fleet.run(run.stop)


@kopf.on.cleanup()
async def shutdown(memo: kopf.Memo, **_: Any) -> None:
    run = running(memo)
    run.stop.set()
    if run.loop_task is not None:
        await run.loop_task
    if run.election_task is not None:
        await run.election_task
    if run.child_watches is not None:
        await run.child_watches.close()
    await run.fleet.cluster.close()
    if run.election is not None:
        await asyncio.to_thread(run.election.release)


# kopf hands each object of a (re)listing over as an event of type None, and sends no
# DELETED for what vanished while a watch was away: the fleet then lists for itself.


@kopf.on.event(GROUP, VERSION, PLURAL)
async def model_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    run = running(memo)
    if run.following_children and run.child_watches is not None and run.namespaces is not None:
        namespace = body.get("metadata", {}).get("namespace")
        if namespace:
            run.child_watches.follow(namespace)
    run.fleet.remember_model(dict(body), deleted=type == "DELETED")
    if type is None:
        run.fleet.relisted()
