"""The GPUs a model takes at peak, from its spec alone: its stable replicas (pods, or
LeaderWorkerSet groups across nodes), the replicas a rollout adds (runtime.rollingUpdate's
maxSurge) and a canary replica while a trial runs. Pure, so `specfleet validate` can say
it before anything is applied."""

from __future__ import annotations

import math

from specfleet.operator.api import (
    Capacity,
    DraftMethod,
    RolloutStrategy,
    SpeculativeModelSpec,
    TuningStrategy,
)


def in_words(found: Capacity) -> str:
    """One line for people: `specfleet validate` prints it."""
    replica = f"{found.per_replica} a replica"
    if found.pods_per_replica > 1:
        replica += f", a group of {found.pods_per_replica} pods"
    parts = f"{found.stable} stable + {found.surge} surge + {found.canary} canary"
    return f"GPUs at peak: {found.peak} {found.resource} ({replica}: {parts})"


def capacity(spec: SpeculativeModelSpec) -> Capacity:
    """Its GPUs at peak: a rollout of the stable replicas while a canary runs (a spec
    change that rolls them during a trial, or a promotion, whose new replicas start while
    the canary's stop)."""
    runtime = spec.runtime
    replicas = spec.replicas
    per_replica = runtime.gpus * runtime.parallelism.nodes_per_replica
    surge = _surge(runtime.rolling_update.max_surge, replicas)
    canary = 1 if _may_run_a_canary(spec) else 0
    return Capacity(
        resource=runtime.gpu_source,
        per_replica=per_replica,
        pods_per_replica=runtime.parallelism.nodes_per_replica,
        stable=replicas,
        surge=surge,
        canary=canary,
        peak=per_replica * (replicas + surge + canary),
    )


def _surge(max_surge: str | int, replicas: int) -> int:
    """Replicas above `replicas` during a rollout: a percentage rounds up, as Deployments
    and LeaderWorkerSets round it, and a rollout never adds more than it replaces."""
    if isinstance(max_surge, str):
        max_surge = math.ceil(replicas * int(max_surge.removesuffix("%")) / 100)
    return min(max_surge, replicas)


def _may_run_a_canary(spec: SpeculativeModelSpec) -> bool:
    """A K trial runs on a canary unless tuning is InPlace (or K is not tuned); a config
    trial unless rollouts are Immediate (an InPlace one takes a canary while speculation
    is off) or the model decodes plainly (its configs are adopted without a trial)."""
    method = spec.draft.method
    k_trials = method.tuned and spec.tuning.strategy is not TuningStrategy.IN_PLACE
    config_trials = (
        spec.rollout.strategy is not RolloutStrategy.IMMEDIATE and method is not DraftMethod.NONE
    )
    return k_trials or config_trials
