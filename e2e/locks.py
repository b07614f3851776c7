"""`make locks`: the hashed locks the images install, one per image.

- operator/requirements.lock: what operator/Dockerfile installs, the dependencies of
  specfleet-runtime and specfleet-operator;
- runtime/requirements.lock: what runtime/Dockerfile installs on a base without vLLM (as
  `make images` builds it), the dependencies of specfleet-runtime.

Each also pins the projects' build backend (`[build-system] requires`) and the installer,
pip (INSTALLER; the venv's own is Debian's 23.0.1, below known fixes): the Dockerfiles
install the lock with `pip install --require-hashes --no-deps` and then the project's own
source with `--no-deps --no-build-isolation`, so nothing in the build is resolved or
downloaded unchecked. The two projects themselves are never in a lock (`--no-emit-package`):
they come from the source, never from an index.

Resolved by uv for the images' Python (Debian bookworm's python3, 3.11, glibc 2.36).
Existing pins are kept unless `--upgrade` (or `make locks UPGRADE=1`);
tests/test_locks.py fails when a lock no longer fits the pyproject files.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

REPO = Path(__file__).resolve().parent.parent
UV = REPO / ".venv" / "bin" / "uv"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_36"


# The venvs' installer, replaced by the lock's first: pip 25.3 fixes GHSA-4xh5-x5gv-qwph
# (CVE-2025-8869, its fallback tar extraction writing outside the target on Pythons
# without PEP 706, bookworm's 3.11.2 among them) and 23.3 CVE-2023-5752.
INSTALLER = (Requirement("pip>=25.3"),)


@dataclass(frozen=True)
class Lock:
    image: str
    # The project directories whose distributions the image installs from source.
    projects: tuple[str, ...]

    @property
    def path(self) -> Path:
        return REPO / self.image / "requirements.lock"


OPERATOR = Lock("operator", ("runtime", "operator"))
RUNTIME = Lock("runtime", ("runtime",))
LOCKS = (OPERATOR, RUNTIME)


@dataclass(frozen=True)
class Pin:
    name: NormalizedName
    version: str
    hashes: tuple[str, ...]
    # What needs it, as uv annotates it: a project or another pin (empty for an input
    # given by requirement alone, such as the build backend).
    via: tuple[NormalizedName, ...]


def pyproject(project: str) -> dict[str, object]:
    with (REPO / project / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def distribution(project: str) -> NormalizedName:
    table = pyproject(project)["project"]
    assert isinstance(table, dict)
    return canonicalize_name(str(table["name"]))


def project_requirements(project: str) -> list[Requirement]:
    """A project's unconditional dependencies (no extras), as its pyproject lists them."""
    table = pyproject(project)["project"]
    assert isinstance(table, dict)
    return [
        requirement
        for requirement in map(Requirement, table.get("dependencies", []))
        if requirement.marker is None
    ]


def build_requirements(project: str) -> list[Requirement]:
    table = pyproject(project)["build-system"]
    assert isinstance(table, dict)
    return [Requirement(text) for text in table["requires"]]


def roots(lock: Lock) -> dict[NormalizedName, list[Requirement]]:
    """What the image needs directly: each project's dependencies other than the projects
    themselves, their build backend and the installer; several requirements on one name
    all hold."""
    local = {distribution(project) for project in lock.projects}
    needed: dict[NormalizedName, list[Requirement]] = {}
    for project in lock.projects:
        for requirement in project_requirements(project) + build_requirements(project):
            name = canonicalize_name(requirement.name)
            if name not in local:
                needed.setdefault(name, []).append(requirement)
    for requirement in INSTALLER:
        needed.setdefault(canonicalize_name(requirement.name), []).append(requirement)
    return needed


def inputs(lock: Lock) -> str:
    """uv's input: the projects by path, the build requirements and the installer."""
    lines = [f"{distribution(project)} @ ./{project}" for project in lock.projects]
    for project in lock.projects:
        lines += [str(requirement) for requirement in build_requirements(project)]
    lines += [str(requirement) for requirement in INSTALLER]
    return "\n".join(dict.fromkeys(lines)) + "\n"


def command(lock: Lock, upgrade: bool = False) -> list[str]:
    argv = [
        str(UV),
        "pip",
        "compile",
        "--quiet",
        "--generate-hashes",
        "--python-version",
        PYTHON_VERSION,
        "--python-platform",
        PLATFORM,
        "--custom-compile-command",
        "make locks",
        "--output-file",
        str(lock.path.relative_to(REPO)),
    ]
    for project in lock.projects:
        argv += ["--no-emit-package", distribution(project)]
    if upgrade:
        argv.append("--upgrade")
    return [*argv, "-"]


def compile_lock(lock: Lock, upgrade: bool = False) -> None:
    subprocess.run(command(lock, upgrade), input=inputs(lock), text=True, cwd=REPO, check=True)


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")
_VIA = re.compile(r"^#\s+via\s*(.*)$")
_VIA_MORE = re.compile(r"^#\s{3,}(\S+)$")


def parse(text: str) -> dict[NormalizedName, Pin]:
    """The pins of a uv-compiled lock, with their hashes and `# via` annotations. A line
    that is neither a pin, a hash, an annotation nor a comment is an error."""
    pins: dict[NormalizedName, Pin] = {}
    current: Pin | None = None
    in_via = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            current, in_via = None, False
            continue
        if not raw.startswith(" ") and not line.startswith("#"):
            match = _PIN.match(line)
            if not match:
                raise ValueError(f"line {number} is not an exact pin: {line!r}")
            name = canonicalize_name(match.group(1))
            current = Pin(name, match.group(2), (), ())
            pins[name] = current
            in_via = False
        elif current is None:
            continue  # the header's and the footer's comments
        elif hashes := _HASH.findall(line):
            current = Pin(current.name, current.version, current.hashes + tuple(hashes), ())
            pins[current.name] = current
        elif via := _VIA.match(line):
            in_via = True
            if via.group(1):
                current = _with_via(current, via.group(1))
                pins[current.name] = current
        elif in_via and (more := _VIA_MORE.match(line)):
            current = _with_via(current, more.group(1))
            pins[current.name] = current
        elif not line.startswith("#"):
            raise ValueError(f"line {number} is neither a hash nor an annotation: {line!r}")
    return pins


def _with_via(pin: Pin, parent: str) -> Pin:
    return Pin(pin.name, pin.version, pin.hashes, (*pin.via, canonicalize_name(parent)))


def read(lock: Lock) -> dict[NormalizedName, Pin]:
    return parse(lock.path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upgrade", action="store_true", help="newest versions, not the pins")
    args = parser.parse_args()
    for lock in LOCKS:
        compile_lock(lock, args.upgrade)
        print(f"{lock.path.relative_to(REPO)}: {len(read(lock))} pins", file=sys.stderr)


if __name__ == "__main__":
    main()
