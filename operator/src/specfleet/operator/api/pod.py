"""Pod settings (spec.runtime.pod and the runtime container's env and resources):
the core/v1 types a model's pods take as written, checked as the API server checks a
pod's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from specfleet.operator.api.common import (
    DNS_1123_LABEL,
    DNS_1123_SUBDOMAIN,
    ENV_NAME_PATTERN,
    LABEL_KEY_PATTERN,
    LABEL_KEY_PREFIX_MAX,
    LABEL_KEY_WORDS,
    NODE_SELECTOR_MAX,
    LabelValue,
    Matching,
    NonEmptyString,
    Quantity,
    SpecModel,
    cel_list,
    in_words,
    is_label_key,
    quantity_value,
)
from specfleet.operator.rules import CheckedAnnotation, Refusal, Rule

# The runtime's config is the contract the operator renders; the API shares its
# vocabulary rather than keeping a second copy.
from specfleet.runtime.config import (
    ENV_POD_IP,
)

# The name of a Secret, a ServiceAccount, a PriorityClass...: a DNS-1123 subdomain, as
# the API server checks it, said in words offline.
ObjectName = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(
        f"^{DNS_1123_SUBDOMAIN}$",
        "an object's name: a DNS-1123 subdomain (lower case letters, digits, '-' and '.')",
    ),
]


# A key of a ConfigMap's or Secret's data, as the API server's IsConfigMapKey.
DataKey = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(
        "^[-._a-zA-Z0-9]+$", "a ConfigMap's or Secret's key: letters, digits, '-', '_' and '.'"
    ),
]


class SecretKeyRef(SpecModel):
    name: ObjectName = Field(description="Secret name in the model's namespace.")
    key: DataKey = Field(default="token", description="Key holding the token.")


# The environment render gives every runtime container, each with why a user's entry
# of that name may not replace it (an entry later in the list would win).
RENDERED_ENV = {
    ENV_POD_IP: "the pod's IP, from whose family the runtime picks where vLLM listens (every "
    "address of the pod)",
    "HF_TOKEN": "set from runtime.hfTokenSecretRef: name the Secret there",
    "HF_HOME": "the model cache (runtime.modelCache)",
}


class EnvVar(SpecModel):
    """An environment variable for the runtime container (value or valueFrom)."""

    rules: ClassVar[tuple[Rule[EnvVar], ...]] = (
        Rule(
            f"!(self.name in {cel_list(list(RENDERED_ENV))})",
            "runtime.env may not set a variable specfleet renders: "
            + "; ".join(f"{name} is {why}" for name, why in RENDERED_ENV.items()),
            lambda var: var.name not in RENDERED_ENV,
            ".name",
            found=lambda var: var.name,
            refusals=(
                Refusal("env-pod-ip", {"spec.runtime.env": [{"name": "POD_IP", "value": "1"}]}),
                Refusal(
                    "env-hf-token",
                    {
                        "spec.runtime.env": [
                            {"name": "A", "value": "1"},
                            {"name": "HF_TOKEN", "value": "hf_x"},
                        ]
                    },
                ),
            ),
        ),
        Rule(
            "!has(self.valueFrom) || !has(self.value) || self.value == ''",
            "runtime.env: a variable takes value or valueFrom, not both (the API server "
            "refuses the pods)",
            lambda var: var.value_from is None or not var.value,
            ".valueFrom",
            found=lambda var: var.name,
            refusals=(
                Refusal(
                    "env-value-and-value-from",
                    {
                        "spec.runtime.env": [
                            {
                                "name": "A",
                                "value": "1",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    name: Annotated[
        str,
        StringConstraints(min_length=1, max_length=256),
        Matching(ENV_NAME_PATTERN, "printable ASCII characters other than '='"),
    ]
    value: str | None = None
    value_from: EnvVarSource | None = None


@dataclass(frozen=True)
class UniqueNames(CheckedAnnotation):
    """A list of named items keyed by name, as Kubernetes keys it (server-side apply
    refuses two items of one name): a map-list in the CRD, checked offline in words."""

    what: str

    def check(self, items: list[Any]) -> list[Any]:
        names = [item.name for item in items]
        twice = next((name for name in names if names.count(name) > 1), None)
        if twice is not None:
            raise ValueError(
                f"must not name a {self.what} twice (found {twice!r} twice): Kubernetes keys "
                "them by name and refuses the pods; keep one"
            )
        return items

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["x-kubernetes-list-type"] = "map"
        json_schema["x-kubernetes-list-map-keys"] = ["name"]
        return json_schema


def _toleration_refusal(id: str, toleration: dict[str, Any]) -> Refusal:
    return Refusal(id, {"spec.runtime.tolerations": [toleration]})


class Toleration(SpecModel):
    """A core/v1 Toleration, checked as the API server checks the pods'."""

    rules: ClassVar[tuple[Rule[Toleration], ...]] = (
        Rule(
            "has(self.key) && self.key != '' || has(self.operator) && self.operator == 'Exists'",
            "runtime.tolerations: a toleration without a key (it matches every taint) needs "
            "operator Exists",
            lambda t: bool(t.key) or t.operator == "Exists",
            ".operator",
            refusals=(_toleration_refusal("toleration-no-key-equal", {"value": "x"}),),
        ),
        Rule(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
            "self.value == ''",
            "runtime.tolerations: a toleration with operator Exists takes no value",
            lambda t: t.operator != "Exists" or not t.value,
            ".value",
            refusals=(
                _toleration_refusal(
                    "toleration-exists-with-value", {"key": "a", "operator": "Exists", "value": "x"}
                ),
            ),
        ),
        Rule(
            "!has(self.tolerationSeconds) || has(self.effect) && self.effect == 'NoExecute'",
            "runtime.tolerations: tolerationSeconds needs effect NoExecute",
            lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
            ".tolerationSeconds",
            refusals=(
                _toleration_refusal(
                    "toleration-seconds-without-no-execute",
                    {"key": "a", "effect": "NoSchedule", "tolerationSeconds": 5},
                ),
            ),
        ),
    )

    key: (
        Annotated[
            str, Matching(f"^$|{LABEL_KEY_PATTERN}", f"empty or a label key: {LABEL_KEY_WORDS}")
        ]
        | None
    ) = None
    operator: Literal["Exists", "Equal"] | None = None
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


# Resource names as the API server takes them: cpu, memory, ephemeral-storage,
# hugepages-<size>, or an extended resource (a domain-prefixed name: nvidia.com/gpu).
EXTENDED_RESOURCE = "[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
RESOURCE_NAME = (
    f"^(cpu|memory|ephemeral-storage|hugepages-[0-9]+([KMGTPE]i|[kMGTPE])?|{EXTENDED_RESOURCE})$"
)
RESOURCES_MAX = 16


def _request_above_limit(r: Resources) -> str | None:
    """The first request above its limit, in words; None: none is."""
    return next(
        (
            f"{name}: {request} > {r.limits[name]}"
            for name, request in r.requests.items()
            if name in r.limits and quantity_value(request) > quantity_value(r.limits[name])
        ),
        None,
    )


def _unknown_resource(r: Resources) -> str | None:
    names = [*r.requests, *r.limits]
    return next((name for name in names if not re.fullmatch(RESOURCE_NAME, name)), None)


class Resources(SpecModel):
    rules: ClassVar[tuple[Rule[Resources], ...]] = (
        Rule(
            f"self.requests.all(k, k.matches('{RESOURCE_NAME}')) && "
            f"self.limits.all(k, k.matches('{RESOURCE_NAME}'))",
            "runtime.resources names cpu, memory, ephemeral-storage, hugepages-<size> or an "
            "extended resource with its domain (example.com/name): the API server refuses "
            "other names",
            lambda r: _unknown_resource(r) is None,
            found=lambda r: repr(_unknown_resource(r)),
            refusals=(
                Refusal(
                    "resources-misspelt-name",
                    {"spec.runtime.resources": {"requests": {"memroy": "1Gi"}}},
                ),
            ),
        ),
        Rule(
            "self.requests.all(k, !(k in self.limits) || "
            "quantity(string(self.requests[k])).compareTo(quantity(string(self.limits[k]))) <= 0)",
            "runtime.resources requests may not exceed their limits: the API server refuses "
            "the pods",
            lambda r: _request_above_limit(r) is None,
            found=lambda r: _request_above_limit(r) or "",
            refusals=(
                Refusal(
                    "resources-request-above-limit",
                    {
                        "spec.runtime.resources": {
                            "requests": {"memory": "2Gi"},
                            "limits": {"memory": "1Gi"},
                        }
                    },
                ),
            ),
        ),
    )

    requests: Annotated[dict[str, Quantity], Field(max_length=RESOURCES_MAX)] = Field(
        default_factory=dict
    )
    limits: Annotated[dict[str, Quantity], Field(max_length=RESOURCES_MAX)] = Field(
        default_factory=dict
    )


NODE_SELECTOR_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.nodeSelector keys must be label keys: {LABEL_KEY_WORDS}",
    lambda selector: all(is_label_key(key) for key in selector),
    found=lambda selector: repr(next(key for key in selector if not is_label_key(key))),
    refusals=(
        Refusal("node-selector-key-with-space", {"spec.runtime.nodeSelector": {"gpu pool": "a"}}),
        Refusal(
            "node-selector-key-bad-prefix",
            {"spec.runtime.nodeSelector": {"Example.com/pool": "a"}},
        ),
    ),
)


# ------------------------------------------------------------------ pod settings
# What platform teams set on inference pods (runtime.pod), passed to the pod template
# as Kubernetes defines it; podspec.py merges it with what the operator owns.

# Labels and annotations the operator puts on the pods: spec.runtime.pod may not set
# them (the selectors, the scrape relabelling and rollouts read them).
OPERATOR_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
)
OPERATOR_PREFIX = "specfleet.io/"
# Volumes and mount paths the operator renders (podspec.py): shared memory, the
# writable temp directory, the model cache and the injected runtime.
OPERATOR_VOLUMES = ("dshm", "tmp", "model-cache", "specfleet-runtime")
MODEL_CACHE_PATH = "/var/cache/specfleet"
INJECTED_RUNTIME_PATH = "/opt/specfleet-runtime"
OPERATOR_MOUNT_PATHS = ("/dev/shm", "/tmp", MODEL_CACHE_PATH, INJECTED_RUNTIME_PATH)
DEFAULT_RUNTIME_IMAGE = "ghcr.io/specfleet/runtime:0.1.0"
# vLLM's own images (vllm/vllm-openai and its variants), which lack specfleet-runtime.
VLLM_IMAGE_PATTERN = "^(docker[.]io/)?vllm/vllm-openai(-[a-z0-9]+)*([:@].*)?$"
# The extended resource runtime.gpus counts when runtime.accelerator is unset.
DEFAULT_ACCELERATOR = "nvidia.com/gpu"
AMD_ACCELERATOR = "amd.com/gpu"
# vLLM's own image for AMD GPUs (ROCm); DEFAULT_RUNTIME_IMAGE is built on its CUDA one.
ROCM_VLLM_IMAGE = "vllm/vllm-openai-rocm:v0.33.0"
# The variable render sets to load the injected runtime (runtime.injectRuntime).
INJECTED_ENV = "PYTHONPATH"
POD_LIST_MAX = 32
# runtime.env's most variables: the API server prices each CEL rule at the most items a
# list may hold, and an unbounded list prices a valueFrom's one-source rule 10x over.
ENV_MAX = 128
PERCENT_PATTERN = r"^[0-9]+%$"


def _operator_key(key: str) -> bool:
    return key.startswith(OPERATOR_PREFIX) or key in OPERATOR_LABELS


def _percent_or_count(value: str | int) -> str | int:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if not re.fullmatch(PERCENT_PATTERN, value):
        raise ValueError("must be a count (2) or a percentage ('25%')")
    return value


CountOrPercent = Annotated[
    str | int,
    AfterValidator(_percent_or_count),
    Field(json_schema_extra={"pattern": PERCENT_PATTERN, "minimum": 0}),
]


class ProbeTimings(SpecModel):
    """Timings of one of the runtime's /health probes (the operator owns what it probes)."""

    initial_delay_seconds: int | None = Field(default=None, ge=0, le=86400)
    period_seconds: int | None = Field(default=None, ge=1, le=3600)
    timeout_seconds: int | None = Field(default=None, ge=1, le=3600)
    failure_threshold: int | None = Field(default=None, ge=1, le=100000)


class Probes(SpecModel):
    """Probe timings; unset values keep specfleet's (startup: every 5s for 30 minutes)."""

    startup: ProbeTimings | None = Field(
        default=None, description="A large model's load takes minutes: raise failureThreshold."
    )
    readiness: ProbeTimings | None = None
    liveness: ProbeTimings | None = None


class LocalObjectReference(SpecModel):
    name: NonEmptyString


class SeccompProfile(SpecModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    localhost_profile: str | None = None


class AppArmorProfile(SpecModel):
    type: Literal["RuntimeDefault", "Localhost", "Unconfined"]
    localhost_profile: str | None = None


class SELinuxOptions(SpecModel):
    user: str | None = None
    role: str | None = None
    type: str | None = None
    level: str | None = None


class WindowsSecurityContextOptions(SpecModel):
    rules: ClassVar[tuple[Rule[WindowsSecurityContextOptions], ...]] = (
        Rule(
            "!has(self.hostProcess) || !self.hostProcess",
            "runtime.pod security contexts may not set windowsOptions.hostProcess: a host "
            "process is the node's; leave it unset",
            lambda w: not w.host_process,
            ".hostProcess",
            refusals=(
                Refusal(
                    "pod-host-process",
                    {"spec.runtime.pod.securityContext": {"windowsOptions": {"hostProcess": True}}},
                ),
            ),
        ),
    )

    gmsa_credential_spec_name: str | None = None
    gmsa_credential_spec: str | None = None
    run_as_user_name: str | None = None
    host_process: bool | None = None


class Sysctl(SpecModel):
    name: NonEmptyString
    value: str


class Capabilities(SpecModel):
    rules: ClassVar[tuple[Rule[Capabilities], ...]] = (
        Rule(
            "!has(self.add) || self.add.all(c, c == 'NET_BIND_SERVICE')",
            "runtime.pod.containerSecurityContext.capabilities.add may add only "
            "NET_BIND_SERVICE (as Pod Security 'restricted'): remove the others",
            lambda c: all(name == "NET_BIND_SERVICE" for name in c.add or []),
            ".add",
            found=lambda c: next(n for n in c.add or [] if n != "NET_BIND_SERVICE"),
            refusals=(
                Refusal(
                    "pod-capability-sys-admin",
                    {
                        "spec.runtime.pod.containerSecurityContext": {
                            "capabilities": {"add": ["SYS_ADMIN"]}
                        }
                    },
                ),
            ),
        ),
    )

    add: list[str] | None = None
    drop: list[str] | None = None


class PodSecurityContext(SpecModel):
    """core/v1 PodSecurityContext. Given, it replaces specfleet's restricted default
    field by field (runAsNonRoot, runAsUser/Group 1000, fsGroup 1000, seccomp
    RuntimeDefault): a field set here wins, the others keep the default."""

    run_as_user: int | None = Field(default=None, ge=0)
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    fs_group: int | None = Field(default=None, ge=0)
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    supplemental_groups: list[int] | None = None
    supplemental_groups_policy: Literal["Merge", "Strict"] | None = None
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: SELinuxOptions | None = None
    se_linux_change_policy: str | None = None
    sysctls: list[Sysctl] | None = None
    windows_options: WindowsSecurityContextOptions | None = None


class SecurityContext(SpecModel):
    """core/v1 SecurityContext of the runtime container. Given, it replaces specfleet's
    restricted default (no privilege escalation, all capabilities dropped) field by field."""

    rules: ClassVar[tuple[Rule[SecurityContext], ...]] = (
        Rule(
            "!has(self.privileged) || !self.privileged",
            "runtime.pod.containerSecurityContext.privileged may not be true: a privileged "
            "container is root on the node; leave it unset (GPUs need no privilege)",
            lambda c: not c.privileged,
            ".privileged",
            refusals=(
                Refusal(
                    "pod-privileged",
                    {"spec.runtime.pod.containerSecurityContext": {"privileged": True}},
                ),
            ),
        ),
    )

    run_as_user: int | None = Field(default=None, ge=0)
    run_as_group: int | None = Field(default=None, ge=0)
    run_as_non_root: bool | None = None
    allow_privilege_escalation: bool | None = None
    privileged: bool | None = None
    read_only_root_filesystem: bool | None = None
    capabilities: Capabilities | None = None
    proc_mount: Literal["Default", "Unmasked"] | None = None
    seccomp_profile: SeccompProfile | None = None
    app_armor_profile: AppArmorProfile | None = None
    se_linux_options: SELinuxOptions | None = None
    windows_options: WindowsSecurityContextOptions | None = None


class LabelSelectorRequirement(SpecModel):
    rules: ClassVar[tuple[Rule[LabelSelectorRequirement], ...]] = (
        Rule(
            "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
            "!has(self.values) || size(self.values) == 0",
            "runtime.pod: a label selector requirement takes values with operator In or "
            "NotIn, none with Exists or DoesNotExist (the API server refuses the pods)",
            lambda r: (len(r.values or []) > 0) == (r.operator in ("In", "NotIn")),
            ".values",
            found=lambda r: f"operator {r.operator}, {len(r.values or [])} values",
            refusals=(
                Refusal(
                    "pod-anti-affinity-exists-with-values",
                    {
                        "spec.runtime.pod.affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "topologyKey": "kubernetes.io/hostname",
                                        "labelSelector": {
                                            "matchExpressions": [
                                                {
                                                    "key": "app",
                                                    "operator": "Exists",
                                                    "values": ["a"],
                                                }
                                            ]
                                        },
                                    }
                                ]
                            }
                        }
                    },
                ),
            ),
        ),
    )

    key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] | None = None


MATCH_LABELS_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod: a label selector's matchLabels keys must be label keys: {LABEL_KEY_WORDS}",
    lambda labels: all(is_label_key(key) for key in labels),
    found=lambda labels: repr(next(key for key in labels if not is_label_key(key))),
    refusals=(
        Refusal(
            "spread-match-labels-key-with-space",
            {
                "spec.runtime.pod.topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"my app": "a"}},
                    }
                ]
            },
        ),
    ),
)


class LabelSelector(SpecModel):
    match_labels: (
        Annotated[dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), MATCH_LABELS_KEYS]
        | None
    ) = None
    match_expressions: (
        Annotated[list[LabelSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None


class TopologySpreadConstraint(SpecModel):
    """core/v1 TopologySpreadConstraint. Without labelSelector, the model's pods (both
    tracks) are the ones spread."""

    rules: ClassVar[tuple[Rule[TopologySpreadConstraint], ...]] = (
        Rule(
            "!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
            "runtime.pod.topologySpreadConstraints: minDomains needs whenUnsatisfiable "
            "DoNotSchedule (the API server refuses the pods)",
            lambda c: c.min_domains is None or c.when_unsatisfiable == "DoNotSchedule",
            ".minDomains",
            refusals=(
                Refusal(
                    "spread-min-domains-schedule-anyway",
                    {
                        "spec.runtime.pod.topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "minDomains": 2,
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    max_skew: int = Field(ge=1)
    topology_key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    match_label_keys: list[str] | None = None
    min_domains: int | None = Field(default=None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None


def _spread_pair(c: TopologySpreadConstraint) -> tuple[str, str]:
    return c.topology_key, c.when_unsatisfiable


SPREAD_PAIRS: Rule[list[TopologySpreadConstraint]] = Rule(
    "self.all(c, self.exists_one(d, d.topologyKey == c.topologyKey && "
    "d.whenUnsatisfiable == c.whenUnsatisfiable))",
    "runtime.pod.topologySpreadConstraints may not repeat a topologyKey with the same "
    "whenUnsatisfiable (the API server refuses the pods)",
    lambda cs: len({_spread_pair(c) for c in cs}) == len(cs),
    found=lambda cs: next(
        c.topology_key for c in cs if [_spread_pair(d) for d in cs].count(_spread_pair(c)) > 1
    ),
    refusals=(
        Refusal(
            "spread-pair-twice",
            {
                "spec.runtime.pod.topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                ]
            },
        ),
    ),
)


# A path as the container runtime resolves it: `/dev/shm/` is `/dev/shm`, which the
# operator already mounts, but the API server compares mount paths as strings.
_CLEAN_PATH = "^/?([^/]+/)*[^/]+$"
_DOT_SEGMENT = "(^|/)[.][.]?(/|$)"


def _is_clean_path(path: str) -> bool:
    return bool(re.fullmatch(_CLEAN_PATH, path)) and not re.search(_DOT_SEGMENT, path)


MOUNT_PATH: Rule[str] = Rule(
    f"self.matches('{_CLEAN_PATH}') && !self.matches('{_DOT_SEGMENT}')",
    "runtime.pod.volumeMounts mountPath must be written clean: no trailing '/', no '//', "
    "no '.' or '..' part (the container sees /dev/shm/ as /dev/shm)",
    _is_clean_path,
    found=repr,
    refusals=(
        Refusal(
            "pod-mount-path-trailing-slash",
            {
                "spec.runtime.pod.volumes": [{"name": "shm", "emptyDir": {}}],
                "spec.runtime.pod.volumeMounts": [{"name": "shm", "mountPath": "/dev/shm/"}],
            },
        ),
    ),
)


# ------------------------------------------------- volume sources and affinity
# The core/v1 types a model's pods take as written, typed with exactly the fields of
# Kubernetes' own schema for them (tests/test_crd.py compares them with 1.37's) and
# checked as the API server checks a pod's (pkg/apis/core/validation), so that a
# mistake in them is refused by validate and at admission, not when the Deployment's
# pods are created. Lists that a rule runs over are bounded, to bound the rule's cost.

FileMode = Annotated[int, Field(ge=0, le=0o777, description="Mode bits, 0 to 0777.")]
UserId = Annotated[int, Field(ge=0, le=2**31 - 1)]
# A path under the volume's root, as ValidateLocalNonReservedPath takes it: not
# absolute, no '..' part, not starting with '..' (RE2 has no lookahead: spelled out).
_PATH_PART = "([^/.][^/]*|[.]|[.][^/.][^/]*)"
RELATIVE_PATH_PATTERN = f"^{_PATH_PART}(/({_PATH_PART}|[.][.][^/]+)?)*$"
RelativePath = Annotated[
    str,
    StringConstraints(max_length=4096),
    Matching(RELATIVE_PATH_PATTERN, "a relative path with no '..' part"),
]
AbsolutePath = Annotated[
    str,
    StringConstraints(max_length=4096),
    Matching(r"^/.*$", "an absolute path (starting with '/')"),
]
# A StorageClass or VolumeAttributesClass name; empty asks for no class.
ClassName = Annotated[
    str,
    StringConstraints(max_length=253),
    Matching(f"^({DNS_1123_SUBDOMAIN})?$", "a class's name: a DNS-1123 subdomain, or empty"),
]


class KeyToPath(SpecModel):
    key: NonEmptyString
    path: RelativePath
    mode: FileMode | None = None
    user: UserId | None = None


class EmptyDirVolumeSource(SpecModel):
    medium: str | None = None
    size_limit: Quantity | None = None
    mode: int | None = Field(default=None, ge=0, le=0o1777)


class ConfigMapVolumeSource(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None
    optional: bool | None = None


class SecretVolumeSource(SpecModel):
    secret_name: NonEmptyString
    items: list[KeyToPath] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None
    optional: bool | None = None


class PersistentVolumeClaimVolumeSource(SpecModel):
    claim_name: NonEmptyString
    read_only: bool | None = None


class NFSVolumeSource(SpecModel):
    server: NonEmptyString
    path: AbsolutePath
    read_only: bool | None = None


class ImageVolumeSource(SpecModel):
    """An OCI image or artifact mounted read-only (weights shipped as an image)."""

    reference: NonEmptyString
    pull_policy: Literal["Always", "Never", "IfNotPresent"] | None = None


class SecretReference(SpecModel):
    name: ObjectName


class CSIVolumeSource(SpecModel):
    driver: Annotated[
        str,
        StringConstraints(max_length=63),
        Matching(
            f"^{DNS_1123_SUBDOMAIN.replace('a-z', 'a-zA-Z')}$",
            "a CSI driver's name: a DNS-1123 subdomain (letters, digits, '-' and '.')",
        ),
    ]
    fs_type: str | None = None
    read_only: bool | None = None
    volume_attributes: dict[str, str] | None = None
    node_publish_secret_ref: SecretReference | None = None


class TypedLocalObjectReference(SpecModel):
    api_group: str | None = None
    kind: NonEmptyString
    name: NonEmptyString


class TypedObjectReference(TypedLocalObjectReference):
    namespace: str | None = None


class VolumeResourceRequirements(SpecModel):
    rules: ClassVar[tuple[Rule[VolumeResourceRequirements], ...]] = (
        Rule(
            "has(self.requests) && 'storage' in self.requests && "
            "quantity(string(self.requests['storage'])).isGreaterThan(quantity('0'))",
            "an ephemeral volume's claim must request storage, more than 0 (the API server "
            "refuses the pods)",
            lambda r: quantity_value((r.requests or {}).get("storage", 0)) > 0,
            ".requests",
            refusals=(
                Refusal(
                    "ephemeral-volume-without-storage",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "scratch",
                                "ephemeral": {
                                    "volumeClaimTemplate": {
                                        "spec": {
                                            "accessModes": ["ReadWriteOnce"],
                                            "resources": {"requests": {"cpu": 1}},
                                        }
                                    }
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class ClaimTemplateMeta(SpecModel):
    """What the API server lets an ephemeral volume's claim template set of metadata."""

    labels: dict[str, LabelValue] | None = None
    annotations: dict[str, str] | None = None


class PersistentVolumeClaimSpec(SpecModel):
    rules: ClassVar[tuple[Rule[PersistentVolumeClaimSpec], ...]] = (
        Rule(
            "self.accessModes.all(m, m == 'ReadWriteOncePod') || "
            "!self.accessModes.exists(m, m == 'ReadWriteOncePod')",
            "runtime.pod.volumes: an ephemeral volume's claim may not take ReadWriteOncePod "
            "with another access mode (the API server refuses the pods)",
            lambda c: (
                len(set(c.access_modes) | {"ReadWriteOncePod"}) == 1
                or "ReadWriteOncePod" not in c.access_modes
            ),
            ".accessModes",
            refusals=(
                Refusal(
                    "ephemeral-read-write-once-pod-and-more",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "scratch",
                                "ephemeral": {
                                    "volumeClaimTemplate": {
                                        "spec": {
                                            "accessModes": ["ReadWriteOncePod", "ReadWriteOnce"],
                                            "resources": {"requests": {"storage": "1Gi"}},
                                        }
                                    }
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    access_modes: Annotated[
        list[Literal["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"]],
        Field(min_length=1, max_length=4),
    ]
    resources: VolumeResourceRequirements
    selector: LabelSelector | None = None
    storage_class_name: ClassName | None = None
    volume_attributes_class_name: ClassName | None = None
    volume_mode: Literal["Block", "Filesystem"] | None = None
    volume_name: str | None = None
    data_source: TypedLocalObjectReference | None = None
    data_source_ref: TypedObjectReference | None = None


class PersistentVolumeClaimTemplate(SpecModel):
    metadata: ClaimTemplateMeta | None = None
    spec: PersistentVolumeClaimSpec


class EphemeralVolumeSource(SpecModel):
    """A PersistentVolumeClaim made for each pod and deleted with it."""

    volume_claim_template: PersistentVolumeClaimTemplate


class NodeSelectorRequirement(SpecModel):
    rules: ClassVar[tuple[Rule[NodeSelectorRequirement], ...]] = (
        Rule(
            "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : "
            "self.operator in ['Gt', 'Lt'] ? has(self.values) && size(self.values) == 1 : "
            "!has(self.values) || size(self.values) == 0",
            "runtime.pod.affinity: a node selector requirement takes values with operator In "
            "or NotIn, exactly one with Gt or Lt, none with Exists or DoesNotExist",
            lambda r: (
                len(r.values or []) >= 1
                if r.operator in ("In", "NotIn")
                else len(r.values or []) == (1 if r.operator in ("Gt", "Lt") else 0)
            ),
            ".values",
            found=lambda r: f"operator {r.operator}, {len(r.values or [])} values",
            refusals=(
                Refusal(
                    "node-affinity-in-without-values",
                    {
                        "spec.runtime.pod.affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {"matchExpressions": [{"key": "gpu", "operator": "In"}]}
                                    ]
                                }
                            }
                        }
                    },
                ),
            ),
        ),
    )

    key: Annotated[
        str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
    ]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None


class RequiredNodeSelectorRequirement(NodeSelectorRequirement):
    """In a required node affinity, values are label values (the API server lets a
    preferred one's through: it may match no node and still schedule)."""

    values: list[LabelValue] | None = None


class NodeFieldSelectorRequirement(SpecModel):
    """The one node field a selector may match: the node's name, with one value."""

    key: Literal["metadata.name"]
    operator: Literal["In", "NotIn"]
    values: Annotated[list[ObjectName], Field(min_length=1, max_length=1)]


class NodeSelectorTerm(SpecModel):
    match_expressions: (
        Annotated[list[NodeSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    match_fields: list[NodeFieldSelectorRequirement] | None = None


class RequiredNodeSelectorTerm(SpecModel):
    match_expressions: (
        Annotated[list[RequiredNodeSelectorRequirement], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    match_fields: list[NodeFieldSelectorRequirement] | None = None


class NodeSelector(SpecModel):
    node_selector_terms: Annotated[
        list[RequiredNodeSelectorTerm], Field(min_length=1, max_length=POD_LIST_MAX)
    ]


Weight = Annotated[int, Field(ge=1, le=100)]


class PreferredSchedulingTerm(SpecModel):
    weight: Weight
    preference: NodeSelectorTerm


class NodeAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[PreferredSchedulingTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None


LabelKeyField = Annotated[
    str, StringConstraints(max_length=317), Matching(LABEL_KEY_PATTERN, "a label key")
]


class PodAffinityTerm(SpecModel):
    label_selector: LabelSelector | None = None
    namespace_selector: LabelSelector | None = None
    namespaces: (
        list[
            Annotated[
                str,
                StringConstraints(max_length=63),
                Matching(DNS_1123_LABEL, "a namespace's name (a DNS-1123 label)"),
            ]
        ]
        | None
    ) = None
    topology_key: LabelKeyField
    match_label_keys: list[LabelKeyField] | None = None
    mismatch_label_keys: list[LabelKeyField] | None = None


class WeightedPodAffinityTerm(SpecModel):
    weight: Weight
    pod_affinity_term: PodAffinityTerm


class PodAffinity(SpecModel):
    required_during_scheduling_ignored_during_execution: (
        Annotated[list[PodAffinityTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None
    preferred_during_scheduling_ignored_during_execution: (
        Annotated[list[WeightedPodAffinityTerm], Field(max_length=POD_LIST_MAX)] | None
    ) = None


class Affinity(SpecModel):
    """core/v1 Affinity: node affinity, pod affinity and pod anti-affinity."""

    node_affinity: NodeAffinity | None = None
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None


# Sources passed through as written, which the API server checks when the pods are
# created: the in-tree drivers Kubernetes keeps for compatibility (deprecated for CSI,
# some removed), and two kinds of a projected volume's sources (see docs/install.md).
PassedThrough = dict[str, Any] | None


def _untyped(alias: str | None = None) -> Any:
    return Field(
        default=None,
        alias=alias,
        description="Kept as written; the API server checks it with the pods.",
    )


# A pod field a downwardAPI volume may write: as the API server's
# validVolumeDownwardAPIFieldPathExpressions, or one label or annotation.
FIELD_PATH_PATTERN = (
    r"^metadata[.](name|namespace|uid|labels|annotations)$"
    rf"|^metadata[.](labels|annotations)\['{LABEL_KEY_PATTERN[1:-1]}'\]$"
)
RESOURCE_FIELD_PATTERN = (
    "^(limits|requests)[.](cpu|memory|ephemeral-storage)$|^(limits|requests)[.]hugepages-.+$"
)


class ObjectFieldSelector(SpecModel):
    api_version: Literal["v1"] | None = None
    field_path: Annotated[
        str,
        StringConstraints(max_length=1024),
        Matching(
            FIELD_PATH_PATTERN,
            "metadata.name, namespace, uid, labels or annotations, or one label or "
            "annotation (metadata.labels['key'])",
        ),
    ]


ResourceField = Annotated[
    str,
    StringConstraints(max_length=317),
    Matching(
        RESOURCE_FIELD_PATTERN,
        "limits. or requests. and cpu, memory, ephemeral-storage or hugepages-<size>",
    ),
]


class ResourceFieldSelector(SpecModel):
    container_name: NonEmptyString  # required in a volume (the container it reads)
    resource: ResourceField
    divisor: Quantity | None = None


# A pod field a variable may read: as the API server's
# validEnvDownwardAPIFieldPathExpressions, or one label or annotation.
ENV_FIELD_PATH_PATTERN = (
    r"^metadata[.](name|namespace|uid)$|^spec[.](nodeName|serviceAccountName)$"
    r"|^status[.](hostIP|hostIPs|podIP|podIPs)$"
    rf"|^metadata[.](labels|annotations)\['{LABEL_KEY_PATTERN[1:-1]}'\]$"
)


class EnvFieldSelector(SpecModel):
    api_version: Literal["v1"] | None = None
    field_path: Annotated[
        str,
        StringConstraints(max_length=1024),
        Matching(
            ENV_FIELD_PATH_PATTERN,
            "metadata.name, namespace or uid, spec.nodeName or serviceAccountName, "
            "status.hostIP(s) or podIP(s), or one label or annotation (metadata.labels['key'])",
        ),
    ]


class EnvResourceFieldSelector(SpecModel):
    container_name: NonEmptyString | None = None  # unset: the runtime container
    resource: ResourceField
    divisor: Quantity | None = None


class DataKeySelector(SpecModel):
    """A key of a ConfigMap or Secret in the model's namespace."""

    name: ObjectName
    key: DataKey
    optional: bool | None = None


ENV_SOURCES = ("fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef", "fileKeyRef")


class EnvVarSource(SpecModel):
    """A core/v1 EnvVarSource, typed and checked as the API server checks the pods' (a
    file's key, alpha in Kubernetes 1.34, is kept as written)."""

    rules: ClassVar[tuple[Rule[EnvVarSource], ...]] = (
        Rule(
            "[" + ", ".join(f"has(self.{s})" for s in ENV_SOURCES) + "].filter(s, s).size() == 1",
            "runtime.env: a valueFrom takes exactly one of "
            + ", ".join(ENV_SOURCES)
            + " (the API server refuses the pods)",
            lambda source: len(source.sources()) == 1,
            found=lambda source: ", ".join(source.sources()) or "none",
            refusals=(
                Refusal(
                    "env-value-from-empty", {"spec.runtime.env": [{"name": "A", "valueFrom": {}}]}
                ),
                Refusal(
                    "env-value-from-two-sources",
                    {
                        "spec.runtime.env": [
                            {
                                "name": "A",
                                "valueFrom": {
                                    "fieldRef": {"fieldPath": "metadata.name"},
                                    "secretKeyRef": {"name": "s", "key": "k"},
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    field_ref: EnvFieldSelector | None = None
    resource_field_ref: EnvResourceFieldSelector | None = None
    config_map_key_ref: DataKeySelector | None = None
    secret_key_ref: DataKeySelector | None = None
    file_key_ref: PassedThrough = _untyped()

    def sources(self) -> list[str]:
        """The sources set, as Kubernetes names them."""
        written = self.model_dump(by_alias=True, exclude_none=True)
        return [source for source in ENV_SOURCES if source in written]


class DownwardAPIVolumeFile(SpecModel):
    rules: ClassVar[tuple[Rule[DownwardAPIVolumeFile], ...]] = (
        Rule(
            "has(self.fieldRef) != has(self.resourceFieldRef)",
            "runtime.pod.volumes: a downwardAPI item takes fieldRef or resourceFieldRef, one "
            "of them (the API server refuses the pods)",
            lambda f: (f.field_ref is None) != (f.resource_field_ref is None),
            refusals=(
                Refusal(
                    "downward-api-item-without-field",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "downwardAPI": {"items": [{"path": "p"}]}}
                        ]
                    },
                ),
            ),
        ),
    )

    path: RelativePath
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: FileMode | None = None
    user: UserId | None = None


class DownwardAPIVolumeSource(SpecModel):
    items: list[DownwardAPIVolumeFile] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None


class ConfigMapProjection(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class SecretProjection(SpecModel):
    name: NonEmptyString
    items: list[KeyToPath] | None = None
    optional: bool | None = None


class DownwardAPIProjection(SpecModel):
    items: list[DownwardAPIVolumeFile] | None = None


class ServiceAccountTokenProjection(SpecModel):
    audience: str | None = None
    expiration_seconds: int | None = Field(
        default=None, ge=600, le=2**32, description="At least 10 minutes; none: 1h."
    )
    path: RelativePath
    user: UserId | None = None


PROJECTIONS = (
    "configMap",
    "secret",
    "downwardAPI",
    "serviceAccountToken",
    "clusterTrustBundle",
    "podCertificate",
)


class VolumeProjection(SpecModel):
    """One source of a projected volume; clusterTrustBundle and podCertificate (certificate
    signers' names and key types) are kept as written."""

    rules: ClassVar[tuple[Rule[VolumeProjection], ...]] = (
        Rule(
            "[" + ", ".join(f"has(self.{p})" for p in PROJECTIONS) + "].filter(p, p).size() <= 1",
            "runtime.pod.volumes: each of a projected volume's sources takes one of "
            + in_words(list(PROJECTIONS))
            + ", not two (the API server refuses the pods)",
            lambda p: len(p.model_dump(exclude_none=True)) <= 1,
            refusals=(
                Refusal(
                    "projected-source-two-kinds",
                    {
                        "spec.runtime.pod.volumes": [
                            {
                                "name": "a",
                                "projected": {
                                    "sources": [
                                        {"configMap": {"name": "c"}, "secret": {"name": "s"}}
                                    ]
                                },
                            }
                        ]
                    },
                ),
            ),
        ),
    )

    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    downward_api: DownwardAPIProjection | None = Field(default=None, alias="downwardAPI")
    service_account_token: ServiceAccountTokenProjection | None = None
    cluster_trust_bundle: PassedThrough = _untyped()
    pod_certificate: PassedThrough = _untyped()


class ProjectedVolumeSource(SpecModel):
    sources: Annotated[list[VolumeProjection], Field(max_length=POD_LIST_MAX)] | None = None
    default_mode: FileMode | None = None
    default_user: UserId | None = None


# Every source of a core/v1 Volume, as Kubernetes 1.37 names them (tests/test_crd.py
# compares them with its schema); the CRD's rule counts them.
VOLUME_SOURCES = (
    "emptyDir",
    "configMap",
    "secret",
    "persistentVolumeClaim",
    "ephemeral",
    "csi",
    "image",
    "nfs",
    "hostPath",
    "downwardAPI",
    "projected",
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "iscsi",
    "photonPersistentDisk",
    "portworxVolume",
    "quobyte",
    "rbd",
    "scaleIO",
    "storageos",
    "vsphereVolume",
)


class VolumeMount(SpecModel):
    """core/v1 VolumeMount on the runtime container."""

    name: NonEmptyString
    mount_path: Annotated[str, StringConstraints(min_length=1, max_length=4096), MOUNT_PATH]
    read_only: bool | None = None
    sub_path: str | None = None
    sub_path_expr: str | None = None
    mount_propagation: Literal["None", "HostToContainer", "Bidirectional"] | None = None
    recursive_read_only: Literal["Disabled", "IfPossible", "Enabled"] | None = None


class Volume(SpecModel):
    """A core/v1 Volume: its name and exactly one source, typed and checked as the API
    server checks the pods' (emptyDir, configMap, secret, persistentVolumeClaim,
    ephemeral, csi, image, nfs, downwardAPI, projected); the in-tree drivers are kept
    as written."""

    rules: ClassVar[tuple[Rule[Volume], ...]] = (
        Rule(
            "!has(self.hostPath)",
            "runtime.pod.volumes may not be hostPath: a pod holding the node's files holds "
            "the node; use a PersistentVolumeClaim (a local PersistentVolume for node disks)",
            lambda v: v.host_path is None,
            refusals=(
                Refusal(
                    "pod-volume-host-path",
                    {"spec.runtime.pod.volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
                ),
            ),
        ),
        Rule(
            "[" + ", ".join(f"has(self.{s})" for s in VOLUME_SOURCES) + "]"
            ".filter(s, s).size() == 1",
            "runtime.pod.volumes must each have exactly one volume source (emptyDir, "
            "persistentVolumeClaim, configMap, ...): the API server refuses two, and makes a "
            "volume with none an emptyDir (write emptyDir: {} if that is meant)",
            lambda v: len(v.sources()) == 1,
            found=lambda v: ", ".join(v.sources()) or "none",
            refusals=(
                Refusal("pod-volume-without-source", {"spec.runtime.pod.volumes": [{"name": "a"}]}),
                Refusal(
                    "pod-volume-two-sources",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "emptyDir": {}, "configMap": {"name": "c"}}
                        ]
                    },
                ),
            ),
        ),
    )

    name: Annotated[
        str,
        StringConstraints(max_length=63),
        Matching(DNS_1123_LABEL, "a DNS-1123 label (lower case letters, digits and '-')"),
    ]
    empty_dir: EmptyDirVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
    csi: CSIVolumeSource | None = None
    image: ImageVolumeSource | None = None
    nfs: NFSVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = Field(default=None, alias="downwardAPI")
    projected: ProjectedVolumeSource | None = None
    host_path: dict[str, Any] | None = Field(
        default=None, description="Refused: a hostPath volume holds the node's files."
    )
    aws_elastic_block_store: PassedThrough = _untyped()
    azure_disk: PassedThrough = _untyped()
    azure_file: PassedThrough = _untyped()
    cephfs: PassedThrough = _untyped()
    cinder: PassedThrough = _untyped()
    fc: PassedThrough = _untyped()
    flex_volume: PassedThrough = _untyped()
    flocker: PassedThrough = _untyped()
    gce_persistent_disk: PassedThrough = _untyped()
    git_repo: PassedThrough = _untyped()
    glusterfs: PassedThrough = _untyped()
    iscsi: PassedThrough = _untyped()
    photon_persistent_disk: PassedThrough = _untyped()
    portworx_volume: PassedThrough = _untyped()
    quobyte: PassedThrough = _untyped()
    rbd: PassedThrough = _untyped()
    scale_io: PassedThrough = _untyped("scaleIO")
    storageos: PassedThrough = _untyped()
    vsphere_volume: PassedThrough = _untyped()

    def sources(self) -> list[str]:
        """The sources set, as Kubernetes names them."""
        written = self.model_dump(by_alias=True, exclude_none=True)
        return [source for source in VOLUME_SOURCES if source in written]


POD_LABEL_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.matches('{LABEL_KEY_PATTERN}') && k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod.labels keys must be label keys: {LABEL_KEY_WORDS}",
    lambda labels: all(is_label_key(key) for key in labels),
    found=lambda labels: repr(next(key for key in labels if not is_label_key(key))),
    refusals=(Refusal("pod-label-key-with-space", {"spec.runtime.pod.labels": {"a b": "c"}}),),
)

POD_ANNOTATION_KEYS: Rule[dict[str, str]] = Rule(
    f"self.all(k, k.lowerAscii().matches('{LABEL_KEY_PATTERN}') && "
    f"k.indexOf('/') <= {LABEL_KEY_PREFIX_MAX})",
    f"runtime.pod.annotations keys must be annotation keys: {LABEL_KEY_WORDS}",
    lambda annotations: all(is_label_key(key.lower()) for key in annotations),
    found=lambda annotations: repr(
        next(key for key in annotations if not is_label_key(key.lower()))
    ),
    refusals=(
        Refusal("pod-annotation-key-with-space", {"spec.runtime.pod.annotations": {"a b": "c"}}),
    ),
)


class Scratch(SpecModel):
    """The size limits of the emptyDir volumes specfleet mounts for what vLLM writes."""

    shared_memory: Quantity | None = Field(
        default=None,
        description="/dev/shm (in memory: NCCL and vLLM's processes share tensors there); "
        "none: 2Gi per GPU, at least 2Gi.",
    )
    tmp: Quantity | None = Field(
        default=None,
        description="/tmp, HOME (vLLM's, torch's and triton's compile caches); none: "
        "10Gi, also the container's default ephemeral-storage request.",
    )


def _effective(pod: PodSettings, name: str, default: Any = None) -> Any:
    """A field of the container's security context, else of the pod's, else the default."""
    contexts = (pod.container_security_context, pod.security_context)
    return next(
        (getattr(c, name) for c in contexts if c is not None and getattr(c, name) is not None),
        default,
    )


class PodSettings(SpecModel):
    """What a platform team sets on the inference pods, passed to the pod template as
    Kubernetes defines it. The operator owns the container's command, args, port and
    GPU count, the model's labels and its own volumes; this block cannot set those."""

    rules: ClassVar[tuple[Rule[PodSettings], ...]] = (
        Rule(
            "self.labels.all(k, !k.startsWith('"
            + OPERATOR_PREFIX
            + f"') && !(k in {cel_list(list(OPERATOR_LABELS))}))",
            f"runtime.pod.labels may not set the model's labels (keys under {OPERATOR_PREFIX}, "
            + ", ".join(OPERATOR_LABELS)
            + "): the operator selects and tells the pods apart by them",
            lambda p: not any(_operator_key(k) for k in p.labels),
            ".labels",
            found=lambda p: next(k for k in p.labels if _operator_key(k)),
            refusals=(
                Refusal(
                    "pod-label-track", {"spec.runtime.pod.labels": {"specfleet.io/track": "x"}}
                ),
                Refusal(
                    "pod-label-instance",
                    {"spec.runtime.pod.labels": {"app.kubernetes.io/instance": "x"}},
                ),
            ),
        ),
        Rule(
            f"self.annotations.all(k, !k.startsWith('{OPERATOR_PREFIX}'))",
            f"runtime.pod.annotations may not set keys under {OPERATOR_PREFIX}: the operator "
            "writes the runtime config hash and K there",
            lambda p: not any(k.startswith(OPERATOR_PREFIX) for k in p.annotations),
            ".annotations",
            found=lambda p: next(k for k in p.annotations if k.startswith(OPERATOR_PREFIX)),
            refusals=(
                Refusal(
                    "pod-annotation-config-hash",
                    {"spec.runtime.pod.annotations": {"specfleet.io/runtime-config-hash": "x"}},
                ),
            ),
        ),
        Rule(
            f"self.volumes.all(v, !(v.name in {cel_list(list(OPERATOR_VOLUMES))}))",
            "runtime.pod.volumes may not be named as a volume specfleet renders: "
            + in_words(list(OPERATOR_VOLUMES))
            + " (the model cache is runtime.modelCache)",
            lambda p: not any(v.name in OPERATOR_VOLUMES for v in p.volumes),
            ".volumes",
            found=lambda p: next(v.name for v in p.volumes if v.name in OPERATOR_VOLUMES),
            refusals=(
                Refusal(
                    "pod-volume-dshm",
                    {"spec.runtime.pod.volumes": [{"name": "dshm", "emptyDir": {}}]},
                ),
            ),
        ),
        Rule(
            f"self.volumeMounts.all(m, !(m.mountPath in {cel_list(list(OPERATOR_MOUNT_PATHS))}))",
            "runtime.pod.volumeMounts may not mount over a path specfleet renders: "
            + in_words(list(OPERATOR_MOUNT_PATHS))
            + " (the model cache is runtime.modelCache)",
            lambda p: not any(m.mount_path in OPERATOR_MOUNT_PATHS for m in p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.mount_path for m in p.volume_mounts if m.mount_path in OPERATOR_MOUNT_PATHS
            ),
            refusals=(
                Refusal(
                    "pod-mount-over-cache",
                    {
                        "spec.runtime.pod.volumes": [{"name": "models", "emptyDir": {}}],
                        "spec.runtime.pod.volumeMounts": [
                            {"name": "models", "mountPath": MODEL_CACHE_PATH}
                        ],
                    },
                ),
            ),
        ),
        Rule(
            "self.volumeMounts.all(m, self.volumeMounts.exists_one(n, n.mountPath == m.mountPath))",
            "runtime.pod.volumeMounts may not mount two volumes at one mountPath (the API "
            "server refuses the pods)",
            lambda p: len({m.mount_path for m in p.volume_mounts}) == len(p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.mount_path
                for m in p.volume_mounts
                if [n.mount_path for n in p.volume_mounts].count(m.mount_path) > 1
            ),
            refusals=(
                Refusal(
                    "pod-mount-path-twice",
                    {
                        "spec.runtime.pod.volumes": [
                            {"name": "a", "emptyDir": {}},
                            {"name": "b", "emptyDir": {}},
                        ],
                        "spec.runtime.pod.volumeMounts": [
                            {"name": "a", "mountPath": "/data"},
                            {"name": "b", "mountPath": "/data"},
                        ],
                    },
                ),
            ),
        ),
        Rule(
            "self.volumeMounts.all(m, self.volumes.exists(v, v.name == m.name))",
            "runtime.pod.volumeMounts must each name one of runtime.pod.volumes",
            lambda p: all(any(v.name == m.name for v in p.volumes) for m in p.volume_mounts),
            ".volumeMounts",
            found=lambda p: next(
                m.name for m in p.volume_mounts if not any(v.name == m.name for v in p.volumes)
            ),
            refusals=(
                Refusal(
                    "pod-mount-without-volume",
                    {"spec.runtime.pod.volumeMounts": [{"name": "nowhere", "mountPath": "/x"}]},
                ),
            ),
        ),
        Rule(
            # The container's field wins over the pod's; runAsNonRoot is true by default.
            "!((has(self.containerSecurityContext) && "
            "has(self.containerSecurityContext.runAsNonRoot) ? "
            "self.containerSecurityContext.runAsNonRoot : !has(self.securityContext) || "
            "!has(self.securityContext.runAsNonRoot) || self.securityContext.runAsNonRoot) && "
            "(has(self.containerSecurityContext) && has(self.containerSecurityContext.runAsUser) "
            "? self.containerSecurityContext.runAsUser == 0 : has(self.securityContext) && "
            "has(self.securityContext.runAsUser) && self.securityContext.runAsUser == 0))",
            "runtime.pod security contexts may not set runAsUser 0 (root) with runAsNonRoot, "
            "which is true unless set: the kubelet refuses to start the container; set "
            "another runAsUser",
            lambda p: (
                not (_effective(p, "run_as_non_root", True) and _effective(p, "run_as_user") == 0)
            ),
            refusals=(
                Refusal("pod-root-user", {"spec.runtime.pod.securityContext": {"runAsUser": 0}}),
                Refusal(
                    "container-root-user",
                    {"spec.runtime.pod.containerSecurityContext": {"runAsUser": 0}},
                ),
            ),
        ),
    )

    volumes: Annotated[list[Volume], Field(max_length=POD_LIST_MAX), UniqueNames("volume")] = Field(
        default_factory=list,
        description="core/v1 Volumes added to the pods (each as Kubernetes defines it).",
    )
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=POD_LIST_MAX)] = Field(
        default_factory=list, description="core/v1 VolumeMounts of the runtime container."
    )
    image_pull_secrets: Annotated[list[LocalObjectReference], Field(max_length=POD_LIST_MAX)] = (
        Field(default_factory=list, description="Secrets to pull the images with.")
    )
    service_account_name: ObjectName | None = Field(
        default=None,
        description="ServiceAccount of the pods (IRSA / workload identity for S3 or GCS "
        "weights); none: the namespace's default.",
    )
    security_context: PodSecurityContext | None = Field(
        default=None,
        description="Pod securityContext, over specfleet's restricted default field by field.",
    )
    container_security_context: SecurityContext | None = Field(
        default=None,
        description="The runtime container's securityContext, over specfleet's restricted "
        "default field by field.",
    )
    affinity: Affinity | None = Field(
        default=None, description="A core/v1 Affinity (node, pod and anti-affinity)."
    )
    topology_spread_constraints: (
        Annotated[list[TopologySpreadConstraint], Field(max_length=POD_LIST_MAX), SPREAD_PAIRS]
        | None
    ) = Field(
        default=None,
        description="How the pods spread across nodes or zones; none: the model's pods "
        "spread across nodes where they can (maxSkew 1 by kubernetes.io/hostname, "
        "ScheduleAnyway); [] spreads nothing.",
    )
    priority_class_name: ObjectName | None = None
    runtime_class_name: ObjectName | None = Field(
        default=None, description="A RuntimeClass (e.g. nvidia for the GPU container runtime)."
    )
    scheduler_name: ObjectName | None = None
    termination_grace_period_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="Time to drain in-flight requests (60s)."
    )
    enable_service_links: bool = Field(
        default=False,
        description="Kubernetes' service environment variables in the pods (off: a Service "
        "named vllm would set VLLM_PORT, which vLLM reads as its own setting).",
    )
    automount_service_account_token: bool = Field(
        default=False,
        description="Mount the ServiceAccount's API token into the pods (off: neither "
        "specfleet-runtime nor vLLM calls the Kubernetes API; workload identity webhooks "
        "add their own token).",
    )
    scratch: Scratch = Field(
        default_factory=Scratch,
        description="Size limits of the scratch volumes specfleet mounts (/dev/shm, /tmp).",
    )
    labels: Annotated[
        dict[str, LabelValue], Field(max_length=NODE_SELECTOR_MAX), POD_LABEL_KEYS
    ] = Field(default_factory=dict, description="Extra labels on the pods (not on selectors).")
    annotations: Annotated[
        dict[str, str], Field(max_length=NODE_SELECTOR_MAX), POD_ANNOTATION_KEYS
    ] = Field(default_factory=dict, description="Extra annotations on the pods.")
    probes: Probes = Field(default_factory=Probes, description="The /health probes' timings.")


class ModelCache(SpecModel):
    """Where the hub cache lives (HF_HOME, where vLLM downloads to): a PVC shared by the
    pods, a directory on each node, or (neither) an emptyDir lost with each pod."""

    rules: ClassVar[tuple[Rule[ModelCache], ...]] = (
        Rule(
            "!(has(self.claimName) && has(self.hostPath))",
            "runtime.modelCache takes claimName or hostPath, not both",
            lambda c: c.claim_name is None or c.host_path is None,
            ".hostPath",
            refusals=(
                Refusal(
                    "model-cache-claim-and-host-path",
                    {"spec.runtime.modelCache": {"claimName": "hub", "hostPath": "/mnt/hub"}},
                ),
            ),
        ),
        Rule(
            "!has(self.sizeLimit) || !(has(self.claimName) || has(self.hostPath))",
            "runtime.modelCache.sizeLimit bounds the emptyDir cache only: a claim's size is "
            "its PersistentVolumeClaim's, a hostPath's its node's disk",
            lambda c: c.size_limit is None or (c.claim_name is None and c.host_path is None),
            ".sizeLimit",
            refusals=(
                Refusal(
                    "model-cache-size-limit-with-claim",
                    {"spec.runtime.modelCache": {"claimName": "hub", "sizeLimit": "100Gi"}},
                ),
            ),
        ),
        Rule(
            "!self.readOnly || has(self.claimName) || has(self.hostPath)",
            "runtime.modelCache.readOnly needs claimName or hostPath: without them the cache "
            "is an emptyDir, empty at each start, and read-only vLLM could not download the "
            "weights into it",
            lambda c: not c.read_only or c.claim_name is not None or c.host_path is not None,
            ".readOnly",
            refusals=(
                Refusal(
                    "model-cache-read-only-empty", {"spec.runtime.modelCache": {"readOnly": True}}
                ),
            ),
        ),
    )

    claim_name: ObjectName | None = Field(
        default=None,
        description="A PersistentVolumeClaim in the model's namespace (ReadWriteMany for "
        "more than one node, or ReadOnlyMany once warm).",
    )
    host_path: (
        Annotated[
            str,
            StringConstraints(max_length=4096),
            Matching(r"^/.*$", "an absolute path (starting with '/')"),
        ]
        | None
    ) = Field(
        default=None,
        description="A directory on each node (a hostPath volume: Pod Security 'restricted' "
        "refuses it; use a local PersistentVolume there).",
    )
    read_only: bool = Field(
        default=False, description="Mount read-only (a cache filled beforehand)."
    )
    size_limit: Quantity | None = Field(
        default=None,
        description="The emptyDir cache's size limit (neither claimName nor hostPath): "
        "the weights must fit; none: 100Gi per GPU, at least 100Gi.",
    )


class RuntimeInjection(SpecModel):
    """Run specfleet-runtime in an image without it (e.g. vllm/vllm-openai): an init
    container copies it from `image` into a shared volume, and the serving container
    runs it with its own Python."""

    image: NonEmptyString = Field(
        default=DEFAULT_RUNTIME_IMAGE, description="The specfleet-runtime image to copy from."
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        default="IfNotPresent", description="The init container's image pull policy."
    )
    resources: Resources | None = Field(
        default=None,
        description="The init container's requests and limits; none: cpu 100m (limit 1), "
        "memory 256Mi (limit 256Mi), ephemeral-storage 256Mi. A resource given here "
        "(request or limit) replaces that resource's default.",
    )


class RollingUpdate(SpecModel):
    """The Deployments' rolling update: GPUs borrowed (maxSurge) or capacity given up
    (maxUnavailable) while pods are replaced."""

    rules: ClassVar[tuple[Rule[RollingUpdate], ...]] = (
        Rule(
            "!((self.maxSurge == 0 || self.maxSurge == '0%') && "
            "(self.maxUnavailable == 0 || self.maxUnavailable == '0%'))",
            "runtime.rollingUpdate: maxSurge and maxUnavailable may not both be 0 (no pod "
            "could ever be replaced)",
            lambda r: not (is_zero(r.max_surge) and is_zero(r.max_unavailable)),
            ".maxSurge",
            refusals=(
                Refusal(
                    "rolling-update-both-zero",
                    {"spec.runtime.rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}},
                ),
            ),
        ),
    )

    max_surge: CountOrPercent = Field(
        default=1,
        description="Pods above replicas during a rollout (each needs its GPUs): 0 when no "
        "GPU is spare, with maxUnavailable 1.",
    )
    max_unavailable: CountOrPercent = Field(
        default=0, description="Pods below replicas during a rollout."
    )


def is_zero(value: str | int) -> bool:
    return value in (0, "0%")


class DisruptionBudget(SpecModel):
    """The model's PodDisruptionBudget: how many stable pods a voluntary disruption (a
    node drain, a cluster upgrade, the autoscaler) may take at once. Pods not Ready are
    always evictable, so a crash-looping or starting pod never blocks a drain."""

    max_unavailable: CountOrPercent = Field(
        default=1,
        description="Stable pods a drain may evict at once (1: one at a time; '100%': no "
        "protection).",
    )


# One per spelling class that vLLM 0.33's parser reads as an owned flag (the runtime's
# contract test checks them against vLLM).
OWNED_ARGS_REFUSED = [
    ("speculative-config", ["--speculative-config", "{}"]),
    ("speculative-config-equals", ['--speculative-config={"method":"ngram"}']),
    ("speculative-abbreviated", ["--speculative", '{"method":"ngram"}']),
    ("speculative-underscore", ["--speculative_config", "{}"]),
    ("speculative-key", ["--speculative-config.num_speculative_tokens", "9"]),
    ("speculative-short", ["-sc", "{}"]),
    ("speculative-short-equals", ["-sc={}"]),
    ("speculative-short-key", ["-sc.method", "ngram"]),
    ("speculative-short-abbreviated", ["-s", "{}"]),
    ("spec-method", ["--spec-method", "ngram"]),
    ("spec-model", ["--spec-model", "other/draft"]),
    ("spec-tokens-abbreviated", ["--spec-t", "9"]),
    ("spec-ambiguous", ["--spec", "9"]),
    ("config-file", ["--config", "/etc/serve.yaml"]),
    ("model", ["--model", "other/model"]),
    ("model-equals", ["--model=other/model"]),
    ("served-abbreviated", ["--served", "x"]),
    ("served-underscore-abbreviated", ["--served_model", "x"]),
    ("tensor-parallel-abbreviated", ["--tensor-parallel", "8"]),
    ("tp-short", ["-tp", "8"]),
    ("tp-glued", ["-tp8"]),
    ("tp-short-abbreviated", ["-t", "8"]),
    ("pipeline-parallel-short", ["-pp", "2"]),
    ("pipeline-parallel-underscore", ["--pipeline_parallel_size=2"]),
    ("data-parallel-short-glued", ["-dp2"]),
    ("data-parallel-abbreviated", ["--data-parallel-si", "2"]),
    ("host-abbreviated", ["--hos", "0.0.0.0"]),
    ("host-key", ["--host.x", "1"]),
    ("port-after-others", ["--max-model-len", "8192", "--port=9000"]),
    ("end-of-options", ["--max-model-len", "8192", "--", "other/model"]),
]
