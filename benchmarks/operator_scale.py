"""Operator scale on the local control plane: N SpeculativeModels applied at once.

    .venv/bin/python benchmarks/operator_scale.py [--counts 100,500,1000] [--repeats 3]
        [--json build/bench/operator_scale.json] [--standby | --paired-standby]
        [--memory-trace FILE] [--apiserver-profile DIR]

Needs the local control plane (`make cluster-up`). For each N and repeat, in fresh
namespaces (`bench-scale-*`, deleted afterwards):

- baseline: the N models are applied with no operator watching, their children are
  rendered with `specfleet.operator.render.children` (with the models' real UIDs in the
  owner references) and `kubectl apply --server-side -f children.yaml` applies their
  children (4 a model); the figure is kubectl's wall time.
- operator: `specfleet operator --namespace NS` (its default 5 s period) is running;
  `kubectl apply --server-side -f models.yaml` applies the N models; the figure is the
  time from the start of that apply until every model has its three children and a
  status with `observedGeneration` equal to its generation, as seen by a watch. Also the
  operator's CPU seconds over that time and its peak RSS (VmHWM) once every pod is
  Running and the fleet has settled. Per model, the watch gives apply -> children
  created and apply -> status written (p50, p99). With `--standby`, two replicas run
  behind a Lease (the first leads); the standby's peak RSS and CPU seconds are measured too.
  With `--paired-standby`, each repeat runs the operator twice after the baseline, alone
  and with a standby, in alternating order (alone first in even repeats), and prints
  each repeat's ratio of the leader's time with a standby to its time alone: the
  standby's cost measured side by side, on the same control plane minutes apart.
- both: what the machine's cores did while the figure ran (`machine_cpu`): the share of
  them busy, and the CPU seconds of each control-plane component, the operator, the
  node agent, kubectl and the benchmark's own watches: where the time went. With
  `--apiserver-profile DIR` (a control plane started with SPECFLEET_APISERVER_PROFILING=1),
  also where the API server's CPU went by kind of work (`apiserver_profile`), from
  5-second CPU profiles taken back to back and kept in DIR: those wholly inside the
  phase.

An extra ServiceCIDR `specfleet-bench` (10.100.0.0/16) gives the 1,000 Services their
ClusterIPs (the test cluster's own range is a /24); it is deleted at the end.
Pods run nowhere: a second node agent (`e2e.node_agent --no-process`) registers 4
nodes `bench-node-*` (1,000 GPUs, 1,100 pods, room for their requests each) that are tainted
`specfleet.io/bench=true:NoSchedule` before they turn Ready, and marks the pods bound to
them Running and Ready. The models (1 replica, 1 GPU) carry the toleration and a
nodeSelector for those nodes, so the real agent's nodes never get them. The agent and
its Node objects are removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.apiserver_profile import Profiler, summarize  # noqa: E402
from e2e import cluster  # noqa: E402
from e2e.models import sim_model  # noqa: E402
from e2e.operator_process import LEASE, OperatorProcess  # noqa: E402
from specfleet.operator import render  # noqa: E402
from specfleet.operator.api import GROUP, PLURAL, VERSION, SpeculativeModel  # noqa: E402
from specfleet.operator.tuner import sync_with_spec  # noqa: E402

BENCH_NODES = 4
NODE_PREFIX = "bench-node"
TAINT_KEY = "specfleet.io/bench"
NODE_LABEL = "specfleet.io/bench-node"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVICE_CIDR: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "ServiceCIDR",
    "metadata": {"name": "specfleet-bench"},
    "spec": {"cidrs": ["10.100.0.0/16"]},
}


def log(message: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    result = cluster.kubectl(*args, input=input, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {result.stderr.strip()[-2000:]}")
    return result.stdout


# --------------------------------------------------------------------------- bench nodes


@contextlib.contextmanager
def bench_nodes(state_dir: Path) -> Iterator[int]:
    """A no-process node agent with tainted nodes of its own; removed on exit."""
    nodes = [f"{NODE_PREFIX}-{i}" for i in range(BENCH_NODES)]
    # The test cluster's service range is a /24; 1,000 models need 1,000 ClusterIPs.
    # An extra ServiceCIDR (networking.k8s.io/v1) widens it without a restart; a /16,
    # since a run's namespaces are deleted in the background and their Services still
    # hold addresses when the next run creates 2,000 (a /20 filled up in a second run).
    kubectl("apply", "--server-side", "-f", "-", input=json.dumps(SERVICE_CIDR))
    state_dir.mkdir(parents=True, exist_ok=True)
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "e2e.node_agent",
            f"--kubeconfig={cluster.kubeconfig_path()}",
            f"--state-dir={state_dir}",
            f"--nodes={BENCH_NODES}",
            f"--node-prefix={NODE_PREFIX}",
            "--gpus=1000",
            "--max-pods=1100",
            # Room for 1,100 inference pods a node at their default requests (2 CPUs,
            # 8Gi and 10Gi of ephemeral storage a GPU): at 64 CPUs most stayed Pending.
            "--cpus=2400",
            "--memory=10Ti",
            "--ephemeral-storage=12Ti",
            "--no-process",
            f"--label={NODE_LABEL}=true",
            f"--taint={TAINT_KEY}=true:NoSchedule",
        ],
        cwd=ROOT,
        stdout=(state_dir / "agent.log").open("ab"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            ready = kubectl(
                "get",
                "nodes",
                "-l",
                NODE_LABEL,
                "-o",
                "jsonpath={range .items[*]}{.status.conditions[?(@.type=='Ready')].status} {end}",
            ).split()
            if ready.count("True") == BENCH_NODES:
                break
            if time.monotonic() > deadline or agent.poll() is not None:
                raise RuntimeError(f"bench nodes not Ready; see {state_dir / 'agent.log'}")
            time.sleep(1)
        yield agent.pid
    finally:
        # Namespaces first, while the agent is there to finish their pods' deletion.
        for namespace in kubectl("get", "ns", "-o", "name", check=False).split():
            if namespace.startswith("namespace/bench-scale-"):
                delete_namespace(namespace.split("/", 1)[1])
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
        kubectl("delete", "node", *nodes, "--ignore-not-found", "--wait=false", check=False)
        kubectl(
            "delete", "servicecidr", SERVICE_CIDR["metadata"]["name"], "--wait=false", check=False
        )


def bench_model(name: str) -> dict[str, Any]:
    """The P-EAGLE example on the sim, one replica, pinned to the bench nodes."""
    return sim_model(
        name,
        replicas=1,
        runtime={
            "nodeSelector": {NODE_LABEL: "true"},
            "tolerations": [
                {"key": TAINT_KEY, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
            ],
        },
    )


def rendered_children(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A model's children as the operator renders them for its first status."""
    model = SpeculativeModel.model_validate(body)
    synced = sync_with_spec(model.spec, model.status, datetime.now(UTC)).status
    return render.manifests(model.model_copy(update={"status": synced}))


def models_yaml(namespace: str, count: int) -> str:
    documents = []
    for i in range(count):
        manifest = bench_model(f"m{i:04d}")
        manifest["metadata"]["namespace"] = namespace
        documents.append(manifest)
    return yaml.safe_dump_all(documents, sort_keys=False)


# -------------------------------------------------------------------------------- watch


@dataclass
class Seen:
    """When the watch first saw each thing, by model name (time.time())."""

    applied: dict[str, float] = field(default_factory=dict)
    status: dict[str, float] = field(default_factory=dict)
    children: dict[str, dict[str, float]] = field(default_factory=dict)
    running_pods: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def child(self, model: str, kind: str) -> None:
        with self.lock:
            self.children.setdefault(model, {}).setdefault(kind, time.time())

    def done(self, model: str) -> float | None:
        """When the model had all three children and its status, if it has."""
        children = self.children.get(model, {})
        if len(children) < 3 or model not in self.status:
            return None
        return max(*children.values(), self.status[model])


class Watcher:
    """Raw watches (JSON lines, no model classes: cheap) on one namespace."""

    def __init__(self, namespace: str) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=str(cluster.kubeconfig_path()))
        self.client = client
        self.namespace = namespace
        self.seen = Seen()
        self.stop = threading.Event()
        core, apps = client.CoreV1Api(self.api), client.AppsV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        watches = [
            (
                partial(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL),
                self._model,
            ),
            (partial(apps.list_namespaced_deployment, namespace), self._deployment),
            (partial(core.list_namespaced_service, namespace), self._service),
            (partial(core.list_namespaced_pod, namespace), self._pod),
        ]
        self.threads = [
            threading.Thread(target=self._watch, args=watch, daemon=True) for watch in watches
        ]
        for thread in self.threads:
            thread.start()
        time.sleep(1.0)  # the watches are open before anything is applied

    def _watch(self, list_call: Any, handler: Any) -> None:
        from kubernetes.watch.watch import iter_resp_lines

        version = ""
        while not self.stop.is_set():
            try:
                response = list_call(
                    watch=True,
                    timeout_seconds=30,
                    resource_version=version or None,
                    _preload_content=False,
                    _request_timeout=40,
                )
                for line in iter_resp_lines(response):
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    obj = event["object"]
                    version = obj["metadata"].get("resourceVersion", version)
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handler(obj)
            except Exception as error:  # a dropped watch: reopen where we were
                if not self.stop.is_set():
                    log(f"watch {handler.__name__}: {error}; reopening")
                    time.sleep(1)

    def _model(self, obj: dict[str, Any]) -> None:
        meta, now = obj["metadata"], time.time()
        with self.seen.lock:
            self.seen.applied.setdefault(meta["name"], now)
            observed = (obj.get("status") or {}).get("observedGeneration")
            if observed is not None and observed == meta.get("generation"):
                self.seen.status.setdefault(meta["name"], now)

    def _deployment(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        model = obj["metadata"].get("labels", {}).get(render.MODEL_LABEL, name)
        self.seen.child(model, "canary" if name.endswith("-canary") else "stable")

    def _service(self, obj: dict[str, Any]) -> None:
        labels = obj["metadata"].get("labels", {})
        if render.MODEL_LABEL in labels:
            self.seen.child(labels[render.MODEL_LABEL], "service")

    def _pod(self, obj: dict[str, Any]) -> None:
        if (obj.get("status") or {}).get("phase") == "Running":
            with self.seen.lock:
                self.seen.running_pods.add(obj["metadata"]["name"])

    def close(self) -> None:
        self.stop.set()


# --------------------------------------------------------------------------------- runs


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass(frozen=True)
class MachineCpu:
    """CPU seconds used so far: the whole machine's (/proc/stat, all cores) and, by
    name, the control plane's components (their pid files), the benchmark's own process
    (its watches), the children it has reaped (kubectl) and the processes named."""

    wall: float
    busy: float
    by_process: dict[str, float]


def machine_cpu(named: dict[str, int]) -> MachineCpu:
    first = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in first)
    busy = (user + nice + system + irq + softirq + steal) / CLOCK_TICKS
    by_process = {}
    # A component restarting rewrites its pid file: one reading left out, not the run.
    for pid_file in cluster.STATE.glob("*.pid"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            by_process[pid_file.stem] = cpu_seconds(int(pid_file.read_text()))
    for name, pid in named.items():
        with contextlib.suppress(OSError, ValueError, IndexError):
            by_process[name] = cpu_seconds(pid)
    own, reaped = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    by_process["benchmark (watches)"] = own.ru_utime + own.ru_stime
    by_process["kubectl (reaped)"] = reaped.ru_utime + reaped.ru_stime
    return MachineCpu(time.monotonic(), busy, by_process)


def cpu_between(before: MachineCpu, after: MachineCpu) -> dict[str, Any]:
    """What the machine's cores did between two readings: the share of them busy, and
    each process's CPU seconds."""
    wall = after.wall - before.wall
    return {
        "busy_share": (after.busy - before.busy) / (wall * (os.cpu_count() or 1)),
        "seconds": {
            name: round(after.by_process[name] - before.by_process[name], 2)
            for name in after.by_process
            if name in before.by_process
        },
    }


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def reconcile_errors(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("specfleet_reconcile_total{") and 'result="error"' in line
    )


WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY")


def api_writes() -> dict[str, float]:
    """The API server's write requests so far, by "resource[/subresource] VERB"."""
    counts: dict[str, float] = {}
    for line in kubectl("get", "--raw", "/metrics").splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(
            pair.split("=", 1) for pair in line[line.index("{") + 1 : line.index("}")].split(",")
        )
        verb = labels["verb"].strip('"')
        if verb not in WRITE_VERBS:
            continue
        resource = labels["resource"].strip('"')
        if labels.get("subresource", '""') != '""':
            resource += "/" + labels["subresource"].strip('"')
        key = f"{resource} {verb}"
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def writes_per_model(
    before: dict[str, float], after: dict[str, float], count: int
) -> dict[str, float]:
    """Writes per model over a run (the API server's counters: every client's writes)."""
    return {
        key: round((after[key] - before.get(key, 0.0)) / count, 2)
        for key in sorted(after)
        if after[key] - before.get(key, 0.0) >= count / 10
    }


def operator_requests(metrics: str) -> dict[str, float]:
    """The operator's own requests so far (its `specfleet_api_requests_total`), by
    "resource VERB", every status code together."""
    counts: dict[str, float] = {}
    for line in metrics.splitlines():
        if not line.startswith("specfleet_api_requests_total{"):
            continue
        labels = dict(
            pair.split("=", 1) for pair in line[line.index("{") + 1 : line.index("}")].split(",")
        )
        key = f"{labels['resource'].strip(chr(34))} {labels['verb'].strip(chr(34))}"
        counts[key] = counts.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def requests_per_model(
    before: dict[str, float], after: dict[str, float], count: int
) -> dict[str, float]:
    """The operator's requests per model over a run, every kind it sent."""
    return {
        key: round((after[key] - before.get(key, 0.0)) / count, 3)
        for key in sorted(after)
        if after[key] > before.get(key, 0.0)
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def create_namespace(name: str) -> None:
    kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=true", "--timeout=300s")
    kubectl("create", "namespace", name)


def delete_namespace(name: str) -> float:
    started = time.monotonic()
    kubectl("delete", "namespace", name, "--wait=true", "--timeout=600s", check=False)
    return time.monotonic() - started


def wait_until(what: str, probe: Any, timeout: float, interval: float = 0.25) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return time.time()
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def run_baseline(
    count: int, tag: str, timeout: float, agent: int, profiler: Profiler | None
) -> dict[str, Any]:
    namespace = f"bench-scale-base-{count}-{tag}"
    create_namespace(namespace)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            models = Path(tmp) / "models.yaml"
            models.write_text(models_yaml(namespace, count))
            started = time.monotonic()
            kubectl("apply", "--server-side", "-f", str(models), "--request-timeout=60s")
            models_seconds = time.monotonic() - started
            log(f"N={count} baseline: models applied alone in {models_seconds:.1f} s")
            listed = json.loads(kubectl("get", "specmodel", "-n", namespace, "-o", "json"))
            children = []
            for body in listed["items"]:
                children += rendered_children(body)
            path = Path(tmp) / "children.yaml"
            path.write_text(yaml.safe_dump_all(children, sort_keys=False))
            watcher = Watcher(namespace)
            try:
                cpu_before = machine_cpu({"bench node agent": agent})
                began, started = time.time(), time.monotonic()
                kubectl(
                    "apply",
                    "--server-side",
                    "--field-manager=specfleet-operator",
                    "-f",
                    str(path),
                    "--request-timeout=60s",
                )
                seconds = time.monotonic() - started
                window = (began, time.time())
                machine = cpu_between(cpu_before, machine_cpu({"bench node agent": agent}))
                log(f"N={count} baseline: children applied in {seconds:.1f} s; pods next")
                # Let the cascade (ReplicaSets, pods, scheduling) finish before the next run.
                wait_until(
                    "every baseline pod Running",
                    lambda: len(watcher.seen.running_pods) >= count,
                    timeout,
                    interval=1,
                )
            finally:
                watcher.close()
        return {
            "count": count,
            "objects": len(children),
            "seconds": seconds,
            "models_seconds": models_seconds,  # the same models, applied with no operator
            "machine_cpu": machine,  # while kubectl applied the children
            **_profiled(profiler, window),
        }
    finally:
        delete_namespace(namespace)


def _profiled(profiler: Profiler | None, window: tuple[float, float]) -> dict[str, Any]:
    """The API server's profiles wholly inside `window` (epoch seconds), summed."""
    if profiler is None:
        return {}
    return {"apiserver_profile": summarize(profiler.window(*window))}


def run_operator(
    count: int,
    tag: str,
    timeout: float,
    logs: Path,
    standby: bool,
    agent: int,
    profiler: Profiler | None,
) -> dict[str, Any]:
    namespace = f"bench-scale-op-{count}-{tag}"
    create_namespace(namespace)
    log_file = logs / f"operator-{count}-{tag}.log"
    if standby:
        # Two replicas behind a Lease, as the chart runs them: the first leads.
        operator = OperatorProcess([namespace], log_file, 5.0, (namespace, LEASE), "leader")
        second = OperatorProcess(
            [namespace], logs / f"standby-{count}-{tag}.log", 5.0, (namespace, LEASE), "standby"
        )
    else:
        operator, second = OperatorProcess([namespace], log_file, period=5.0), None
    try:
        operator.start()
        assert operator.process is not None
        pid = operator.process.pid
        if second is not None:
            wait_until("the first replica to lead", operator.leading, 30)
            second.start()
            assert second.process is not None
            standby_cpu_before = cpu_seconds(second.process.pid)
        time.sleep(2)  # kopf's initial listing is done
        watcher = Watcher(namespace)
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as models:
                models.write(models_yaml(namespace, count))
                models.flush()
                cpu_before = cpu_seconds(pid)
                rss_before = rss_mb(pid)
                writes_before = api_writes()
                requests_before = operator_requests(operator.metrics())
                named = {"operator": pid, "bench node agent": agent}
                if second is not None and second.process is not None:
                    named["standby"] = second.process.pid
                machine_before = machine_cpu(named)
                t0 = time.time()
                kubectl("apply", "--server-side", "-f", models.name, "--request-timeout=60s")
                applied = time.time() - t0
            seen = watcher.seen
            names = [f"m{i:04d}" for i in range(count)]

            def all_done() -> bool:
                with seen.lock:
                    return all(seen.done(n) is not None for n in names)

            log(f"N={count} operator: models applied in {applied:.1f} s; reconciles next")
            wait_until("every model reconciled", all_done, timeout)
            machine = cpu_between(machine_before, machine_cpu(named))
            done = max(seen.done(n) or 0.0 for n in names)
            log(f"N={count} operator: every model reconciled; pods Running next")
            cpu = cpu_seconds(pid) - cpu_before
            writes_done = api_writes()
            requests_done = operator_requests(operator.metrics())
            # Peak memory is taken once the fleet has settled: pods Running, statuses
            # updated from their events.
            wait_until(
                "every pod Running",
                lambda: len(seen.running_pods) >= count,
                timeout,
                interval=1,
            )
            time.sleep(10)
            rss = peak_rss_mb(pid)
            rss_settled = rss_mb(pid)
            requests_settled = operator_requests(operator.metrics())
            cpu_settled = cpu_seconds(pid) - cpu_before
            standby_figures = {}
            if second is not None and second.process is not None:
                assert not second.leading()
                standby_figures = {
                    "standby_peak_rss_mb": peak_rss_mb(second.process.pid),
                    "standby_cpu_seconds_settled": cpu_seconds(second.process.pid)
                    - standby_cpu_before,
                }
            writes_settled = api_writes()
            children = [max(seen.children[n].values()) - seen.applied[n] for n in names]
            status = [seen.status[n] - seen.applied[n] for n in names]
        finally:
            watcher.close()
        return {
            "count": count,
            "seconds": done - t0,
            "apply_models_seconds": applied,
            # From the models' apply until every model was done: the cores' use by process.
            "machine_cpu": machine,
            "cpu_seconds": cpu,
            "cpu_seconds_settled": cpu_settled,
            "peak_rss_mb": rss,
            # The operator's resident memory before the models came and once settled,
            # and the growth per model: what each model costs it, cache included.
            "rss_before_mb": rss_before,
            "rss_settled_mb": rss_settled,
            "rss_per_model_kb": (rss_settled - rss_before) * 1024 / count,
            "children_latency": {
                "p50": percentile(children, 0.5),
                "p99": percentile(children, 0.99),
                "max": max(children),
            },
            "status_latency": {
                "p50": percentile(status, 0.5),
                "p99": percentile(status, 0.99),
                "max": max(status),
            },
            "reconcile_errors": reconcile_errors(operator.metrics()),
            **_profiled(profiler, (t0, done)),
            # Until every model was done, and until the fleet settled (pods Running).
            "writes_per_model": writes_per_model(writes_before, writes_done, count),
            "writes_per_model_settled": writes_per_model(writes_before, writes_settled, count),
            # The operator's own requests (its metrics), until done and until settled.
            "requests_per_model": requests_per_model(requests_before, requests_done, count),
            "requests_per_model_settled": requests_per_model(
                requests_before, requests_settled, count
            ),
            **standby_figures,
        }
    finally:
        operator.stop()
        if second is not None:
            second.stop()
        delete_namespace(namespace)


def measured_code(benchmark: Path = Path(__file__)) -> dict[str, Any]:
    """The commit measured on, and whether the operator's code or the `benchmark` that
    measured it differed from it (a figure measured on uncommitted code names no commit
    it can be checked against)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "operator/src", str(benchmark.resolve())],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"commit": commit, "uncommitted_changes": bool(changed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="100,500,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=600.0, help="per run and phase")
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/operator_scale.json")
    parser.add_argument("--append", action="store_true", help="keep the runs already in --json")
    parser.add_argument("--attempts", type=int, default=2, help="per run (shared API server)")
    with_standby = parser.add_mutually_exclusive_group()
    with_standby.add_argument(
        "--standby", action="store_true", help="run a second replica behind a Lease"
    )
    with_standby.add_argument(
        "--paired-standby",
        action="store_true",
        help="run the operator alone and with a standby in each repeat, and compare",
    )
    parser.add_argument(
        "--memory-trace",
        type=Path,
        help="append the operator's memory every 10 s to this file, a JSON line each "
        "(benchmarks/memory_trace/sitecustomize.py)",
    )
    parser.add_argument(
        "--apiserver-profile",
        type=Path,
        help="profile the API server's CPU back to back into this directory and sum each "
        "phase's profiles by kind of work (benchmarks/apiserver_profile.py)",
    )
    args = parser.parse_args()
    if args.memory_trace is not None:
        # The operator processes inherit the environment (e2e/operator_process.py).
        trace = ROOT / "benchmarks" / "memory_trace"
        path = [str(trace), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        os.environ["SPECFLEET_MEMORY_TRACE"] = str(args.memory_trace.resolve())
    # `timeout` and Ctrl-C still clean up: namespaces, the operator, the agent, its nodes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logs = args.json.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"runs": []}
    if args.append and args.json.exists():
        results["runs"] = json.loads(args.json.read_text())["runs"]
    code = measured_code()
    cluster.install_crds()
    profiler = None
    if args.apiserver_profile is not None:
        profiler = Profiler(args.apiserver_profile, cluster.kubectl_command()).start()
    with contextlib.ExitStack() as stack:
        if profiler is not None:
            stack.callback(profiler.stop)
        agent = stack.enter_context(
            bench_nodes(Path(tempfile.gettempdir()) / "specfleet-bench-agent")
        )
        for count in (int(c) for c in args.counts.split(",")):
            for repeat in range(args.repeats):
                for attempt in range(args.attempts):
                    tag = f"{repeat}-{int(time.time()) % 100000}"
                    try:
                        base = run_baseline(count, tag, args.timeout, agent, profiler)
                        paired = {}
                        for standby in _standby_order(args, repeat):
                            paired[standby] = run_operator(
                                count,
                                f"{tag}-{int(standby)}",
                                args.timeout,
                                logs,
                                standby,
                                agent,
                                profiler,
                            )
                        op = paired[args.standby]
                        break
                    except (RuntimeError, TimeoutError) as error:
                        # Other engineers' tests share this API server (and restart it).
                        log(f"N={count} #{repeat} attempt {attempt}: {error}")
                else:
                    raise RuntimeError(f"N={count} #{repeat}: every attempt failed")
                log(
                    f"N={count} #{repeat}: baseline {base['seconds']:.1f} s "
                    f"(models alone {base['models_seconds']:.1f} s)"
                )
                log(
                    f"N={count} #{repeat}: operator {op['seconds']:.1f} s "
                    f"(models applied in {op['apply_models_seconds']:.1f} s), "
                    f"cpu {op['cpu_seconds']:.1f} s, peak RSS {op['peak_rss_mb']:.0f} MB, "
                    f"children p50/p99 {op['children_latency']['p50']:.2f}/"
                    f"{op['children_latency']['p99']:.2f} s"
                    + (
                        f"; standby peak RSS {op['standby_peak_rss_mb']:.0f} MB, cpu "
                        f"{op['standby_cpu_seconds_settled']:.1f} s"
                        if "standby_peak_rss_mb" in op
                        else ""
                    )
                )
                for name, figures in (("baseline", base), ("operator", op)):
                    machine = figures["machine_cpu"]
                    log(
                        f"N={count} #{repeat}: {name}: cores {100 * machine['busy_share']:.0f}% "
                        "busy; CPU s: "
                        + ", ".join(f"{k} {v:.1f}" for k, v in machine["seconds"].items())
                    )
                log(
                    f"N={count} #{repeat}: operator requests per model until done: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in op["requests_per_model"].items())
                    + "; until settled: "
                    + ", ".join(f"{k} {v:.2f}" for k, v in op["requests_per_model_settled"].items())
                    + f"; RSS per model {op['rss_per_model_kb']:.0f} KB"
                )
                run = {"count": count, **code, "baseline": base, "operator": op}
                if args.paired_standby:
                    run["operator_with_standby"] = paired[True]
                    log(
                        f"N={count} #{repeat}: with a standby the leader took "
                        f"{paired[True]['seconds']:.1f} s against {op['seconds']:.1f} s alone: "
                        f"{paired[True]['seconds'] / op['seconds']:.3f}x"
                    )
                results["runs"].append(run)
                args.json.write_text(json.dumps(results, indent=2))
    summary = []
    for count in sorted({r["count"] for r in results["runs"]}):
        runs = [r for r in results["runs"] if r["count"] == count]
        base = statistics.median(r["baseline"]["seconds"] for r in runs)
        op = statistics.median(r["operator"]["seconds"] for r in runs)
        summary.append(
            {
                "count": count,
                "repeats": len(runs),
                "baseline_seconds": base,
                "operator_seconds": op,
                "ratio": statistics.median(
                    r["operator"]["seconds"] / r["baseline"]["seconds"] for r in runs
                ),
                **{
                    key: statistics.median(r["operator"][key] for r in runs)
                    for key in ("cpu_seconds", "peak_rss_mb", "apply_models_seconds")
                },
                "models_alone_seconds": statistics.median(
                    r["baseline"]["models_seconds"] for r in runs
                ),
                "children_p50": statistics.median(
                    r["operator"]["children_latency"]["p50"] for r in runs
                ),
                "children_p99": statistics.median(
                    r["operator"]["children_latency"]["p99"] for r in runs
                ),
                "status_p50": statistics.median(
                    r["operator"]["status_latency"]["p50"] for r in runs
                ),
                "status_p99": statistics.median(
                    r["operator"]["status_latency"]["p99"] for r in runs
                ),
            }
        )
    results["summary"] = summary
    if args.paired_standby:
        results["standby_ratios"] = standby_ratios(results["runs"])
    args.json.write_text(json.dumps(results, indent=2))
    print(json.dumps(summary, indent=2))
    if args.paired_standby:
        print(json.dumps(results["standby_ratios"], indent=2))


def _standby_order(args: argparse.Namespace, repeat: int) -> list[bool]:
    """Whether each operator run of a repeat has a standby: paired, alone first in even
    repeats and second in odd ones, so that a drift of the control plane over the runs
    falls on both sides alike."""
    if not args.paired_standby:
        return [args.standby]
    return [False, True] if repeat % 2 == 0 else [True, False]


def standby_ratios(runs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per count: each paired repeat's leader time with a standby over its time alone,
    their median and spread."""
    ratios: dict[int, list[float]] = {}
    for run in runs:
        if "operator_with_standby" in run:
            ratio = run["operator_with_standby"]["seconds"] / run["operator"]["seconds"]
            ratios.setdefault(run["count"], []).append(ratio)
    return {
        count: {
            "each": [round(r, 3) for r in each],
            "median": round(statistics.median(each), 3),
            "min": round(min(each), 3),
            "max": round(max(each), 3),
        }
        for count, each in ratios.items()
    }


if __name__ == "__main__":
    main()
