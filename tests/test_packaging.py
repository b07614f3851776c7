"""The folder `operator/` must never shadow the standard library's `operator`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROBE = "import operator, specfleet.operator; operator.itemgetter; print(operator.__file__)"


def _probe(*python: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [*python, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_editable_install_keeps_stdlib_operator() -> None:
    location = _probe(sys.executable)
    assert not location.startswith(str(REPO)), location


def test_regular_install_keeps_stdlib_operator(tmp_path: Path) -> None:
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", tmp_path / "dist", REPO], check=True)
    wheel = next((tmp_path / "dist").glob("specfleet-*.whl"))
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", site, wheel], check=True)
    # -S: no site-packages, so only the installed copy is seen, not the editable finder.
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    location = _probe(sys.executable, "-S", env=env)
    assert not location.startswith(str(REPO)), location
    assert (site / "specfleet" / "operator" / "api.py").exists()
    assert not (site / "operator").exists()
