"""How the operator's process allocates memory."""

from __future__ import annotations

import ctypes
import os
from typing import Any

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def fewer_arenas() -> bool:
    """Two malloc arenas instead of glibc's up to 8 a core. glibc gives each thread that
    allocates an arena of its own (the Lease's requests, the metrics server, name lookups
    in asyncio's thread pool; the fleet's requests ran in that pool until they moved onto
    the event loop): what one thread frees stays in its arena, where the event loop's
    allocations cannot reuse it. As MALLOC_ARENA_MAX=2 would, and that variable, when
    set, wins. False where the C library is not glibc (musl)."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    mallopt = _glibc("mallopt")
    return mallopt is not None and bool(mallopt(M_ARENA_MAX, ARENAS))


def give_back() -> bool:
    """Hand the free pages inside malloc's arenas back to the system (glibc's
    malloc_trim). The replies of a listing, decoded and dropped, leave tens of MB free
    between the objects that stay, which glibc keeps for later and the resident size
    counts (the fleet's listings every 2 minutes grew it by 20-30 MB each at 1,000
    models). False where the C library is not glibc."""
    malloc_trim = _glibc("malloc_trim")
    return malloc_trim is not None and bool(malloc_trim(0))


def _glibc(function: str) -> Any:
    """A function of glibc's, or None where the C library is another (musl)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return getattr(libc, function, None)
