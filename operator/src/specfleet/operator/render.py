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
import re
from collections.abc import Collection
from typing import Any

from specfleet.operator import podspec
from specfleet.operator.api import (
    API_VERSION,
    KIND,
    SpeculativeModel,
)
from specfleet.operator.children import (
    DEPLOYMENT,
    DISRUPTION_BUDGET,
    LEADER_WORKER_SET,
    SERVICE,
    TRACKS,
    Track,
)
from specfleet.operator.runtime_container import spans_nodes
from specfleet.operator.track_plan import TrackPlan, plan
from specfleet.runtime.hot_schedule import ENV_TOKEN as SCHEDULE_TOKEN_ENV

Manifest = dict[str, Any]

# Pod labels the operator puts on every pod; a Prometheus scraping them relabels these
# to `model` and `track` (plus the usual `namespace` and `pod`).
MODEL_LABEL = "specfleet.io/model"
TRACK_LABEL = "specfleet.io/track"
CONFIG_HASH_ANNOTATION = "specfleet.io/runtime-config-hash"
TOKENS_ANNOTATION = "specfleet.io/speculative-tokens"
COMPONENT = "inference-server"
# What LeaderWorkerSet's pod webhook labels its pods with and tells their containers: the
# index in the group (0: the leader; the leader's address: runtime_container).
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
# A group whose pod restarts is recreated whole: a worker cannot rejoin its leader's
# running process group (vLLM's ranks start together).
GROUP_RESTART_POLICY = "RecreateGroupOnPodRestart"


def canary_name(model_name: str) -> str:
    return f"{model_name}-canary"


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
    leaders = {WORKER_INDEX_LABEL: "0"} if spans_nodes(model.spec) else {}
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


def runs(model: SpeculativeModel, planned: TrackPlan) -> SpeculativeModel:
    """The model as a track's pods run it: with the track's spec."""
    return model.model_copy(update={"spec": planned.spec})


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
    container = planned.container
    if planned.hot and schedule_credential is not None:  # outside the config hash
        credential = {"name": SCHEDULE_TOKEN_ENV, "value": schedule_credential}
        container = container | {"env": [*container["env"], credential]}
    owned = owned_labels(model, track)
    pod = model.spec.runtime.pod
    pod_spec = podspec.pod_spec(model.spec, container, {MODEL_LABEL: model.metadata.name})
    return {
        "metadata": {
            # The user's labels over the recommended ones, under the operator's.
            "labels": recommended_labels(model) | pod.labels | owned,
            "annotations": pod.annotations
            | {
                CONFIG_HASH_ANNOTATION: planned.config_hash,
                TOKENS_ANNOTATION: str(planned.template_tokens),
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
            "strategy": podspec.strategy(model.spec),
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
    rolling = podspec.strategy(model.spec)["rollingUpdate"]
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
    render_track = _leader_worker_set if spans_nodes(model.spec) else _deployment
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
    render_track = _deployment if spans_nodes(model.spec) else _leader_worker_set
    plans = plan(model.spec, model.status)
    retired = []
    for track in tracks:
        manifest = render_track(model, track, plans[track], None)
        manifest["spec"]["replicas"] = 0
        retired.append(manifest)
    return retired


def retired_tracks(model: SpeculativeModel, present: Collection[tuple[str, str]]) -> list[Track]:
    """The tracks whose workload of the kind the model no longer runs is `present`."""
    kind = workload_kind(1 if spans_nodes(model.spec) else 2)
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
