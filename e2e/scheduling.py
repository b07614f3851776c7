"""How `make pytest` (`pytest -n 4 --dist loadgroup`) hands out the tests: the vLLM tests
and then the e2e files with real vLLM on the cluster are one unit of work, and its worker
takes nothing else until it is nearly done; every other file is a unit of its own. One
worker starts the vLLM unit while the others take the e2e files one at a time (the tests
waiting on the cluster's clocks overlap: they share it, e2e/cluster_share.py), then
whatever is left.
Grouped by path, not by an `xdist_group` marker: xdist 3.8 marks a group by renaming
the test's node id, which pytest 9.2's node ids ignore.
"""

from __future__ import annotations

from xdist.scheduler import LoadGroupScheduling
from xdist.workermanage import WorkerController

from e2e import cluster_share

# The e2e files with real vLLM on the cluster: run by the worker that ran the vLLM tests
# without a cluster (cluster_share.VLLM_TESTS), right after them in the same unit of work.
# They hold the machine's one vLLM in turn anyway, so one worker runs them back to back:
# as a unit of its own, the real vLLM group's file waited 237 s behind other files on a
# worker that took it late (runs of 4 December). The LeaderWorkerSet tests without vLLM
# are a file of their own, on another worker (87 s of the unit's before).
REAL_ENGINE_E2E = ("e2e/test_real_engine.py", "e2e/test_real_engine_multi_node.py")
VLLM_UNIT = "vllm"


def work_order(queued: list[str], first_seen: dict[str, int]) -> list[str]:
    """The order the workers take the queued units in: the vLLM unit first (its worker
    starts vLLM without the cluster while the others start on the cluster), then the e2e
    files in the order they were collected (`first_seen`: those that need the cluster
    alone first), then the rest as queued."""
    e2e = sorted((unit for unit in queued if unit.startswith("e2e/")), key=first_seen.__getitem__)
    lead = [VLLM_UNIT] * (VLLM_UNIT in queued) + e2e
    return lead + [unit for unit in queued if unit not in lead]


def holds_back(vllm_tests_left: int) -> bool:
    """Whether the vLLM unit's worker waits for more of it to end before its next unit.
    xdist hands a worker its next unit when two of its tests are left, and behind the
    vLLM unit's last two (real vLLM on the cluster, minutes each) that unit would wait
    while the other workers run dry. But a worker runs a test only once it holds the
    next one or is told to stop (xdist's remote loop), so with one left it must be given
    more: held back at one, its last test waited for the end of the whole run (about
    500 s in the runs of 4 December)."""
    return vllm_tests_left > 1


class OneClusterScheduling(LoadGroupScheduling):
    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith((*cluster_share.VLLM_TESTS, *REAL_ENGINE_E2E)):
            return VLLM_UNIT
        # A file, not loadgroup's single test: its module fixtures are set up once.
        return nodeid.split("::", 1)[0]

    def _reschedule(self, node: WorkerController) -> None:
        left = list(self.assigned_work[node].get(VLLM_UNIT, {}).values()).count(False)
        if holds_back(left):
            return
        super()._reschedule(node)

    def _assign_work_unit(self, node: WorkerController) -> None:
        # xdist queues the largest units first; instead work_order.
        assert self.collection is not None
        first: dict[str, int] = {}
        for nodeid in self.collection:
            first.setdefault(self._split_scope(nodeid), len(first))
        for scope in work_order(list(self.workqueue), first):
            self.workqueue.move_to_end(scope)
        super()._assign_work_unit(node)
