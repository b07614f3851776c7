"""The operator's process keeps two malloc arenas (allocator.fewer_arenas): eight
threads allocating at once share them, where glibc alone gives each its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from specfleet.operator import allocator

# Eight threads hold their allocations until all have made theirs (an arena freed by a
# thread that ended would be handed to the next), then glibc prints its arenas.
THREADS = textwrap.dedent(
    """
    import ctypes, sys, threading
    from specfleet.operator import allocator
    if sys.argv[1] == "fewer":
        assert allocator.fewer_arenas()
    barrier = threading.Barrier(8)
    def allocate():
        held = [bytes(100_000) for _ in range(5)]
        barrier.wait()
        held += [bytes(100_000) for _ in range(5)]
        barrier.wait()
    threads = [threading.Thread(target=allocate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ctypes.CDLL("libc.so.6").malloc_stats()
    """
)


def arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", THREADS, mode],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    return sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_operators_threads_share_two_arenas() -> None:
    assert arenas("as glibc has it") > allocator.ARENAS
    assert arenas("fewer") == allocator.ARENAS


def test_malloc_arena_max_set_by_the_user_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert allocator.fewer_arenas() is False
