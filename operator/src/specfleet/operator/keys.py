"""How the operator names a SpeculativeModel in its own maps and metrics: one place, so
that a model without a namespace (a `specfleet validate` file) is keyed alike everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specfleet.operator.api import SpeculativeModel

Key = tuple[str, str]  # (namespace, name)


def model_key(namespace: str | None, name: str) -> Key:
    return (namespace or "", name)


def key_of(body: dict[str, Any]) -> Key:
    """The key of an API object given as a dict."""
    metadata = body["metadata"]
    return model_key(metadata.get("namespace"), metadata["name"])


def key_of_model(model: SpeculativeModel) -> Key:
    return model_key(model.metadata.namespace, model.metadata.name)
