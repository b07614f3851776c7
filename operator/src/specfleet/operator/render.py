"""Render a SpeculativeModel's children: a pure function of the model and its status.

For a model `m`: Deployment `m` (track=stable, the K in effect), Deployment
`m-canary` (track=canary, the candidate K, 0 replicas without a candidate),
Service `m` selecting both tracks, so the canary sees the stable pods' traffic mix, and
PodDisruptionBudget `m` for the stable pods. A model whose replicas span nodes
(runtime.parallelism.nodesPerReplica above 1) has LeaderWorkerSets `m-stable` and
`m-canary` instead of the Deployments, each replica a group of a leader (vLLM's API
server and rank 0) and workers (headless ranks joining it); the Service selects leaders.
Every child carries an owner reference to `m`; the garbage collector deletes them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Collection
from typing import Any

from specfleet.operator import podspec, schedule
from specfleet.operator.api import (
    API_VERSION,
    KIND,
    DraftMethod,
    ScheduledBand,
    SpeculativeModel,
    SuffixDecoding,
)
from specfleet.operator.children import (
    DEPLOYMENT,
    DISRUPTION_BUDGET,
    LEADER_WORKER_SET,
    SERVICE,
    TRACKS,
    Track,
)
from specfleet.operator.track_plan import TrackPlan, TrackPlans, plan
from specfleet.runtime.config import Method, RuntimeConfig
from specfleet.runtime.hot_schedule import ENV_TOKEN as SCHEDULE_TOKEN_ENV

Manifest = dict[str, Any]

# Pod labels the operator puts on every pod; a Prometheus scraping them relabels these
# to `model` and `track` (plus the usual `namespace` and `pod`).
MODEL_LABEL = "specfleet.io/model"
TRACK_LABEL = "specfleet.io/track"
CONFIG_HASH_ANNOTATION = "specfleet.io/runtime-config-hash"
TOKENS_ANNOTATION = "specfleet.io/speculative-tokens"
CONTAINER_NAME = "runtime"
COMPONENT = "inference-server"
# vLLM loads weights before /health answers: allow up to 30 minutes for start-up.
STARTUP_PERIOD_SECONDS = 5
STARTUP_FAILURE_THRESHOLD = 360
# What LeaderWorkerSet's pod webhook labels its pods with and tells their containers: the
# index in the group (0: the leader) and the leader's address.
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
# A group whose pod restarts is recreated whole: a worker cannot rejoin its leader's
# running process group (vLLM's ranks start together).
GROUP_RESTART_POLICY = "RecreateGroupOnPodRestart"


def canary_name(model_name: str) -> str:
    return f"{model_name}-canary"


def spans_nodes(model: SpeculativeModel) -> bool:
    """Each replica is a LeaderWorkerSet group across nodes, not a pod."""
    return model.spec.runtime.parallelism.nodes_per_replica > 1


def workload_kind(nodes_per_replica: int) -> str:
    """A track's workload: a Deployment, or a LeaderWorkerSet where replicas span nodes."""
    return LEADER_WORKER_SET.kind if nodes_per_replica > 1 else DEPLOYMENT.kind


def workload_ref(name: str, kind: str, track: Track) -> tuple[str, str]:
    """The kind and name of model `name`'s workload of `kind` for a track. A stable
    LeaderWorkerSet is not named `name`: LeaderWorkerSet makes a headless Service of its
    own name, whose DNS names the workers reach their leader by, and `name` is the
    model's Service."""
    if kind == LEADER_WORKER_SET.kind:
        return kind, f"{name}-{track}"
    return kind, name if track == "stable" else canary_name(name)


def serving_selector(model: SpeculativeModel) -> dict[str, str]:
    """The labels of the pods that serve: every pod of the model, or a group's leader."""
    leaders = {WORKER_INDEX_LABEL: "0"} if spans_nodes(model) else {}
    return {MODEL_LABEL: model.metadata.name} | leaders


def image_version(image: str) -> str | None:
    """The tag of an image reference as a label value (at most 63 characters, starting
    and ending with a letter or digit); None for an image without a tag (a digest)."""
    reference = image.partition("@")[0]
    name, _, tag = reference.rpartition(":")
    if not name or "/" in tag:  # no tag, or the colon was a registry's port
        return None
    value = re.sub(r"[^A-Za-z0-9_.-]", "", tag)[:63].strip("_.-")
    return value or None


def recommended_labels(model: SpeculativeModel) -> dict[str, str]:
    """Kubernetes' recommended labels besides the operator's own: what the pods are part
    of, their role, the serving image's tag. runtime.pod.labels may replace them on the
    pods."""
    result = {
        "app.kubernetes.io/component": COMPONENT,
        "app.kubernetes.io/part-of": "specfleet",
    }
    version = image_version(model.spec.runtime.image)
    if version:
        result["app.kubernetes.io/version"] = version
    return result


def owned_labels(model: SpeculativeModel, track: Track | None = None) -> dict[str, str]:
    """The labels the operator selects and tells the pods apart by (api.OPERATOR_LABELS
    and specfleet.io/*): runtime.pod.labels may not set them."""
    result = {
        "app.kubernetes.io/name": "specfleet-runtime",
        "app.kubernetes.io/instance": model.metadata.name,
        "app.kubernetes.io/managed-by": "specfleet",
        MODEL_LABEL: model.metadata.name,
    }
    if track:
        result[TRACK_LABEL] = track
    return result


def labels(model: SpeculativeModel, track: Track | None = None) -> dict[str, str]:
    """Every child's labels: the recommended ones and the operator's own."""
    return recommended_labels(model) | owned_labels(model, track)


def pod_selector(model: SpeculativeModel, track: Track) -> dict[str, str]:
    """The labels that select one track's pods: its Deployment's selector."""
    return {MODEL_LABEL: model.metadata.name, TRACK_LABEL: track}


def scale_selector(model: SpeculativeModel) -> str:
    """The stable pods (a group's leaders) as a label selector string: what the scale
    subresource reports, so that an HPA averaging pod metrics counts the pods
    `spec.replicas` counts."""
    selector = pod_selector(model, "stable") | serving_selector(model)
    return ",".join(f"{key}={value}" for key, value in selector.items())


def owner_references(model: SpeculativeModel) -> list[dict[str, Any]]:
    """The model as its children's controller; none for a model not read from a cluster
    (`specfleet render`): it has no uid yet, and the API server refuses an empty one."""
    if not model.metadata.uid:
        return []
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": model.metadata.name,
            "uid": model.metadata.uid,
            "controller": True,
        }
    ]


def runtime_config(
    model: SpeculativeModel,
    method: DraftMethod,
    tokens: int,
    batch_schedule: list[ScheduledBand] | None = None,
    hot: bool = False,
) -> RuntimeConfig:
    """The runtime's config contract for one track; pods listen on every address they
    have (no --host: the runtime's config.listen_host, from POD_IP's family). `hot`: the
    engine takes K hot, so `tokens` is its ceiling and `batch_schedule` the startup one."""
    spec = model.spec
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
        master_addr=f"$({LEADER_ADDRESS_ENV})" if spans_nodes(model) else None,
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


def _container(
    model: SpeculativeModel,
    method: DraftMethod,
    tokens: int,
    batch_schedule: list[ScheduledBand] | None,
    hot: bool,
) -> dict[str, Any]:
    runtime = model.spec.runtime
    probes = runtime.pod.probes
    return {
        "name": CONTAINER_NAME,
        "image": runtime.image,
        "command": podspec.command(model),
        "args": runtime_config(model, method, tokens, batch_schedule, hot).to_args(),
        "env": podspec.environment(model),
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
        "resources": podspec.container_resources(model),
        "startupProbe": podspec.with_timings(
            _probe("/health", STARTUP_PERIOD_SECONDS, STARTUP_FAILURE_THRESHOLD), probes.startup
        ),
        "readinessProbe": podspec.with_timings(_probe("/health", 5, 3), probes.readiness),
        "livenessProbe": podspec.with_timings(_probe("/health", 10, 6), probes.liveness),
        **({"lifecycle": hook} if (hook := podspec.lifecycle(model)) else {}),
        # The runtime writes a one-line preflight failure here; the operator shows it.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": podspec.container_security(model),
        "volumeMounts": podspec.volume_mounts(model),
    }


def config_hash(container: dict[str, Any]) -> str:
    """Changes whenever the rendered runtime configuration does, to roll the pods."""
    blob = json.dumps(container, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _track_container(model: SpeculativeModel, planned: TrackPlan) -> tuple[int, dict[str, Any]]:
    """K in the track's template and its container; `model` as the track runs it
    (`runs`). Pods that take K hot start at their ceiling for every batch (the runtime's
    default) until the schedule is handed to them as they turn Ready: nothing the tuner
    or a spec edit of speculation.tokens changes is in their template."""
    tokens = model.spec.speculation.max_tokens if planned.hot else planned.tokens
    batch_schedule = None if planned.hot else planned.schedule
    return tokens, _container(model, planned.method, tokens, batch_schedule, planned.hot)


def runs(model: SpeculativeModel, planned: TrackPlan) -> SpeculativeModel:
    """The model as a track's pods run it: with the track's spec."""
    return model.model_copy(update={"spec": planned.spec})


def config_hashes(model: SpeculativeModel, plans: TrackPlans) -> dict[Track, str]:
    """The config hash each track's pods are rendered with (CONFIG_HASH_ANNOTATION): a
    pod with another runs another config, being rolled out or rolled away."""
    hashes = {}
    for track in TRACKS:
        track_model = runs(model, plans[track])
        _, container = _track_container(track_model, plans[track])
        hashes[track] = config_hash(container)
    return hashes


def _child_metadata(model: SpeculativeModel, name: str, child_labels: dict[str, str]) -> Manifest:
    """A child's metadata: its name and labels, in the model's namespace, owned by it."""
    return {
        "name": name,
        "namespace": model.metadata.namespace,
        "labels": child_labels,
        "ownerReferences": owner_references(model),
    }


def _template(
    model: SpeculativeModel, track: Track, planned: TrackPlan, schedule_credential: str | None
) -> Manifest:
    """A track's pod template (a group's leader's, where replicas span nodes); `model` as
    the track runs it (`runs`)."""
    tokens, container = _track_container(model, planned)
    config = config_hash(container)
    if planned.hot and schedule_credential is not None:
        container["env"].append({"name": SCHEDULE_TOKEN_ENV, "value": schedule_credential})
    owned = owned_labels(model, track)
    pod = model.spec.runtime.pod
    pod_spec = podspec.pod_spec(model, container, {MODEL_LABEL: model.metadata.name})
    return {
        "metadata": {
            # The user's labels over the recommended ones, under the operator's.
            "labels": recommended_labels(model) | pod.labels | owned,
            "annotations": pod.annotations
            | {
                CONFIG_HASH_ANNOTATION: config,
                TOKENS_ANNOTATION: str(tokens),
            },
        },
        "spec": pod_spec,
    }


def deployment(
    model: SpeculativeModel, track: Track, schedule_credential: str | None = None
) -> Manifest:
    """One track's Deployment. Under hot switching the stable pods' template holds the
    ceiling (maxTokens), never the K in effect, so a new K does not roll them;
    `schedule_credential` (the operator's, which only it can derive:
    hot_schedules.credential) goes into their environment, outside the config hash."""
    return _deployment(model, track, plan(model.spec, model.status)[track], schedule_credential)


def _deployment(
    model: SpeculativeModel, track: Track, planned: TrackPlan, schedule_credential: str | None
) -> Manifest:
    model = runs(model, planned)  # the last good config but on a config trial
    return {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": _child_metadata(
            model,
            workload_ref(model.metadata.name, DEPLOYMENT.kind, track)[1],
            labels(model, track),
        ),
        "spec": {
            "replicas": planned.replicas,
            "selector": {"matchLabels": pod_selector(model, track)},
            # By default one pod at a time, never below the serving capacity: a rollout
            # borrows one GPU slot rather than dropping a replica (runtime.rollingUpdate).
            "strategy": podspec.strategy(model),
            "template": _template(model, track, planned, schedule_credential),
        },
    }


def _worker_template(leader: Manifest) -> Manifest:
    """A group's workers' pod template: the leader's, its runtime a headless rank (its
    node rank the worker index LeaderWorkerSet gives it) with no API server to probe or
    drain."""
    worker = copy.deepcopy(leader)
    container = worker["spec"]["containers"][0]
    args = container["args"]
    cut = args.index("--") if "--" in args else len(args)
    container["args"] = [*args[:cut], "--node-rank", f"$({WORKER_INDEX_ENV})", *args[cut:]]
    for field in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        container.pop(field, None)
    return worker


def leader_worker_set(
    model: SpeculativeModel, track: Track, schedule_credential: str | None = None
) -> Manifest:
    """One track's LeaderWorkerSet, for replicas that span nodes: a group of
    nodesPerReplica pods a replica, restarted whole when one of its pods restarts, rolled
    like a Deployment (runtime.rollingUpdate, by groups)."""
    planned = plan(model.spec, model.status)[track]
    return _leader_worker_set(model, track, planned, schedule_credential)


def _leader_worker_set(
    model: SpeculativeModel, track: Track, planned: TrackPlan, schedule_credential: str | None
) -> Manifest:
    model = runs(model, planned)
    leader = _template(model, track, planned, schedule_credential)
    rolling = podspec.strategy(model)["rollingUpdate"]
    return {
        "apiVersion": LEADER_WORKER_SET.api_version,
        "kind": LEADER_WORKER_SET.kind,
        "metadata": _child_metadata(
            model,
            workload_ref(model.metadata.name, LEADER_WORKER_SET.kind, track)[1],
            labels(model, track),
        ),
        "spec": {
            "replicas": planned.replicas,
            "leaderWorkerTemplate": {
                "size": model.spec.runtime.parallelism.nodes_per_replica,
                "restartPolicy": GROUP_RESTART_POLICY,
                "leaderTemplate": leader,
                "workerTemplate": _worker_template(leader),
            },
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": rolling},
        },
    }


def workload(
    model: SpeculativeModel, track: Track, schedule_credential: str | None = None
) -> Manifest:
    """A track's Deployment, or its LeaderWorkerSet where replicas span nodes."""
    planned = plan(model.spec, model.status)[track]
    return _workload(model, track, planned, schedule_credential)


def _workload(
    model: SpeculativeModel, track: Track, planned: TrackPlan, schedule_credential: str | None
) -> Manifest:
    render_track = _leader_worker_set if spans_nodes(model) else _deployment
    return render_track(model, track, planned, schedule_credential)


def retired_workloads(
    model: SpeculativeModel, present: Collection[tuple[str, str]]
) -> list[Manifest]:
    """The tracks' workloads of the kind the model no longer runs (its nodesPerReplica
    changed between 1 and more), of those `present` (kind, name), scaled to 0: their pods
    would otherwise hold their GPUs beside the new ones. Kept, not deleted (the operator
    deletes nothing), as the canary's workload is between trials."""
    # Rendered only where present: nearly always none, and every reconcile asks.
    tracks = retired_tracks(model, present)
    if not tracks:
        return []
    render_track = _deployment if spans_nodes(model) else _leader_worker_set
    plans = plan(model.spec, model.status)
    retired = []
    for track in tracks:
        manifest = render_track(model, track, plans[track], None)
        manifest["spec"]["replicas"] = 0
        retired.append(manifest)
    return retired


def retired_tracks(model: SpeculativeModel, present: Collection[tuple[str, str]]) -> list[Track]:
    """The tracks whose workload of the kind the model no longer runs is `present`."""
    kind = workload_kind(1 if spans_nodes(model) else 2)
    return [t for t in TRACKS if workload_ref(model.metadata.name, kind, t) in present]


def service(model: SpeculativeModel) -> Manifest:
    return {
        "apiVersion": SERVICE.api_version,
        "kind": SERVICE.kind,
        "metadata": _child_metadata(model, model.metadata.name, labels(model)),
        "spec": {
            "selector": serving_selector(model),
            "ports": [
                {"name": "http", "port": model.spec.runtime.port, "targetPort": "http"},
            ],
        },
    }


def disruption_budget(model: SpeculativeModel) -> Manifest:
    """The stable pods' PodDisruptionBudget: a drain evicts at most maxUnavailable of them
    at once, and any that is not Ready (AlwaysAllow), so a pod that cannot start never
    blocks a drain. The canary is left out: a trial it ends is tried again."""
    return {
        "apiVersion": DISRUPTION_BUDGET.api_version,
        "kind": DISRUPTION_BUDGET.kind,
        "metadata": _child_metadata(model, model.metadata.name, labels(model)),
        "spec": {
            "maxUnavailable": model.spec.runtime.disruption_budget.max_unavailable,
            "selector": {"matchLabels": pod_selector(model, "stable")},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def manifests(model: SpeculativeModel, schedule_credential: str | None = None) -> list[Manifest]:
    """Every child the model should have, in the order they are applied. The canary workload
    always exists (scaled to 0 without a candidate) so its history stays in one object."""
    plans = plan(model.spec, model.status)
    return [
        _workload(model, "stable", plans.stable, schedule_credential),
        _workload(model, "canary", plans.canary, None),
        service(model),
        disruption_budget(model),
    ]
