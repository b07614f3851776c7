"""One local cluster shared by the pytest workers of `make test`, and one vLLM at a time.

The cluster listens on fixed ports, so every worker uses the same one: the first to need
it starts it, and it goes down when the last one leaves (if this run started it). Tests
take turns on it: most share it (each in its own namespaces), while a test that breaks
it for everyone (an API server restart, a killed node agent, an operator watching every
namespace) runs alone. Readers let a waiting writer go first, so a test that needs the
cluster alone waits for the tests already running and no longer.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e import cluster

SHARE = cluster.STATE / "share"
USERS = SHARE / "users"
# How long the run that started the cluster waits for the other workers before stopping it.
LAST_USER_TIMEOUT = 3600.0
# The test files that start real vLLM (its CPU build) without the cluster: each holds the
# engine's turn while it runs (tests/conftest.py), and with real vLLM on the cluster they
# are one worker's unit of work (e2e/scheduling.py). vLLM 0.33's argument and config
# checks start no engine: they import vLLM and compute (135 s of that unit's chain, the
# one that bounds the run), so they run on any worker, as tests/test_vllm_flags.py does.
VLLM_TESTS = (
    "tests/test_real_engine.py",
    "tests/test_real_engine_hot_schedule.py",
    "tests/test_real_engine_multi_node.py",
)


@contextmanager
def _locked(name: str, operation: int) -> Iterator[None]:
    SHARE.mkdir(parents=True, exist_ok=True)
    with (SHARE / name).open("a") as handle:
        fcntl.flock(handle, operation)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def turn(alone: bool) -> Iterator[None]:
    """Hold the cluster for one test: shared, or `alone`. The turnstile makes a waiting
    writer block new readers (flock alone lets readers starve a writer)."""
    if alone:
        with _locked("turnstile.lock", fcntl.LOCK_EX), _locked("turn.lock", fcntl.LOCK_EX):
            yield
        return
    with _locked("turnstile.lock", fcntl.LOCK_EX):
        pass
    with _locked("turn.lock", fcntl.LOCK_SH):
        yield


@contextmanager
def engine_turn() -> Iterator[None]:
    """Hold the machine's one vLLM for one e2e test or one file of VLLM_TESTS. Two vLLM
    servers on 2 cores slow each other by the minute, and a test that judges K by the
    speed vLLM measures (a hot trial's pairs) then measures its neighbour: single pairs
    strayed +-40%."""
    with _locked("engine.lock", fcntl.LOCK_EX):
        yield


@contextmanager
def leader_worker_set_turn() -> Iterator[None]:
    """Hold LeaderWorkerSet's controller for one test file. Its CRDs and webhook
    configurations are the cluster's, so two files' controllers at once would replace
    each other's webhooks and both reconcile every group; the file with real vLLM and
    the one without run on different workers and take turns."""
    with _locked("lws.lock", fcntl.LOCK_EX):
        yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _other_users() -> list[Path]:
    """The other live processes using the cluster (files of dead ones are removed)."""
    others = []
    for path in USERS.glob("*") if USERS.exists() else ():
        pid = int(path.name)
        if pid == os.getpid():
            continue
        if _alive(pid):
            others.append(path)
        else:
            path.unlink(missing_ok=True)
    return others


def join() -> bool:
    """Use the cluster, starting it if it is down; True if this process started it."""
    with _locked("up.lock", fcntl.LOCK_EX):
        USERS.mkdir(parents=True, exist_ok=True)
        (USERS / str(os.getpid())).touch()
        if cluster.is_up():
            return False
        cluster.up()
        return True


def leave(stop: bool) -> None:
    """Stop using the cluster; with `stop` (this process started it), stop it once the
    other users have left."""
    (USERS / str(os.getpid())).unlink(missing_ok=True)
    if not stop:
        return
    deadline = time.monotonic() + LAST_USER_TIMEOUT
    while _other_users() and time.monotonic() < deadline:
        time.sleep(1)
    with _locked("up.lock", fcntl.LOCK_EX):
        cluster.down()
