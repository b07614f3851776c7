"""How the operator's process allocates memory."""

from __future__ import annotations

import ctypes
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def fewer_arenas() -> bool:
    """Two malloc arenas instead of glibc's up to 8 a core. The operator's API calls run
    in asyncio's thread pool, and glibc gives each thread that allocates an arena of its
    own: a reply decoded in one thread leaves its freed memory in that thread's arena,
    where the event loop's allocations cannot reuse it. As MALLOC_ARENA_MAX=2 would, and
    that variable, when set, wins. False where the C library is not glibc (musl)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_ARENA_MAX, ARENAS))
