"""Two distributions under one `specfleet` namespace, with honest boundaries.

specfleet-runtime (runtime/) is what each inference pod runs; specfleet-operator
(operator/) depends on it, never the other way. Built as wheels and installed without
the editable finders, the runtime alone has no operator to import, and the folder
`operator/` never shadows the standard library's `operator`.
"""

from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
OPERATOR_ONLY = {"kopf", "kubernetes", "typer", "specfleet-operator"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dist = tmp_path_factory.mktemp("dist")
    for folder in ("runtime", "operator"):
        # A copy: pip builds in the source tree and would leave build/ and egg-info there.
        source = dist / "src" / folder
        shutil.copytree(REPO / folder, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        subprocess.run([*PIP, "wheel", "--no-deps", "-w", dist, source], check=True)
    return {
        "runtime": next(dist.glob("specfleet_runtime-*.whl")),
        "operator": next(dist.glob("specfleet_operator-*.whl")),
    }


def _requirements(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(archive.read(name).decode())
    # "kopf<2,>=1.45" -> "kopf"; extras ("vllm; extra == ...") are not installed by default.
    return {
        req.split(";")[0].split("<")[0].split(">")[0].split("=")[0].split("[")[0].strip()
        for req in metadata.get_all("Requires-Dist") or []
        if "extra ==" not in req
    }


def _run_installed(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    # -S: no site-packages, so only the installed copy is seen, not the editable finders
    # (nor the dependencies: the probes locate modules rather than import them).
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )


def test_runtime_dependencies_cannot_reach_the_operator(wheels: dict[str, Path]) -> None:
    runtime = _requirements(wheels["runtime"])
    assert runtime == {"aiohttp", "prometheus-client", "pydantic", "pyyaml"}
    assert not runtime & OPERATOR_ONLY
    assert "specfleet-runtime" in _requirements(wheels["operator"])


def test_each_wheel_holds_only_its_own_package(wheels: dict[str, Path]) -> None:
    for folder, wheel in wheels.items():
        with zipfile.ZipFile(wheel) as archive:
            modules = {n for n in archive.namelist() if n.endswith(".py")}
        assert modules, wheel
        assert all(n.startswith(f"specfleet/{folder}/") for n in modules), sorted(modules)
        # A namespace package: an __init__.py here would hide the other distribution.
        assert "specfleet/__init__.py" not in modules


def test_runtime_installed_alone_has_no_operator(wheels: dict[str, Path], tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([*PIP, "install", "--no-deps", "--target", site, wheels["runtime"]], check=True)
    probe = "from importlib.util import find_spec as f; print(f('specfleet.runtime.config').origin)"
    assert _run_installed(site, probe).stdout.startswith(str(site))
    result = _run_installed(site, "import specfleet.operator")
    assert "No module named 'specfleet.operator'" in result.stderr


def test_both_installed_keep_stdlib_operator(wheels: dict[str, Path], tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([*PIP, "install", "--no-deps", "--target", site, *wheels.values()], check=True)
    # find_spec locates a module without importing it (its dependencies are not here).
    probe = (
        "import operator; from importlib.util import find_spec as f; operator.itemgetter; "
        "print(operator.__file__, f('specfleet.operator.api').origin)"
    )
    result = _run_installed(site, probe)
    assert result.returncode == 0, result.stderr
    stdlib, api = result.stdout.split()
    assert not stdlib.startswith(str(REPO)), stdlib
    assert api.startswith(str(site)), api
    assert (site / "specfleet" / "operator" / "api" / "old_status.py").exists()
    assert (site / "specfleet" / "runtime" / "config.py").exists()
    assert not (site / "operator").exists()


def test_editable_install_keeps_stdlib_operator() -> None:
    probe = "import operator, specfleet.operator; operator.itemgetter; print(operator.__file__)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not result.stdout.strip().startswith(str(REPO)), result.stdout
