"""The local cluster's pod addresses and names (e2e/podnet.py), and a pod's container
joining its network namespace (e2e/oci.py), without touching the host."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from e2e import oci, podnet


def test_addresses_are_handed_out_once_lowest_first_and_reused_last() -> None:
    pool = podnet.AddressPool(ipaddress.IPv4Network("198.18.0.0/29"))
    taken = [pool.take() for _ in range(5)]
    # .1 is the host's end of the bridge: never a pod's.
    assert taken == [f"198.18.0.{n}" for n in (2, 3, 4, 5, 6)]
    with pytest.raises(RuntimeError, match="no address left"):
        pool.take()
    pool.release("198.18.0.3")
    assert pool.take() == "198.18.0.3"


def test_a_pod_keeps_its_address_across_a_restart_of_the_agent_when_free() -> None:
    pool = podnet.AddressPool(ipaddress.IPv4Network("198.18.0.0/29"))
    assert pool.take("198.18.0.5") == "198.18.0.5"
    assert pool.take("198.18.0.5") == "198.18.0.2"  # taken: the lowest free instead
    assert pool.take("10.0.0.1") == "198.18.0.3"  # not of this pool


def test_the_ranges_are_inside_the_bridge_network_and_apart() -> None:
    assert podnet.PROCESS_POD_RANGE.subnet_of(podnet.POD_NETWORK)
    assert podnet.NO_PROCESS_POD_RANGE.subnet_of(podnet.POD_NETWORK)
    assert not podnet.PROCESS_POD_RANGE.overlaps(podnet.NO_PROCESS_POD_RANGE)
    assert podnet.HOST_ADDRESS in podnet.POD_NETWORK


def test_link_names_fit_the_kernels_limit() -> None:
    uid = "0f4c2a1e-9b7d-4c3e-8a6f-1234567890ab"
    assert len(podnet.veth_name(uid)) <= 15  # IFNAMSIZ - 1
    assert podnet.veth_name(uid).startswith(podnet.VETH_PREFIX)
    assert podnet.namespace_name(uid) == f"{podnet.PREFIX}-{uid}"


def _runtime_config(tmp_path: Path, spec: oci.ContainerSpec) -> dict[str, Any]:
    template = tmp_path / "template.json"
    namespaces = [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]
    template.write_text(
        json.dumps({"process": {}, "mounts": [], "linux": {"namespaces": namespaces}})
    )
    image = {"Entrypoint": ["specfleet", "operator"]}
    oci.write_config(template, tmp_path / "bundle", tmp_path / "rootfs", image, spec)
    return dict(json.loads((tmp_path / "bundle" / "config.json").read_text()))


def test_a_pods_container_joins_its_network_namespace(tmp_path: Path) -> None:
    joined = oci.ContainerSpec(network_namespace=podnet.namespace_path("abc"))
    namespaces = _runtime_config(tmp_path, joined)["linux"]["namespaces"]
    networks = [n for n in namespaces if n["type"] == "network"]
    assert networks == [{"type": "network", "path": "/run/netns/specfleet-abc"}]


def test_a_smoke_run_without_a_pod_uses_the_hosts_network(tmp_path: Path) -> None:
    namespaces = _runtime_config(tmp_path, oci.ContainerSpec())["linux"]["namespaces"]
    assert "network" not in {n["type"] for n in namespaces}
