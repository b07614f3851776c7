"""A model's config: the spec fields whose change is a config change (draft.method,
draft.model, runtime.image, runtime.args), named by a hash, and the model as the stable
pods run it while a new config is on trial or was rejected (docs/rollouts.md)."""

from __future__ import annotations

import hashlib
import json

from specfleet.operator.api import (
    RunningConfig,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.children import Track

# The annotation that forces a config through without a trial: its value is the hash.
FORCE_CONFIG_ANNOTATION = "specfleet.io/force-config"


def config_of(spec: SpeculativeModelSpec) -> RunningConfig:
    """The spec's config and its hash: equal fields, equal hash, on every operator."""
    fields = {
        "method": spec.draft.method.value,
        "draftModel": spec.draft.model,
        "image": spec.runtime.image,
        "args": list(spec.runtime.args),
    }
    blob = json.dumps(fields, sort_keys=True).encode()
    return RunningConfig(
        hash=hashlib.sha256(blob).hexdigest()[:12],
        method=spec.draft.method,
        draft_model=spec.draft.model,
        image=spec.runtime.image,
        args=list(spec.runtime.args),
    )


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


def track_config(
    spec: SpeculativeModelSpec, status: SpeculativeModelStatus, track: Track
) -> RunningConfig | None:
    """The config a track's pods run when it is not the spec's (None: the spec's): the
    config on trial on its canary (or, switched in place, on the stable pods), else the
    last good one on both tracks, so that a K trial after a rejection measures the
    config the stable pods run."""
    state = status.config
    if state is None:
        return None
    trial = state.trial
    if trial is not None and (track == "canary" or (trial.in_place and trial.switched)):
        return None if trial.config.hash == config_of(spec).hash else trial.config
    if state.running.hash == config_of(spec).hash:
        return None
    return state.running


def as_track_runs(model: SpeculativeModel, track: Track) -> SpeculativeModel:
    """The model with the config a track's pods run in place of the spec's: the spec
    says the new config, the stable pods keep the last good one until it is promoted."""
    running = track_config(model.spec, model.status, track)
    if running is None:
        return model
    spec = model.spec
    draft = spec.draft.model_copy(update={"method": running.method, "model": running.draft_model})
    runtime = spec.runtime.model_copy(update={"image": running.image, "args": running.args})
    return model.model_copy(
        update={"spec": spec.model_copy(update={"draft": draft, "runtime": runtime})}
    )
