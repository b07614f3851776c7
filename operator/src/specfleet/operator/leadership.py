"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Every replica watches the models; only the one holding the Lease watches their children
(handlers.lead_then_run) and writes. The holder renews every `retry_period`; a standby
takes the Lease once it has seen the same record, unrenewed, for `lease_duration` by its
own monotonic clock (no trust in other hosts' wall clocks), counted from when its read
returned, as client-go does: the record may have been written at any moment before that.
Fencing: the leader may write only until `renew_deadline` after the start of its last
successful renew, which is earlier than any standby can take over (`lease_duration` after it
saw that renew). A write that leaves just before then is answered or abandoned within the
request timeout, which is shorter than the margin between the two. A leader that cannot
renew by then has lost: it stops writing at once and the operator exits, so that it comes
back as a standby with nothing stale in memory.
The tries run on a thread of their own: reconciles that fill the event loop or the
default thread pool cannot delay a renew, nor the discovery that it failed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from specfleet.operator import observability
from specfleet.operator.kube import REQUEST_TIMEOUT, call

log = logging.getLogger("specfleet.leadership")
# Standbys spread their tries over this much more than the retry period, as client-go does.
JITTER = 0.2
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class ElectionConfig:
    lease_name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    # Seconds any API request may take (kube.REQUEST_TIMEOUT unless a test says otherwise).
    request_timeout: float = REQUEST_TIMEOUT

    def problems(self) -> list[str]:
        """Why these settings cannot fence a leader, in the words of the command line."""
        found = []
        if not self.retry_period > 0:
            found.append("--retry-period must be more than 0 seconds")
        if not self.renew_deadline > (1 + JITTER) * self.retry_period:
            found.append(
                f"--renew-deadline ({self.renew_deadline:g}s) must be more than "
                f"{1 + JITTER:g} x --retry-period ({self.retry_period:g}s): a leader needs "
                "more than one try to renew before it gives up"
            )
        if not self.lease_duration > self.renew_deadline:
            found.append(
                f"--lease-duration ({self.lease_duration:g}s) must be more than "
                f"--renew-deadline ({self.renew_deadline:g}s): the difference is the margin "
                "in which a leader that failed to renew has stopped writing before a standby "
                "takes over"
            )
        elif not self.lease_duration - self.renew_deadline > self.request_timeout:
            found.append(
                f"--lease-duration ({self.lease_duration:g}s) must be more than "
                f"--renew-deadline ({self.renew_deadline:g}s) plus the request timeout "
                f"({self.request_timeout:g}s): a write sent just before a leader's deadline "
                "may land that much later, and must land before a standby takes over"
            )
        if not self.lease_name:
            found.append("--lease-name is empty")
        if not self.namespace:
            found.append(
                "--lease-namespace (or $POD_NAMESPACE) is empty: name the Lease's namespace"
            )
        return found


@dataclass(frozen=True)
class LeaseRecord:
    """The part of a Lease's spec the election reads and writes."""

    holder: str  # "" once released
    duration: float
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


def claim(
    current: LeaseRecord | None,
    seen_since: float,
    identity: str,
    now: float,
    wall: datetime,
    lease_duration: float,
) -> LeaseRecord | None:
    """The record that makes `identity` the leader (a first acquire, a takeover or a renew),
    or None while another holder's lease is still valid. `seen_since` is when (monotonic
    seconds) this replica first saw `current` unchanged; `now` is the monotonic time."""
    if current is None:
        return LeaseRecord(identity, lease_duration, wall, wall, 0)
    if current.holder == identity:
        return replace(current, duration=lease_duration, renew_time=wall)
    if current.holder and now < seen_since + current.duration:
        return None
    return LeaseRecord(identity, lease_duration, wall, wall, current.transitions + 1)


def released(record: LeaseRecord, wall: datetime) -> LeaseRecord:
    """What a leader that stops writes, so that a standby takes over at once."""
    return replace(record, holder="", duration=1, renew_time=wall)


def _same_write(stored: LeaseRecord, written: LeaseRecord) -> bool:
    """`stored` is `written`: the same holder's renewal of the same instant (renewTime
    keeps microseconds, so no other try of this holder writes the same one)."""
    return stored.holder == written.holder and stored.renew_time == written.renew_time


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}

    def time_of(field: str) -> datetime | None:
        value = spec.get(field)
        return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None

    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        duration=float(spec.get("leaseDurationSeconds") or 0),
        acquire_time=time_of("acquireTime"),
        renew_time=time_of("renewTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


def _spec(record: LeaseRecord) -> dict[str, Any]:
    def text(value: datetime | None) -> str | None:
        return value.astimezone(UTC).strftime(MICRO_TIME) if value else None

    return {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": max(1, round(record.duration)),
        "acquireTime": text(record.acquire_time),
        "renewTime": text(record.renew_time),
        "leaseTransitions": record.transitions,
    }


class LeaseStore:
    """Reads and writes the one Lease; every write is conditional on the version read."""

    def __init__(
        self, api: Any, namespace: str, name: str, timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        return call(self.api, method, path, body, timeout=self.timeout)

    def read(self) -> tuple[LeaseRecord, str] | None:
        """The record and its resourceVersion, or None when there is no Lease yet."""
        try:
            lease = self._call("GET", self._path(self.name), None)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return _record(lease), str(lease["metadata"]["resourceVersion"])

    def write(self, record: LeaseRecord, version: str | None) -> bool:
        """Create (no version) or replace (at `version`); False when someone else wrote
        first (409 on either). An answer that did not come (a timeout, a dropped
        connection) may follow a write the server committed: the Lease is read back, and
        the write counts if what is stored is this very record."""
        try:
            return self._write(record, version)
        except urllib3.exceptions.HTTPError:
            found = self.read()
            if found is not None and _same_write(found[0], record):
                return True
            raise

    def _write(self, record: LeaseRecord, version: str | None) -> bool:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": _spec(record),
        }
        try:
            if version is None:
                self._call("POST", self._path(""), body)
            else:
                self._call("PUT", self._path(self.name), body)
        except ApiException as error:
            if error.status == 409:
                return False
            raise
        return True

    def _path(self, name: str) -> str:
        base = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        return f"{base}/{name}" if name else base


class Election:
    """One replica's part in the election. `may_write` is the fence every write checks."""

    def __init__(
        self,
        config: ElectionConfig,
        store: LeaseStore,
        on_lost: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.store = store
        self.on_lost = on_lost
        self.clock = clock
        self.leading = False
        self.lost = False
        self.valid_until = 0.0  # monotonic; writes stop here unless renewed
        self.acquired = asyncio.Event()  # set once, when this replica starts leading
        self._seen: tuple[LeaseRecord, float] | None = None  # last record read, since when
        # Called on the event loop after each try of the Lease that leaves this replica free
        # to write (the fleet then retries the writes that met the fence closed).
        self.on_fence_open: Callable[[], None] = lambda: None
        observability.LEADER.set(0)

    def may_write(self) -> bool:
        return self.leading and not self.lost and self.clock() < self.valid_until

    async def run(self, stop: asyncio.Event) -> None:
        """Try to lead, then renew, until `stop` or until leadership is lost; the tries
        run on a thread of their own (see the module's docstring)."""
        config = self.config
        log.info(
            "%s: standing for Lease %s/%s", config.identity, config.namespace, config.lease_name
        )
        loop = asyncio.get_running_loop()
        stopped = threading.Event()
        ended: asyncio.Future[bool] = loop.create_future()

        def tries() -> None:
            lost = True  # a crash of the thread loses leadership too
            try:
                lost = self._run_blocking(stopped, partial(loop.call_soon_threadsafe, self._lead))
            finally:
                loop.call_soon_threadsafe(_settle, ended, lost)

        threading.Thread(target=tries, name="specfleet-lease", daemon=True).start()
        stopping: asyncio.Future[bool] = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([stopping, ended], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            stopped.set()
        if await ended:
            self.on_lost()

    def _lead(self) -> None:
        if self.may_write():
            self.acquired.set()
            self.on_fence_open()

    def _run_blocking(self, stopped: threading.Event, leading: Callable[[], object]) -> bool:
        """The loop of tries; True once leadership is lost, False when stopped."""
        while not stopped.is_set():
            if not self.attempt():
                return True
            if self.leading:
                leading()
            stopped.wait(self.pause())
        return False

    def pause(self) -> float:
        """Seconds until the next try: the retry period (spread on standbys), or less when
        the Lease this standby waits on expires sooner, so a takeover is not a whole
        period late."""
        if self.leading:
            return self.config.retry_period
        pause = self.config.retry_period * (1 + JITTER * random.random())
        if self._seen is not None and self._seen[0].holder:
            record, since = self._seen
            pause = min(pause, max(0.0, since + record.duration - self.clock()))
        return pause

    def attempt(self) -> bool:
        """One acquire-or-renew (blocking) and what follows from it; False once lost."""
        config = self.config
        started = self.clock()
        holding: bool | None
        try:
            holding = self._try()
        except Exception as error:  # the API server may be away for a while
            log.warning("the Lease could not be read or written: %s", error)
            holding = None
        if holding:
            self.valid_until = started + config.renew_deadline
            if not self.leading:
                log.info("%s: leading (Lease %s)", config.identity, config.lease_name)
                observability.LEADER.set(1)
                self.leading = True
        elif self.leading and (holding is False or self.clock() >= self.valid_until):
            why = (
                "another replica holds the Lease"
                if holding is False
                else f"could not renew the Lease for {config.renew_deadline:g}s"
            )
            self.lost = True
            self.valid_until = 0.0
            observability.LEADER.set(0)
            log.error("%s: lost leadership: %s; stopping", config.identity, why)
            return False
        return True

    def _try(self) -> bool:
        """One acquire-or-renew; whether this replica holds the Lease now."""
        found = self.store.read()
        # The record may have been written at any moment up to the read's answer: dated
        # from before the read, a slow read would shorten the wait for its holder.
        now = self.clock()
        if found is None:
            record, version = None, None
        else:
            record, version = found
            if self._seen is None or self._seen[0] != record:
                self._seen = (record, now)
        seen_since = self._seen[1] if self._seen is not None else now
        wanted = claim(
            record,
            seen_since,
            self.config.identity,
            now,
            datetime.now(UTC),
            self.config.lease_duration,
        )
        return wanted is not None and self.store.write(wanted, version)

    def release(self) -> None:
        """Hand the Lease over on a clean stop (blocking): writes stop first."""
        if not self.may_write():
            return
        self.valid_until = 0.0
        observability.LEADER.set(0)
        try:
            found = self.store.read()
            if found is not None and found[0].holder == self.config.identity:
                self.store.write(released(found[0], datetime.now(UTC)), found[1])
                log.info("%s: released the Lease", self.config.identity)
        except Exception as error:
            log.warning(
                "releasing the Lease failed (a standby takes it when it expires): %s", error
            )


def _settle(future: asyncio.Future[bool], lost: bool) -> None:
    if not future.done():
        future.set_result(lost)
