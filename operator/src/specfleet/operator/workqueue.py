"""The fleet's work queue, as controller-runtime's: which models to reconcile next and
when. A dirty set (models woken by a watch event since the last pass), a sweep of every
model each period, a bounded number of reconciles in flight, one at a time per model,
and a back-off for models whose reconcile failed. It knows keys, never what a reconcile
does; a reconcile may wait on slow I/O without its slot (`without_slot`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from specfleet.operator.keys import Key

log = logging.getLogger("specfleet.workqueue")
# Reconciles in flight at once: enough to keep the API server busy, few enough that
# models finish in the order they arrived rather than all at the end of a burst.
CONCURRENT_RECONCILES = 16
# A model whose children cannot be put in place is retried after 5 s, 10 s, ... at
# most 5 minutes apart, or at once when its spec changes: not every 5 s sweep.
BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 300.0
# The slots the running reconcile holds one of (set in its own task).
_holding: ContextVar[asyncio.Semaphore | None] = ContextVar("holding", default=None)


@asynccontextmanager
async def without_slot() -> AsyncIterator[None]:
    """Wait on I/O a tenant controls (a scrape, a Prometheus query) without holding a
    reconcile slot, and take one again after: one tenant's slow pods must not keep other
    models' reconciles from starting. Outside a reconcile, only the body runs."""
    slots = _holding.get()
    if slots is None:
        yield
        return
    slots.release()
    try:
        yield
    finally:
        # Shielded: if cancelled here, the slot is still taken, for the reconcile's own
        # release to give back.
        await asyncio.shield(slots.acquire())


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
    slots: asyncio.Semaphore = field(
        default_factory=lambda: asyncio.Semaphore(CONCURRENT_RECONCILES)
    )

    def add(self, key: Key) -> None:
        self.dirty.add(key)
        self.changed.set()

    def discard(self, key: Key) -> None:
        self.dirty.discard(key)

    async def run(
        self,
        stop: asyncio.Event,
        period: float,
        every: Callable[[], Iterable[Key]],
        reconcile: Callable[[Key], Awaitable[None]],
    ) -> None:
        """Reconcile every key each `period` seconds and, in between, each key that was
        added, as soon as a slot is free; on stop, finish the reconciles in flight."""
        next_sweep = 0.0
        ticks: set[asyncio.Task[None]] = set()
        while not stop.is_set():
            now = time.monotonic()
            known = set(every())
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
                    tick = asyncio.create_task(self._tick(key, reconcile))
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

    async def _tick(self, key: Key, reconcile: Callable[[Key], Awaitable[None]]) -> None:
        async with self.slots:
            self.queued.discard(key)
            self.running.add(key)
            _holding.set(self.slots)  # this task's own context
            try:
                await reconcile(key)
            finally:
                self.running.discard(key)
                if key in self.again:
                    self.again.discard(key)
                    self.add(key)
