"""What each model costs the operator, in-process: requests by verb (the same in every
run), reconciles, CPU and heap per model, with no shared API server in the figures.

    .venv/bin/python benchmarks/fleet_costs.py [--models 300] [--json build/bench/fleet_costs.json]

The real `Fleet`, `WorkQueue` and `Evaluator` (the production settings: 5 s period,
status written at most every 2 s for progress) run on the fake API server of the fleet's
tests (`tests/fake_cluster.py`), which plays the controllers too: 0.5 s after the fleet
has taken all that the last step brought, each Deployment takes one more of the status
writes its controllers make (its ReplicaSet, the pods Pending -> scheduled -> Running ->
Ready, the ReplicaSet's and the Deployment's counts and conditions, the disruption
budget's status). Watch events are handed to the
fleet as kopf would hand them (one call each). N models are created at once:

- requests per model by verb and resource (as `specfleet_api_requests_total` names them)
  until every model is done (its four children and a status of its generation), until
  the fleet settled (every pod Ready, status following, nothing sent for 3 s), and over
  a quiet spell of two periods after that (nothing changed: nothing should be sent);
- watch events per model by kind (each costs the operator a kopf event in production)
  and the reconciles they led to (full ones: validate, render, summarize);
- CPU per model: the process's CPU over the run less the fake API server's (its requests,
  its controllers and the copies that stand in for the watches' JSON), and that against
  a baseline measured in the same run: one validation and one render of the model's
  children (and their JSON, as an apply sends it) per model, the least a controller
  must do. A ratio, so a slower machine moves both;
- heap per model (a second run, under tracemalloc): the traced growth, split by walking
  the operator's structures (each object counted once, at its first owner): the cache's
  models, each child kind, pod starts, the fleet's records (what it keeps per model
  beside the body), the evaluator's windows, the operator's metric series; the fake API
  server's own objects are taken out, and "the rest" is what none of these hold.

Not modelled: kopf's own per-event work and JSON decoding, the Kubernetes client, TLS.
Those are the production run's (`operator_scale.py`), which this complements.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import inspect
import json
import sys
import threading
import time
import tracemalloc
import types
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specfleet.operator import observability, render  # noqa: E402
from specfleet.operator.api import SpeculativeModel  # noqa: E402
from specfleet.operator.children import child_kind  # noqa: E402
from specfleet.operator.evaluation import Evaluator  # noqa: E402
from specfleet.operator.fleet import STATUS_INTERVAL_SECONDS, Fleet  # noqa: E402
from specfleet.operator.tuner import sync_with_spec  # noqa: E402
from tests.fake_cluster import FakeCluster  # noqa: E402

NAMESPACE = "team"  # the fake's controllers work in this one
PERIOD = 5.0  # the operator's default
ROUND_SECONDS = 0.5  # between two steps of the fake's controllers
QUIET_SECONDS = 3.0  # nothing sent this long: settled
CHILDREN = 4  # two Deployments, a Service, a PodDisruptionBudget
# The fake's API calls the fleet makes, and the (verb, resource) each is counted as.
SERVED = ("apply", "replace_status", "get_child", "list_models", "list_children", "post_event")


def bench_manifest(name: str) -> dict[str, Any]:
    """The P-EAGLE example on the sim, 1 replica, 1 GPU, as operator_scale.py applies."""
    manifest: dict[str, Any] = yaml.safe_load((ROOT / "examples/llama-peagle.yaml").read_text())
    manifest["metadata"] = {"name": name}
    manifest["spec"]["replicas"] = 1
    manifest["spec"]["runtime"] = {"gpus": 1, "env": [{"name": "SPECFLEET_ENGINE", "value": "sim"}]}
    return manifest


def request_name(method: str, args: tuple[Any, ...]) -> str:
    """`resource VERB`, as the operator's specfleet_api_requests_total names a request."""
    if method == "apply":
        return f"{child_kind(args[0]['kind']).plural} APPLY"
    if method == "replace_status":
        return "speculativemodels/status PUT"
    if method == "get_child":
        plural = (
            "speculativemodels" if args[0] == "SpeculativeModel" else child_kind(args[0]).plural
        )
        return f"{plural} GET"
    if method == "list_models":
        return "speculativemodels LIST"
    if method == "list_children":
        return f"{child_kind(args[0]).plural} LIST"
    return "events POST"


class MeteredCluster(FakeCluster):
    """The fake API server, one request at a time (the fleet calls it from worker
    threads), counting each request and the CPU it spends on its own side."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.counts: Counter[str] = Counter()
        self.watch_events: Counter[str] = Counter()
        self.cpu = 0.0  # seconds of the fake's own work, every thread
        self.last_request = time.monotonic()
        self.steps: dict[str, int] = {}  # Deployment -> its controllers' next step
        for method in SERVED:
            setattr(self, method, self._metered(method, getattr(self, method), count=True))
        for method in ("create_model", "done", "pods_ready"):  # the benchmark's, not the fleet's
            setattr(self, method, self._metered(method, getattr(self, method), count=False))

    def _metered(self, method: str, call: Callable[..., Any], count: bool) -> Callable[..., Any]:
        def metered(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                started = time.thread_time()
                try:
                    return call(*args, **kwargs)
                finally:
                    if count:
                        self.counts[request_name(method, args)] += 1
                        self.last_request = time.monotonic()
                    self.cpu += time.thread_time() - started

        return metered

    def deliver_all(self, fleet: Fleet) -> None:
        """Every queued watch event to the fleet, as kopf's handlers hand them; the copy
        (standing in for the watch's JSON) is the fake's CPU, the handler the fleet's."""
        with self.lock:
            started = time.thread_time()
            events, self.watch = self.watch, []
            copies = [(e.type, copy.deepcopy(e.body)) for e in events]
            self.cpu += time.thread_time() - started
        for type, body in copies:
            self.watch_events[body["kind"]] += 1
            if body["kind"] == "SpeculativeModel":
                fleet.remember_model(body, deleted=type == "DELETED")
            else:
                fleet.cache.remember_child(body, deleted=type == "DELETED")

    def control(self) -> None:
        """One step of the Deployment and ReplicaSet controllers, the scheduler, the
        kubelets and the disruption controller, for every Deployment."""
        with self.lock:
            started = time.thread_time()
            for (kind, _, name), body in list(self.objects.items()):
                if kind == "Deployment":
                    self._deployment_step(name, body)
            self.cpu += time.thread_time() - started

    def _deployment_step(self, name: str, body: dict[str, Any]) -> None:
        """Each Deployment goes through the writes its controllers make, one a round, in
        the order they make them; most status writes change nothing the operator reads
        (a ReplicaSet's counts, availableReplicas, the Progressing condition's
        lastUpdateTime, a disruption budget's status)."""
        step = self.steps.get(name, 0)
        self.steps[name] = step + 1
        replicas = int(body["spec"].get("replicas", 1))
        replica_set, pods = f"{name}-rs", [f"{name}-rs-{i}" for i in range(replicas)]
        now = _timestamp()

        def deployment(ready: int, progress: str, **more: int) -> None:
            available = ready >= replicas
            self.set_child_status(
                "Deployment",
                name,
                {
                    "observedGeneration": body["metadata"]["generation"],
                    **more,
                    **({"readyReplicas": ready, "availableReplicas": ready} if ready else {}),
                    "conditions": [
                        _condition("Available", available, now),
                        _condition("Progressing", True, now, progress),
                    ],
                },
            )

        def replica_set_status(ready: int) -> None:
            counts = {"replicas": replicas, "fullyLabeledReplicas": replicas}
            ready_counts = {"readyReplicas": ready, "availableReplicas": ready} if ready else {}
            self.set_child_status(
                "ReplicaSet", replica_set, {"observedGeneration": 1, **counts, **ready_counts}
            )

        counts = {"replicas": replicas, "updatedReplicas": replicas}
        if step == 0:
            self._start_replica_set(name, body)
        elif step == 1:
            deployment(0, "NewReplicaSetCreated")
        elif step == 2:
            for pod in pods:
                self._create_pod(pod, replica_set, body)
        elif step == 3:
            replica_set_status(0)
        elif step == 4:
            deployment(0, "ReplicaSetUpdated", unavailableReplicas=replicas, **counts)
        elif step in (5, 6, 7):
            for pod in pods:
                self.set_child_status("Pod", pod, _pod_status(step - 3, pod, now))
        elif step == 8 and replicas:
            replica_set_status(replicas)
        elif step == 9 and replicas:
            deployment(replicas, "ReplicaSetUpdated", **counts)
        elif step == 10 and replicas:
            deployment(replicas, "NewReplicaSetAvailable", **counts)
        elif step == 11 and ("PodDisruptionBudget", NAMESPACE, name) in self.objects:
            healthy = {"currentHealthy": replicas, "desiredHealthy": replicas - 1}
            self.set_child_status(
                "PodDisruptionBudget",
                name,
                {"observedGeneration": 1, "expectedPods": replicas, **healthy},
            )

    def _start_replica_set(self, name: str, deployment: dict[str, Any]) -> None:
        template = deployment["spec"]["template"]["metadata"]
        self.create(
            {
                "kind": "ReplicaSet",
                "metadata": {
                    "name": f"{name}-rs",
                    "namespace": NAMESPACE,
                    "uid": f"uid-rs-{name}",
                    "labels": template["labels"],
                    "ownerReferences": [
                        {
                            "kind": "Deployment",
                            "name": name,
                            "uid": deployment["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
            }
        )

    def _create_pod(self, pod: str, replica_set: str, deployment: dict[str, Any]) -> None:
        template = deployment["spec"]["template"]["metadata"]
        owner = {"kind": "ReplicaSet", "name": replica_set, "uid": f"uid-{replica_set}"}
        self.create(
            {
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "namespace": NAMESPACE,
                    "uid": f"uid-pod-{pod}",
                    "creationTimestamp": _timestamp(),
                    "labels": template["labels"],
                    "annotations": template.get("annotations", {}),
                    "ownerReferences": [{**owner, "controller": True}],
                },
                "status": {"phase": "Pending"},
            }
        )

    def done(self, names: list[str]) -> bool:
        """Every model has its children and a status of its generation."""
        for name in names:
            model = self.objects[("SpeculativeModel", NAMESPACE, name)]
            if (model.get("status") or {}).get("observedGeneration") != model["metadata"][
                "generation"
            ]:
                return False
            for kind, child in (
                ("Deployment", name),
                ("Deployment", f"{name}-canary"),
                ("Service", name),
                ("PodDisruptionBudget", name),
            ):
                if (kind, NAMESPACE, child) not in self.objects:
                    return False
        return True

    def pods_ready(self, names: list[str]) -> bool:
        """Every model's pod is Ready and its status says so."""
        for name in names:
            status = self.objects[("SpeculativeModel", NAMESPACE, name)].get("status") or {}
            ready = {c["type"]: c["status"] for c in status.get("conditions") or []}
            if ready.get("Ready") != "True":
                return False
        return True


def _timestamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type: str, status: bool, now: str, reason: str = "") -> dict[str, Any]:
    return {
        "type": type,
        "status": "True" if status else "False",
        "reason": reason
        or ("MinimumReplicasAvailable" if status else "MinimumReplicasUnavailable"),
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }


def _pod_status(step: int, pod: str, now: str) -> dict[str, Any]:
    """A pod scheduled (step 2), running but not Ready (3), Ready (4)."""
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
    if step == 2:
        return {"phase": "Pending", "conditions": [scheduled]}
    ready = step == 4
    # Loopback, where no sim listens: a scrape is refused at once.
    ip = f"127.1.{sum(map(ord, pod)) % 250}.{len(pod) % 250}"
    return {
        "phase": "Running",
        "podIP": ip,
        "conditions": [
            scheduled,
            {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": now},
            {"type": "Ready", "status": str(ready), "lastTransitionTime": now},
        ],
        "containerStatuses": [
            {
                "name": "vllm",
                "ready": ready,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": now}},
            }
        ],
    }


async def idle(fleet: Fleet, cluster: MeteredCluster) -> None:
    """Every watch event delivered and every reconcile it woke done."""
    queue = fleet.cache.queue
    while True:
        cluster.deliver_all(fleet)
        await asyncio.sleep(0.01)
        if not (cluster.watch or queue.dirty or queue.queued or queue.running):
            return


def reconciles() -> float:
    """Full reconciles so far (those a tick with unchanged inputs skips are not)."""
    return sum(
        REGISTRY.get_sample_value(
            "specfleet_reconcile_duration_seconds_count", {"handler": handler}
        )
        or 0.0
        for handler in ("reconcile", "evaluate")
    )


def per_model(counts: Counter[str], count: int) -> dict[str, float]:
    return {name: counts[name] / count for name in sorted(counts)}


async def run_fleet(count: int, heap: bool) -> dict[str, Any]:
    """N models created at once on the fake, run until settled and then quiet."""
    cluster = MeteredCluster()
    fleet = Fleet(cluster, Evaluator(), period=PERIOD, status_interval=STATUS_INTERVAL_SECONDS)  # type: ignore[arg-type]
    names = [f"m{i:04d}" for i in range(count)]
    manifests = [bench_manifest(name) for name in names]
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    await asyncio.sleep(0.1)  # its first listing
    gc.collect()
    heap_before = tracemalloc.get_traced_memory()[0] if heap else 0
    cpu_before, fake_before = time.process_time(), cluster.cpu
    reconciles_before = reconciles()
    started = time.monotonic()
    for manifest in manifests:
        cluster.create_model(manifest, namespace=NAMESPACE)
    phases: dict[str, Counter[str]] = {}
    events: dict[str, Counter[str]] = {}
    while True:
        # Each step of the controllers waits until the fleet has taken all the last one
        # brought: the same events meet the same reconciles in every run, however fast
        # the machine (a busy fleet would otherwise fold more events into one reconcile).
        await idle(fleet, cluster)
        now = time.monotonic()
        if "done" not in phases and cluster.done(names):
            phases["done"], events["done"] = Counter(cluster.counts), Counter(cluster.watch_events)
            done_seconds = now - started
        if (
            "done" in phases
            and cluster.pods_ready(names)
            and now - cluster.last_request > QUIET_SECONDS
        ):
            break
        if now - started > 600:
            raise TimeoutError("the fleet did not settle in 10 minutes")
        await asyncio.sleep(ROUND_SECONDS)
        cluster.control()
    phases["settled"], events["settled"] = Counter(cluster.counts), Counter(cluster.watch_events)
    reconciled = reconciles() - reconciles_before
    settled_seconds = time.monotonic() - started
    cpu = time.process_time() - cpu_before
    fake_cpu = cluster.cpu - fake_before
    heap_figures: dict[str, Any] = {}
    if heap:
        gc.collect()
        heap_figures = heap_split(fleet, cluster, heap_before, count)
    # Two periods with nothing new: the sweeps run, and should send nothing.
    quiet_from = Counter(cluster.counts)
    deadline = time.monotonic() + 2 * PERIOD + 0.5
    while time.monotonic() < deadline:
        cluster.deliver_all(fleet)
        cluster.control()
        await asyncio.sleep(ROUND_SECONDS)
    quiet = Counter(cluster.counts)
    quiet.subtract(quiet_from)
    stop.set()
    await running
    for name in names:  # the next run starts without this one's series
        observability.forget_model(NAMESPACE, name)
    return {
        "models": count,
        "done_seconds": done_seconds,
        "settled_seconds": settled_seconds,
        "requests_per_model_done": per_model(phases["done"], count),
        "requests_per_model_settled": per_model(phases["settled"], count),
        "requests_per_model_quiet": per_model(+quiet, count),
        "watch_events_per_model_done": per_model(events["done"], count),
        "watch_events_per_model_settled": per_model(events["settled"], count),
        "reconciles_per_model_settled": reconciled / count,
        "operator_cpu_ms_per_model": (cpu - fake_cpu) * 1000 / count,
        "fake_cpu_ms_per_model": fake_cpu * 1000 / count,
        **heap_figures,
    }


def baseline_cpu_ms(count: int) -> float:
    """One validation and one render (and its JSON) of each model's children: the least
    a controller does per model."""
    bodies = []
    for i in range(count):
        body = bench_manifest(f"m{i:04d}")
        body["metadata"].update(namespace=NAMESPACE, uid=f"uid-m{i:04d}", generation=1)
        bodies.append(body)
    started = time.process_time()
    for body in bodies:
        model = SpeculativeModel.model_validate(body)
        model = model.model_copy(
            update={"status": sync_with_spec(model.spec, model.status, datetime.now(UTC)).status}
        )
        json.dumps(render.manifests(model))
    return (time.process_time() - started) * 1000 / count


# ------------------------------------------------------------------------------- heap

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType,
           asyncio.AbstractEventLoop, threading.Thread)  # fmt: skip


def deep_size(root: Any, seen: set[int]) -> int:
    """Bytes of `root` and all it holds that `seen` does not hold already (then it does)."""
    total, stack = 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE) or inspect.iscoroutine(obj):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif not isinstance(obj, str | bytes | int | float | bool) and obj is not None:
            if hasattr(obj, "__dict__"):
                stack.append(vars(obj))
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def _metric_series() -> Iterator[Any]:
    for value in vars(observability).values():
        series = getattr(value, "_metrics", None)
        if isinstance(series, dict):
            yield series


def heap_split(fleet: Fleet, cluster: MeteredCluster, before: int, count: int) -> dict[str, Any]:
    """KB per model: the traced growth, and what of it each part of the operator holds."""
    grown = tracemalloc.get_traced_memory()[0] - before
    cache = fleet.cache
    by_kind: dict[str, list[Any]] = {}
    for children in cache.children.values():
        for (kind, _), body in children.items():
            by_kind.setdefault(kind, []).append(body)
    # Every root is built first and held until the end: an id in `seen` is never one
    # of a freed temporary's, reused.
    roots: list[tuple[str, Any]] = [
        ("cache: models (bodies)", [r.body for r in cache.models.values()]),
        *((f"cache: {kind}s", by_kind[kind]) for kind in sorted(by_kind)),
        ("cache: children's index", cache.children),
        ("cache: pod starts", cache.starts),
        ("fleet: records beside the body", cache.models),
        ("fleet: work queue, deletions", [cache.queue, cache.deleted]),
        ("evaluator: windows", getattr(fleet.evaluator, "trackers", {})),
        ("metrics: series", list(_metric_series())),
    ]
    seen: set[int] = set()
    parts = {name: deep_size(root, seen) for name, root in roots}
    fake = deep_size(vars(cluster), seen)
    operator = grown - fake
    parts["rest (untraced by the walk)"] = operator - sum(parts.values())
    return {
        "heap_kb_per_model": operator / 1024 / count,
        "heap_split_kb_per_model": {name: size / 1024 / count for name, size in parts.items()},
        "fake_api_server_kb_per_model": fake / 1024 / count,
    }


# ------------------------------------------------------------------------------ report


def table(result: dict[str, Any]) -> str:
    lines = ["| request | until done | until settled | quiet (2 periods) |", "|---|---|---|---|"]
    done, settled = result["requests_per_model_done"], result["requests_per_model_settled"]
    quiet = result["requests_per_model_quiet"]
    for name in sorted({*done, *settled, *quiet}):
        lines.append(
            f"| {name} | {done.get(name, 0):.2f} | {settled.get(name, 0):.2f} | "
            f"{quiet.get(name, 0):.2f} |"
        )
    lines.append(
        f"| **all** | {sum(done.values()):.2f} | {sum(settled.values()):.2f} | "
        f"{sum(quiet.values()):.2f} |"
    )
    events = result["watch_events_per_model_settled"]
    lines += [
        "",
        "watch events per model until settled: "
        + ", ".join(f"{kind} {n:.2f}" for kind, n in sorted(events.items()))
        + f" (all {sum(events.values()):.2f}); full reconciles per model "
        + f"{result['reconciles_per_model_settled']:.2f}",
        "",
        "| CPU per model | ms |",
        "|---|---|",
        f"| operator (process less the fake) | {result['operator_cpu_ms_per_model']:.2f} |",
        f"| baseline: one validate + render + JSON | {result['baseline_cpu_ms_per_model']:.2f} |",
        f"| **ratio** | **{result['cpu_ratio']:.1f}** |",
        f"| (the fake API server and controllers) | {result['fake_cpu_ms_per_model']:.2f} |",
    ]
    if "heap_kb_per_model" in result:
        lines += ["", "| heap per model | KB |", "|---|---|"]
        for name, size in result["heap_split_kb_per_model"].items():
            lines.append(f"| {name} | {size:.1f} |")
        lines.append(f"| **operator, all** | **{result['heap_kb_per_model']:.1f}** |")
        lines.append(
            f"| (the fake API server's objects) | {result['fake_api_server_kb_per_model']:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=300)
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/fleet_costs.json")
    parser.add_argument("--no-heap", action="store_true", help="skip the tracemalloc run")
    args = parser.parse_args()
    baseline = baseline_cpu_ms(args.models)
    result = asyncio.run(run_fleet(args.models, heap=False))
    result["baseline_cpu_ms_per_model"] = baseline
    result["cpu_ratio"] = result["operator_cpu_ms_per_model"] / baseline
    if not args.no_heap:
        tracemalloc.start()
        heap = asyncio.run(run_fleet(args.models, heap=True))
        tracemalloc.stop()
        result.update({k: v for k, v in heap.items() if k.startswith(("heap", "fake_api"))})
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"{args.models} models: done in {result['done_seconds']:.1f} s, settled in "
          f"{result['settled_seconds']:.1f} s (in-process, fake API server)")  # fmt: skip
    print(table(result))


if __name__ == "__main__":
    main()
