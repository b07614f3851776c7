"""The GPUs a model takes at peak (capacity.capacity): stable replicas, pods or groups
across nodes, the rollout's surge and a canary replica, as `specfleet validate` prints it
and docs/install.md works it out."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from specfleet.operator import api
from specfleet.operator.api import Capacity
from specfleet.operator.capacity import capacity
from specfleet.operator.cli import app
from specfleet.operator.status import ObservedChildren, summarize
from tests.conftest import REPO
from tests.invalid_manifests import apply_changes
from tests.test_render import example
from tests.test_status import T0


def _capacity(manifest: dict[str, Any], changes: dict[str, Any] | None = None) -> Capacity:
    model = api.SpeculativeModel.model_validate(apply_changes(manifest, changes or {}))
    return capacity(model.spec)


def test_a_group_across_nodes_counts_its_pods_gpus() -> None:
    found = _capacity(example(REPO / "examples" / "llama-405b-multi-node.yaml"))
    assert found == Capacity(
        resource="nvidia.com/gpu", per_replica=16, pods_per_replica=2, stable=1, surge=1,
        canary=1, peak=48,
    )  # fmt: skip


def test_the_worked_example_of_install_md(peagle_manifest: dict[str, Any]) -> None:
    """replicas 2, gpus 4 and the default rolling update: 8 GPUs steady, 16 at peak."""
    changes = {"spec.replicas": 2, "spec.runtime.gpus": 4}
    assert _capacity(peagle_manifest, changes).peak == 16
    # No spare GPU: a rollout takes a replica down, and neither trial takes a canary.
    no_spare = changes | {
        "spec.runtime.rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        "spec.tuning.strategy": "InPlace",
        "spec.rollout.strategy": "Immediate",
    }
    assert _capacity(peagle_manifest, no_spare).peak == 8


@pytest.mark.parametrize(
    ("replicas", "max_surge", "surge"),
    [(3, "50%", 2), (4, "10%", 1), (2, 5, 2), (2, "200%", 2), (3, "0%", 0)],
)
def test_the_surge_rounds_a_percentage_up_and_never_exceeds_the_replicas(
    peagle_manifest: dict[str, Any], replicas: int, max_surge: int | str, surge: int
) -> None:
    changes = {
        "spec.replicas": replicas,
        "spec.runtime.rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": 1},
    }
    assert _capacity(peagle_manifest, changes).surge == surge


@pytest.mark.parametrize(
    ("changes", "canary"),
    [
        ({}, 1),
        ({"spec.tuning.strategy": "InPlace"}, 1),  # config trials still take a canary
        ({"spec.rollout.strategy": "Immediate"}, 1),  # K trials still do
        ({"spec.tuning.strategy": "InPlace", "spec.rollout.strategy": "InPlace"}, 1),
        ({"spec.tuning.strategy": "InPlace", "spec.rollout.strategy": "Immediate"}, 0),
        ({"spec.draft": {"method": "none"}}, 0),  # no K tuned, configs adopted at once
        (
            {
                "spec.draft": {"method": "suffix"},
                "spec.speculation": {"tokens": 8, "minTokens": 8, "maxTokens": 8},
                "spec.rollout.strategy": "Immediate",
            },
            0,
        ),
    ],
)
def test_a_canary_is_counted_where_a_trial_may_run_one(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], canary: int
) -> None:
    assert _capacity(peagle_manifest, changes).canary == canary


def test_the_accelerator_s_resource_is_named(peagle_manifest: dict[str, Any]) -> None:
    changes = {
        "spec.runtime.accelerator": "amd.com/gpu",
        "spec.runtime.image": "vllm/vllm-openai-rocm:v0.33.0",
        "spec.runtime.injectRuntime": {},
    }
    assert _capacity(peagle_manifest, changes).resource == "amd.com/gpu"


def test_validate_prints_the_gpus_at_peak_of_each_valid_model() -> None:
    path = REPO / "examples" / "deepseek-v3-mtp-multi-node.yaml"
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{path} (deepseek-v3): valid",
        f"{path} (deepseek-v3): GPUs at peak: 48 nvidia.com/gpu (16 a replica, a group of 2 "
        "pods: 1 stable + 1 surge + 1 canary)",
    ]


def test_status_says_the_gpus_at_peak_as_validate_does(peagle_manifest: dict[str, Any]) -> None:
    manifest = apply_changes(peagle_manifest, {"spec.replicas": 3})
    model = api.SpeculativeModel.model_validate(manifest)
    status = summarize(model, ObservedChildren(), T0)
    assert status.capacity == capacity(model.spec)
    assert status.capacity is not None and status.capacity.peak == (3 + 1 + 1) * 1
    written = status.model_dump(by_alias=True, mode="json", exclude_none=True)["capacity"]
    assert written["perReplica"] == 1 and written["peak"] == 5
