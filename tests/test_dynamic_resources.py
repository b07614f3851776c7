"""GPUs claimed by Dynamic Resource Allocation (runtime.resourceClaimTemplate): each pod
claims from the template instead of requesting the accelerator's extended resource, and
validate and admission refuse the two asked at once. The real scheduler allocating such a
claim: e2e/test_dynamic_resources.py."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from specfleet.operator import render
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.capacity import capacity
from tests.conftest import REPO
from tests.invalid_manifests import apply_changes
from tests.test_render import example

MULTI_NODE = REPO / "examples" / "llama-405b-multi-node.yaml"


def _pod_specs(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template the model renders: a Deployment's, or a group's leader and worker."""
    specs = []
    for child in render.manifests(SpeculativeModel.model_validate(manifest)):
        if child["kind"] == "Deployment":
            specs.append(child["spec"]["template"]["spec"])
        elif child["kind"] == "LeaderWorkerSet":
            group = child["spec"]["leaderWorkerTemplate"]
            specs += [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
    return specs


@pytest.mark.parametrize("source", ["single-node", "multi-node"])
def test_each_pod_claims_its_gpus_from_the_template(
    peagle_manifest: dict[str, Any], source: str
) -> None:
    manifest = peagle_manifest if source == "single-node" else example(MULTI_NODE)
    claimed = apply_changes(manifest, {"spec.runtime.resourceClaimTemplate": "h100s"})
    specs = _pod_specs(claimed)
    assert len(specs) == (2 if source == "single-node" else 4)
    for spec in specs:
        assert spec["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "h100s"}]
        resources = spec["containers"][0]["resources"]
        assert resources["claims"] == [{"name": "gpus"}]
        assert "nvidia.com/gpu" not in resources["requests"] | resources.get("limits", {})
    # Without it, the extended resource as before, and no claim.
    for spec in _pod_specs(manifest):
        assert "resourceClaims" not in spec
        assert "nvidia.com/gpu" in spec["containers"][0]["resources"]["limits"]


def test_capacity_names_the_template(peagle_manifest: dict[str, Any]) -> None:
    claimed = apply_changes(
        peagle_manifest, {"spec.runtime.resourceClaimTemplate": "h100s", "spec.runtime.gpus": 4}
    )
    found = capacity(SpeculativeModel.model_validate(claimed).spec)
    assert found.resource == "claimed from ResourceClaimTemplate h100s"
    assert found.per_replica == 4


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"spec.runtime.accelerator": "amd.com/gpu"},
            "runtime.resourceClaimTemplate",
            "two ways to ask for the GPUs",
        ),
        ({"spec.runtime.gpus": 0}, "runtime.gpus", "GPUs its engine does not use"),
        (
            {"spec.runtime.resourceClaimTemplate": "Not_A_Name"},
            "runtime.resourceClaimTemplate",
            "",
        ),
    ],
)
def test_what_validate_refuses_with_a_claim_template(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], field: str, words: str
) -> None:
    claimed = apply_changes(
        peagle_manifest, {"spec.runtime.resourceClaimTemplate": "h100s"} | changes
    )
    with pytest.raises(ValidationError) as refused:
        SpeculativeModel.model_validate(claimed)
    assert field in str(refused.value) and words in str(refused.value)
