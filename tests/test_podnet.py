"""The local cluster's pod addresses and names (e2e/podnet.py), without touching the host."""

from __future__ import annotations

import ipaddress

import pytest

from e2e import podnet


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
