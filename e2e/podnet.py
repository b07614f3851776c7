"""Pod networking for the local cluster, as a bridge CNI plugin does it.

One Linux bridge (BRIDGE) holds the host's address on the pod network (HOST_ADDRESS, where
the API server listens, so pods reach it); each pod gets a network namespace of its own,
joined to the bridge by a veth pair, with one address from POD_NETWORK and loopback up.
The pod network is a /16 of 198.18.0.0/15 (RFC 2544's benchmarking range): it exists only
on this bridge and in these namespaces. No default route is added anywhere, so nothing on
it can reach, and nothing here probes, an address outside it; `check` refuses to start
where the host already routes any of it elsewhere.

Everything is named with PREFIX, so a run cleans up what a killed run left (`remove_all`
at start and at `make cluster-down`).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

PREFIX = "specfleet"
BRIDGE = "sfbr0"
VETH_PREFIX = "sfv"  # the host's end of a pod's veth pair: sfv + 12 hex digits
POD_NETWORK = ipaddress.IPv4Network("198.18.0.0/16")
HOST_ADDRESS = ipaddress.IPv4Address("198.18.0.1")
# Pods that run a process get addresses from the lower half; a --no-process node agent
# (benchmarks) gives its pods addresses from the upper half, where nothing listens.
PROCESS_POD_RANGE = ipaddress.IPv4Network("198.18.0.0/17")
NO_PROCESS_POD_RANGE = ipaddress.IPv4Network("198.18.128.0/17")
NETNS_DIR = Path("/run/netns")


class Unavailable(RuntimeError):
    """This machine cannot give pods their own network (the message says why)."""


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def namespace_name(pod_uid: str) -> str:
    return f"{PREFIX}-{pod_uid}"


def namespace_path(pod_uid: str) -> Path:
    return NETNS_DIR / namespace_name(pod_uid)


def veth_name(pod_uid: str) -> str:
    return VETH_PREFIX + pod_uid.replace("-", "")[:12]


def check() -> None:
    """Raise Unavailable unless pods can have their own network here: root, iproute2, and
    the kernel's network namespaces, veth pairs and bridges (tried on a throwaway pair),
    and no route of the host's into the pod network."""
    if os.geteuid() != 0:
        raise Unavailable("pod networks need root (network namespaces, veth pairs, a bridge)")
    if shutil.which("ip") is None:
        raise Unavailable("pod networks need iproute2's `ip` (e2e/install-debian-packages.sh)")
    routes = json.loads(run_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
    for route in routes:
        destination = route.get("dst", "")
        if destination in ("", "default") or route.get("dev") == BRIDGE:
            continue
        try:
            network = ipaddress.IPv4Network(destination, strict=False)
        except ValueError:
            continue
        if network.overlaps(POD_NETWORK) and route.get("type") not in ("local", "broadcast"):
            raise Unavailable(
                f"the host routes {destination} (dev {route.get('dev')}), inside the pod "
                f"network {POD_NETWORK}: the local cluster will not shadow it"
            )
    probe = f"{PREFIX}-probe-{uuid.uuid4().hex[:6]}"
    link = f"sfp{uuid.uuid4().hex[:8]}"
    try:
        for args in (
            ("netns", "add", probe),
            ("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", probe),
            ("link", "add", f"{link}b", "type", "bridge"),
        ):
            result = run_ip(*args, check=False)
            if result.returncode != 0:
                raise Unavailable(
                    f"`ip {' '.join(args)}` failed ({result.stderr.strip()}): the kernel or "
                    "this container lacks network namespaces, veth or bridge support"
                )
    finally:
        run_ip("link", "del", f"{link}b", check=False)
        run_ip("link", "del", link, check=False)
        run_ip("netns", "del", probe, check=False)


def ours() -> tuple[list[str], list[str]]:
    """The network namespaces and links a run of the local cluster made."""
    namespaces = [
        line.split()[0]
        for line in run_ip("netns", "list").stdout.splitlines()
        if line.startswith(f"{PREFIX}-")
    ]
    links = [
        entry["ifname"]
        for entry in json.loads(run_ip("-j", "link", "show").stdout or "[]")
        if entry["ifname"] == BRIDGE or entry["ifname"].startswith(VETH_PREFIX)
    ]
    return namespaces, links


def remove_all() -> None:
    """Remove every namespace and link of ours (a veth goes with its pod's namespace)."""
    namespaces, links = ours()
    for name in namespaces:
        run_ip("netns", "del", name, check=False)
    for link in links:
        run_ip("link", "del", link, check=False)


def create_bridge() -> None:
    """The bridge with the host's address on the pod network (after removing leftovers)."""
    remove_all()
    run_ip("link", "add", BRIDGE, "type", "bridge")
    run_ip("addr", "add", f"{HOST_ADDRESS}/{POD_NETWORK.prefixlen}", "dev", BRIDGE)
    run_ip("link", "set", BRIDGE, "up")


def create_pod_network(pod_uid: str, address: str) -> Path:
    """A namespace for one pod with loopback up and `address` on its eth0, the other end
    of whose veth pair is on the bridge; returns the namespace's path."""
    namespace = namespace_name(pod_uid)
    veth = veth_name(pod_uid)
    delete_pod_network(pod_uid)  # a restarted agent may meet its own pod's leftovers
    run_ip("netns", "add", namespace)
    run_ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
    run_ip("link", "set", veth, "master", BRIDGE, "up")
    run_ip("-n", namespace, "addr", "add", f"{address}/{POD_NETWORK.prefixlen}", "dev", "eth0")
    run_ip("-n", namespace, "link", "set", "lo", "up")
    run_ip("-n", namespace, "link", "set", "eth0", "up")
    return namespace_path(pod_uid)


def delete_pod_network(pod_uid: str) -> None:
    run_ip("netns", "del", namespace_name(pod_uid), check=False)
    run_ip("link", "del", veth_name(pod_uid), check=False)  # gone with the namespace, normally


def set_connected(pod_uid: str, connected: bool) -> None:
    """Cut a pod off the network (its veth's host end down) or join it again."""
    run_ip("link", "set", veth_name(pod_uid), "up" if connected else "down")


class AddressPool:
    """Pod addresses from `network`, each handed out once until released."""

    def __init__(self, network: ipaddress.IPv4Network) -> None:
        self.free = [str(a) for a in network.hosts() if a != HOST_ADDRESS]
        self.free.reverse()  # pop() hands out the lowest first
        self.taken: set[str] = set()

    def take(self, preferred: str | None = None) -> str:
        """A free address: `preferred` when it is one (a pod's address from before a
        restart of the node agent keeps it), else the lowest."""
        if preferred is not None and preferred in self.free:
            self.free.remove(preferred)
        elif not self.free:
            raise RuntimeError("the pod network has no address left")
        else:
            preferred = self.free.pop()
        self.taken.add(preferred)
        return preferred

    def release(self, address: str) -> None:
        if address in self.taken:
            self.taken.remove(address)
            self.free.insert(0, address)  # reused last, as a CNI's host-local IPAM does
