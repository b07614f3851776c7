"""Each pod in its own network namespace on the local cluster's bridge (e2e/podnet.py):
its address in status, loopback of its own, the API server reachable, no route out; the
controller manager fills its Service's EndpointSlices; its namespace and veth go with it,
and a node agent that was killed leaves nothing behind once it runs again."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from e2e import cluster, podnet
from e2e.waiting import wait_for

# Run inside a pod: what it sees of its network, as JSON in its termination message.
NETWORK_REPORT = f"""
import http.server, json, socket, ssl, threading, urllib.request
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=server.serve_forever, daemon=True).start()
with urllib.request.urlopen(f"http://127.0.0.1:{{server.server_address[1]}}/", timeout=5) as r:
    loopback = r.status
unverified = ssl._create_unverified_context()
with urllib.request.urlopen("{cluster.SERVER}/livez", timeout=5, context=unverified) as r:
    apiserver = r.status
report = {{
    "loopback": loopback,
    "apiserver": apiserver,
    "links": sorted(name for _, name in socket.if_nameindex()),
}}
open("/dev/termination-log", "w").write(json.dumps(report))
"""


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    container = {
        "name": "web",
        "image": "local/python",
        "command": [sys.executable, "-m", "http.server", "--bind", "$(POD_IP)", "8080"],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "http", "containerPort": 8080}],
        "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1},
    }
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def _ready_pod(core: client.CoreV1Api, namespace: str, app: str) -> client.V1Pod:
    def ready() -> client.V1Pod | None:
        for pod in core.list_namespaced_pod(namespace, label_selector=f"app={app}").items:
            conditions = pod.status.conditions or []
            if any(c.type == "Ready" and c.status == "True" for c in conditions):
                return pod
        return None

    return wait_for(f"a ready {app} pod", ready, timeout=90)


def _ip(*args: str) -> str:
    return podnet.run_ip(*args).stdout


def test_a_pod_has_its_own_network_and_its_service_endpoints(
    api_client: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("web"))
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 8080}]},
        },
    )
    pod = _ready_pod(core, namespace, "web")
    address = pod.status.pod_ip
    assert ipaddress.ip_address(address) in podnet.PROCESS_POD_RANGE
    assert pod.status.host_ip == str(podnet.HOST_ADDRESS)
    with urllib.request.urlopen(f"http://{address}:8080/", timeout=5) as reply:
        assert reply.status == 200

    # Its namespace: eth0 with the pod's address, the pod network's route and no other.
    name = podnet.namespace_name(pod.metadata.uid)
    assert f"{address}/{podnet.POD_NETWORK.prefixlen}" in _ip("-n", name, "-br", "addr")
    routes = _ip("-n", name, "-4", "route").splitlines()
    assert [r.split()[0] for r in routes] == [str(podnet.POD_NETWORK)], routes
    veth = podnet.veth_name(pod.metadata.uid)
    assert f"master {podnet.BRIDGE}" in _ip("link", "show", veth)

    # The controller manager's EndpointSlice for the Service holds the pod's address.
    discovery = client.DiscoveryV1Api(api_client)

    def sliced() -> list[str] | None:
        slices = discovery.list_namespaced_endpoint_slice(
            namespace, label_selector="kubernetes.io/service-name=web"
        ).items
        ready = [
            a
            for s in slices
            for e in s.endpoints or []
            if e.conditions and e.conditions.ready
            for a in e.addresses
        ]
        return ready or None

    assert wait_for("the Service's EndpointSlice", sliced) == [address]

    # A pod's own loopback, the API server at the host's address, eth0 and lo only.
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "report"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "local/process",
                        "command": [sys.executable, "-c", NETWORK_REPORT],
                    }
                ],
            },
        },
    )

    def terminated() -> Any:
        statuses = core.read_namespaced_pod_status("report", namespace).status.container_statuses
        state = statuses[0].state if statuses else None
        return state.terminated if state else None

    done = wait_for("the report pod to finish", terminated, timeout=60)
    assert done.exit_code == 0, done.message
    assert json.loads(done.message) == {"loopback": 200, "apiserver": 200, "links": ["eth0", "lo"]}

    # Deleted, the pod takes its namespace and veth with it.
    apps.delete_namespaced_deployment("web", namespace)
    wait_for(
        "the pod's namespace and veth to go",
        lambda: name not in podnet.ours()[0] and veth not in podnet.ours()[1],
        timeout=60,
    )


@pytest.mark.cluster_alone
def test_a_killed_node_agents_pod_networks_are_removed_when_it_runs_again(
    api_client: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api_client)
    core = client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(namespace, _deployment("survivor"))
    pod = _ready_pod(core, namespace, "survivor")
    path = podnet.namespace_path(pod.metadata.uid)
    pod_dir = cluster.NODE_AGENT_STATE / f"{namespace}_{pod.metadata.name}_{pod.metadata.uid[:8]}"
    orphan = int((pod_dir / "web.pid").read_text())

    # The agent dies as a killed run leaves it: its pods' processes and networks stay.
    agent = next(c for c in cluster.components(Path("/nonexistent")) if c.name == "node-agent")
    agent_pid = agent.pid()
    assert agent_pid is not None
    os.kill(agent_pid, signal.SIGKILL)
    wait_for("the node agent to die", lambda: agent.pid() is None, timeout=30)
    assert path.exists()
    cluster.up()  # starts the node agent again (the rest runs)

    # The orphan is gone and the pod runs again in a new namespace; every namespace and
    # veth of ours belongs to a pod that exists.
    wait_for("the orphaned process to go", lambda: not Path(f"/proc/{orphan}").exists())

    def in_a_new_namespace() -> bool:
        """The pod's new process runs in the namespace at its path. Its inode number
        alone cannot tell a new namespace: the kernel may hand the freed one's on."""
        try:
            pid = int((pod_dir / "web.pid").read_text())
            return pid != orphan and os.stat(f"/proc/{pid}/ns/net").st_ino == path.stat().st_ino
        except (OSError, ValueError):
            return False

    wait_for("the pod in a new namespace", in_a_new_namespace, timeout=60)
    _ready_pod(core, namespace, "survivor")
    uids = {p.metadata.uid for p in core.list_pod_for_all_namespaces().items}
    namespaces, links = podnet.ours()
    assert {n.removeprefix(f"{podnet.PREFIX}-") for n in namespaces} <= uids
    veths = {podnet.veth_name(u) for u in uids}
    assert {link for link in links if link != podnet.BRIDGE} <= veths
