"""One tenant's slow metrics do not hold the reconciles other models need: the real Fleet,
WorkQueue and Evaluator on the fake cluster, the slow Prometheus a real local tarpit."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from specfleet.operator.api import SpeculativeModel
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.fleet import Fleet
from specfleet.operator.keys import Key
from specfleet.operator.metrics import Outbound
from specfleet.operator.status import ObservedChildren
from specfleet.operator.workqueue import (
    CONCURRENT_RECONCILES,
    Priority,
    WorkQueue,
    without_slot,
)
from tests.fake_cluster import FakeCluster, ScriptedEvaluator
from tests.hostile_servers import tarpit
from tests.test_fleet import tokens_in

HOGS = 3 * CONCURRENT_RECONCILES  # 48
TIMEOUT = 20.0  # each hog's query waits this long: the operator's ceiling, and theirs


def _urgent_if(new: Callable[[Key], bool]) -> Callable[[Key], Priority]:
    """Priority.URGENT for the keys `new` picks (as new models' are), ROUTINE otherwise."""
    return lambda key: Priority.URGENT if new(key) else Priority.ROUTINE


async def _until(condition: Any, within: float) -> float:
    """Seconds until `condition()` holds; fails after `within`."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < within, "not in time"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def test_a_new_models_children_come_while_48_models_wait_on_a_tarpit(
    peagle_manifest: dict[str, Any],
) -> None:
    cluster = FakeCluster()

    async def main() -> tuple[float, float]:
        stop = asyncio.Event()
        running: asyncio.Task[None] | None = None
        try:  # leaving the tarpit closes it: the hogs' queries end at once, unreachable
            async with tarpit() as (slow, held):
                # Listed by the install, as a Prometheus beside the operator may be: a
                # loopback address is refused otherwise.
                outbound = Outbound(max_timeout=TIMEOUT, prometheus_urls=frozenset([slow]))
                fleet = Fleet(cluster, Evaluator(outbound))  # type: ignore[arg-type]
                for index in range(HOGS):
                    hog = copy.deepcopy(peagle_manifest)
                    hog["metadata"]["name"] = f"hog-{index}"
                    hog["spec"]["metrics"] = {
                        "source": "Prometheus",
                        "prometheus": {"url": slow},
                        "scrapeTimeout": f"{TIMEOUT:g}s",
                    }
                    cluster.create_model(hog, namespace="hogs")
                cluster.deliver(fleet)
                running = asyncio.create_task(fleet.run(stop))
                # Hogs wait on the tarpit in every slot (before, no more could).
                await _until(lambda: len(held) >= CONCURRENT_RECONCILES, within=10)
                cluster.create_model(peagle_manifest, namespace="team")
                cluster.deliver(fleet)
                name = peagle_manifest["metadata"]["name"]
                created = await _until(
                    lambda: ("Deployment", "team", name) in cluster.objects, within=TIMEOUT * 2
                )
                # And a change of its K (as a rollback's) reaches its pods as soon.
                cluster.edit_spec(name, lambda spec: spec["speculation"].update(tokens=5))
                cluster.deliver(fleet)
                changed = await _until(
                    lambda: tokens_in(cluster.stable_args(name)) == 5, within=TIMEOUT * 2
                )
                return created, changed
        finally:
            stop.set()
            if running is not None:
                await asyncio.wait_for(running, timeout=TIMEOUT)

    created, changed = asyncio.run(main())
    assert created < 2.0, f"the new model's Deployment came {created:.1f}s after it"
    assert changed < 2.0, f"its new K reached its Deployment {changed:.1f}s after the edit"


def test_a_model_woken_while_its_reconcile_waits_runs_again_after_it_not_beside() -> None:
    """A reconcile waiting without its slot is not joined by a second one of the same model
    (it would wait on the first's lock holding a slot); the wake is not lost either."""
    key = ("team", "m")

    async def main() -> list[Key]:
        queue, stop, release = WorkQueue(), asyncio.Event(), asyncio.Event()
        reconciled: list[Key] = []

        async def reconcile(key: Key) -> None:
            reconciled.append(key)
            if len(reconciled) == 1:
                async with without_slot():
                    await release.wait()

        running = asyncio.create_task(queue.run(stop, 3600.0, lambda: [key], reconcile))
        await _until(lambda: len(reconciled) == 1, within=5)
        queue.add(key)
        await asyncio.sleep(0.2)
        assert reconciled == [key] and queue.slots._value == CONCURRENT_RECONCILES
        release.set()
        await _until(lambda: len(reconciled) == 2, within=5)
        stop.set()
        await running
        return reconciled

    assert asyncio.run(main()) == [key, key]


def test_a_new_models_reconcile_takes_the_next_slot_before_waiting_refreshes() -> None:
    """Issue 46: every slot busy and refreshes of settled models waiting for one; a new
    model (urgent) arrives after them and still runs first when a slot frees."""
    settled = [("team", f"s{i:02d}") for i in range(CONCURRENT_RECONCILES + 8)]
    new = ("team", "new")

    async def main() -> list[Key]:
        queue, stop, release = WorkQueue(), asyncio.Event(), asyncio.Event()
        order: list[Key] = []

        async def reconcile(key: Key) -> None:
            order.append(key)
            await release.wait()

        known = [*settled]
        running = asyncio.create_task(
            queue.run(stop, 3600.0, lambda: known, reconcile, _urgent_if(lambda key: key == new))
        )
        await _until(lambda: len(order) == CONCURRENT_RECONCILES, within=5)
        known.append(new)
        queue.add(new)
        await _until(lambda: queue.slots.waiting(Priority.URGENT) == 1, within=5)
        release.set()
        await _until(lambda: len(order) == len(known), within=5)
        stop.set()
        await running
        return order

    order = asyncio.run(main())
    assert order[CONCURRENT_RECONCILES] == new, order[CONCURRENT_RECONCILES - 1 :]


def test_a_reconcile_back_from_its_io_takes_the_next_slot_before_new_models() -> None:
    """Issue 46: a reconcile that gave its slot up for a scrape holds its decoded model
    until it has one again. Every slot busy and new models (urgent) waiting: the one back
    from its I/O runs at the first freed slot, not after every model waiting."""
    busy = [("team", f"b{i:02d}") for i in range(CONCURRENT_RECONCILES)]
    scraping, new = ("team", "scraping"), [("team", f"n{i}") for i in range(8)]

    async def main() -> list[tuple[str, Key]]:
        queue, stop, scraped = WorkQueue(), asyncio.Event(), asyncio.Event()
        done = {key: asyncio.Event() for key in [scraping, *busy, *new]}
        order: list[tuple[str, Key]] = []

        async def reconcile(key: Key) -> None:
            order.append(("started", key))
            if key == scraping:
                async with without_slot():
                    await scraped.wait()
                order.append(("resumed", key))
            await done[key].wait()

        known = [scraping, *busy]
        running = asyncio.create_task(
            queue.run(stop, 3600.0, lambda: known, reconcile, _urgent_if(lambda key: key in new))
        )
        # The scraping model's slot went to the last busy one: every slot is taken.
        await _until(lambda: len(order) == len(known), within=5)
        for key in new:
            known.append(key)
            queue.add(key)
        await _until(lambda: queue.slots.waiting(Priority.URGENT) == len(new), within=5)
        scraped.set()
        waiting = len(new) + 1
        await _until(lambda: sum(map(queue.slots.waiting, Priority)) == waiting, within=5)
        seen = len(order)
        done[busy[0]].set()  # one slot freed
        await _until(lambda: len(order) > seen, within=5)
        await asyncio.sleep(0.1)
        freed_to = order[seen:]
        for event in done.values():
            event.set()
        await _until(lambda: len(order) == len(known) + 1, within=5)
        stop.set()
        await running
        return freed_to

    assert asyncio.run(main()) == [("resumed", scraping)]


def test_a_model_that_waited_out_a_burst_queues_as_a_new_model(
    peagle_manifest: dict[str, Any],
) -> None:
    """A new model waits out a burst without its slot (Fleet._after_the_burst); it has
    started nothing, so it takes a slot again as a new model does: after a reconcile back
    from its scrape that queued after it, before a refresh that queued before it."""
    cluster = FakeCluster()
    fleet = Fleet(cluster, ScriptedEvaluator(), burst_quiet=1.0, burst_limit=30)  # type: ignore[arg-type]
    cluster.create_model(peagle_manifest)
    cluster.deliver(fleet)
    (bursting,) = fleet.cache.models.keys()
    scraping, refresh = (bursting[0], "scraping"), (bursting[0], "refresh")
    busy = [(bursting[0], f"b{i:02d}") for i in range(CONCURRENT_RECONCILES)]

    async def main() -> list[tuple[str, Key]]:
        queue, stop, scraped = WorkQueue(), asyncio.Event(), asyncio.Event()
        done = {key: asyncio.Event() for key in [bursting, scraping, refresh, *busy]}
        order: list[tuple[str, Key]] = []

        async def reconcile(key: Key) -> None:
            order.append(("started", key))
            if key == bursting:
                await fleet._after_the_burst(key)
                order.append(("resumed", key))
            elif key == scraping:
                async with without_slot():
                    await scraped.wait()
                order.append(("resumed", key))
            await done[key].wait()

        # Both give their slot up at once: the busy models hold every slot.
        known = [bursting, scraping, *busy]
        running = asyncio.create_task(
            queue.run(stop, 3600.0, lambda: known, reconcile, _urgent_if(lambda k: k == bursting))
        )
        await _until(lambda: len(order) == len(known), within=5)
        known.append(refresh)
        queue.add(refresh)
        await _until(lambda: queue.slots.waiting(Priority.ROUTINE) == 1, within=5)
        # The burst is over (1 s without a new model): the model waits for a slot again.
        await _until(lambda: sum(map(queue.slots.waiting, Priority)) == 2, within=5)
        scraped.set()
        await _until(lambda: sum(map(queue.slots.waiting, Priority)) == 3, within=5)
        freed_to = []
        for key in busy[:3]:  # one slot freed at a time
            seen = len(order)
            done[key].set()
            await _until(lambda seen=seen: len(order) > seen, within=5)
            freed_to += order[seen:]
        for event in done.values():
            event.set()
        await _until(lambda: len(order) == len(known) + 2, within=5)
        stop.set()
        await running
        return freed_to

    assert asyncio.run(main()) == [
        ("resumed", scraping),
        ("resumed", bursting),
        ("started", refresh),
    ]


def test_an_evaluation_with_no_pod_to_scrape_keeps_its_slot(
    peagle_manifest: dict[str, Any],
) -> None:
    """A new model's first evaluation has no pod to read: nothing to wait on, so it keeps
    its slot; given up, a model waiting for one ran before it finished (issue 46)."""
    busy = [("team", f"b{i:02d}") for i in range(CONCURRENT_RECONCILES - 1)]
    evaluating, waiting = ("team", "new"), ("team", "waiting")
    model = SpeculativeModel.model_validate(
        {**peagle_manifest, "metadata": {**peagle_manifest["metadata"], "namespace": "team"}}
    )

    async def main() -> list[tuple[str, Key]]:
        queue, stop, go, done = WorkQueue(), asyncio.Event(), asyncio.Event(), asyncio.Event()
        order: list[tuple[str, Key]] = []

        async def reconcile(key: Key) -> None:
            order.append(("started", key))
            if key == evaluating:
                await go.wait()
                await Evaluator().evaluate(model, ObservedChildren(), datetime.now(UTC))
                order.append(("evaluated", key))
            await done.wait()

        known = [*busy, evaluating]
        running = asyncio.create_task(queue.run(stop, 3600.0, lambda: known, reconcile))
        await _until(lambda: len(order) == len(known), within=5)  # every slot taken
        known.append(waiting)
        queue.add(waiting)
        await _until(lambda: queue.slots.waiting(Priority.ROUTINE) == 1, within=5)
        go.set()
        # Either it evaluated in its slot, or it gave the slot to the waiting model.
        ran = ("evaluated", evaluating), ("started", waiting)
        await _until(lambda: any(event in order for event in ran), within=5)
        await asyncio.sleep(0.1)
        seen = list(order)
        done.set()
        await _until(lambda: len(order) == len(known) + 1, within=5)
        stop.set()
        await running
        return seen

    seen = asyncio.run(main())
    assert ("started", waiting) not in seen and seen[-1] == ("evaluated", evaluating), seen


def test_a_namespace_s_model_waits_for_one_reconcile_of_a_namespace_with_many_waiting() -> None:
    """Every slot busy with one namespace's models and 3 x the slots more of them waiting;
    another namespace's model arrives after them and runs at the second freed slot (the
    first goes to the namespace whose turn it is). In arrival order it ran after all 48."""
    crowd = [("crowd", f"m{i:02d}") for i in range(4 * CONCURRENT_RECONCILES)]
    other = ("team", "m")

    async def main() -> list[Key]:
        queue, stop, release = WorkQueue(), asyncio.Event(), asyncio.Event()
        order: list[Key] = []

        async def reconcile(key: Key) -> None:
            order.append(key)
            await release.wait()

        known = [*crowd]
        running = asyncio.create_task(queue.run(stop, 3600.0, lambda: known, reconcile))
        await _until(lambda: len(order) == CONCURRENT_RECONCILES, within=5)
        await _until(lambda: queue.slots.waiting(Priority.ROUTINE) == len(crowd) - len(order), 5)
        known.append(other)
        queue.add(other)
        await _until(lambda: queue.slots.waiting(Priority.ROUTINE) == len(known) - len(order), 5)
        release.set()
        await _until(lambda: len(order) == len(known), within=5)
        stop.set()
        await running
        return order

    order = asyncio.run(main())
    assert order.index(other) == CONCURRENT_RECONCILES + 1, order.index(other)
