"""The runtime container a track's pods run, rendered from what the track runs (its spec,
method, K and schedule: `track_plan.TrackPlan`, which keeps it and its hash), and the
config hash that names it on the pods (`render.CONFIG_HASH_ANNOTATION`): a pod with
another hash runs another config. Pure: a function of the spec and the track's plan."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from specfleet.operator import podspec, schedule
from specfleet.operator.api import (
    DraftMethod,
    ScheduledBand,
    SpeculativeModelSpec,
    SuffixDecoding,
)
from specfleet.runtime.config import Method, RuntimeConfig

CONTAINER_NAME = "runtime"
# vLLM loads weights before /health answers: allow up to 30 minutes for start-up.
STARTUP_PERIOD_SECONDS = 5
STARTUP_FAILURE_THRESHOLD = 360
# What LeaderWorkerSet tells a group's containers: the leader's address.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"


def spans_nodes(spec: SpeculativeModelSpec) -> bool:
    """Each replica is a LeaderWorkerSet group across nodes, not a pod."""
    return spec.runtime.parallelism.nodes_per_replica > 1


def runtime_config(
    spec: SpeculativeModelSpec,
    method: DraftMethod,
    tokens: int,
    batch_schedule: list[ScheduledBand] | None = None,
    hot: bool = False,
) -> RuntimeConfig:
    """The runtime's config contract for one track; pods listen on every address they
    have (no --host: the runtime's config.listen_host, from POD_IP's family). `hot`: the
    engine takes K hot, so `tokens` is its ceiling and `batch_schedule` the startup one."""
    draft = spec.draft
    runtime = method.runtime
    suffix = draft.suffix if runtime is Method.SUFFIX and draft.suffix else SuffixDecoding()
    return RuntimeConfig(
        model=spec.model.name,
        served_model_name=spec.model.served_name or spec.model.name,
        method=runtime,
        draft_model=draft.model if runtime.takes_draft_model else None,
        num_speculative_tokens=tokens if runtime.speculates else None,
        draft_tensor_parallel_size=draft.tensor_parallel_size if runtime.learned_draft else None,
        draft_sample_method=draft.sample_method if runtime.learned_draft else None,
        rejection_sample_method=draft.rejection_sample_method if runtime.speculates else None,
        adaptive_verification=bool(draft.adaptive_verification),
        prompt_lookup_min=draft.prompt_lookup_min if runtime.prompt_lookup else None,
        prompt_lookup_max=draft.prompt_lookup_max if runtime.prompt_lookup else None,
        suffix_max_tree_depth=suffix.max_tree_depth,
        suffix_max_cached_requests=suffix.max_cached_requests,
        suffix_max_spec_factor=suffix.max_spec_factor,
        suffix_min_token_prob=suffix.min_token_prob,
        tensor_parallel_size=spec.runtime.tensor,
        pipeline_parallel_size=spec.runtime.parallelism.pipeline,
        data_parallel_size=spec.runtime.parallelism.data,
        nnodes=spec.runtime.parallelism.nodes_per_replica,
        master_addr=f"$({LEADER_ADDRESS_ENV})" if spans_nodes(spec) else None,
        port=spec.runtime.port,
        extra_args=tuple(spec.runtime.args),
        # With data parallel ranks vLLM runs one K: a schedule left in status from before
        # (until the tuner restarts from the spec) is not rendered, its largest K is.
        batch_schedule=(
            schedule.entries(batch_schedule)
            if batch_schedule and runtime.speculates and spec.runtime.parallelism.data == 1
            else ()
        ),
        hot_schedule=hot,
    )


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def container(
    spec: SpeculativeModelSpec,
    method: DraftMethod,
    tokens: int,
    batch_schedule: list[ScheduledBand] | None,
    hot: bool,
) -> dict[str, Any]:
    """The serving container of pods that run `spec` with `method` at K=tokens."""
    runtime = spec.runtime
    probes = runtime.pod.probes
    return {
        "name": CONTAINER_NAME,
        "image": runtime.image,
        "command": podspec.command(spec),
        "args": runtime_config(spec, method, tokens, batch_schedule, hot).to_args(),
        "env": podspec.environment(spec),
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
        "resources": podspec.container_resources(spec),
        "startupProbe": podspec.with_timings(
            _probe("/health", STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD), probes.startup
        ),
        "readinessProbe": podspec.with_timings(_probe("/health", 5, 3), probes.readiness),
        "livenessProbe": podspec.with_timings(_probe("/health", 10, 6), probes.liveness),
        **({"lifecycle": hook} if (hook := podspec.lifecycle(spec)) else {}),
        # The runtime writes a one-line preflight failure here; the operator shows it.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": podspec.container_security(spec),
        "volumeMounts": podspec.volume_mounts(spec),
    }


def config_hash(rendered: dict[str, Any]) -> str:
    """Changes whenever the rendered runtime configuration does, to roll the pods."""
    blob = json.dumps(rendered, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
