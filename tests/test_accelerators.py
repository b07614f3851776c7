"""spec.runtime.accelerator: the extended resource runtime.gpus counts, nvidia.com/gpu
unless set; AMD's (amd.com/gpu) runs vLLM's ROCm image, not the CUDA-based default."""

from __future__ import annotations

from typing import Any

import pytest

from specfleet.operator import render
from specfleet.operator.api import (
    AMD_ACCELERATOR,
    DEFAULT_ACCELERATOR,
    DEFAULT_RUNTIME_IMAGE,
    ROCM_VLLM_IMAGE,
)
from specfleet.operator.errors import validation_errors
from tests.invalid_manifests import apply_changes
from tests.test_render import model_from

AMD = {
    "spec.runtime.accelerator": AMD_ACCELERATOR,
    "spec.runtime.image": ROCM_VLLM_IMAGE,
    "spec.runtime.injectRuntime": {},
    "spec.runtime.gpus": 8,
    "spec.runtime.parallelism": {"tensor": 8},
}


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    return dict(render.manifests(model_from(manifest))[0]["spec"]["template"]["spec"])


def test_gpus_are_requested_as_nvidia_gpus_by_default(peagle_manifest: dict[str, Any]) -> None:
    resources = _pod(peagle_manifest)["containers"][0]["resources"]
    assert resources["requests"][DEFAULT_ACCELERATOR] == resources["limits"][DEFAULT_ACCELERATOR]
    assert AMD_ACCELERATOR not in resources["requests"]


def test_amd_gpus_run_vllms_rocm_image_with_tensor_parallelism(
    peagle_manifest: dict[str, Any],
) -> None:
    manifest = apply_changes(peagle_manifest, AMD)
    assert validation_errors(manifest) == []
    pod = _pod(manifest)
    container = pod["containers"][0]
    assert container["image"] == ROCM_VLLM_IMAGE
    assert container["resources"]["requests"][AMD_ACCELERATOR] == "8"
    assert container["resources"]["limits"][AMD_ACCELERATOR] == "8"
    assert DEFAULT_ACCELERATOR not in container["resources"]["limits"]
    assert container["args"][container["args"].index("--tensor-parallel-size") + 1] == "8"
    # specfleet-runtime is copied in from its own image.
    assert [c["image"] for c in pod["initContainers"]] == [DEFAULT_RUNTIME_IMAGE]


def test_another_vendors_resource_is_taken_as_named(peagle_manifest: dict[str, Any]) -> None:
    manifest = apply_changes(peagle_manifest, {"spec.runtime.accelerator": "gpu.intel.com/xe"})
    resources = _pod(manifest)["containers"][0]["resources"]
    assert resources["limits"]["gpu.intel.com/xe"] == "1"
    assert DEFAULT_ACCELERATOR not in resources["limits"]


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"spec.runtime.accelerator": "gpu"},
            "spec.runtime.accelerator",
            "an extended resource name with its domain",
        ),
        (
            {"spec.runtime.accelerator": AMD_ACCELERATOR},
            "spec.runtime.image",
            f"set runtime.image to vLLM's ROCm image, {ROCM_VLLM_IMAGE}",
        ),
        (
            {**AMD, "spec.runtime.resources": {"limits": {AMD_ACCELERATOR: 2}}},
            "spec.runtime.resources",
            "may not set the accelerator's resource (runtime.accelerator, else nvidia.com/gpu)"
            ": the operator sets it from runtime.gpus (found amd.com/gpu)",
        ),
        (
            {"spec.runtime.resources": {"requests": {DEFAULT_ACCELERATOR: 1}}},
            "spec.runtime.resources",
            "(found nvidia.com/gpu)",
        ),
    ],
)
def test_each_bad_accelerator_setting_is_refused_naming_its_field(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], field: str, words: str
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    assert [e for e in errors if e.startswith(f"{field}: ") and words in e], errors
