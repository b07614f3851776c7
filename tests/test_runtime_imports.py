"""The runtime stands alone: no operator imports, and a light sim (no numpy, no torch)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
import specfleet.runtime.cli, specfleet.runtime.sim_server, specfleet.runtime.preflight
heavy = sorted(m for m in ("numpy", "torch", "kopf", "kubernetes") if m in sys.modules)
operator = sorted(m for m in sys.modules if m.startswith("specfleet.operator"))
print(heavy + operator)
"""


def test_runtime_imports_neither_the_operator_nor_heavy_libraries() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
