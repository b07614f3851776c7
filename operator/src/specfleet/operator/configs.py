"""A model's config: the spec fields whose change is a config change (draft.method,
draft.model, runtime.image, runtime.args), named by a hash, with the whole of what its
pods are rendered from (`PodsConfig`), so that the stable pods run a config kept while a
new one is on trial or was rejected (docs/rollouts.md; `track_plan`) as it last ran,
never some fields of one commit and the rest of the next."""

from __future__ import annotations

import hashlib
import json

from specfleet.operator.api import PodsConfig, RunningConfig, SpeculativeModelSpec

# The annotation that forces a config through without a trial: its value is the hash.
FORCE_CONFIG_ANNOTATION = "specfleet.io/force-config"


def pods_of(spec: SpeculativeModelSpec) -> PodsConfig:
    """What the spec's pods are rendered from, K and replicas aside."""
    return PodsConfig(
        model=spec.model.model_copy(deep=True),
        draft=spec.draft.model_copy(deep=True),
        runtime=spec.runtime.model_copy(deep=True),
    )


def config_hash(spec: SpeculativeModelSpec) -> str:
    """The hash that names the spec's config: equal fields, equal hash, on every operator.
    Alone, it is read without building (and validating) the config, on every reconcile."""
    fields = {
        "method": spec.draft.method.value,
        "draftModel": spec.draft.model,
        "image": spec.runtime.image,
        "args": list(spec.runtime.args),
    }
    blob = json.dumps(fields, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def config_of(spec: SpeculativeModelSpec) -> RunningConfig:
    """The spec's config and its hash, with what its pods are rendered from (which the
    hash leaves out)."""
    return RunningConfig(
        hash=config_hash(spec),
        method=spec.draft.method,
        draft_model=spec.draft.model,
        image=spec.runtime.image,
        args=list(spec.runtime.args),
        pods=pods_of(spec),
    )


def target_changes(spec: SpeculativeModelSpec, running: RunningConfig) -> str | None:
    """The target model (or the name it is served as) the spec changes from the one the
    running config's pods serve, in words; None when it is the same, or unknown (a status
    written before the running config kept its pods)."""
    if running.pods is None or running.pods.model == spec.model:
        return None
    before, after = running.pods.model, spec.model
    words = f"model.name {before.name!r} -> {after.name!r}"
    if before.served_name != after.served_name:
        words += f", model.servedName {before.served_name!r} -> {after.served_name!r}"
    return words


def changes(before: RunningConfig, after: RunningConfig) -> str:
    """What a config change changes, in words."""
    words = [
        f"{name} {old!r} -> {new!r}"
        for name, old, new in (
            ("draft.method", before.method.value, after.method.value),
            ("draft.model", before.draft_model, after.draft_model),
            ("runtime.image", before.image, after.image),
            ("runtime.args", before.args, after.args),
        )
        if old != new
    ]
    return ", ".join(words) or "no field"
