"""Reading manifest files for the command line: every way a file can be unreadable
said in one line, YAML's duplicate keys refused (PyYAML keeps the last silently), and
each document sorted into ours, near misses of our kind, and others."""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from specfleet.operator import render
from specfleet.operator.api import GROUP, KIND, SpeculativeModel


class ManifestError(ValueError):
    """A file that cannot be read as manifests; the message is one line, the fix in it."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ManifestError(
                    f"line {line}: key {key!r} is given twice in one mapping (first on line "
                    f"{seen[key]}); YAML keeps only the last, so merge the two"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


# The path that names standard input, as kubectl's `-f -`.
STDIN = Path("-")


def read_documents(path: Path) -> list[Any]:
    """The file's YAML documents (empty ones left out; STDIN: standard input's), the
    items of a `kind: List` in its place; ManifestError says why not."""
    try:
        text = (sys.stdin.buffer.read() if path == STDIN else path.read_bytes()).decode()
    except UnicodeDecodeError as error:
        raise ManifestError(
            f"cannot read: not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    except OSError as error:
        raise ManifestError(f"cannot read: {error.strerror or error}") from None
    try:
        documents = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ManifestError(f"not YAML: {where}{error.problem or error}") from None
    except yaml.YAMLError as error:
        raise ManifestError(f"not YAML: {error}") from None
    documents = [
        item
        for document in documents
        for item in (document["items"] if _is_list(document) else [document])
    ]
    if not documents:
        raise ManifestError("no documents in the file")
    return documents


def _is_list(document: Any) -> bool:
    """A `kind: List` (kubectl get -o yaml writes one): its items are the documents."""
    return (
        isinstance(document, dict)
        and document.get("kind") == "List"
        and isinstance(document.get("items"), list)
    )


@dataclass
class Sorted:
    """A file's documents: SpeculativeModels (or mappings without a kind, judged as
    ones), kinds that look like a misspelt SpeculativeModel, and other kinds."""

    ours: list[tuple[int, Any]] = field(default_factory=list)
    near_misses: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)


def sort_documents(documents: list[Any]) -> Sorted:
    result = Sorted()
    for index, document in enumerate(documents):
        kind = document.get("kind") if isinstance(document, dict) else None
        if kind is None or kind == KIND:
            result.ours.append((index, document))
            continue
        api_version = str(document.get("apiVersion", ""))
        if api_version.startswith(f"{GROUP}/") or difflib.get_close_matches(
            str(kind), [KIND], n=1, cutoff=0.75
        ):
            result.near_misses.append(
                f"document {index}: kind {kind!r} is not {KIND!r}, the only kind of "
                f"{GROUP}: spell it {KIND!r}"
            )
        else:
            result.others.append(str(kind))
    return result


def no_model_error(others: list[str]) -> str:
    kinds = ", ".join(sorted(set(others)))
    plural = "" if len(others) == 1 else "s"
    return f"no {KIND} in the file ({len(others)} other document{plural}: {kinds})"


def collisions(models: list[tuple[str, SpeculativeModel]]) -> list[str]:
    """Models (each with where it was read) given twice, or whose children would share a
    name: e.g. `llama`'s canary Deployment is `llama-canary`, the stable one of a model so
    named."""
    owners: dict[tuple[str, str, str], tuple[str, str]] = {}
    seen: dict[tuple[str, str], str] = {}
    problems = []
    for where, model in models:
        namespace = model.metadata.namespace or ""
        if (namespace, model.metadata.name) in seen:
            problems.append(
                f"{where} ({model.metadata.name}): model {model.metadata.name} is given twice "
                f"in the same namespace (first in {seen[namespace, model.metadata.name]}): "
                "applied, the second would replace the first; keep one, or give them "
                "different names or namespaces"
            )
            continue
        seen[namespace, model.metadata.name] = where
        for child in render.manifests(model):
            key = (namespace, child["kind"], child["metadata"]["name"])
            name = model.metadata.name
            if key in owners and owners[key][1] != name:
                other_where, other = owners[key]
                problems.append(
                    f"{where} ({name}): its {key[1]} {key[2]} is also one of model {other}'s "
                    f"({other_where}) in the same namespace: rename one model (a model "
                    f"NAME owns NAME and {render.canary_name('NAME')})"
                )
            owners.setdefault(key, (where, name))
    return problems
