"""Kubernetes' own JSON schemas (kubernetes-validate's, 1.37, shipped in its wheel), to
hold the schemas we write for embedded Kubernetes types (the chart's values, the CRD's
pod settings) to exactly Kubernetes' fields."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

KUBERNETES_VERSION = "1.37.0"
Schema = dict[str, Any]


@functools.cache
def definitions() -> dict[str, Schema]:
    import kubernetes_validate

    schemas = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    strict = schemas / f"v{KUBERNETES_VERSION}-local-strict" / "_definitions.json"
    found: dict[str, Schema] = json.loads(strict.read_text())["$defs"]
    return found


def resolved(node: Schema) -> Schema:
    while "$ref" in node or len(node.get("allOf", [])) == 1:
        ref = node["$ref"] if "$ref" in node else node["allOf"][0]["$ref"]
        node = definitions()[ref.rsplit("/", 1)[1]]
    return node


def _types(node: Schema) -> set[str]:
    kind = node.get("type", [])
    return ({kind} if isinstance(kind, str) else set(kind)) - {"null"}


def differences(
    path: str, ours: Schema, theirs: Schema, takes_any_key: Callable[[Schema], bool]
) -> Iterator[str]:
    """Where our schema of a Kubernetes type differs from Kubernetes' own: an object
    open to any key, a field missing or added, a field of another type (nested ones
    too). `takes_any_key` says how our dialect spells an open object."""
    theirs = resolved(theirs)
    if ours.get("type") == "array":  # an array with no items (maxItems 0) refuses any
        yield from differences(f"{path}[]", ours.get("items", {}), theirs["items"], takes_any_key)
        return
    if ours.get("type") and _types(theirs) and ours["type"] not in _types(theirs):
        yield f"{path} is {ours['type']}, Kubernetes' is {sorted(_types(theirs))}"
        return
    if ours.get("type") != "object":
        return
    fields = theirs.get("properties")
    if fields is None:  # a map (requests, limits): any key, each value typed
        if not isinstance(ours.get("additionalProperties"), dict):
            yield f"{path} takes any value"
        return
    if takes_any_key(ours):
        yield f"{path} takes any key"
        return
    given = ours.get("properties", {})
    if set(given) != set(fields):
        yield f"{path}: {sorted(given)} != Kubernetes' {sorted(fields)}"
    for name in sorted(set(given) & set(fields)):
        yield from differences(f"{path}.{name}", given[name], fields[name], takes_any_key)
