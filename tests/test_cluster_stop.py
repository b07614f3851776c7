"""Stopping the local cluster: nothing a component started outlives it (e2e/cluster.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from e2e import cluster, node_agent


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


def test_a_pod_its_agent_left_running_is_killed(tmp_path: Path) -> None:
    """A node agent killed before it had stopped its pods leaves them running in sessions
    of their own: `down` kills them by their pid files before removing the state."""
    pod = subprocess.Popen(["sleep", "60"], start_new_session=True)
    (tmp_path / "ns_pod_1234abcd").mkdir()
    pid_file = tmp_path / "ns_pod_1234abcd" / "main.pid"
    pid_file.write_text(str(pod.pid))

    node_agent.kill_leftovers(tmp_path)

    assert pod.wait(timeout=10) == -signal.SIGKILL
    assert not pid_file.exists()
