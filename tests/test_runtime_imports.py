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


DECISION_CORE = """
import sys
import specfleet.operator.tuner, specfleet.operator.fleet, specfleet.operator.handlers
print(sorted(m for m in sys.modules if m.startswith("specfleet.runtime.sim")))
"""


def test_the_decision_core_does_not_import_the_simulator() -> None:
    """The tuner predicts with `runtime.decoding`; the simulated engine is a consumer."""
    result = subprocess.run(
        [sys.executable, "-c", DECISION_CORE],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[]"
