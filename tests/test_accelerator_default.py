"""The install's default accelerator (the chart's defaultAccelerator): written at
admission into a model that names no GPU source, with AMD's also the ROCm image; the
chart's MutatingAdmissionPolicy and `specfleet validate --default-accelerator` apply the
same rule (`accelerator_default`). On the real API server: e2e/test_admission_policy.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.operator import api
from specfleet.operator.accelerator_default import with_default
from specfleet.operator.cli import app
from tests.invalid_manifests import apply_changes
from tests.test_chart import manifests, render

TEMPLATE = "templates/accelerator-default.yaml"


def _runtime(manifest: dict[str, Any]) -> dict[str, Any]:
    return dict(manifest["spec"]["runtime"])


def test_a_model_naming_no_gpu_source_gets_the_installs(peagle_manifest: dict[str, Any]) -> None:
    runtime = _runtime(with_default(peagle_manifest, "intel.com/gpu"))
    assert runtime["accelerator"] == "intel.com/gpu"
    assert "image" not in runtime or runtime["image"] == api.DEFAULT_RUNTIME_IMAGE
    amd = _runtime(with_default(peagle_manifest, api.AMD_ACCELERATOR))
    assert amd["accelerator"] == api.AMD_ACCELERATOR
    assert amd["image"] == api.ROCM_VLLM_IMAGE and amd["injectRuntime"] == {}
    # The ROCm image makes the model valid where the default image would be refused.
    api.SpeculativeModel.model_validate(with_default(peagle_manifest, api.AMD_ACCELERATOR))


@pytest.mark.parametrize(
    "changes",
    [
        {"spec.runtime.accelerator": "nvidia.com/gpu"},
        {"spec.runtime.resourceClaimTemplate": "h100s"},
    ],
    ids=["names-an-accelerator", "claims-by-dra"],
)
def test_a_model_naming_its_gpu_source_keeps_it(
    peagle_manifest: dict[str, Any], changes: dict[str, Any]
) -> None:
    manifest = apply_changes(peagle_manifest, changes)
    assert with_default(manifest, api.AMD_ACCELERATOR) == manifest


def test_another_image_is_kept_under_amd(peagle_manifest: dict[str, Any]) -> None:
    manifest = apply_changes(peagle_manifest, {"spec.runtime.image": "registry/rocm-runtime:1"})
    runtime = _runtime(with_default(manifest, api.AMD_ACCELERATOR))
    assert runtime["image"] == "registry/rocm-runtime:1" and "injectRuntime" not in runtime


def test_validate_applies_the_installs_default(
    peagle_manifest: dict[str, Any], tmp_path: Any
) -> None:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(apply_changes(peagle_manifest, {"spec.runtime.gpus": 2})))
    result = CliRunner().invoke(
        app, ["validate", "--default-accelerator", "amd.com/gpu", str(path)]
    )
    assert result.exit_code == 0, result.output
    assert "GPUs at peak: 8 amd.com/gpu" in result.output, result.output
    refused = CliRunner().invoke(app, ["validate", "--default-accelerator", "gpu", str(path)])
    assert refused.exit_code != 0 and "--default-accelerator" in refused.output


def test_the_chart_renders_the_policy_only_with_a_default() -> None:
    assert render(show_only=TEMPLATE, check=False).returncode != 0  # nothing to show
    rendered = manifests(
        render(show_only=TEMPLATE, set_json=['defaultAccelerator="amd.com/gpu"']).stdout
    )
    assert [d["kind"] for d in rendered] == [
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    ]
    (variable,) = rendered[0]["spec"]["variables"]
    assert variable == {"name": "defaultAccelerator", "expression": '"amd.com/gpu"'}
