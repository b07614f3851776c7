"""Where the operator's resident memory goes, sampled from inside its process while a
benchmark runs: `operator_scale.py --memory-trace FILE` puts this folder first on the
operator's PYTHONPATH, and Python imports this module at start.

Every 10 s a thread appends one JSON line to $SPECFLEET_MEMORY_TRACE: seconds since
start, VmRSS and VmHWM (MB, /proc/self/status), glibc's arenas (mallinfo2: MB taken
from the system, MB in use, MB free inside them), and the blocks Python's own allocator
holds. Every third line also counts the objects the garbage collector tracks, by type, and
the coroutines suspended, by the function they run.
Only in `specfleet operator` processes: other Python processes started beside it with
the same environment (the node agent, kubectl plugins) are left alone.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import sys
import threading
import time

SECONDS = 10.0


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def _status_mb() -> dict[str, int]:
    wanted = ("VmRSS", "VmHWM")
    with open("/proc/self/status") as status:
        pairs = (line.split(":", 1) for line in status if line.startswith(wanted))
        return {name: int(value.split()[0]) // 1024 for name, value in pairs}


def _census() -> dict[str, object]:
    """The objects the garbage collector tracks, by type, and the coroutines suspended,
    by the function they run. In a function of its own: the list of every object must
    go before the next sleep, or it keeps them all alive until the next census."""
    objects = gc.get_objects()
    types = collections.Counter(type(o).__name__ for o in objects)
    waiting = collections.Counter(
        o.cr_code.co_qualname
        for o in objects
        if type(o).__name__ == "coroutine" and o.cr_frame is not None
    )
    return {
        "gc_objects": sum(types.values()),
        "gc_types": types.most_common(12),
        "coroutines": waiting.most_common(12),
    }


def sample(path: str, seconds: float = SECONDS, lines: int | None = None) -> None:
    """Append a line every `seconds`: for ever, or `lines` of them."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    started = time.monotonic()
    count = 0
    with open(path, "a") as out:
        while lines is None or count < lines:
            time.sleep(seconds)
            count += 1
            info = libc.mallinfo2()
            line: dict[str, object] = {
                "seconds": round(time.monotonic() - started),
                **_status_mb(),
                "malloc_arenas_mb": info.arena >> 20,
                "malloc_in_use_mb": info.uordblks >> 20,
                "malloc_free_mb": info.fordblks >> 20,
                "python_blocks": sys.getallocatedblocks(),
            }
            if count % 3 == 0:
                line.update(_census())
            out.write(json.dumps(line) + "\n")
            out.flush()


def is_operator() -> bool:
    # python .../bin/specfleet operator ...: the console script, then the command.
    return "operator" in sys.orig_argv[1:3]


if os.environ.get("SPECFLEET_MEMORY_TRACE") and is_operator():
    threading.Thread(
        target=sample, args=(os.environ["SPECFLEET_MEMORY_TRACE"],), daemon=True
    ).start()
