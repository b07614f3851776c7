"""Invalid SpeculativeModel manifests, shared by the offline tests and the admission tests.

Each case changes the P-EAGLE example at one path and names the field the error
must mention (offline: pydantic's path; at admission: the API server's message). The
cases of the cross-field rules are the rules' own refusals (api.RULES): their errors
must say the rule's message.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from specfleet.operator.api import MAX_ARG_LENGTH, RULES
from specfleet.operator.rules import DELETE, Rule


@dataclass(frozen=True)
class InvalidCase:
    id: str
    changes: dict[str, Any]  # dotted path -> new value (or DELETE)
    field: str  # the field the error must name (a rule's case: the rule's message)
    cel: bool = False  # refused by a CEL rule (rather than the schema) at admission
    rule: Rule[Any] | None = None  # the cross-field rule the case breaks
    # Refused by the API server's strict field validation (kubectl's default), which
    # prunes rather than refuses inside the schema code that crdcheck runs.
    unknown_field: bool = False
    # Refused by the API server's check of a map-list's keys (two items of one name),
    # which it runs after the schema code that crdcheck runs.
    duplicate_key: bool = False


def apply_changes(manifest: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(manifest)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return result


INVALID_CASES = [
    # An extended resource needs its domain (the API server refuses the pods otherwise).
    InvalidCase("accelerator-without-domain", {"spec.runtime.accelerator": "gpu"}, "accelerator"),
    # Names of other objects, as the API server checks them.
    InvalidCase("secret-name", {"spec.runtime.hfTokenSecretRef": {"name": "HF_Token"}}, "name"),
    InvalidCase(
        "secret-key", {"spec.runtime.hfTokenSecretRef": {"name": "hf", "key": "a/b"}}, "key"
    ),
    InvalidCase(
        "priority-class-name",
        {"spec.runtime.pod": {"priorityClassName": "High Priority"}},
        "priorityClassName",
    ),
    InvalidCase(
        "env-name-twice",
        {"spec.runtime.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        "env",
        duplicate_key=True,
    ),
    InvalidCase("max-above-32", {"spec.speculation.maxTokens": 33}, "maxTokens"),
    InvalidCase("tokens-zero", {"spec.speculation.tokens": 0}, "tokens"),
    InvalidCase("tokens-not-int", {"spec.speculation.tokens": "five"}, "tokens"),
    # Types the OpenAPI schema refuses (YAML makes these easy to write by accident).
    InvalidCase("floor-string", {"spec.rollback.minAcceptance": "0.8"}, "minAcceptance"),
    InvalidCase("replicas-string", {"spec.replicas": "2"}, "replicas"),
    InvalidCase("tokens-bool", {"spec.speculation.tokens": True}, "tokens"),
    InvalidCase("tuning-enabled-string", {"spec.tuning.enabled": "yes"}, "tuning.enabled"),
    InvalidCase("image-int", {"spec.runtime.image": 5}, "runtime.image"),
    InvalidCase("args-item-int", {"spec.runtime.args": [8192]}, "runtime.args[0]"),
    InvalidCase("failure-limit-zero", {"spec.rollback.failureLimit": 0}, "failureLimit"),
    InvalidCase("unknown-metric", {"spec.rollback.metric": "Vibes"}, "metric"),
    InvalidCase("unknown-method", {"spec.draft.method": "medusa2"}, "method"),
    InvalidCase(
        "args-item-too-long",
        {"spec.runtime.args": ["--chat-template", "x" * (MAX_ARG_LENGTH + 1)]},
        "runtime.args",
    ),
    InvalidCase("replicas-zero", {"spec.replicas": 0}, "replicas"),
    InvalidCase("replicas-negative", {"spec.replicas": -2}, "replicas"),
    InvalidCase("interval-zero", {"spec.tuning.interval": "0s"}, "interval", True),
    InvalidCase("interval-no-unit", {"spec.tuning.interval": "60"}, "interval", True),
    InvalidCase("cooldown-negative", {"spec.tuning.cooldown": "-5m"}, "cooldown", True),
    # Durations past their maximum: these overflowed datetime or asyncio arithmetic.
    InvalidCase("interval-too-long", {"spec.tuning.interval": "99999999999h"}, "interval", True),
    InvalidCase("interval-over-max", {"spec.tuning.interval": "61m"}, "interval", True),
    InvalidCase("cooldown-over-max", {"spec.tuning.cooldown": "721h"}, "cooldown", True),
    InvalidCase(
        "reprobe-after-too-long", {"spec.rollback.reprobeAfter": "99999999h"}, "reprobeAfter", True
    ),
    InvalidCase(
        "canary-pending-timeout-over-max",
        {"spec.tuning.canaryPendingTimeout": "25h"},
        "canaryPendingTimeout",
        True,
    ),
    InvalidCase(
        "scrape-timeout-over-max", {"spec.metrics.scrapeTimeout": "6m"}, "scrapeTimeout", True
    ),
    InvalidCase(
        "max-window-age-over-max", {"spec.tuning.maxWindowAge": "25h"}, "maxWindowAge", True
    ),
    InvalidCase("unknown-below-floor-policy", {"spec.rollback.belowFloor": "Panic"}, "belowFloor"),
    InvalidCase("unknown-schedule-mode", {"spec.speculation.schedule": {"mode": "Often"}}, "mode"),
    InvalidCase("duration-units-out-of-order", {"spec.tuning.cooldown": "30m1h"}, "cooldown", True),
    InvalidCase("unknown-strategy", {"spec.tuning.strategy": "BlueGreen"}, "strategy"),
    InvalidCase("min-draft-tokens-zero", {"spec.tuning.minDraftTokens": 0}, "minDraftTokens"),
    InvalidCase("port-out-of-range", {"spec.runtime.port": 70000}, "port"),
    # What the API server refuses for the children, refused up front.
    InvalidCase(
        "env-name-with-equals",
        {"spec.runtime.env": [{"name": "A=B", "value": "1"}]},
        "runtime.env[0].name",
    ),
    InvalidCase(
        "env-name-not-ascii",
        {"spec.runtime.env": [{"name": "CAFÉ", "value": "1"}]},
        "runtime.env[0].name",
    ),
    InvalidCase(
        "memory-not-a-quantity",
        {"spec.runtime.resources": {"requests": {"memory": "lots"}}},
        "runtime.resources.requests.memory",
    ),
    InvalidCase(
        "cpu-negative",
        {"spec.runtime.resources": {"limits": {"cpu": -1}}},
        "runtime.resources.limits.cpu",
    ),
    InvalidCase(
        "memory-negative",
        {"spec.runtime.resources": {"limits": {"memory": "-1Gi"}}},
        "runtime.resources.limits.memory",
    ),
    InvalidCase(
        "node-selector-value-with-space",
        {"spec.runtime.nodeSelector": {"pool": "a b"}},
        "runtime.nodeSelector.pool",
    ),
    InvalidCase(
        "node-selector-value-too-long",
        {"spec.runtime.nodeSelector": {"pool": "a" * 64}},
        "runtime.nodeSelector.pool",
    ),
    InvalidCase("target-missing", {"spec.model": DELETE}, "model"),
    InvalidCase("target-name-empty", {"spec.model.name": ""}, "model.name"),
    InvalidCase("sample-method-unknown", {"spec.draft.sampleMethod": "beam"}, "sampleMethod"),
    # synthetic is vLLM's test mode, not offered.
    InvalidCase(
        "rejection-synthetic", {"spec.draft.rejectionSampleMethod": "synthetic"}, "rejection"
    ),
    InvalidCase(
        "suffix-min-token-prob-above-one",
        {
            "spec.draft.method": "suffix",
            "spec.draft.model": DELETE,
            "spec.speculation": {"tokens": 8, "minTokens": 8, "maxTokens": 8},
            "spec.draft.suffix": {"minTokenProb": 1.5},
        },
        "minTokenProb",
    ),
]
INVALID_CASES += [
    InvalidCase(
        "unknown-spec-field",
        {"spec.speculation.tokenz": 4},
        "spec.speculation.tokenz",
        unknown_field=True,
    ),
    InvalidCase(
        "unknown-metadata-field",
        {"metadata.namesapce": "ml"},
        "metadata.namesapce",
        unknown_field=True,
    ),
    InvalidCase("unknown-top-level-field", {"spce": {}}, "spce", unknown_field=True),
    # What the operator owns of the container is no field of runtime.pod.
    *(
        InvalidCase(
            f"pod-{name.lower()}",
            {f"spec.runtime.pod.{name}": value},
            f"spec.runtime.pod.{name}",
            unknown_field=True,
        )
        for name, value in [
            ("command", ["sh"]),
            ("args", ["--port", "9"]),
            ("ports", [{"containerPort": 9000}]),
            ("resources", {"limits": {"nvidia.com/gpu": 8}}),
        ]
    ),
]
INVALID_CASES += [
    # Pod settings the schema refuses.
    InvalidCase(
        "pod-volume-name", {"spec.runtime.pod.volumes": [{"name": "Cache"}]}, "volumes[0].name"
    ),
    InvalidCase(
        "pod-volume-name-twice",
        {
            "spec.runtime.pod.volumes": [
                {"name": "a", "emptyDir": {}},
                {"name": "a", "emptyDir": {}},
            ]
        },
        "volumes",
        duplicate_key=True,
    ),
    InvalidCase(
        "pod-service-account-name",
        {"spec.runtime.pod.serviceAccountName": "Weights Reader"},
        "serviceAccountName",
    ),
    InvalidCase(
        "rolling-update-not-a-percentage",
        {"spec.runtime.rollingUpdate": {"maxSurge": "half"}},
        "maxSurge",
    ),
    InvalidCase(
        "pod-seccomp-type",
        {"spec.runtime.pod.securityContext": {"seccompProfile": {"type": "Default"}}},
        "seccompProfile.type",
    ),
    InvalidCase(
        "model-cache-relative-path", {"spec.runtime.modelCache": {"hostPath": "hub"}}, "hostPath"
    ),
]
INVALID_CASES += [
    InvalidCase(refusal.id, dict(refusal.changes), rule.message, cel=True, rule=rule)
    for rule in RULES
    for refusal in rule.refusals
]


def _volume(source: str, value: Any) -> dict[str, Any]:
    return {"spec.runtime.pod.volumes": [{"name": "v", source: value}]}


def _claim(**spec: Any) -> dict[str, Any]:
    storage = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    return _volume("ephemeral", {"volumeClaimTemplate": {"spec": {**storage, **spec}}})


def _affinity(value: dict[str, Any]) -> dict[str, Any]:
    return {"spec.runtime.pod.affinity": value}


def _node_terms(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return _affinity({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}})


def _pod_terms(*terms: dict[str, Any]) -> dict[str, Any]:
    terms_ = list(terms)
    return _affinity(
        {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms_}}
    )


_IN_ZONE = {"key": "zone", "operator": "In", "values": ["a"]}

# What the API server refuses in the pods' volume sources and affinity (the Deployment's
# pods, once created): the CRD types them, so admission refuses them too.
INVALID_CASES += [
    InvalidCase(
        "empty-dir-size-limit",
        _volume("emptyDir", {"sizeLimit": "lots"}),
        "volumes[0].emptyDir.sizeLimit",
    ),
    InvalidCase(
        "empty-dir-size-limit-negative",
        _volume("emptyDir", {"sizeLimit": "-1Gi"}),
        "volumes[0].emptyDir.sizeLimit",
    ),
    InvalidCase(
        "empty-dir-unknown-field",
        _volume("emptyDir", {"size": "1Gi"}),
        "emptyDir.size",
        unknown_field=True,
    ),
    # A misspelt source is no source: strict field validation names it, and without it the
    # API server prunes it and the volume has none (the rule's message, at volumes[0]).
    InvalidCase("volume-source-misspelt", _volume("emptydir", {}), "volumes[0]"),
    InvalidCase("config-map-without-name", _volume("configMap", {}), "configMap.name"),
    InvalidCase(
        "config-map-item-path-up",
        _volume("configMap", {"name": "c", "items": [{"key": "k", "path": "../etc/passwd"}]}),
        "configMap.items[0].path",
    ),
    InvalidCase(
        "config-map-item-path-absolute",
        _volume("configMap", {"name": "c", "items": [{"key": "k", "path": "/etc/passwd"}]}),
        "configMap.items[0].path",
    ),
    InvalidCase(
        "secret-default-mode-decimal-777",
        _volume("secret", {"secretName": "s", "defaultMode": 777}),
        "secret.defaultMode",
    ),
    InvalidCase("secret-without-name", _volume("secret", {"optional": True}), "secret.secretName"),
    InvalidCase(
        "claim-name-empty", _volume("persistentVolumeClaim", {"claimName": ""}), "claimName"
    ),
    InvalidCase("nfs-relative-path", _volume("nfs", {"server": "nas", "path": "hub"}), "nfs.path"),
    InvalidCase("csi-driver-name", _volume("csi", {"driver": "s3 csi"}), "csi.driver"),
    InvalidCase(
        "image-pull-policy",
        _volume("image", {"reference": "r", "pullPolicy": "Sometimes"}),
        "pullPolicy",
    ),
    InvalidCase("ephemeral-without-template", _volume("ephemeral", {}), "volumeClaimTemplate"),
    InvalidCase("ephemeral-no-access-mode", _claim(accessModes=[]), "accessModes"),
    InvalidCase("ephemeral-access-mode", _claim(accessModes=["ReadWrite"]), "accessModes[0]"),
    InvalidCase(
        "ephemeral-storage-class-name", _claim(storageClassName="Fast SSD"), "storageClassName"
    ),
    InvalidCase("ephemeral-volume-mode", _claim(volumeMode="Raw"), "volumeMode"),
    InvalidCase(
        "downward-api-field-path",
        _volume(
            "downwardAPI", {"items": [{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}]}
        ),
        "downwardAPI.items[0].fieldRef.fieldPath",
    ),
    InvalidCase(
        "projected-token-too-short",
        _volume(
            "projected",
            {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 60}}]},
        ),
        "expirationSeconds",
    ),
    InvalidCase("node-affinity-no-terms", _node_terms(), "nodeSelectorTerms"),
    InvalidCase(
        "node-affinity-operator",
        _node_terms({"matchExpressions": [{**_IN_ZONE, "operator": "Equals"}]}),
        "matchExpressions[0].operator",
    ),
    InvalidCase(
        "node-affinity-key",
        _node_terms({"matchExpressions": [{**_IN_ZONE, "key": "a b"}]}),
        "matchExpressions[0].key",
    ),
    InvalidCase(
        "node-affinity-required-value",
        _node_terms({"matchExpressions": [{**_IN_ZONE, "values": ["H100 80GB"]}]}),
        "matchExpressions[0].values[0]",
    ),
    InvalidCase(
        "node-affinity-field-key",
        _node_terms({"matchFields": [{**_IN_ZONE, "key": "metadata.labels"}]}),
        "matchFields[0].key",
    ),
    InvalidCase(
        "node-affinity-weight-zero",
        _affinity(
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {"matchExpressions": [_IN_ZONE]}}
                    ]
                }
            }
        ),
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    InvalidCase("pod-affinity-without-topology-key", _pod_terms({}), "topologyKey"),
    InvalidCase(
        "pod-affinity-namespace",
        _pod_terms({"topologyKey": "zone", "namespaces": ["ML Team"]}),
        "namespaces[0]",
    ),
    InvalidCase(
        "pod-affinity-label-value",
        _pod_terms({"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "a b"}}}),
        "matchLabels.app",
    ),
    InvalidCase(
        "pod-affinity-weight-over-100",
        _affinity(
            {
                "podAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 101, "podAffinityTerm": {"topologyKey": "zone"}}
                    ]
                }
            }
        ),
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    InvalidCase(
        "affinity-unknown-field",
        _affinity({"nodeAffinty": {}}),
        "affinity.nodeAffinty",
        unknown_field=True,
    ),
]


def _value_from(source: dict[str, Any]) -> dict[str, Any]:
    return {"spec.runtime.env": [{"name": "A", "valueFrom": source}]}


# What the API server refuses in a variable's valueFrom (the pods, once created): typed
# in the CRD, so admission refuses it too.
INVALID_CASES += [
    InvalidCase(
        "env-field-ref-path",
        _value_from({"fieldRef": {"fieldPath": "spec.containers"}}),
        "valueFrom.fieldRef.fieldPath",
    ),
    # A downwardAPI volume may write all labels; a variable only one.
    InvalidCase(
        "env-field-ref-all-labels",
        _value_from({"fieldRef": {"fieldPath": "metadata.labels"}}),
        "valueFrom.fieldRef.fieldPath",
    ),
    InvalidCase(
        "env-resource-field-ref",
        _value_from({"resourceFieldRef": {"resource": "limits.gpu"}}),
        "valueFrom.resourceFieldRef.resource",
    ),
    InvalidCase(
        "env-secret-key-ref-without-key",
        _value_from({"secretKeyRef": {"name": "s"}}),
        "valueFrom.secretKeyRef.key",
    ),
    InvalidCase(
        "env-config-map-key-ref-name",
        _value_from({"configMapKeyRef": {"name": "Bad Name", "key": "k"}}),
        "valueFrom.configMapKeyRef.name",
    ),
    InvalidCase(
        "env-secret-key-ref-key",
        _value_from({"secretKeyRef": {"name": "s", "key": "a/b"}}),
        "valueFrom.secretKeyRef.key",
    ),
    InvalidCase(
        "env-value-from-unknown-field",
        _value_from({"fieldref": {"fieldPath": "metadata.name"}}),
        "valueFrom.fieldref",
        unknown_field=True,
    ),
]
