"""Leader election: who may write, when, against a Lease held in memory and a clock the test
moves (the real Lease and real processes: e2e/test_leader_election.py)."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes.config import kube_config
from prometheus_client import REGISTRY

from specfleet.operator.kube import api_client
from specfleet.operator.leadership import (
    Election,
    ElectionConfig,
    LeaseRecord,
    LeaseStore,
    claim,
    released,
)
from tests.api_servers import LateLease, kubeconfig

WALL = datetime(2026, 11, 30, 12, tzinfo=UTC)


class MemoryLease(LeaseStore):
    """One Lease with the API server's optimistic concurrency; `down` fails every call."""

    def __init__(self) -> None:
        super().__init__(None, "ns", "lease")
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down = False

    def read(self) -> tuple[LeaseRecord, str] | None:
        if self.down:
            raise ConnectionError("API server unreachable")
        return None if self.record is None else (self.record, str(self.version))

    def write(self, record: LeaseRecord, version: str | None) -> bool:
        if self.down:
            raise ConnectionError("API server unreachable")
        current = None if self.record is None else str(self.version)
        if version != current:
            return False
        self.record, self.version = record, self.version + 1
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# A Lease tried every 0.1 s, for the tests that run the election's own thread.
QUICK = ElectionConfig(
    "lease",
    "ns",
    "a",
    lease_duration=2,
    renew_deadline=1,
    retry_period=0.1,
    request_timeout=0.5,
)


def elections(store: MemoryLease, clock: Clock, *names: str) -> list[Election]:
    return [
        Election(ElectionConfig("lease", "ns", name), store, on_lost=lambda: None, clock=clock)
        for name in names
    ]


def test_claim_takes_a_missing_released_or_expired_lease_and_renews_its_own() -> None:
    first = claim(None, 0, "a", 5, WALL, 15)
    assert first == LeaseRecord("a", 15, WALL, WALL, 0)
    later = WALL.replace(minute=1)
    renewed = claim(first, 0, "a", 100, later, 15)
    assert renewed == replace(first, renew_time=later)  # acquireTime kept
    assert claim(first, 0, "b", 14.9, later, 15) is None  # valid for 15 s after seen
    taken = claim(first, 0, "b", 15, later, 15)
    assert taken == LeaseRecord("b", 15, later, later, 1)
    assert claim(released(first, later), 0, "b", 0.1, later, 15) == taken


@pytest.mark.parametrize(
    ("durations", "flag"),
    [
        ((15, 10, 0), "--retry-period"),
        ((15, 2, 2), "--renew-deadline"),
        ((10, 10, 2), "--lease-duration"),
    ],
)
def test_settings_that_cannot_fence_are_refused_naming_the_flag(
    durations: tuple[float, float, float], flag: str
) -> None:
    problems = ElectionConfig("lease", "ns", "a", *durations).problems()
    assert problems
    assert problems[0].startswith(flag)
    assert ElectionConfig("lease", "ns", "a").problems() == []
    assert "--lease-namespace" in ElectionConfig("lease", "", "a").problems()[0]


def test_a_killed_leader_is_replaced_after_the_lease_duration_and_not_before() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elections(store, clock, "a", "b")
    assert a.attempt() and a.may_write()
    for _ in range(10):  # both running: a renews, b waits
        clock.now += 2
        assert a.attempt() and b.attempt()
        assert a.may_write() and not b.may_write()
    killed = clock.now  # a's last renew; b saw it at this same moment
    while not b.may_write():
        clock.now += b.pause()
        b.attempt()
    assert clock.now == killed + 15  # b tries again just when the Lease expires
    assert store.record is not None and store.record.holder == "b"
    assert store.record.transitions == 1


def test_a_frozen_leader_stops_writing_before_the_standby_starts() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elections(store, clock, "a", "b")
    a.attempt()
    b.attempt()
    # a freezes right after a renew; b keeps trying. Whenever b may write, a may not.
    for _ in range(40):
        clock.now += 0.5
        b.attempt()
        assert not (a.may_write() and b.may_write()), clock.now
    assert b.may_write()
    # a resumes: it may not write, and its first try finds the Lease taken: it has lost.
    assert not a.may_write()
    assert a.attempt() is False
    assert a.lost and not a.may_write()


def test_a_leader_cut_off_from_the_api_server_gives_up_at_its_renew_deadline() -> None:
    store, clock = MemoryLease(), Clock()
    (a,) = elections(store, clock, "a")
    a.attempt()
    renewed = clock.now
    store.down = True
    while a.attempt():
        assert a.may_write() == (clock.now < renewed + 10)
        clock.now += 2
    assert a.lost and clock.now >= renewed + 10


def test_a_clean_stop_hands_the_lease_over_at_once() -> None:
    store, clock = MemoryLease(), Clock()
    a, b = elections(store, clock, "a", "b")
    a.attempt()
    b.attempt()
    a.release()
    assert not a.may_write()
    clock.now += 0.1
    assert b.attempt() and b.may_write()


def test_never_two_writers_under_random_freezes_outages_and_restarts() -> None:
    """Three replicas on one Lease; at random, each is frozen (no tries), the API server
    is down, or a lost replica restarts as a new standby. At every instant at most one
    replica may write, and the Lease always ends up held."""
    rng = random.Random(7)
    store, clock = MemoryLease(), Clock()
    replicas = elections(store, clock, "r0", "r1", "r2")
    frozen_until = [0.0, 0.0, 0.0]
    restarts = 0
    for _ in range(4000):
        clock.now += rng.uniform(0.1, 1.0)
        store.down = rng.random() < 0.05
        for index, replica in enumerate(replicas):
            if rng.random() < 0.005:
                frozen_until[index] = clock.now + rng.uniform(1, 30)
            if clock.now < frozen_until[index]:
                continue
            if not replica.attempt():
                restarts += 1
                (replicas[index],) = elections(store, clock, f"r{index}-{restarts}")
        assert sum(r.may_write() for r in replicas) <= 1, clock.now
    assert restarts > 0  # the run did exercise lost leadership
    store.down = False
    frozen_until = [0.0, 0.0, 0.0]
    for _ in range(20):
        clock.now += 2
        for replica in replicas:
            replica.attempt()
    assert sum(r.may_write() for r in replicas) == 1


def test_settings_whose_margin_a_slow_write_can_cross_are_refused() -> None:
    """A write sent just before the leader's deadline may land a request timeout later:
    the margin between renew deadline and lease duration must cover it."""
    problems = ElectionConfig("lease", "ns", "a", 15, 12, 2, request_timeout=4).problems()
    assert problems and problems[0].startswith("--lease-duration")
    assert "request timeout" in problems[0]
    assert ElectionConfig("lease", "ns", "a", 15, 10, 2, request_timeout=4).problems() == []


def test_a_slow_read_of_the_leaders_newest_renew_gives_the_standby_no_early_start() -> None:
    """The standby's GET takes 7 s and returns the renew the leader made 6.9 s into it:
    the standby must count the Lease's duration from the answer, not from the request."""
    store, clock = SlowLease(), Clock()
    a, b = elections(store, clock, "a", "b")
    assert a.attempt()

    def renew_meanwhile() -> None:
        store.during_read = lambda: None
        clock.now += 6.9
        assert a.attempt()  # a's last renew; then a freezes
        clock.now += 0.1

    store.during_read = renew_meanwhile
    b.attempt()
    assert a.may_write() and not b.may_write()
    for _ in range(60):
        clock.now += 0.5
        b.attempt()
        assert not (a.may_write() and b.may_write()), clock.now
    assert b.may_write()


class SlowLease(MemoryLease):
    def __init__(self) -> None:
        super().__init__()
        self.during_read: Callable[[], None] = lambda: None

    def read(self) -> tuple[LeaseRecord, str] | None:
        self.during_read()
        return super().read()


def test_a_busy_default_thread_pool_neither_delays_a_renew_nor_hides_a_lost_lease() -> None:
    """Reconciles fill the default thread pool (here: one worker, blocked). The Lease is
    still taken, and once the API server is gone the leader stops writing, reports it
    (specfleet_leader 0) and calls on_lost, all while the pool stays blocked."""
    store = MemoryLease()
    config = QUICK

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        unblock = threading.Event()
        busy = asyncio.ensure_future(asyncio.to_thread(unblock.wait, 30))
        lost = asyncio.Event()
        election = Election(config, store, on_lost=lost.set)
        stop = asyncio.Event()
        running = asyncio.create_task(election.run(stop))
        try:
            await asyncio.wait_for(election.acquired.wait(), timeout=10)
            assert election.may_write()
            store.down = True
            await asyncio.wait_for(lost.wait(), timeout=10)
            assert not busy.done()  # all of it happened with the pool blocked
            assert not election.may_write() and election.lost
            assert REGISTRY.get_sample_value("specfleet_leader") == 0
        finally:
            stop.set()
            unblock.set()
            await running
            await busy

    asyncio.run(scenario())


def test_a_renewal_the_server_committed_but_answered_late_keeps_the_leadership(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server commits the renewal and answers after the request timeout: the
    leader reads the Lease back, finds its own renewal and keeps leading; the PUT is sent
    once (urllib3 sent it again with the old resourceVersion: 409, and the leader quit)."""
    server = LateLease()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setattr(
        kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig(server.url, tmp_path / "k"))
    )
    store = LeaseStore(api_client("a"), "ns", "lease", timeout=0.5)
    config = ElectionConfig("lease", "ns", "a", request_timeout=0.5)
    election = Election(config, store, on_lost=lambda: None)
    try:
        assert election.attempt() and election.may_write()  # acquired, answered at once
        server.delay = 1.0
        renewing = time.monotonic()
        assert election.attempt(), "lost the Lease to its own renewal"
        assert election.may_write()
        assert election.valid_until >= renewing + config.renew_deadline
        assert server.writes == [("POST", 200), ("PUT", 200)]
        assert server.holder() == "a"
    finally:
        server.close()


def test_each_try_that_leaves_the_leader_writing_reopens_the_fleets_fence() -> None:
    """on_fence_open runs on the event loop after each try of the Lease that leaves this
    replica free to write (the fleet retries then what met the fence closed), and never
    once it may not write."""
    store = MemoryLease()
    config = QUICK

    async def scenario() -> None:
        lost = asyncio.Event()
        election = Election(config, store, on_lost=lost.set)
        opened: list[tuple[int, bool]] = []
        election.on_fence_open = lambda: opened.append(
            (threading.get_ident(), election.may_write())
        )
        stop = asyncio.Event()
        running = asyncio.create_task(election.run(stop))
        try:
            deadline = time.monotonic() + 10
            while len(opened) < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert len(opened) >= 3, opened
            assert opened == [(threading.get_ident(), True)] * len(opened)
            store.down = True
            await asyncio.wait_for(lost.wait(), timeout=10)
            before = len(opened)
            await asyncio.sleep(0.3)
            assert len(opened) == before and not election.may_write()
        finally:
            stop.set()
            await running

    asyncio.run(scenario())
