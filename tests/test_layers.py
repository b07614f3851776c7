"""The operator's modules form layers: no import cycle, and a decision core without I/O.

Imports are read from the source (every `import` and `from ... import` anywhere in a
module, `if TYPE_CHECKING:` blocks and function bodies included), so a cycle hidden
behind a type-only import still counts: it still ties the modules' meaning together.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import specfleet.operator

PACKAGE = "specfleet.operator"
SOURCE = Path(specfleet.operator.__path__[0])

# The modules that decide (spec, status, observation, now) -> (status, actions), render
# the children and replay scenarios: they import nothing that talks to a network, the
# API server or a metrics registry (`metrics`, `evaluation`, `fleet` and `kube` do).
DECISION_CORE = ("tuner", "render", "status", "simulate", "peers", "observations", "pod_reading")
IO_LIBRARIES = ("aiohttp", "kubernetes", "kopf", "prometheus_client")


def module_name(path: Path) -> str:
    """`api/status.py` is `api.status`, `api/__init__.py` is `api`."""
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SOURCE.rglob("*.py"))}


def _module_of(name: str) -> str | None:
    """The operator's module that a dotted import names: the longest one it starts with."""
    parts = name[len(PACKAGE) + 1 :].split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in MODULES:
            return ".".join(parts[:end])
    return None


def imports_of(path: Path) -> set[str]:
    """The operator's modules `path` imports (a package counts as its `__init__`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(PACKAGE + ".") and (module := _module_of(name)) is not None:
                found.add(module)
    found.discard(module_name(path))
    return found


def import_graph() -> dict[str, set[str]]:
    return {name: imports_of(path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check below can fail: a type-only import back closes a loop it reports."""
    graph = {"tuner": {"floor"}, "floor": {"windows"}, "windows": {"tuner"}, "api": set()}
    assert cycles(graph) == [["floor", "tuner", "windows"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_operator_has_no_import_cycle() -> None:
    graph = import_graph()
    assert {"api", "api.status", "api.old_status", "tuner"} <= graph.keys()
    assert "api.old_status" in graph["api.status"]  # a package's modules are seen
    assert cycles(graph) == []


def test_the_decision_core_imports_no_io_library() -> None:
    probe = (
        "import sys\n"
        + "".join(f"import {PACKAGE}.{module}\n" for module in DECISION_CORE)
        + f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({IO_LIBRARIES!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
