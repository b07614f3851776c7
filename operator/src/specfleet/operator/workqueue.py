"""The fleet's work queue, as controller-runtime's: which models to reconcile next and
when. A dirty set (models woken by a watch event since the last pass), a sweep of every
model each period, a bounded number of reconciles in flight, one at a time per model,
and a back-off for models whose reconcile failed. It knows keys, never what a reconcile
does; a reconcile may wait on slow I/O without its slot (`without_slot`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import IntEnum

from specfleet.operator.keys import Key
from specfleet.operator.turns import Turns

log = logging.getLogger("specfleet.workqueue")
# Reconciles in flight at once: enough to keep the API server busy, few enough that
# models finish in the order they arrived rather than all at the end of a burst.
CONCURRENT_RECONCILES = 16
# A model whose children cannot be put in place is retried after 5 s, 10 s, ... at
# most 5 minutes apart, or at once when its spec changes: not every 5 s sweep.
BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 300.0


class Priority(IntEnum):
    """Whom a freed slot goes to first."""

    # A reconcile taking its slot again after I/O (`without_slot`): half done, it holds
    # its decoded model meanwhile. Behind the others, a burst of 1,000 new models kept
    # every one of them decoded and waiting (the operator's peak memory).
    RESUMING = 0
    URGENT = 1  # what a user waits on: a new model's children, a new spec's status
    ROUTINE = 2  # a status refresh of a settled model


class Slots:
    """A semaphore whose waiters are handed a freed slot by `Priority`; within each
    priority the namespaces take turns (`Turns`), so one namespace's hundreds of models
    waiting delay another's by one reconcile each round, not by all of them."""

    def __init__(self, value: int) -> None:
        self._value = value
        self._waiters: dict[Priority, Turns[asyncio.Future[None]]] = {p: Turns() for p in Priority}

    def waiting(self, priority: Priority) -> int:
        return sum(1 for future in self._waiters[priority] if not future.done())

    async def acquire(self, namespace: str, priority: Priority) -> None:
        if self._value > 0 and not any(self.waiting(p) for p in Priority):
            self._value -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[priority].add(namespace, future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # handed a slot it will not use
            else:
                self._waiters[priority].remove(namespace, future)
            raise

    def release(self) -> None:
        for priority in Priority:
            if self._waiters[priority].take(_hand_slot) is not None:
                return  # the slot passes on: _value stays
        self._value += 1


def _hand_slot(waiter: asyncio.Future[None]) -> bool:
    """Hand a freed slot to `waiter`, unless it gave up waiting."""
    if waiter.done():
        return False
    waiter.set_result(None)
    return True


# The slots the running reconcile holds one of, and its model's namespace (set in its own
# task).
_holding: ContextVar[tuple[Slots, str] | None] = ContextVar("holding", default=None)


@asynccontextmanager
async def without_slot(resume: Priority = Priority.RESUMING) -> AsyncIterator[None]:
    """Wait on I/O a tenant controls (a scrape, a Prometheus query) without holding a
    reconcile slot, and take one again after: one tenant's slow pods must not keep other
    models' reconciles from starting. The slot is taken again with priority `resume`:
    the next one freed, for a reconcile that is half done. Outside a reconcile, only the
    body runs."""
    holding = _holding.get()
    if holding is None:
        yield
        return
    slots, namespace = holding
    slots.release()
    try:
        yield
    finally:
        # Shielded: if cancelled here, the slot is still taken, for the reconcile's own
        # release to give back.
        await asyncio.shield(slots.acquire(namespace, resume))


@dataclass(frozen=True)
class Backoff:
    """A model whose last reconcile failed: when to try again, unless its spec (its
    generation) changes first."""

    failures: int
    retry_at: float  # time.monotonic()
    generation: int | None

    def holds(self, generation: int | None) -> bool:
        return time.monotonic() < self.retry_at and self.generation == generation


def backed_off(previous: Backoff | None, generation: int | None) -> Backoff:
    """The back-off after one more failure."""
    failures = (previous.failures if previous is not None else 0) + 1
    # The exponent is capped so that a model failing for days never overflows a float.
    delay = min(BACKOFF_SECONDS * 2.0 ** min(failures - 1, 16), MAX_BACKOFF_SECONDS)
    return Backoff(failures, time.monotonic() + delay, generation)


@dataclass
class WorkQueue:
    # Models to re-run before the next sweep: new or edited models and models whose
    # children changed. A burst of N events costs O(N) reconciles, not O(N^2).
    dirty: set[Key] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    queued: set[Key] = field(default_factory=set)  # waiting for a reconcile slot
    running: set[Key] = field(default_factory=set)
    # Running models woken meanwhile: run again when done, never two at once (a second
    # reconcile would wait on the first's lock holding a slot).
    again: set[Key] = field(default_factory=set)
    slots: Slots = field(default_factory=lambda: Slots(CONCURRENT_RECONCILES))

    def add(self, key: Key) -> None:
        self.dirty.add(key)
        self.changed.set()

    def discard(self, key: Key) -> None:
        self.dirty.discard(key)

    async def run(
        self,
        stop: asyncio.Event,
        period: float,
        every: Callable[[], Collection[Key]],
        reconcile: Callable[[Key], Awaitable[None]],
        priority: Callable[[Key], Priority] = lambda key: Priority.ROUTINE,
    ) -> None:
        """Reconcile every key each `period` seconds and, in between, each key that was
        added, as soon as a slot is free; on stop, finish the reconciles in flight.
        `priority` says who takes a freed slot first: URGENT keys (what a user waits on:
        a new model's children) before ROUTINE ones (status refreshes of settled
        models), after the reconciles resuming from I/O."""
        next_sweep = 0.0
        ticks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            now = time.monotonic()
            # A view of the keys, never a copy: this runs at every wake, and a set of all
            # 1,000 keys built each time was 4% of the operator's CPU in a burst.
            known = every()
            if now >= next_sweep:
                keys = list(known)
                next_sweep = now + period
            else:
                keys = [k for k in self.dirty if k in known]
            self.dirty.clear()
            self.changed.clear()
            for key in keys:
                if key in self.running:
                    self.again.add(key)
                elif key not in self.queued:  # a queued tick will read the newest state
                    self.queued.add(key)
                    tick = asyncio.create_task(self._tick(key, reconcile, priority(key)))
                    ticks.add(tick)
                    tick.add_done_callback(ticks.discard)
            waiters = [
                asyncio.ensure_future(self.changed.wait()),
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

    async def _tick(
        self, key: Key, reconcile: Callable[[Key], Awaitable[None]], priority: Priority
    ) -> None:
        await self.slots.acquire(key[0], priority)
        try:
            await self._run(key, reconcile)
        finally:
            self.slots.release()

    async def _run(self, key: Key, reconcile: Callable[[Key], Awaitable[None]]) -> None:
        """One reconcile of `key`, holding a slot."""
        self.queued.discard(key)
        self.running.add(key)
        _holding.set((self.slots, key[0]))  # this task's own context
        try:
            await reconcile(key)
        finally:
            self.running.discard(key)
            if key in self.again:
                self.again.discard(key)
                self.add(key)
