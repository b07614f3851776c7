"""Why a manifest is not a valid SpeculativeModel, in the API server's terms: one
`field.path: reason` a line, each reason saying the fix where there is a usual one."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from specfleet.operator.api import SpeculativeModel
from specfleet.operator.rules import ERROR_TYPE as RULE_ERROR

# What kubectl's strict field validation knows at the top and in metadata (ObjectMeta).
TOP_LEVEL_KEYS = ("apiVersion", "kind", "metadata", "spec", "status")
METADATA_KEYS = (
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)
# Pydantic's strict type errors, by the type they expected.
# A number YAML 1.1 reads as a string (5e-2; 5.0e-2 is a float).
_NO_DOT_EXPONENT = r"[-+]?[0-9]+[eE][-+]?[0-9]+"
_TYPE_WORDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
}


def validation_errors(manifest: Any) -> list[str]:
    """Why a manifest is not a valid SpeculativeModel, one `field.path: reason` a line."""
    if not isinstance(manifest, dict):
        return [f"(document): expected a mapping, got {type(manifest).__name__}"]
    errors = [
        *_unknown_keys(manifest, TOP_LEVEL_KEYS, ""),
        *_unknown_keys(manifest.get("metadata"), METADATA_KEYS, "metadata."),
        *_beyond_int64(manifest, ""),
    ]
    try:
        SpeculativeModel.model_validate(manifest)
    except ValidationError as error:
        errors += [describe(e) for e in error.errors()]
    return errors


# The API server decodes JSON integers as int64 and refuses a larger one.
_INT64 = range(-(2**63), 2**63)


def _beyond_int64(node: Any, path: str) -> Iterator[str]:
    """An integer anywhere in the manifest that the API server cannot hold."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _beyond_int64(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _beyond_int64(value, f"{path}[{index}]")
    elif isinstance(node, int) and not isinstance(node, bool) and node not in _INT64:
        yield f"{path}: {node} is beyond a 64-bit integer, which the API server refuses"


def _unknown_keys(node: Any, known: tuple[str, ...], prefix: str) -> Iterator[str]:
    if isinstance(node, dict):
        for key in node:
            if key not in known:
                yield f"{prefix}{key}: unknown field{_did_you_mean(str(key), known)}"


def _did_you_mean(key: str, known: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def describe(error: ErrorDetails, root: type[BaseModel] | None = SpeculativeModel) -> str:
    """One pydantic error as `field.path: reason`, the path spelled as the API server
    spells it (list items as [i]; a rule's error at the field the rule blames). An
    unknown field gets the nearest of its siblings in `root`'s tree, if one is close."""
    path = ""
    for part in error["loc"]:
        if part == "[key]":  # pydantic's mark of a map's key: the message says it is one
            continue
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    if error["type"] == RULE_ERROR and error.get("ctx", {}).get("blames"):
        path += error["ctx"]["blames"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        siblings = _siblings(root, error["loc"]) if root else []
        message = "unknown field" + _did_you_mean(str(error["loc"][-1]), siblings)
    elif error["type"] in _TYPE_WORDS and isinstance(error["input"], str | int | float):
        message = _wrong_type(error["type"], error["input"])
    return f"{path or '(document)'}: {message}"


def _wrong_type(kind: str, value: str | int | float) -> str:
    wanted = _TYPE_WORDS[kind]
    if isinstance(value, bool):
        return f"must be {wanted}, not {str(value).lower()}"
    if isinstance(value, str) and kind == "float_type" and re.fullmatch(_NO_DOT_EXPONENT, value):
        # YAML 1.1 (PyYAML, kubectl) reads 5e-2 as a string: its floats need a dot.
        return (
            f"must be {wanted}, not the string {value!r}: YAML reads an exponent without a "
            f"dot as a string, quoted or not; write {float(value)!r}"
        )
    if isinstance(value, str):
        return f"must be {wanted}, not the string {value!r}: write it without quotes"
    if kind == "string_type":
        return f"must be {wanted}, not the number {value!r}: write it in quotes"
    return f"must be {wanted}, not {value!r}"


def _siblings(root: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the model that holds the last part of a path."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if model is None or isinstance(part, int):
            continue
        field = next((f for name, f in model.model_fields.items() if part in (name, f.alias)), None)
        model = _model_in(field.annotation) if field else None
    if model is None:
        return []
    return [f.alias or name for name, f in model.model_fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through Optional, lists and dicts."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
        for arg in typing.get_args(annotation):
            if (found := _model_in(arg)) is not None:
                return found
    return None
