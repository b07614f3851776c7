"""The SpeculativeModel API (specfleet.io/v1alpha1): the single source of truth.

The CRD YAML in crds/ and the chart, and the field tables in the docs, are generated
from these models (`specfleet crds`). Each cross-field rule is one `Rule` (rules.py),
declared on its model: its CEL rule goes into the CRD's `x-kubernetes-validations`
(admission by the API server), its Python check runs in pydantic (offline `specfleet
validate`, the operator), both with one message, and its refusals are the tests'
invalid manifests (`RULES` lists them all).

The models are in five modules, each using only those before it: `common` (the API's
group and names, the bases of its models, the strings it checks as the API server does),
`pod` (pod settings: the core/v1 types a model's pods take), `spec`, `old_status` (readers
of status bodies an earlier version wrote) and `status`; the root, `SpeculativeModel`,
is here, and every name of those modules is `api.<name>`.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

# The API's names, one package: `api.Trial`, `api.PodSettings`... wherever they live.
from specfleet.operator.api.common import *  # noqa: F403
from specfleet.operator.api.common import (
    DNS_1035_LABEL,
    DNS_1035_WORDS,
    AnnotationKey,
    ApiModel,
    LabelKey,
    LabelValue,
    NamespaceName,
)
from specfleet.operator.api.pod import *  # noqa: F403
from specfleet.operator.api.pod import (
    MATCH_LABELS_KEYS,
    MOUNT_PATH,
    NODE_SELECTOR_KEYS,
    POD_ANNOTATION_KEYS,
    POD_LABEL_KEYS,
    SPREAD_PAIRS,
    Capabilities,
    DownwardAPIVolumeFile,
    EnvVar,
    EnvVarSource,
    LabelSelectorRequirement,
    ModelCache,
    NodeSelectorRequirement,
    PersistentVolumeClaimSpec,
    PodSettings,
    Resources,
    RollingUpdate,
    SecurityContext,
    Toleration,
    TopologySpreadConstraint,
    Volume,
    VolumeProjection,
    VolumeResourceRequirements,
    WindowsSecurityContextOptions,
)
from specfleet.operator.api.spec import *  # noqa: F403
from specfleet.operator.api.spec import (
    FLOOR,
    DraftModel,
    Metrics,
    Parallelism,
    Runtime,
    Schedule,
    ScheduleBand,
    Speculation,
    SpeculativeModelSpec,
)
from specfleet.operator.api.status import *  # noqa: F403
from specfleet.operator.api.status import SpeculativeModelStatus
from specfleet.operator.rules import Refusal, Rule, RuledModel


class ObjectMeta(BaseModel):
    """The parts of metadata the operator reads; the rest is kept as given. Labels and
    annotations are checked as the API server checks any object's."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str
    namespace: NamespaceName | None = None
    uid: str | None = None
    generation: int | None = None
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    annotations: dict[AnnotationKey, str] = Field(default_factory=dict)


class SpeculativeModel(ApiModel, RuledModel):
    """A target model served by vLLM with a speculative draft, tuned by the operator."""

    # At the root: a CRD's schema may not constrain metadata.
    rules: ClassVar[tuple[Rule[SpeculativeModel], ...]] = (
        Rule(
            "self.metadata.name.matches('" + DNS_1035_LABEL + "')",
            f"metadata.name must be {DNS_1035_WORDS}",
            lambda m: bool(re.fullmatch(DNS_1035_LABEL, m.metadata.name)),
            found=lambda m: repr(m.metadata.name),
            refusals=(Refusal("name-not-dns-label", {"metadata.name": "Llama_8B"}),),
        ),
        Rule(
            "self.metadata.name != 'vllm'",
            "metadata.name may not be vllm: the model's Service would be named vllm, and "
            "Kubernetes then sets VLLM_PORT=tcp://... in the namespace's pods, which vLLM "
            "reads as its own port setting and refuses at start; name the model otherwise",
            lambda m: m.metadata.name != "vllm",
            refusals=(Refusal("name-vllm", {"metadata.name": "vllm"}),),
        ),
    )

    model_config = ConfigDict(extra="ignore")

    api_version: Literal["specfleet.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["SpeculativeModel"]
    metadata: ObjectMeta
    spec: SpeculativeModelSpec
    status: SpeculativeModelStatus = Field(default_factory=SpeculativeModelStatus)


# Every cross-field rule, each declared once on its model (or field): the CRD, the
# validators and the invalid-manifest tests all come from these.
RULES: list[Rule[Any]] = [
    *SpeculativeModel.rules,
    *DraftModel.rules,
    *ScheduleBand.rules,
    *Schedule.rules,
    *Speculation.rules,
    *Runtime.rules,
    *Parallelism.rules,
    *Resources.rules,
    *Toleration.rules,
    *TopologySpreadConstraint.rules,
    SPREAD_PAIRS,
    NODE_SELECTOR_KEYS,
    *PodSettings.rules,
    POD_LABEL_KEYS,
    POD_ANNOTATION_KEYS,
    MOUNT_PATH,
    *Volume.rules,
    *VolumeResourceRequirements.rules,
    *DownwardAPIVolumeFile.rules,
    *VolumeProjection.rules,
    *LabelSelectorRequirement.rules,
    *NodeSelectorRequirement.rules,
    *PersistentVolumeClaimSpec.rules,
    MATCH_LABELS_KEYS,
    *SecurityContext.rules,
    *Capabilities.rules,
    *WindowsSecurityContextOptions.rules,
    *ModelCache.rules,
    *RollingUpdate.rules,
    *EnvVar.rules,
    *EnvVarSource.rules,
    FLOOR,
    *Metrics.rules,
    *SpeculativeModelSpec.rules,
]


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "K", "type": "integer", "jsonPath": ".status.speculation.tokens"},
    # ACCEPT is the figure the floor judges (spec.rollback.metric), next to the floor itself;
    # vLLM's draft acceptance rate and the metric's name are in `-o wide`.
    {"name": "Accept", "type": "number", "jsonPath": ".status.acceptance.judged"},
    {"name": "Floor", "type": "number", "jsonPath": ".spec.rollback.minAcceptance"},
    {"name": "ALen", "type": "number", "jsonPath": ".status.acceptance.meanLength"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Rejected", "type": "string", "jsonPath": ".status.config.rejected.hash"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Metric", "type": "string", "jsonPath": ".spec.rollback.metric", "priority": 1},
    {"name": "Rate", "type": "number", "jsonPath": ".status.acceptance.rate", "priority": 1},
    {"name": "Config", "type": "string", "jsonPath": ".status.config.running.hash", "priority": 1},
]
