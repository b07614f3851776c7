"""Contract with real vLLM 0.33's `SpeculativeConfig`: the `--speculative-config` our
runtime renders for every method is one vLLM accepts, with the values we meant, and what
our preflight refuses, vLLM refuses too (or, where vLLM only fails later, that is said).

vLLM builds the config from the target's `ModelConfig` and the draft's config.json, so
the models here are tiny directories written per run: a config.json each (all that
`ModelConfig` and `SpeculativeConfig` read, but for DeepSeek-V4.1's tokenizer), a
two-word tokenizer.json, and placeholder weights for our preflight, which looks for
them. No weights are loaded and no server is started. Every case
goes through our renderer (`parse_serve_args` -> `speculative_config`) and our preflight
(`preflight.run`, here in the dev venv), and through vLLM in one subprocess of the vLLM
interpreter (found as tests/test_runtime_vllm_contract.py finds it; without one the vLLM
tests skip).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specfleet.runtime import preflight
from specfleet.runtime.config import Method, RuntimeConfig, parse_serve_args
from specfleet.runtime.vllm_args import speculative_config
from tests.test_runtime_preflight import model_dir
from tests.test_runtime_vllm_contract import requires_vllm, vllm_python

# Runs inside the vLLM interpreter: reads {"cases": [{name, target, tensor_parallel_size,
# spec}]} on stdin, builds each target's ModelConfig and the SpeculativeConfig the way
# vLLM's engine args do (EngineArgs.create_speculative_config), and prints a JSON
# report: per case, the resolved fields or the exception's type and message.
CHECK = r"""
import json, multiprocessing, os, pickle, sys
from concurrent.futures import ProcessPoolExecutor

def inspect_class(fn):
    # What vLLM's own inspector process runs (registry.py, _run), for one class.
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    return pickle.loads(fn)()

# vLLM inspects a model class it has not cached in a new interpreter (registry.py,
# _run_in_subprocess), importing torch and vLLM again for each class: over 600 s for this
# file's classes on a new 2-core machine beside the other tests. One process, forked
# before vLLM is imported, inspects them all: as in vLLM's, no platform is set there, so
# DeepSeek V4 resolves to its NVIDIA classes (as on a GPU node), not the CPU stubs.
inspector = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"))
inspector.submit(int).result()  # forked now

from vllm import platforms
from vllm.platforms.cpu import CpuPlatform
platforms.current_platform = CpuPlatform()  # no GPU here; the configs need a platform
import cloudpickle
import vllm
from vllm.config import ModelConfig, ParallelConfig, SpeculativeConfig
from vllm.model_executor.models import registry
from vllm.v1.spec_decode.dynamic.utils import validate_and_normalize_dynamic_sd_schedule

def run_in_inspector(fn):
    try:
        return inspector.submit(inspect_class, cloudpickle.dumps(fn)).result()
    except Exception as error:  # raised as vLLM's _run_in_subprocess raises it
        raise RuntimeError(f"Error raised in subprocess:\n{error}") from error

registry._run_in_subprocess = run_in_inspector

request = json.load(sys.stdin)
report = {"version": vllm.__version__, "results": {}}
targets = {}
for case in request["cases"]:
    spec = case["spec"]
    try:
        if case["target"] not in targets:
            targets[case["target"]] = ModelConfig(model=case["target"])
        config = SpeculativeConfig(
            **spec,
            target_model_config=targets[case["target"]],
            target_parallel_config=ParallelConfig(
                tensor_parallel_size=case["tensor_parallel_size"]
            ),
        )
        draft = config.draft_model_config
        result = {
            "ok": True,
            "fields": {k: getattr(config, k) for k in [*spec, "parallel_drafting"]},
            "architectures": list(draft.architectures) if draft is not None else None,
        }
        # The schedule's rules are checked when vLLM's scheduler starts, not here.
        schedule = spec.get("num_speculative_tokens_per_batch_size")
        if schedule is not None:
            result["schedule"] = validate_and_normalize_dynamic_sd_schedule(schedule)
    except Exception as error:
        result = {"ok": False, "type": type(error).__name__, "message": str(error)[:2000]}
    report["results"][case["name"]] = json.loads(json.dumps(result, default=str))
print("REPORT " + json.dumps(report), flush=True)
inspector.shutdown()  # it holds this process's pipes: the caller would wait on them
# Skip the interpreter's teardown: after the DeepSeek-V4(.1) cases it takes ~15 s.
os._exit(0)
"""

# vLLM picks the method from the draft's path when it contains one of these, even over
# an explicit draft_model or mtp (speculative.py's auto-detection): the model paths here
# must not, or the cases would test that instead.
PATH_MARKERS = ("eagle-", "eagle3", "dflash", "dspark")

VOCAB = 1024
LAYER = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
LLAMA = {**LAYER, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}
QWEN3 = {**LAYER, "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
# MTP: vLLM rewrites the target's own config into the draft's (deepseek_mtp) and takes
# n_predict from num_nextn_predict_layers.
DEEPSEEK_V3 = {
    **LAYER,
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "num_nextn_predict_layers": 1,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}
# DeepSeek-V4 ships its DSpark (and MTP) layers inside the target checkpoint; V4.1
# only DSpark ones.
DEEPSEEK_V4 = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "q_lora_rank": 16,
    "o_lora_rank": 16,
    "o_groups": 2,
    "qk_rope_head_dim": 8,
    "index_n_heads": 4,
    "index_head_dim": 16,
    "index_topk": 16,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "num_nextn_predict_layers": 1,
    "vocab_size": VOCAB,
    "max_position_embeddings": 512,
    "torch_dtype": "bfloat16",
}
DEEPSEEK_V41 = {
    **DEEPSEEK_V4,
    "architectures": ["DeepseekV41ForCausalLM"],
    "model_type": "deepseek_v41",
}
# One decoder layer in vLLM's LlamaForCausalLMEagle3 layout (as e2e/tiny_models.py
# writes it), reading target layers 1 and 2; the mask token makes it a P-EAGLE head.
EAGLE3_HEAD = {
    **LLAMA,
    "num_hidden_layers": 1,
    "architectures": ["LlamaForCausalLMEagle3"],
    "draft_vocab_size": VOCAB,
    "target_hidden_size": 64,
    "mask_token_id": VOCAB - 1,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]},
}
EAGLE3_HEAD_UNMASKED = {k: v for k, v in EAGLE3_HEAD.items() if k != "mask_token_id"}
EAGLE_HEAD = {**LLAMA, "num_hidden_layers": 1, "architectures": ["EagleLlamaForCausalLM"]}
# A DFlash block-diffusion draft (z-lab's config layout) and a Qwen3 draft that is not one.
DFLASH_DRAFT = {
    **QWEN3,
    "architectures": ["DFlashDraftModel"],
    "block_size": 4,
    "num_target_layers": 2,
    "dflash_config": {"mask_token_id": VOCAB - 1, "target_layer_ids": [0, 1]},
}
# A Qwen3 DSpark draft (a separate checkpoint, unlike DeepSeek-V4's).
DSPARK_DRAFT = {
    **QWEN3,
    "architectures": ["Qwen3DSparkModel"],
    "block_size": 4,
    "markov_rank": 1,
    "draft_vocab_size": VOCAB,
}

MODELS: dict[str, dict[str, Any]] = {
    "llama-target": LLAMA,
    "qwen3-target": QWEN3,
    "mtp1-target": DEEPSEEK_V3,
    "mtp3-target": {**DEEPSEEK_V3, "num_nextn_predict_layers": 3},
    "v4-target": DEEPSEEK_V4,
    "v41-target": DEEPSEEK_V41,
    "e3-head": EAGLE3_HEAD,
    "e3-head-unmasked": EAGLE3_HEAD_UNMASKED,
    "e1-head": EAGLE_HEAD,
    # draft_model: a narrower Llama of the same vocabulary, and one of another.
    "small-llama": {**LLAMA, "hidden_size": 32, "head_dim": 8},
    "other-vocab-llama": {**LLAMA, "vocab_size": VOCAB // 2},
    "diffusion-draft": DFLASH_DRAFT,
    "qwen3-draft": {**QWEN3, "block_size": 4},
    "spark-draft": DSPARK_DRAFT,
}
# A valid tokenizer.json of two words. Only DeepSeek-V4.1's ModelConfig loads the
# tokenizer (vLLM's own DeepSeek-V4.1 tokenizer class); the others only need the file
# to be there for our preflight.
TOKENIZER: dict[str, Any] = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 1}, "unk_token": "<unk>"},
}


@dataclass(frozen=True)
class Case:
    """`serve` args on model directories, and what vLLM and our preflight make of them."""

    target: str
    draft: str | None
    args: tuple[str, ...]
    # A fragment of vLLM's error message (quoted from vLLM 0.33); None: vLLM accepts.
    vllm_refuses: str | None = None
    # A fragment of our PreflightError; None: preflight passes.
    preflight_refuses: str | None = None
    # The draft architecture vLLM resolves, where it says something.
    architecture: str | None = None
    # The method vLLM runs instead of the one we render (SWITCHED).
    vllm_method: str | None = None


def k(n: int) -> tuple[str, ...]:
    return ("--num-speculative-tokens", str(n))


# Both accept: one case for every method (test_every_method_has_an_accepted_case), and
# the options each renders.
ACCEPTED: dict[str, Case] = {
    "peagle": Case(
        "llama-target", "e3-head", ("--method", "peagle", *k(5)),
        architecture="LlamaForCausalLMEagle3",
    ),
    "eagle3": Case(
        "llama-target", "e3-head", ("--method", "eagle3", *k(3)),
        architecture="LlamaForCausalLMEagle3",
    ),
    "eagle": Case(
        "llama-target", "e1-head", ("--method", "eagle", *k(2)),
        architecture="EagleLlamaForCausalLM",
    ),
    "eagle3, draft TP 1 of 2": Case(
        "llama-target", "e3-head",
        ("--method", "eagle3", *k(3), "--tensor-parallel-size", "2",
         "--draft-tensor-parallel-size", "1"),
    ),
    "draft_model, greedy": Case(
        "llama-target", "small-llama",
        ("--method", "draft_model", *k(3), "--draft-sample-method", "greedy"),
        architecture="LlamaForCausalLM",
    ),
    "draft_model, probabilistic, draft TP 2 of 2": Case(
        "llama-target", "small-llama",
        ("--method", "draft_model", *k(4), "--draft-sample-method", "probabilistic",
         "--tensor-parallel-size", "2", "--draft-tensor-parallel-size", "2"),
    ),
    "mtp, 1 layer, K=1": Case(
        "mtp1-target", None, ("--method", "mtp", *k(1)), architecture="DeepSeekMTPModel"
    ),
    "mtp, 1 layer, K=3 (the layer runs 3 times)": Case(
        "mtp1-target", None, ("--method", "mtp", *k(3))
    ),
    "mtp, 3 layers, K=2": Case("mtp3-target", None, ("--method", "mtp", *k(2))),
    "mtp, 3 layers, K=3": Case("mtp3-target", None, ("--method", "mtp", *k(3))),
    "mtp, 3 layers, K=6": Case("mtp3-target", None, ("--method", "mtp", *k(6))),
    "mtp, DeepSeek-V4": Case(
        "v4-target", None, ("--method", "mtp", *k(1)), architecture="DeepSeekV4MTPModel"
    ),
    "ngram": Case(
        "llama-target", None,
        ("--method", "ngram", *k(4), "--prompt-lookup-min", "2", "--prompt-lookup-max", "5"),
    ),
    "ngram, default window": Case("llama-target", None, ("--method", "ngram", *k(3))),
    "ngram_gpu": Case(
        "llama-target", None,
        ("--method", "ngram_gpu", *k(3), "--prompt-lookup-min", "1",
         "--prompt-lookup-max", "3"),
    ),
    "dflash": Case(
        "qwen3-target", "diffusion-draft", ("--method", "dflash", *k(4)),
        architecture="DFlashDraftModel",
    ),
    "dspark, Qwen3 draft": Case(
        "qwen3-target", "spark-draft", ("--method", "dspark", *k(4)),
        architecture="Qwen3DSparkModel",
    ),
    # The engine's own verification budget per step, K its cap (vLLM 0.33 documents it
    # for method dspark only: SpeculativeConfig.enable_adaptive_verification).
    "dspark, Qwen3 draft, adaptive verification": Case(
        "qwen3-target", "spark-draft", ("--method", "dspark", *k(7), "--adaptive-verification"),
        architecture="Qwen3DSparkModel",
    ),
    "dspark, in a DeepSeek-V4 target": Case(
        "v4-target", None, ("--method", "dspark", *k(4)), architecture="DSparkDraftModel"
    ),
    "dspark, in a DeepSeek-V4.1 target": Case(
        "v41-target", None, ("--method", "dspark", *k(4)),
        architecture="DSparkV41DraftModel",
    ),
    "eagle3, rejection block, probabilistic": Case(
        "llama-target", "e3-head",
        ("--method", "eagle3", *k(3), "--rejection-sample-method", "block",
         "--draft-sample-method", "probabilistic"),
    ),
    "eagle3, rejection fly, K=2": Case(
        "llama-target", "e3-head",
        ("--method", "eagle3", *k(2), "--rejection-sample-method", "fly"),
    ),
    "peagle, rejection standard": Case(
        "llama-target", "e3-head",
        ("--method", "peagle", *k(4), "--rejection-sample-method", "standard"),
    ),
    "eagle3, batch schedule": Case(
        "llama-target", "e3-head",
        ("--method", "eagle3", *k(3), "--batch-schedule", "1:4:3",
         "--batch-schedule", "5:64:2", "--batch-schedule", "65:256:0"),
    ),
}  # fmt: skip

# Both refuse, each for its own reason.
REFUSED: dict[str, Case] = {
    "mtp, 3 layers, K=4": Case(
        "mtp3-target", None, ("--method", "mtp", *k(4)),
        vllm_refuses="num_speculative_tokens:4 must be divisible by n_predict=3",
        preflight_refuses="K=4 does not fit the target's 3 MTP layers",
    ),
    "mtp on a target without MTP layers": Case(
        "llama-target", None, ("--method", "mtp", *k(1)),
        vllm_refuses="Unsupported speculative method: 'mtp'",
        preflight_refuses="has no MTP layers",
    ),
    "draft_model of another vocabulary": Case(
        "llama-target", "other-vocab-llama", ("--method", "draft_model", *k(3)),
        vllm_refuses="Target and draft model should have the same vocabulary size. "
        f"Target model vocab_size={VOCAB}. Draft model vocab_size={VOCAB // 2}.",
        preflight_refuses=f"draft vocabulary size {VOCAB // 2} != target vocabulary size {VOCAB}",
    ),
    # vLLM renames the draft's architecture DFlash<arch> and refuses it at config time,
    # when its model registry does not know the name.
    "mtp, DeepSeek-V4.1 target": Case(
        "v41-target", None, ("--method", "mtp", *k(1)),
        vllm_refuses="DeepSeek V4.1 has no classic-MTP draft",
        preflight_refuses="vLLM refuses method mtp on it; use method dspark",
    ),
    "dflash, a draft that is not DFlash": Case(
        "qwen3-target", "qwen3-draft", ("--method", "dflash", *k(4)),
        vllm_refuses="Model architectures ['DFlashQwen3ForCausalLM'] are not supported for now",
        preflight_refuses="is not a DFlash draft",
    ),
}  # fmt: skip

# Our preflight refuses these; vLLM's SpeculativeConfig accepts them and fails later
# (loading weights, or building the proposer), which these cases pin down.
PREFLIGHT_ONLY: dict[str, Case] = {
    # vLLM takes any target for DeepSeek-V4's built-in DSpark layers; only loading the
    # llama checkpoint's weights fails.
    "dspark, in a target without DSpark layers": Case(
        "llama-target", None, ("--method", "dspark", *k(4)),
        preflight_refuses="only DeepSeek-V4 checkpoints have",
        architecture="DSparkDraftModel",
    ),
    # Parallel drafting reads the mask token when the proposer is built.
    "peagle, a head without a mask token": Case(
        "llama-target", "e3-head-unmasked", ("--method", "peagle", *k(4)),
        preflight_refuses="has no mask token",
    ),
    # vLLM renames LlamaForCausalLM Eagle3LlamaForCausalLM, a registered EAGLE-3 head.
    "eagle3, a plain Llama draft": Case(
        "llama-target", "small-llama", ("--method", "eagle3", *k(3)),
        preflight_refuses="is not an EAGLE-3/P-EAGLE draft",
        architecture="Eagle3LlamaForCausalLM",
    ),
}  # fmt: skip

# vLLM overrides an explicit draft_model by what it finds in the draft (vLLM's
# auto-detection): our preflight refuses these, and vLLM would run another method.
SWITCHED: dict[str, Case] = {
    # vLLM rewrites every draft config; a DeepSeek-V3 one becomes its MTP draft.
    "draft_model, a checkpoint with MTP layers": Case(
        "llama-target", "mtp1-target", ("--method", "draft_model", *k(2)),
        preflight_refuses="would run it as method mtp, not draft_model",
        vllm_method="mtp", architecture="DeepSeekMTPModel",
    ),
    "draft_model, a DSpark draft": Case(
        "qwen3-target", "spark-draft", ("--method", "draft_model", *k(2)),
        preflight_refuses="would run it as method dspark, not draft_model",
        vllm_method="dspark", architecture="Qwen3DSparkModel",
    ),
}  # fmt: skip

# This vLLM venv has no arctic_inference, so vLLM raises its ImportError before it looks
# at any suffix_decoding_* knob: it shows our argv reached suffix validation, but the
# knobs themselves are not validated by vLLM here. (Preflight runs without torch here,
# so its arctic-inference check, which runs only where vLLM is, does not apply.)
SUFFIX = Case(
    "llama-target", None,
    ("--method", "suffix", *k(8), "--suffix-max-tree-depth", "16",
     "--suffix-max-cached-requests", "100", "--suffix-max-spec-factor", "1.5",
     "--suffix-min-token-prob", "0.2"),
    vllm_refuses="Arctic Inference is required for suffix decoding. "
    "Install via `pip install arctic-inference==",
)  # fmt: skip

CASES: dict[str, Case] = {
    **ACCEPTED,
    **REFUSED,
    **PREFLIGHT_ONLY,
    **SWITCHED,
    "suffix": SUFFIX,
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    assert not any(m in str(root).lower() for m in PATH_MARKERS), root
    for name, config in MODELS.items():
        model_dir(root, name, config)
        (root / name / "tokenizer.json").write_text(json.dumps(TOKENIZER))
    return root


def runtime_config(case: Case, root: Path) -> RuntimeConfig:
    draft = ["--draft-model", str(root / case.draft)] if case.draft else []
    return parse_serve_args(["--model", str(root / case.target), *draft, *case.args], env={})[0]


def rendered(case: Case, root: Path) -> dict[str, Any]:
    spec = speculative_config(runtime_config(case, root))
    assert spec is not None
    return spec


# Where the CPU build's servers in tests/ keep what vLLM learns of a model class (vLLM's
# envs.py: VLLM_CACHE_ROOT, else XDG_CACHE_HOME's or ~/.cache's vllm).
CPU_BUILD_CACHE = Path(
    os.environ.get("VLLM_CACHE_ROOT")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vllm"
)


def model_classes_learned(cache: Path) -> dict[str, bytes]:
    """What a vLLM cache holds of each model class it inspected, by file."""
    return {path.name: path.read_bytes() for path in (cache / "modelinfos").glob("*.json")}


@pytest.fixture(scope="module")
def report(models: Path) -> dict[str, Any]:
    python = vllm_python()
    assert python is not None
    cases = [
        {
            "name": name,
            "target": str(models / case.target),
            "tensor_parallel_size": runtime_config(case, models).tensor_parallel_size,
            "spec": rendered(case, models),
        }
        for name, case in CASES.items()
    ]
    # Beside vLLM 0.33's venv: what it learns of a model class (importing its module in
    # the check's inspector process, a few seconds a class) is learned once, not at every run.
    cache = Path(python).parent.parent / "vllm-cache"
    shared = model_classes_learned(CPU_BUILD_CACHE)
    result = subprocess.run(
        [python, "-c", CHECK],
        input=json.dumps({"cases": cases}),
        capture_output=True,
        text=True,
        # A hang's limit: 60 s alone, 125 s beside the cluster's tests; more beside real vLLM.
        timeout=600,
        check=False,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            # A cache of its own for what vLLM learns of a model class: vLLM's CPU build
            # names its file by the same source (llama.py is byte for byte 0.33's) but
            # reads other fields, so each threw the other's away and probed the class
            # again in a subprocess, about 10 s at the next vLLM CPU server's start.
            "VLLM_CACHE_ROOT": str(cache),
        },
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, result.stderr[-3000:]
    found: dict[str, Any] = json.loads(lines[-1].removeprefix("REPORT "))
    assert found["version"].startswith("0.33."), found["version"]
    assert set(found["results"]) == set(CASES)
    # vLLM 0.33 learned the model classes into its own cache, and left the CPU build's alone.
    assert model_classes_learned(cache), cache
    assert model_classes_learned(CPU_BUILD_CACHE) == shared, CPU_BUILD_CACHE
    return found


def test_every_method_has_an_accepted_case(models: Path) -> None:
    accepted = {runtime_config(case, models).method for case in ACCEPTED.values()}
    assert accepted == {m for m in Method if m.speculates} - {Method.SUFFIX}
    assert runtime_config(SUFFIX, models).method is Method.SUFFIX


@pytest.mark.parametrize("name", CASES)
def test_preflight(name: str, models: Path) -> None:
    case = CASES[name]
    config = runtime_config(case, models)
    lines: list[str] = []
    if case.preflight_refuses is None:
        preflight.run(config, {}, use_torch=False, log=lines.append)
        assert any("weights and tokenizer found" in line for line in lines), lines
    else:
        with pytest.raises(preflight.PreflightError, match=re.escape(case.preflight_refuses)):
            preflight.run(config, {}, use_torch=False, log=lines.append)


@requires_vllm
@pytest.mark.parametrize("name", [*ACCEPTED, *PREFLIGHT_ONLY])
def test_vllm_accepts_the_rendered_config(name: str, models: Path, report: dict[str, Any]) -> None:
    case, result = CASES[name], report["results"][name]
    assert result["ok"], result
    spec = rendered(case, models)
    # vLLM kept every value we rendered: no auto-detection switched the method, no
    # default overrode K, the window, the sampling or the draft TP.
    assert result["fields"] == {**spec, "parallel_drafting": result["fields"]["parallel_drafting"]}
    # Parallel drafting is on exactly for the methods we count as drafting in one pass
    # (vLLM turns it on itself for dflash and dspark).
    method = runtime_config(case, models).method
    assert result["fields"]["parallel_drafting"] is method.parallel_drafting
    if case.architecture is not None:
        assert result["architectures"] == [case.architecture]
    if "num_speculative_tokens_per_batch_size" in spec:
        assert result["schedule"] == spec["num_speculative_tokens_per_batch_size"]


@requires_vllm
@pytest.mark.parametrize("name", REFUSED)
def test_vllm_refuses_what_preflight_refuses(name: str, report: dict[str, Any]) -> None:
    case, result = CASES[name], report["results"][name]
    assert case.vllm_refuses is not None and case.preflight_refuses is not None
    assert not result["ok"], result
    assert case.vllm_refuses in result["message"], result


@requires_vllm
def test_vllm_reaches_suffix_validation(report: dict[str, Any]) -> None:
    result = report["results"]["suffix"]
    assert not result["ok"], result
    assert result["type"] == "ImportError", result
    assert SUFFIX.vllm_refuses is not None and SUFFIX.vllm_refuses in result["message"], result


@requires_vllm
@pytest.mark.parametrize("name", SWITCHED)
def test_vllm_runs_another_method_where_preflight_refuses(
    name: str, models: Path, report: dict[str, Any]
) -> None:
    case, result = CASES[name], report["results"][name]
    assert case.preflight_refuses is not None  # test_preflight: our preflight refuses it
    assert result["ok"], result
    assert case.vllm_method != rendered(case, models)["method"]
    assert result["fields"]["method"] == case.vllm_method, result
    assert result["architectures"] == [case.architecture], result
