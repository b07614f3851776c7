"""The images' hashed locks (e2e/locks.py, `make locks`) fit the pyproject files: every
requirement pinned at a version it admits, every pin hashed, nothing pinned that nothing
needs, and the Dockerfiles install them with hashes required. Offline: the locks are read,
never resolved again."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from packaging.utils import NormalizedName, canonicalize_name

from e2e import locks
from tests.conftest import REPO


def _needed(lock: locks.Lock, pins: dict[NormalizedName, locks.Pin]) -> set[NormalizedName]:
    """The pins reachable from the image's roots through uv's `# via` annotations, each
    edge from a project backed by that project's own pyproject."""
    roots = locks.roots(lock)
    declared = {
        locks.distribution(project): {
            canonicalize_name(r.name) for r in locks.project_requirements(project)
        }
        for project in lock.projects
    }
    needed = set(roots) & set(pins)
    changed = True
    while changed:
        changed = False
        for name, pin in pins.items():
            if name in needed:
                continue
            for parent in pin.via:
                if parent in needed or name in declared.get(parent, set()):
                    needed.add(name)
                    changed = True
                    break
    return needed


def _problems(lock: locks.Lock, pins: dict[NormalizedName, locks.Pin]) -> list[str]:
    """Why `pins` no longer fit `lock`'s pyproject files (nothing when they do)."""
    problems = []
    for name, requirements in locks.roots(lock).items():
        if name not in pins:
            problems.append(f"{name} is not pinned")
            continue
        problems += [
            f"{name}=={pins[name].version} is outside {requirement}"
            for requirement in requirements
            if not requirement.specifier.contains(pins[name].version, prereleases=True)
        ]
    problems += [f"{name} has no hash" for name, pin in sorted(pins.items()) if not pin.hashes]
    problems += [f"nothing needs {name}" for name in sorted(set(pins) - _needed(lock, pins))]
    ours = {locks.distribution(project) for project in ("operator", "runtime")}
    problems += [f"{name} is ours, built from source" for name in sorted(ours & set(pins))]
    return problems


@pytest.mark.parametrize("lock", locks.LOCKS, ids=lambda lock: lock.image)
def test_each_lock_fits_its_pyproject_files(lock: locks.Lock) -> None:
    pins = locks.read(lock)
    assert len(pins) > len(locks.roots(lock))
    assert not _problems(lock, pins), f"{lock.path.relative_to(REPO)} is stale: make locks"


def test_the_runtime_and_operator_locks_agree_on_what_both_pin() -> None:
    operator, runtime = locks.read(locks.OPERATOR), locks.read(locks.RUNTIME)
    differ = {
        name: (operator[name].version, runtime[name].version)
        for name in set(operator) & set(runtime)
        if operator[name].version != runtime[name].version
    }
    assert not differ, f"the two locks pin different versions: {differ}: make locks"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        # A pin below the floor (GHSA-6mq8-rvhq-8wgg's 3.13.2).
        (
            lambda text: re.sub(r"^aiohttp==\S+", "aiohttp==3.13.2", text, flags=re.M),
            "aiohttp==3.13.2 is outside aiohttp>=3.14.3",
        ),
        # A requirement the lock lacks.
        (
            lambda text: re.sub(r"^pyyaml==.*?\n(?=\S)", "", text, flags=re.M | re.S),
            "pyyaml is not pinned",
        ),
        # A pin without its hashes.
        (
            lambda text: re.sub(r"^(yarl==\S+) \\\n(?:    --hash.*\n)+", r"\1\n", text, flags=re.M),
            "yarl has no hash",
        ),
        # A pin nothing needs any more (as when a dependency leaves the pyproject).
        (
            lambda text: (
                text + "six==1.17.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
                "    # via specfleet-runtime\n"
            ),
            "nothing needs six",
        ),
        (
            lambda text: text + "specfleet-runtime==0.1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n",
            "specfleet-runtime is ours",
        ),
    ],
    ids=["below-floor", "missing", "unhashed", "unneeded", "ours"],
)
def test_a_lock_that_no_longer_fits_is_caught(edit: Callable[[str], str], problem: str) -> None:
    text = locks.RUNTIME.path.read_text()
    edited = edit(text)
    assert edited != text
    problems = _problems(locks.RUNTIME, locks.parse(edited))
    assert any(found.startswith(problem) for found in problems), problems


def test_a_line_that_is_not_a_pin_is_refused() -> None:
    with pytest.raises(ValueError, match="not an exact pin"):
        locks.parse("aiohttp>=3.14\n")


@pytest.mark.parametrize("image", ["operator", "runtime"])
def test_the_dockerfile_installs_its_lock_with_hashes_then_its_source_without_deps(
    image: str,
) -> None:
    text = (REPO / image / "Dockerfile").read_text().replace("\\\n", " ")
    installs = [
        " ".join(command.split())
        for command in re.split(r"&&|\nRUN |\nCOPY ", text)
        if "pip install" in command
    ]
    from_lock = f"--require-hashes --no-deps -r /src/{image}/requirements.lock"
    assert [c for c in installs if from_lock in c], f"{image}/Dockerfile skips its lock"
    first_lock = next(i for i, c in enumerate(installs) if from_lock in c)
    sources = [i for i, c in enumerate(installs) if "/src/runtime" in c and " -r " not in c]
    assert sources and all(i > first_lock for i in sources)
    assert all("--no-deps" in installs[i] for i in sources)
