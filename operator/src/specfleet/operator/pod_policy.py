"""What a platform team lets a model's pods hold beyond what the CRD refuses for every
install: another ServiceAccount's identity, Secret volumes, projected volumes (which mint
ServiceAccount tokens for any audience), a model cache in a node's directory. The
operator refuses a model asking for more before applying any child, `specfleet validate`
given the same allowances (the chart's podPolicy values, the operator's flags) refuses it
in the same words, and so does admission: the chart's ValidatingAdmissionPolicy holds the
CEL `admission_policy` writes from the same table (`ALLOWANCES`), through `specfleet
crds`."""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specfleet.operator import api
from specfleet.operator.api import SpeculativeModelSpec
from specfleet.operator.render import MODEL_LABEL

# Volume sources that hand the pods credentials: a Secret's keys, or (projected) Secrets
# and ServiceAccount tokens.
CREDENTIAL_VOLUMES = ("secret", "projected")
# Who the pods run as without serviceAccountName, and what the refusal says is allowed
# when the install names no other.
DEFAULT_ACCOUNT = "default"
NO_OTHER_ACCOUNT = "none besides default"

Slots = dict[str, str]


@dataclass(frozen=True)
class PodPolicy:
    """The allowances; the default allows neither."""

    service_accounts: frozenset[str] = frozenset()
    secret_volumes: bool = False
    host_path_cache: bool = False

    def refusals(self, spec: SpeculativeModelSpec) -> list[str]:
        """Each field the policy refuses, named, with the fix."""
        return [
            allowance.words.format(**slots)
            for allowance in ALLOWANCES
            for slots in allowance.refused(spec, self)
        ]


@dataclass(frozen=True)
class Allowance:
    """One thing only the install may allow, judged in Python by the operator and
    `specfleet validate` (`refused`) and in CEL by admission (`allows`, `slots`): one
    entry, so the two cannot drift apart unseen, and one refusal in both (`words`)."""

    value: str  # the chart's podPolicy value, and the CEL variable holding it
    words: str  # the refusal; its {slots} filled by `refused` or by `slots`' CEL
    refused: Callable[[SpeculativeModelSpec, PodPolicy], list[Slots]]  # each refused field
    allows: str  # CEL, true when the model holds nothing this refuses
    slots: Slots  # CEL string expressions for the first refused field


def _other_account(spec: SpeculativeModelSpec, policy: PodPolicy) -> list[Slots]:
    account = spec.runtime.pod.service_account_name
    if account in (None, DEFAULT_ACCOUNT, *policy.service_accounts):
        return []
    allowed = ", ".join(sorted(policy.service_accounts)) or NO_OTHER_ACCOUNT
    return [{"account": repr(account), "allowed": allowed}]


def _credential_volumes(spec: SpeculativeModelSpec, policy: PodPolicy) -> list[Slots]:
    if policy.secret_volumes:
        return []
    found = []
    for index, volume in enumerate(spec.runtime.pod.volumes):
        source = next((s for s in CREDENTIAL_VOLUMES if s in volume.sources()), None)
        if source is not None:
            found.append({"field": f"spec.runtime.pod.volumes[{index}].{source}"})
    return found


def _host_path_cache(spec: SpeculativeModelSpec, policy: PodPolicy) -> list[Slots]:
    refused = spec.runtime.model_cache.host_path is not None and not policy.host_path_cache
    return [{}] if refused else []


def cel_string(text: str) -> str:
    """A CEL string literal (JSON's escapes are CEL's)."""
    return json.dumps(text)


# The first credential volume, as admission names it.
_FIRST_CREDENTIAL = "variables.credentialVolumes[0]"
_FIRST_CREDENTIAL_SOURCE = "".join(
    f"has({_FIRST_CREDENTIAL}.{source}) ? {cel_string(source)} : " for source in CREDENTIAL_VOLUMES
) + cel_string("")

ALLOWANCES = (
    Allowance(
        "serviceAccounts",
        "spec.runtime.pod.serviceAccountName: {account} is not a ServiceAccount this "
        "operator's install lets models run as ({allowed}: the chart's "
        "podPolicy.serviceAccounts); remove it to run as the namespace's default",
        _other_account,
        f"variables.account in [{cel_string(DEFAULT_ACCOUNT)}] + variables.serviceAccounts",
        {
            "account": '"\'" + variables.account + "\'"',
            "allowed": f"size(variables.serviceAccounts) == 0 ? {cel_string(NO_OTHER_ACCOUNT)} : "
            "variables.serviceAccounts.join(', ')",
        },
    ),
    Allowance(
        "secretVolumes",
        "{field}: this operator's install allows no Secret or projected volumes (the "
        "chart's podPolicy.secretVolumes); a Hugging Face token is runtime.hfTokenSecretRef",
        _credential_volumes,
        "variables.secretVolumes || size(variables.credentialVolumes) == 0",
        {
            "field": "'spec.runtime.pod.volumes[' + "
            f"string(variables.pod.volumes.indexOf({_FIRST_CREDENTIAL})) + '].' + "
            f"({_FIRST_CREDENTIAL_SOURCE})"
        },
    ),
    Allowance(
        "hostPathCache",
        "spec.runtime.modelCache.hostPath: this operator's install allows no model cache in "
        "a node's directory (the chart's podPolicy.hostPathCache): a hostPath may be any of "
        "the node's files; use modelCache.claimName",
        _host_path_cache,
        "variables.hostPathCache || !has(object.spec.runtime.modelCache.hostPath) || "
        "type(object.spec.runtime.modelCache.hostPath) != string",
        {},
    ),
)

# What admission reads of the model, for the allowances above. The CRD's defaults fill
# runtime.pod and its volumes, so they are there by the time admission runs; a field
# written as null (the CRD keeps it) is as absent, as the operator reads it.
_MODEL_VARIABLES = (
    ("pod", "object.spec.runtime.pod"),
    (
        "account",
        "has(variables.pod.serviceAccountName) && "
        "type(variables.pod.serviceAccountName) == string ? "
        f"variables.pod.serviceAccountName : {cel_string(DEFAULT_ACCOUNT)}",
    ),
    (
        "credentialVolumes",
        "variables.pod.volumes.filter(v, "
        + " || ".join(f"has(v.{source})" for source in CREDENTIAL_VOLUMES)
        + ")",
    ),
)


def _message(allowance: Allowance) -> str:
    """The refusal's words as a CEL messageExpression."""
    parts = []
    for literal, slot, _, _ in string.Formatter().parse(allowance.words):
        if literal:
            parts.append(cel_string(literal))
        if slot is not None:
            parts.append(f"({allowance.slots[slot]})")
    return " + ".join(parts)


# A model's Service selects its pods by MODEL_LABEL, so a pod anyone makes with it joins
# the Service (the operator already reads only pods its workloads made: children.
# owned_pods). Admission lets only the workloads' controllers make or label such a pod
# (the install's podPolicy.modelPodCreators), and only the operator and the controllers
# of the workloads it makes make a workload whose pods would carry it (podPolicy.
# modelWorkloadCreators, the operator's own ServiceAccount added by the chart): else a
# tenant's own Deployment would have the ReplicaSet controller make the pods for it.
_KEY = cel_string(MODEL_LABEL)
MODEL_POD_CREATORS_VALUE = "modelPodCreators"
MODEL_WORKLOAD_CREATORS_VALUE = "modelWorkloadCreators"
_POD = "Pod"
_LEADER_WORKER_SET = "LeaderWorkerSet"
# Where each kind's pods take their labels from; the apps kinds' (Deployment, ReplicaSet,
# StatefulSet) by default.
_POD_METADATA = {
    _POD: ("metadata",),
    _LEADER_WORKER_SET: (
        "spec.leaderWorkerTemplate.leaderTemplate.metadata",
        "spec.leaderWorkerTemplate.workerTemplate.metadata",
    ),
}
_TEMPLATE_METADATA = ("spec.template.metadata",)
_WORKLOADS = {  # API group: the workloads the policy also matches
    "apps": ["deployments", "replicasets", "statefulsets"],
    "leaderworkerset.x-k8s.io": ["leaderworkersets"],
}


def _model_label_at(root: str, path: str) -> str:
    """CEL: [the model label's value] at `path`'s labels in `root`, or [] where any part
    is absent. `root` is read as dyn: the policy matches several kinds, and the type check
    of one kind's path against another's schema would only warn."""
    parts = f"dyn({root}).{path}.labels".split(".")
    present = [f"has({'.'.join(parts[: i + 1])})" for i in range(1, len(parts))]
    labels = ".".join(parts)
    return f"({' && '.join(present)} && {_KEY} in {labels} ? [{labels}[{_KEY}]] : [])"


def _model_labels(root: str) -> str:
    """CEL: the model label's values the write's pods would carry, by the kind written."""

    def of(paths: tuple[str, ...]) -> str:
        return " + ".join(_model_label_at(root, path) for path in paths)

    kinds = "".join(
        f"request.kind.kind == {cel_string(kind)} ? {of(paths)} : "
        for kind, paths in _POD_METADATA.items()
    )
    return kinds + of(_TEMPLATE_METADATA)


def _model_pods_policy() -> dict[str, Any]:
    """The rules of the policy over pods and the workloads that make them: a write whose
    pods carry MODEL_LABEL is made only by one of the install's creators of its kind; an
    update that keeps the label as it was passes."""
    is_pod = f"request.kind.kind == {cel_string(_POD)}"
    creators = (
        f"request.userInfo.username in ({is_pod} ? variables.{MODEL_POD_CREATORS_VALUE}"
        f" : variables.{MODEL_WORKLOAD_CREATORS_VALUE})"
    )
    return {
        "values": [MODEL_POD_CREATORS_VALUE, MODEL_WORKLOAD_CREATORS_VALUE],
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                }
                for group, resources in {"": ["pods"], **_WORKLOADS}.items()
            ]
        },
        "variables": [
            {"name": "modelLabels", "expression": _model_labels("object")},
            {
                "name": "oldModelLabels",
                "expression": (
                    f"request.operation == 'UPDATE' ? ({_model_labels('oldObject')}) : []"
                ),
            },
        ],
        "validations": [
            {
                "expression": (
                    "size(variables.modelLabels) == 0 || "
                    f"{creators} || variables.modelLabels == variables.oldModelLabels"
                ),
                "messageExpression": (
                    f"({is_pod} ? "
                    + cel_string(
                        f"metadata.labels[{MODEL_LABEL}]: a model's Service selects pods by "
                        "this label, so only its workloads' controllers make or label such "
                        f"pods (the chart's podPolicy.{MODEL_POD_CREATORS_VALUE}), not "
                    )
                    + " : "
                    + cel_string(
                        f"the pod template's metadata.labels[{MODEL_LABEL}]: a model's Service "
                        "selects pods by this label, so only the operator and the controllers "
                        "of its workloads make workloads whose pods carry it (the chart's "
                        f"podPolicy.{MODEL_WORKLOAD_CREATORS_VALUE}), not "
                    )
                    + ") + request.userInfo.username"
                ),
            }
        ],
    }


# What an admission policy over the models matches: their creates and updates.
MODEL_WRITES: dict[str, Any] = {
    "resourceRules": [
        {
            "apiGroups": [api.GROUP],
            "apiVersions": [api.VERSION],
            "operations": ["CREATE", "UPDATE"],
            "resources": [api.PLURAL],
        }
    ]
}


def admission_policy() -> dict[str, Any]:
    """The chart's ValidatingAdmissionPolicies' rules (templates/pod-policy.yaml adds one
    CEL variable per podPolicy value in `values`, rendered from the install's values): the
    models' pod policy, and under `pods` the policy over the models' pods' label."""
    return {
        "pods": _model_pods_policy(),
        "values": [allowance.value for allowance in ALLOWANCES],
        "matchConstraints": MODEL_WRITES,
        "variables": [{"name": name, "expression": cel} for name, cel in _MODEL_VARIABLES],
        "validations": [
            {"expression": allowance.allows, "messageExpression": _message(allowance)}
            for allowance in ALLOWANCES
        ],
    }


NOTHING_MORE = PodPolicy()  # the chart's default
