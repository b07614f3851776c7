"""spec.runtime.parallelism: vLLM's tensor, pipeline and data parallel sizes in one
replica, checked against runtime.gpus, the method and vLLM 0.33's rules, rendered as its
flags; with data parallel ranks the pods run one K (vLLM drops per-batch schedules)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from specfleet.operator import render, schedule
from specfleet.operator.api import ScheduledBand, ScheduleMode, SpeculativeModelStatus
from specfleet.operator.cli import app
from specfleet.operator.errors import validation_errors
from specfleet.operator.observations import Observation
from specfleet.operator.rules import DELETE
from specfleet.operator.tuner import decide
from specfleet.runtime.config import parse_serve_args
from specfleet.runtime.vllm_args import vllm_argv
from tests.decisions import T0, make_spec
from tests.invalid_manifests import apply_changes
from tests.test_render import model_from

FIXED = {"mode": "Fixed", "bands": [{"upToBatch": 8, "tokens": 6}, {"tokens": 2}]}


def _args(manifest: dict[str, Any], **status: Any) -> list[str]:
    stable = render.manifests(model_from(manifest, **status))[0]
    return list(stable["spec"]["template"]["spec"]["containers"][0]["args"])


def _value(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_parallel_sizes_render_vllms_flags(peagle_manifest: dict[str, Any]) -> None:
    manifest = apply_changes(
        peagle_manifest,
        {
            "spec.runtime.gpus": 8,
            "spec.runtime.parallelism": {"tensor": 2, "pipeline": 2, "data": 2},
        },
    )
    args = _args(manifest)
    sizes = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size")
    assert [_value(args, flag) for flag in sizes] == ["2", "2", "2"]
    argv = vllm_argv(parse_serve_args(args, env={})[0])
    assert [_value(argv, flag) for flag in sizes] == ["2", "2", "2"]


def test_sizes_of_one_render_no_pipeline_or_data_flag(peagle_manifest: dict[str, Any]) -> None:
    args = _args(peagle_manifest)
    assert _value(args, "--tensor-parallel-size") == "1"
    argv = vllm_argv(parse_serve_args(args, env={})[0])
    assert "--pipeline-parallel-size" not in args + argv
    assert "--data-parallel-size" not in args + argv


def test_the_older_tensor_parallel_size_is_still_read(peagle_manifest: dict[str, Any]) -> None:
    old = {"spec.runtime.gpus": 4, "spec.runtime.tensorParallelSize": 4}
    assert _value(_args(apply_changes(peagle_manifest, old)), "--tensor-parallel-size") == "4"
    # 1, which older versions' CRD wrote into every object, gives way to the new name.
    both = {**old, "spec.runtime.tensorParallelSize": 1, "spec.runtime.parallelism": {"tensor": 4}}
    assert _value(_args(apply_changes(peagle_manifest, both)), "--tensor-parallel-size") == "4"
    assert validation_errors(apply_changes(peagle_manifest, both)) == []


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        (
            {"spec.runtime.gpus": 2, "spec.runtime.parallelism": {"data": 2, "nodesPerReplica": 2}},
            "spec.runtime.parallelism.nodesPerReplica",
            "data parallel ranks across nodes are not supported (found 2 with data 2)",
        ),
        (
            {
                "spec.runtime.gpus": 2,
                "spec.runtime.parallelism": {"tensor": 3, "nodesPerReplica": 2},
            },
            "spec.runtime.parallelism",
            "must divide tensor x pipeline",
        ),
        (
            {
                "spec.runtime.gpus": 1,
                "spec.runtime.parallelism": {"tensor": 4, "nodesPerReplica": 2},
            },
            "spec.runtime.parallelism",
            "must not exceed runtime.gpus per pod times nodesPerReplica",
        ),
        (
            {"spec.runtime.gpus": 4, "spec.runtime.parallelism": {"tensor": 4, "pipeline": 2}},
            "spec.runtime.parallelism",
            "the GPUs one replica's engine uses, must not exceed runtime.gpus",
        ),
        (
            {"spec.runtime.gpus": 0, "spec.runtime.parallelism": {"pipeline": 2}},
            "spec.runtime.parallelism",
            "(found 1 x 2 x 1 > 0)",
        ),
        (
            {
                "spec.runtime.gpus": 4,
                "spec.runtime.tensorParallelSize": 2,
                "spec.runtime.parallelism": {"tensor": 4},
            },
            "spec.runtime.tensorParallelSize",
            "the older name of runtime.parallelism.tensor",
        ),
        (
            {
                "spec.runtime.gpus": 4,
                "spec.runtime.parallelism": {"tensor": 4},
                "spec.draft.tensorParallelSize": 2,
            },
            "spec.draft.tensorParallelSize",
            "(found 2, not 1 or 4)",
        ),
        (
            {
                "spec.speculation.switching": "Hot",
                "spec.runtime.gpus": 2,
                "spec.runtime.parallelism": {"data": 2},
            },
            "spec.speculation.switching",
            "needs runtime.parallelism.data 1",
        ),
        (
            {
                "spec.draft.method": "dspark",
                "spec.draft.model": DELETE,
                "spec.draft.adaptiveVerification": True,
                "spec.runtime.gpus": 2,
                "spec.runtime.parallelism": {"pipeline": 2},
            },
            "spec.draft.adaptiveVerification",
            "refuses adaptive verification with pipeline parallelism",
        ),
        (
            {"spec.runtime.args": ["-pp", "2"]},
            "spec.runtime.args",
            "'-pp', which sets --pipeline-parallel-size",
        ),
        (
            {"spec.runtime.args": ["--data-parallel-size=2"]},
            "spec.runtime.args",
            "which sets --data-parallel-size",
        ),
    ],
)
def test_each_bad_parallelism_is_refused_naming_its_field(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], field: str, words: str
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    assert [e for e in errors if e.startswith(f"{field}: ") and words in e], errors


def test_with_data_parallel_ranks_a_schedule_falls_back_to_one_k() -> None:
    spec = make_spec(
        speculation={"schedule": FIXED}, runtime={"gpus": 2, "parallelism": {"data": 2}}
    )
    assert spec.schedule_in_effect.mode is ScheduleMode.OFF
    assert schedule.fixed(spec) is None
    [warning] = spec.warnings()
    assert warning.startswith("spec.speculation.schedule: mode Fixed is not followed with ")
    assert "spec.runtime.parallelism.data 2" in warning
    status = decide(spec, SpeculativeModelStatus(), Observation(None, None), T0).status
    assert status.speculation.schedule is None
    assert status.speculation.tokens == spec.speculation.tokens
    # The same spec on one rank runs the schedule as written.
    one_rank = make_spec(speculation={"schedule": FIXED})
    assert one_rank.warnings() == []
    status = decide(one_rank, SpeculativeModelStatus(), Observation(None, None), T0).status
    assert status.speculation.schedule == [
        ScheduledBand(up_to_batch=8, tokens=6),
        ScheduledBand(tokens=2),
    ]


def test_a_running_schedule_gives_way_to_one_k_when_data_parallel_grows() -> None:
    before = make_spec(speculation={"schedule": FIXED})
    status = decide(before, SpeculativeModelStatus(), Observation(None, None), T0).status
    assert status.speculation.schedule is not None
    after = make_spec(
        speculation={"schedule": FIXED}, runtime={"gpus": 2, "parallelism": {"data": 2}}
    )
    decided = decide(after, status, Observation(None, None), T0)
    assert decided.status.speculation.schedule is None
    assert decided.status.speculation.tokens == after.speculation.tokens


def test_a_schedule_left_in_status_is_not_rendered_with_data_parallel_ranks(
    peagle_manifest: dict[str, Any],
) -> None:
    status = {
        "speculation": {"tokens": 6, "schedule": [{"upToBatch": 8, "tokens": 6}, {"tokens": 2}]}
    }
    # Restart: a schedule at startup (hot pods take theirs from the operator).
    peagle_manifest["spec"]["speculation"]["switching"] = "Restart"
    assert _value(_args(peagle_manifest, **status), "--batch-schedule") == "1:8:6"
    manifest = apply_changes(
        peagle_manifest, {"spec.runtime.gpus": 2, "spec.runtime.parallelism": {"data": 2}}
    )
    args = _args(manifest, **status)
    assert "--batch-schedule" not in args
    assert _value(args, "--num-speculative-tokens") == "6"


def test_validate_warns_of_the_fallback_and_passes_the_model(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    manifest = apply_changes(
        peagle_manifest,
        {
            "spec.runtime.gpus": 4,
            "spec.runtime.parallelism": {"data": 2},
            "spec.speculation.schedule": {"mode": "Learned"},
        },
    )
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path} (llama-8b): valid" in result.stdout
    assert "warning: spec.speculation.schedule: mode Learned is not followed" in result.stderr
    assert "warning: spec.runtime.gpus: 4 per pod, and the engine uses 2" in result.stderr
