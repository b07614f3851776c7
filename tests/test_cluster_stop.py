"""Stopping the local cluster: nothing a component started outlives it (e2e/cluster.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from e2e import cluster


def test_a_child_that_outlives_its_component_is_killed_before_the_state_goes() -> None:
    """As the node agent's `umoci unpack`, started as SIGTERM came, went on unpacking
    into the cluster's state after the agent had exited, while `down` removed it."""
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 61"], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(cluster._live_members(leader.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(leader.pid, signal.SIGTERM)
    leader.wait()
    left = cluster._live_members(leader.pid)
    assert len(left) == 1, "the child runs on once its leader is gone"

    cluster._kill_group(leader.pid)

    assert cluster._live_members(leader.pid) == []
