"""Only a model's own pods count (issue 42, item 5): a pod with the model's labels and
config-hash annotation, which `specfleet render` prints for anyone to copy, is not
scraped as the model's unless its owner chain (ReplicaSet, then Deployment) leads to the
model. The real Fleet and Evaluator on the fake cluster; the pods real local servers."""

from __future__ import annotations

import asyncio
import copy
import socket
from typing import Any

from aiohttp import web

from specfleet.operator import render
from specfleet.operator.evaluation import Evaluator
from specfleet.operator.fleet import Fleet
from tests.fake_cluster import FakeCluster
from tests.hostile_servers import serving
from tests.test_metrics import page

MODEL = "llama-8b"
KEY = ("team", MODEL)


def _meta(uid: str, owner: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    refs = [] if owner is None else [{"kind": owner[0], "uid": owner[1], "controller": True}]
    return {"metadata": {"uid": uid, "ownerReferences": refs, **extra}}


def test_a_pod_counts_only_through_its_replica_set_and_deployment() -> None:
    from specfleet.operator.children import owned_pods

    deployments = [
        _meta("d-stable", ("SpeculativeModel", "m")),
        _meta("d-stranger", ("SpeculativeModel", "another-model")),  # a stranger's `m`
        None,  # no canary
    ]
    replica_sets = [
        _meta("rs", ("Deployment", "d-stable")),
        _meta("rs-stranger", ("Deployment", "d-stranger")),
        _meta("rs-orphan"),
    ]
    pods = {
        "ours": _meta("p1", ("ReplicaSet", "rs")),
        "no-owner": _meta("p2"),
        "another-deployment": _meta("p3", ("ReplicaSet", "rs-stranger")),
        "orphaned-replica-set": _meta("p4", ("ReplicaSet", "rs-orphan")),
        "unknown-replica-set": _meta("p5", ("ReplicaSet", "made-up")),
        "owned-by-the-deployment": _meta("p6", ("Deployment", "d-stable")),
        "a-job": _meta("p7", ("Job", "rs")),
    }
    kept = owned_pods("m", deployments, replica_sets, pods.values())
    assert [pod["metadata"]["uid"] for pod in kept] == ["p1"]
    # A model read without a uid owns nothing.
    assert owned_pods(None, deployments, replica_sets, pods.values()) == []


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_stray_pod_with_the_models_labels_is_not_scraped_nor_counted(
    peagle_manifest: dict[str, Any],
) -> None:
    """A tenant's pod with the labels and the config hash of the stable pods, serving
    100x counters: before, it was scraped as the model's and took a window from 75% to
    0.8%. Now only the pod the ReplicaSet created is asked for its page."""
    port = _free_port()
    manifest = copy.deepcopy(peagle_manifest)
    manifest["spec"]["runtime"]["port"] = port
    cluster = FakeCluster()
    fleet = Fleet(cluster, Evaluator())  # type: ignore[arg-type]
    cluster.create_model(manifest)
    asked: dict[str, int] = {"ours": 0, "stray": 0}

    def pod_server(who: str, drafts: float) -> web.Application:
        async def metrics(_: web.Request) -> web.Response:
            asked[who] += 1
            return web.Response(text=page(drafts, [drafts * 0.75] * 3, generation=drafts))

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    async def main() -> bool:
        async with (
            serving(pod_server("ours", 100), "127.0.0.2", port),
            serving(pod_server("stray", 10_000), "127.0.0.3", port),
        ):
            cluster.deliver(fleet)
            await fleet.reconcile(KEY)  # the Deployments
            (ours,) = cluster.run_pods(MODEL, ["127.0.0.2"])
            template = cluster.objects[("Deployment", "team", MODEL)]["spec"]["template"]
            cluster.create(
                {
                    "kind": "Pod",
                    "metadata": {
                        "name": "stray",
                        "namespace": "team",
                        "uid": "uid-stray",
                        "labels": template["metadata"]["labels"],
                        "annotations": template["metadata"]["annotations"],
                    },
                    "status": {
                        "podIP": "127.0.0.3",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
            assert render.CONFIG_HASH_ANNOTATION in template["metadata"]["annotations"]
            cluster.deliver(fleet)
            observed = [p["metadata"]["name"] for p in fleet.cache.observed(KEY).pods]
            for _ in range(2):
                fleet.cache.models[KEY].next_evaluation = None  # an evaluation is due
                await fleet.reconcile(KEY)
                cluster.deliver(fleet)
            return [ours] == observed

    assert asyncio.run(main())  # the stray pod is not in what status summarizes either
    assert asked == {"ours": 2, "stray": 0}
