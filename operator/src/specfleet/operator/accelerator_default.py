"""The install's default accelerator (the chart's `defaultAccelerator`): a model that names
no GPU source (neither `runtime.accelerator` nor `runtime.resourceClaimTemplate`) gets
the install's accelerator written into its spec at admission, by a MutatingAdmissionPolicy
the chart renders from `admission_defaulting`; with AMD's, a model on the default (CUDA)
runtime image also gets vLLM's ROCm image with the runtime injected. Written at
admission, so the stored spec says what runs, and render, the operator, the CRD's rules
and every reader of the model see it. `specfleet validate --default-accelerator` applies
the same defaulting (`with_default`) before it validates."""

from __future__ import annotations

import copy
from typing import Any

from specfleet.operator import api
from specfleet.operator.pod_policy import MODEL_WRITES, cel_string

# The chart value, and the CEL variable that holds it.
VALUE = "defaultAccelerator"


def _takes_default(runtime: dict[str, Any]) -> bool:
    return runtime.get("accelerator") is None and runtime.get("resourceClaimTemplate") is None


def with_default(manifest: dict[str, Any], accelerator: str) -> dict[str, Any]:
    """The manifest as admission stores it under the install's default accelerator."""
    runtime = (manifest.get("spec") or {}).get("runtime") or {}
    if not isinstance(runtime, dict) or not _takes_default(runtime):
        return manifest
    defaulted = copy.deepcopy(manifest)
    runtime = defaulted.setdefault("spec", {}).setdefault("runtime", {})
    runtime["accelerator"] = accelerator
    on_default_image = runtime.get("image", api.DEFAULT_RUNTIME_IMAGE) == api.DEFAULT_RUNTIME_IMAGE
    if accelerator == api.AMD_ACCELERATOR and on_default_image:
        runtime["image"] = api.ROCM_VLLM_IMAGE
        runtime["injectRuntime"] = runtime.get("injectRuntime") or {}
    return defaulted


def admission_defaulting() -> dict[str, Any]:
    """The chart's MutatingAdmissionPolicy's rules: `with_default` in CEL, the install's
    accelerator in the variable VALUE (templates/accelerator-default.yaml adds it)."""
    runtime = "object.spec.runtime"
    accelerator = f"Object.spec.runtime{{accelerator: variables.{VALUE}}}"
    rocm = (
        f"Object.spec.runtime{{accelerator: variables.{VALUE}, "
        f"image: {cel_string(api.ROCM_VLLM_IMAGE)}, "
        "injectRuntime: Object.spec.runtime.injectRuntime{}}"
    )
    on_default_image = (
        f"variables.{VALUE} == {cel_string(api.AMD_ACCELERATOR)} && "
        f"(!has({runtime}.image) || {runtime}.image == {cel_string(api.DEFAULT_RUNTIME_IMAGE)})"
    )
    return {
        "values": [VALUE],
        "matchConstraints": MODEL_WRITES,
        "matchConditions": [
            {
                "name": "names-no-gpu-source",
                "expression": f"!has(object.spec.runtime) || (!has({runtime}.accelerator) "
                f"&& !has({runtime}.resourceClaimTemplate))",
            }
        ],
        "mutations": [
            {
                "patchType": "ApplyConfiguration",
                "applyConfiguration": {
                    "expression": f"Object{{spec: Object.spec{{runtime: {on_default_image} "
                    f"? {rocm} : {accelerator}}}}}"
                },
            }
        ],
    }
