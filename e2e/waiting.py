"""Polling helpers for tests against the cluster: wait for a state, say which one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 60,
    interval: float = 0.5,
    context: Callable[[], object] | None = None,
) -> T:
    """Call `probe` until it returns something truthy; fail naming `what`, the last value
    and, where given, `context()` (the state that explains why it never came)."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    shown = f"; context: {context()!r}" if context else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}{shown}")
