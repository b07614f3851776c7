"""The pod settings of a model's Deployments (spec.runtime.pod, modelCache, injectRuntime,
rollingUpdate): what a track's container holds besides the runtime's config
(runtime_container.py) and what render.py adds around it in the pod template.

Restricted Pod Security by default: a non-root user, no privilege escalation, every
capability dropped, seccomp RuntimeDefault; what vLLM writes (the hub cache, its own
caches under HOME, temp files) goes to volumes, so the image's root file system is
never written. The user's securityContext fields win over the defaults one by one.
"""

from __future__ import annotations

from typing import Any

from specfleet.operator.api import (
    INJECTED_ENV,
    INJECTED_RUNTIME_PATH,
    MODEL_CACHE_PATH,
    ProbeTimings,
    Resources,
    SpeculativeModelSpec,
)
from specfleet.runtime.config import ENV_POD_IP

# The uid vLLM's pods run as unless the pod's securityContext says otherwise: not root,
# and the group that owns the volumes (fsGroup), so a PVC cache is writable.
RUN_AS = 1000
POD_SECURITY_DEFAULT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_DEFAULT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
# Variables render sets unless runtime.env does: HOME, under which vLLM, torch's
# compiler and triton keep their caches (the image's /root is not writable by a non-root
# user), and USER, the name torch asks getpass for (a uid without a passwd entry has none).
DEFAULT_ENV = {"HOME": "/tmp", "USER": "vllm"}
INJECT_VOLUME = "specfleet-runtime"
INJECT_CONTAINER = "specfleet-runtime"
# The runtime's CLI in the serving container: the image's Python when it is injected.
INJECTED_CLI = ["python3", "-m", "specfleet.runtime.cli"]
RUNTIME_CLI = ["specfleet-runtime"]
INJECTED_COMMAND = [*INJECTED_CLI, "serve"]
RUNTIME_COMMAND = [*RUNTIME_CLI, "serve"]
TERMINATION_GRACE_SECONDS = 60
# What the preStop drain leaves of the grace period for vLLM to stop after SIGTERM.
STOP_SECONDS = 10
# What the serving container requests for each resource runtime.resources names neither a
# request nor a limit of, per GPU (at least one GPU's worth): a floor for vLLM's API
# server, engine core and tokenizer around the GPUs, so no pod is BestEffort; the real
# figure for a model (its weights pass through host memory) belongs in runtime.resources.
CPU_PER_GPU = 2
MEMORY_PER_GPU_GI = 8
# The scratch volumes' default size limits: /dev/shm per GPU (vLLM's own Kubernetes
# guide gives 2Gi), /tmp (HOME: compile caches), the emptyDir model cache per GPU (the
# weights fit in the GPUs' memory) and the injected runtime (a few megabytes).
SHM_PER_GPU_GI = 2
TMP_SIZE = "10Gi"
CACHE_PER_GPU_GI = 100
INJECT_SIZE = "256Mi"
# The init container copying the runtime: requests and limits, so quotas that require
# them admit the pod.
INIT_REQUESTS = {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": INJECT_SIZE}
INIT_LIMITS = {"cpu": "1", "memory": "256Mi"}
DEFAULT_SPREAD: dict[str, Any] = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "ScheduleAnyway",
}


def _dump(value: Any) -> Any:
    return value.model_dump(by_alias=True, exclude_none=True, mode="json")


def command(spec: SpeculativeModelSpec) -> list[str]:
    return INJECTED_COMMAND if spec.runtime.inject_runtime else RUNTIME_COMMAND


def termination_grace(spec: SpeculativeModelSpec) -> int:
    given = spec.runtime.pod.termination_grace_period_seconds
    return given if given is not None else TERMINATION_GRACE_SECONDS


def lifecycle(spec: SpeculativeModelSpec) -> dict[str, Any] | None:
    """The preStop hook that lets in-flight requests finish before vLLM gets SIGTERM
    (`specfleet-runtime drain`): for the grace period less STOP_SECONDS; none when the
    grace period leaves no time for it."""
    budget = termination_grace(spec) - STOP_SECONDS
    if budget <= 0:
        return None
    cli = INJECTED_CLI if spec.runtime.inject_runtime else RUNTIME_CLI
    port = spec.runtime.port
    drain = [*cli, "drain", "--port", str(port), "--seconds", str(budget)]
    return {"preStop": {"exec": {"command": drain}}}


def environment(spec: SpeculativeModelSpec) -> list[dict[str, Any]]:
    """The runtime container's variables: the pod's IP (where vLLM listens), the hub token
    from its Secret, what the pod settings need, then the user's runtime.env (HOME and
    USER are defaults the user's env may replace; HF_HOME and PYTHONPATH are owned)."""
    runtime = spec.runtime
    env: list[dict[str, Any]] = [
        {"name": ENV_POD_IP, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    secret = runtime.hf_token_secret_ref
    if secret:
        env.append(
            {
                "name": "HF_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}},
            }
        )
    env.append({"name": "HF_HOME", "value": MODEL_CACHE_PATH})
    given = {var.name for var in runtime.env}
    env += [
        {"name": name, "value": value} for name, value in DEFAULT_ENV.items() if name not in given
    ]
    if runtime.inject_runtime:
        env.append({"name": INJECTED_ENV, "value": INJECTED_RUNTIME_PATH})
    env += [var.model_dump(by_alias=True, exclude_none=True) for var in runtime.env]
    return env


def _gpus(spec: SpeculativeModelSpec) -> int:
    return max(1, spec.runtime.gpus)


def shm_size(spec: SpeculativeModelSpec) -> str:
    given = spec.runtime.pod.scratch.shared_memory
    return str(given) if given is not None else f"{SHM_PER_GPU_GI * _gpus(spec)}Gi"


def tmp_size(spec: SpeculativeModelSpec) -> str:
    given = spec.runtime.pod.scratch.tmp
    return str(given) if given is not None else TMP_SIZE


def cache_size(spec: SpeculativeModelSpec) -> str:
    given = spec.runtime.model_cache.size_limit
    return str(given) if given is not None else f"{CACHE_PER_GPU_GI * _gpus(spec)}Gi"


def with_defaults(
    given: Resources | None, requests: dict[str, str], limits: dict[str, str]
) -> dict[str, dict[str, str]]:
    """`given`'s requests and limits, and the defaults of each resource it names neither
    a request nor a limit of (a default request could exceed the user's limit)."""
    given_requests = {k: str(v) for k, v in given.requests.items()} if given else {}
    given_limits = {k: str(v) for k, v in given.limits.items()} if given else {}
    named = given_requests.keys() | given_limits.keys()
    result: dict[str, dict[str, str]] = {}
    for key, defaults, own in (
        ("requests", requests, given_requests),
        ("limits", limits, given_limits),
    ):
        merged = {k: v for k, v in defaults.items() if k not in named} | own
        if merged:
            result[key] = merged
    return result


# The name of the pods' GPU claim, from runtime.resourceClaimTemplate (DRA).
GPU_CLAIM = "gpus"


def container_resources(spec: SpeculativeModelSpec) -> dict[str, Any]:
    """The serving container's resources: runtime.resources over the default requests,
    and the GPUs (an extended resource: its request equals its limit; or the pod's claim)."""
    runtime = spec.runtime
    defaults = {
        "cpu": str(CPU_PER_GPU * _gpus(spec)),
        "memory": f"{MEMORY_PER_GPU_GI * _gpus(spec)}Gi",
        "ephemeral-storage": tmp_size(spec),
    }
    resources: dict[str, Any] = with_defaults(runtime.resources, defaults, {})
    if runtime.resource_claim_template is not None:
        resources["claims"] = [{"name": GPU_CLAIM}]
    elif runtime.gpus:
        resources.setdefault("requests", {})[runtime.accelerator_resource] = str(runtime.gpus)
        resources.setdefault("limits", {})[runtime.accelerator_resource] = str(runtime.gpus)
    return resources


def with_timings(default: dict[str, Any], timings: ProbeTimings | None) -> dict[str, Any]:
    """A probe with the user's timings over specfleet's."""
    return default | (_dump(timings) if timings else {})


def volume_mounts(spec: SpeculativeModelSpec) -> list[dict[str, Any]]:
    runtime = spec.runtime
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH}
        | ({"readOnly": True} if runtime.model_cache.read_only else {}),
    ]
    if runtime.inject_runtime:
        mounts.append({"name": INJECT_VOLUME, "mountPath": INJECTED_RUNTIME_PATH, "readOnly": True})
    return mounts + [_dump(m) for m in runtime.pod.volume_mounts]


def container_security(spec: SpeculativeModelSpec) -> dict[str, Any]:
    given = spec.runtime.pod.container_security_context
    return CONTAINER_SECURITY_DEFAULT | (_dump(given) if given else {})


def _model_cache_volume(spec: SpeculativeModelSpec) -> dict[str, Any]:
    cache = spec.runtime.model_cache
    if cache.claim_name:
        claim: dict[str, Any] = {"claimName": cache.claim_name}
        if cache.read_only:
            claim["readOnly"] = True
        return {"name": "model-cache", "persistentVolumeClaim": claim}
    if cache.host_path:
        return {
            "name": "model-cache",
            "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"},
        }
    return {"name": "model-cache", "emptyDir": {"sizeLimit": cache_size(spec)}}


def _init_containers(spec: SpeculativeModelSpec) -> list[dict[str, Any]]:
    inject = spec.runtime.inject_runtime
    if inject is None:
        return []
    return [
        {
            "name": INJECT_CONTAINER,
            "image": inject.image,
            "imagePullPolicy": inject.image_pull_policy,
            "command": ["specfleet-runtime", "inject", INJECTED_RUNTIME_PATH],
            "resources": with_defaults(inject.resources, INIT_REQUESTS, INIT_LIMITS),
            "volumeMounts": [{"name": INJECT_VOLUME, "mountPath": INJECTED_RUNTIME_PATH}],
            "securityContext": container_security(spec),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
    ]


def _spread(spec: SpeculativeModelSpec, selector: dict[str, str]) -> list[dict[str, Any]]:
    """The topology spread constraints; one without a labelSelector spreads the model's
    pods. None given: spread them across nodes where the scheduler can (a node lost or
    drained then takes one replica, not all), never leaving a pod Pending for it."""
    given = spec.runtime.pod.topology_spread_constraints
    if given is None:
        return [DEFAULT_SPREAD | {"labelSelector": {"matchLabels": selector}}]
    return [
        _dump(c) if c.label_selector else _dump(c) | {"labelSelector": {"matchLabels": selector}}
        for c in given
    ]


def pod_spec(
    spec: SpeculativeModelSpec, container: dict[str, Any], selector: dict[str, str]
) -> dict[str, Any]:
    """The pod spec around the runtime container; `selector` picks the model's pods (for
    topology spread constraints that name none)."""
    runtime = spec.runtime
    pod = runtime.pod
    manifest: dict[str, Any] = {}
    init = _init_containers(spec)
    if init:
        manifest["initContainers"] = init
    manifest["containers"] = [container]
    manifest["securityContext"] = POD_SECURITY_DEFAULT | (
        _dump(pod.security_context) if pod.security_context else {}
    )
    manifest["terminationGracePeriodSeconds"] = termination_grace(spec)
    # Off unless asked: a Service named vllm sets VLLM_PORT, which vLLM reads as its own;
    # nothing in the pods calls the Kubernetes API.
    manifest["enableServiceLinks"] = pod.enable_service_links
    manifest["automountServiceAccountToken"] = pod.automount_service_account_token
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(spec)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": tmp_size(spec)}},
        _model_cache_volume(spec),
    ]
    if runtime.inject_runtime:
        volumes.append({"name": INJECT_VOLUME, "emptyDir": {"sizeLimit": INJECT_SIZE}})
    manifest["volumes"] = volumes + [_dump(v) for v in pod.volumes]
    if runtime.resource_claim_template is not None:
        # Each pod its own claim, made from the template by Kubernetes' resourceclaim
        # controller and allocated by the scheduler.
        manifest["resourceClaims"] = [
            {"name": GPU_CLAIM, "resourceClaimTemplateName": runtime.resource_claim_template}
        ]
    if runtime.node_selector:
        manifest["nodeSelector"] = dict(runtime.node_selector)
    if runtime.tolerations:
        manifest["tolerations"] = [_dump(t) for t in runtime.tolerations]
    if pod.affinity is not None and (affinity := _dump(pod.affinity)):
        manifest["affinity"] = affinity
    spread = _spread(spec, selector)
    if spread:
        manifest["topologySpreadConstraints"] = spread
    if pod.image_pull_secrets:
        manifest["imagePullSecrets"] = [_dump(s) for s in pod.image_pull_secrets]
    optional = {
        "serviceAccountName": pod.service_account_name,
        "priorityClassName": pod.priority_class_name,
        "runtimeClassName": pod.runtime_class_name,
        "schedulerName": pod.scheduler_name,
    }
    manifest.update({key: value for key, value in optional.items() if value is not None})
    return manifest


def strategy(spec: SpeculativeModelSpec) -> dict[str, Any]:
    return {"type": "RollingUpdate", "rollingUpdate": _dump(spec.runtime.rolling_update)}
