"""How make pytest hands out the tests to its workers (e2e/scheduling.py), run against
xdist's own scheduler code with workers that follow xdist's rule for running a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

from xdist.workermanage import WorkerController

from e2e import scheduling
from e2e.cluster_share import VLLM_TESTS

VLLM = scheduling.VLLM_UNIT


def test_the_vllm_unit_goes_first_then_the_e2e_files_as_collected() -> None:
    """The vLLM unit first: behind the e2e files it started 566 s into a run, and its
    real vLLM on the cluster set the run's end."""
    queued = ["tests/test_b.py", "e2e/test_shared.py", VLLM, "e2e/test_alone.py"]
    first_seen = {"e2e/test_alone.py": 0, "tests/test_b.py": 1, "e2e/test_shared.py": 2}
    first_seen[VLLM] = 3
    assert scheduling.work_order(queued, first_seen) == [
        VLLM,
        "e2e/test_alone.py",
        "e2e/test_shared.py",
        "tests/test_b.py",
    ]
    # Once the vLLM unit is taken, the e2e files still lead.
    assert scheduling.work_order(["tests/test_b.py", "e2e/test_shared.py"], first_seen) == [
        "e2e/test_shared.py",
        "tests/test_b.py",
    ]


@dataclass(eq=False)
class Worker:
    """A worker as xdist's remote loop runs it: a test runs only once the worker holds
    the next one too, or has been told to stop."""

    name: str
    held: list[int] = field(default_factory=list)
    shutting_down: bool = False
    ran: list[tuple[int, str]] = field(default_factory=list)  # (tick, node id)

    @property
    def gateway(self) -> SimpleNamespace:
        return SimpleNamespace(id=self.name)

    def send_runtest_some(self, indices: list[int]) -> None:
        self.held += indices

    def shutdown(self) -> None:
        self.shutting_down = True

    def runnable(self) -> bool:
        return len(self.held) >= 2 or (self.shutting_down and len(self.held) == 1)


def run(collection: list[str], workers: int) -> list[Worker]:
    """Every test takes one tick; the workers run side by side, and the controller stops
    them all once the scheduler says the tests are finished (xdist's DSession)."""
    config = SimpleNamespace(
        getvalue=lambda name: [f"{workers}*popen"] if name == "tx" else None,
        option=SimpleNamespace(loadscopereorder=True),
    )
    sched = scheduling.OneClusterScheduling(cast(Any, config))
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(cast(WorkerController, node))
        sched.add_node_collection(cast(WorkerController, node), collection)
    sched.schedule()
    for tick in range(10 * len(collection)):
        running = [node for node in nodes if node.runnable()]
        if not running:
            break
        for node in running:
            index = node.held.pop(0)
            node.ran.append((tick, collection[index]))
            sched.mark_test_complete(cast(WorkerController, node), index)
        if sched.tests_finished:
            for node in nodes:
                node.shutdown()
    return nodes


def test_the_vllm_worker_runs_its_last_test_at_once_and_then_takes_more() -> None:
    """Held back until the unit had no test left, the vLLM worker's last test waited
    for more work that never came: it ran only when the whole run was done with
    (about 500 s idle in the runs of 4 December)."""
    vllm = [f"{VLLM_TESTS[0]}::test_{i}" for i in range(4)]
    vllm += [f"{path}::test_{i}" for path in scheduling.REAL_ENGINE_E2E for i in range(2)]
    others = [f"tests/test_{f}.py::test_{i}" for f in range(12) for i in range(3)]
    nodes = run(vllm + others, workers=3)
    assert sorted(nid for node in nodes for _, nid in node.ran) == sorted(vllm + others)
    (vllm_worker,) = [node for node in nodes if node.ran and node.ran[0][1] in vllm]
    ticks = [tick for tick, nid in vllm_worker.ran if nid in vllm]
    assert ticks == list(range(len(vllm))), vllm_worker.ran  # one after the other, no wait
    # ... and then it shares what is left with the others.
    assert len(vllm_worker.ran) > len(vllm), vllm_worker.ran
    assert [nid for _, nid in vllm_worker.ran[: len(vllm)]] == vllm  # nothing in between
    assert max(tick for node in nodes for tick, _ in node.ran) <= (len(vllm + others)) // 3 + 3


def test_the_vllm_unit_keeps_its_worker_until_one_test_is_left() -> None:
    assert scheduling.holds_back(2)
    assert not scheduling.holds_back(1)
    assert not scheduling.holds_back(0)
