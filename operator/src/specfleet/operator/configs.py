"""A model's config: the spec fields whose change is a config change (draft.method,
draft.model, runtime.image, runtime.args), named by a hash, with the whole of what its
pods are rendered from (`PodsConfig`), so that the stable pods run a config kept while a
new one is on trial or was rejected (docs/rollouts.md; `track_specs`) as it last ran,
never some fields of one commit and the rest of the next."""

from __future__ import annotations

import hashlib
import json

from specfleet.operator.api import (
    ConfigState,
    PodsConfig,
    RunningConfig,
    SpeculativeModelSpec,
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


def track_specs(
    spec: SpeculativeModelSpec, state: ConfigState | None
) -> tuple[SpeculativeModelSpec, SpeculativeModelSpec]:
    """The spec as the stable and the canary pods run it, by status' config `state`."""
    own = config_hash(spec)
    return _runs(spec, state, "stable", own), _runs(spec, state, "canary", own)


def _running(state: ConfigState | None, track: Track, own: str) -> RunningConfig | None:
    """The config a track's pods run when it is not the spec's (hash `own`; None: the
    spec's): the config on trial on its canary (or, switched in place, on the stable
    pods), else the last good one on both tracks, so that a K trial after a rejection
    measures the config the stable pods run."""
    if state is None:
        return None
    trial = state.trial
    switched = trial is not None and trial.stable_runs_candidate
    if trial is not None and (track == "canary" or switched):
        return None if trial.config.hash == own else trial.config
    if state.running.hash == own:
        return None
    return state.running


def _runs(
    spec: SpeculativeModelSpec, state: ConfigState | None, track: Track, own: str
) -> SpeculativeModelSpec:
    """The spec as a track's pods run it. A running config from before it kept its pods:
    its four fields alone over the spec's."""
    running = _running(state, track, own)
    if running is None:
        return spec
    pods = running.pods
    target = pods.model if pods is not None else spec.model
    draft = (pods.draft if pods is not None else spec.draft).model_copy(
        update={"method": running.method, "model": running.draft_model}
    )
    runtime = (pods.runtime if pods is not None else spec.runtime).model_copy(
        update={"image": running.image, "args": running.args}
    )
    update = {"model": target, "draft": draft, "runtime": runtime}
    return spec.model_copy(update=update)
