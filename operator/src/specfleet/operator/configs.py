"""A model's config: the spec fields whose change is a config change (draft.method,
draft.model, runtime.image, runtime.args), named by a hash, and the model as the stable
pods run it while a new config is on trial or was rejected (docs/rollouts.md): the whole
of what its pods are rendered from as it last ran (`PodsConfig`), never some fields of
one commit and the rest of the next."""

from __future__ import annotations

import hashlib
import json

from specfleet.operator.api import (
    PodsConfig,
    RunningConfig,
    SpeculativeModel,
    SpeculativeModelSpec,
    SpeculativeModelStatus,
)
from specfleet.operator.children import Track

# The annotation that forces a config through without a trial: its value is the hash.
FORCE_CONFIG_ANNOTATION = "specfleet.io/force-config"


def pods_of(spec: SpeculativeModelSpec) -> PodsConfig:
    """What the spec's pods are rendered from, K and replicas aside."""
    return PodsConfig(
        model=spec.model.model_copy(deep=True),
        draft=spec.draft.model_copy(deep=True),
        runtime=spec.runtime.model_copy(deep=True),
    )


def config_of(spec: SpeculativeModelSpec, pods: bool = True) -> RunningConfig:
    """The spec's config and its hash: equal fields, equal hash, on every operator; with
    what its pods are rendered from (`pods`), which the hash leaves out."""
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
        pods=pods_of(spec) if pods else None,
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
    says the new config, the stable pods keep the last good one until it is promoted,
    rendered whole from what it last ran with (target, draft, runtime: image, args,
    injected runtime, pod settings...), not from the spec's other fields of the new
    commit. A running config from before it kept its pods: its four fields alone."""
    running = track_config(model.spec, model.status, track)
    if running is None:
        return model
    spec = model.spec
    pods = running.pods
    target = pods.model if pods is not None else spec.model
    draft = (pods.draft if pods is not None else spec.draft).model_copy(
        update={"method": running.method, "model": running.draft_model}
    )
    runtime = (pods.runtime if pods is not None else spec.runtime).model_copy(
        update={"image": running.image, "args": running.args}
    )
    update = {"model": target, "draft": draft, "runtime": runtime}
    return model.model_copy(update={"spec": spec.model_copy(update=update)})
