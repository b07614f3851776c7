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


# Fragments the heap as decoded replies do: large chunks freed between small ones that
# stay, so no free() can shrink the heap; then the resident size before and after.
FRAGMENTED = textwrap.dedent(
    """
    import sys
    from specfleet.operator import allocator
    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    replies, kept = [], []
    for _ in range(2000):
        replies.append(bytearray(b"x" * 50_000))  # touched: resident
        kept.append(bytearray(b"y" * 1_000))
    del replies
    before = rss_mb()
    assert allocator.give_back()
    print(before, rss_mb())
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_free_pages_between_kept_objects_go_back_to_the_system() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRAGMENTED], capture_output=True, text=True, check=True, timeout=60
    )
    before, after = (int(mb) for mb in done.stdout.split())
    assert before - after > 50, (before, after)  # 100 MB freed between the kept ones
