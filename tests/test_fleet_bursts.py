"""A user's apply of many models is not crowded by the operator's requests for their
children: models never reconciled wait while new ones keep coming (Fleet._after_the_burst),
and no longer than the limit; a settled model's change never waits. The real Fleet and
WorkQueue on the fake cluster; each check is an order of events, with wide margins in time."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any

from specfleet.operator.fleet import Fleet
from tests.fake_cluster import FakeCluster, ScriptedEvaluator
from tests.test_fleet import tokens_in
from tests.test_fleet_fairness import _until

QUIET = 1.0  # a burst ends after this long without a new model
STEP = 0.1  # a new model every STEP seconds: a burst


def _named(manifest: dict[str, Any], index: int) -> dict[str, Any]:
    model = copy.deepcopy(manifest)
    model["metadata"]["name"] = f"m{index}"
    return model


def _workloads(cluster: FakeCluster) -> set[str]:
    return {name for kind, _, name in cluster.objects if kind == "Deployment"}


def _running(cluster: FakeCluster, fleet: Fleet, scenario: Callable[[], Awaitable[float]]) -> float:
    async def main() -> float:
        stop = asyncio.Event()
        running = asyncio.create_task(fleet.run(stop))
        try:
            return await scenario()
        finally:
            stop.set()
            await asyncio.wait_for(running, timeout=30)

    return asyncio.run(main())


def test_new_models_wait_for_the_burst_to_pause(peagle_manifest: dict[str, Any]) -> None:
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator(), burst_quiet=QUIET, burst_limit=30)  # type: ignore[arg-type]

    async def burst() -> float:
        for index in range(6):
            cluster.create_model(_named(peagle_manifest, index))
            cluster.deliver(fleet)
            await asyncio.sleep(STEP)
            assert not _workloads(cluster), "children made while models kept coming"
        last = time.monotonic()
        await _until(lambda: {f"m{i}" for i in range(6)} <= _workloads(cluster), within=15)
        return time.monotonic() - last

    after_the_last = _running(cluster, fleet, burst)
    assert after_the_last >= QUIET - STEP, f"children {after_the_last:.2f}s after the last model"


def test_a_stream_that_never_pauses_holds_a_model_no_longer_than_the_limit(
    peagle_manifest: dict[str, Any],
) -> None:
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator(), burst_quiet=QUIET, burst_limit=1.5)  # type: ignore[arg-type]

    async def stream() -> float:
        started = time.monotonic()
        index = 0
        while "m0" not in _workloads(cluster):
            assert time.monotonic() - started < 15, "the first model was held past the limit"
            cluster.create_model(_named(peagle_manifest, index))
            cluster.deliver(fleet)
            index += 1
            await asyncio.sleep(STEP)
        return time.monotonic() - started

    held = _running(cluster, fleet, stream)
    assert held >= 1.5 - STEP, f"the first model's children came {held:.2f}s after it"


def test_a_settled_model_s_change_does_not_wait_for_a_burst(
    peagle_manifest: dict[str, Any],
) -> None:
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator(), burst_quiet=QUIET, burst_limit=30)  # type: ignore[arg-type]
    name = peagle_manifest["metadata"]["name"]

    async def edit_during_a_burst() -> float:
        cluster.create_model(peagle_manifest)
        cluster.deliver(fleet)
        await _until(lambda: name in _workloads(cluster), within=15)
        await asyncio.sleep(0.2)  # its first reconcile ends; it is settled
        for index in range(3):
            cluster.create_model(_named(peagle_manifest, index))
            cluster.deliver(fleet)
            await asyncio.sleep(STEP)
        cluster.edit_spec(name, lambda spec: spec["speculation"].update(tokens=5))
        cluster.deliver(fleet)
        edited = time.monotonic()
        await _until(lambda: tokens_in(cluster.stable_args(name)) == 5, within=15)
        assert not {"m0", "m1", "m2"} & _workloads(cluster), "the burst was not held"
        return time.monotonic() - edited

    _running(cluster, fleet, edit_during_a_burst)
