"""Golden argv for every method and option, and the flags the runtime refuses to share.

`CASES` is also what the vLLM contract test feeds to vLLM's own parser.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specfleet.runtime.config import (
    BatchScheduleEntry,
    ConfigError,
    Engine,
    Method,
    RuntimeConfig,
    parse_serve_args,
)
from specfleet.runtime.vllm_args import (
    OWNED_ARG_PATTERN,
    owned_flag,
    refuse_collisions,
    speculative_config,
    vllm_argv,
)

TARGET = "meta-llama/Llama-3.1-8B-Instruct"
DRAFT = "RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3"


def _spec(**keys: Any) -> str:
    return json.dumps(keys, separators=(",", ":"))


# (runtime serve args, the exact vllm argv they render)
CASES: dict[str, tuple[list[str], list[str]]] = {
    "peagle": (
        ["--model", TARGET, "--method", "peagle", "--draft-model", DRAFT,
         "--num-speculative-tokens", "5"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=5, parallel_drafting=True)],
    ),
    "eagle3": (
        ["--model", TARGET, "--method", "eagle3", "--draft-model", DRAFT,
         "--num-speculative-tokens", "3"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=3)],
    ),
    "eagle": (
        ["--model", TARGET, "--method", "eagle", "--draft-model", "yuhuili/EAGLE-LLaMA3-8B",
         "--num-speculative-tokens", "2"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="eagle", model="yuhuili/EAGLE-LLaMA3-8B", num_speculative_tokens=2)],
    ),
    "ngram": (
        ["--model", TARGET, "--method", "ngram", "--num-speculative-tokens", "4",
         "--prompt-lookup-min", "2", "--prompt-lookup-max", "5"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="ngram", num_speculative_tokens=4, prompt_lookup_min=2,
               prompt_lookup_max=5)],
    ),
    "none": (
        ["--model", TARGET, "--method", "none"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1"],
    ),
    "leader of a replica across two nodes": (
        ["--model", TARGET, "--method", "eagle3", "--draft-model", DRAFT,
         "--num-speculative-tokens", "3", "--tensor-parallel-size", "2",
         "--pipeline-parallel-size", "2", "--nnodes", "2",
         "--master-addr", "m-stable-0.m-stable.ns"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
         "--nnodes", "2", "--master-addr", "m-stable-0.m-stable.ns", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=3)],
    ),
    "worker of a replica across two nodes": (
        ["--model", TARGET, "--method", "eagle3", "--draft-model", DRAFT,
         "--num-speculative-tokens", "3", "--tensor-parallel-size", "2",
         "--pipeline-parallel-size", "2", "--nnodes", "2",
         "--master-addr", "m-stable-0.m-stable.ns", "--node-rank", "1"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
         "--nnodes", "2", "--master-addr", "m-stable-0.m-stable.ns", "--node-rank", "1",
         "--headless", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=3)],
    ),
    "none ignores leftover speculation flags": (
        ["--model", TARGET, "--method", "none", "--draft-model", DRAFT,
         "--num-speculative-tokens", "5", "--batch-schedule", "1:4:5"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1"],
    ),
    "every option": (
        ["--model", TARGET, "--served-model-name", "llama-8b", "--method", "peagle",
         "--draft-model", DRAFT, "--num-speculative-tokens", "7",
         "--draft-tensor-parallel-size", "1", "--batch-schedule", "1:8:7",
         "--batch-schedule", "9:32:4", "--batch-schedule", "33:256:2",
         "--tensor-parallel-size", "2", "--host", "10.1.2.3", "--port", "8000",
         "--", "--max-model-len", "8192", "--gpu-memory-utilization", "0.9"],
        ["vllm", "serve", TARGET, "--served-model-name", "llama-8b",
         "--tensor-parallel-size", "2", "--host", "10.1.2.3", "--port", "8000",
         "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=7, parallel_drafting=True,
               draft_tensor_parallel_size=1,
               num_speculative_tokens_per_batch_size=[[1, 8, 7], [9, 32, 4], [33, 256, 2]]),
         "--max-model-len", "8192", "--gpu-memory-utilization", "0.9"],
    ),
    "draft tensor parallel equal to the target's": (
        ["--model", TARGET, "--method", "eagle3", "--draft-model", DRAFT,
         "--num-speculative-tokens", "3", "--tensor-parallel-size", "4",
         "--draft-tensor-parallel-size", "4"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "4", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=3,
               draft_tensor_parallel_size=4)],
    ),
    "pipeline and data parallel": (
        ["--model", TARGET, "--method", "mtp", "--num-speculative-tokens", "2",
         "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2",
         "--data-parallel-size", "1"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "4",
         "--pipeline-parallel-size", "2", "--speculative-config",
         _spec(method="mtp", num_speculative_tokens=2)],
    ),
    "data parallel": (
        ["--model", TARGET, "--method", "eagle3", "--draft-model", DRAFT,
         "--num-speculative-tokens", "3", "--tensor-parallel-size", "2",
         "--data-parallel-size", "4"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "2", "--data-parallel-size", "4",
         "--speculative-config", _spec(method="eagle3", model=DRAFT, num_speculative_tokens=3)],
    ),
    "draft_model with probabilistic draft sampling": (
        ["--model", TARGET, "--method", "draft_model", "--draft-model",
         "meta-llama/Llama-3.2-1B-Instruct", "--num-speculative-tokens", "4",
         "--draft-sample-method", "probabilistic"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="draft_model", model="meta-llama/Llama-3.2-1B-Instruct",
               num_speculative_tokens=4, draft_sample_method="probabilistic")],
    ),
    "peagle with greedy draft sampling named": (
        ["--model", TARGET, "--method", "peagle", "--draft-model", DRAFT,
         "--num-speculative-tokens", "2", "--draft-sample-method", "greedy"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=2, parallel_drafting=True,
               draft_sample_method="greedy")],
    ),
    "mtp: the target's own heads, no draft model": (
        ["--model", TARGET, "--method", "mtp", "--num-speculative-tokens", "1"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="mtp", num_speculative_tokens=1)],
    ),
    "mtp from a separate checkpoint, probabilistic, block verification": (
        ["--model", TARGET, "--method", "mtp", "--draft-model", "/models/assistant",
         "--num-speculative-tokens", "2", "--draft-sample-method", "probabilistic",
         "--rejection-sample-method", "block"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="mtp", model="/models/assistant", num_speculative_tokens=2,
               draft_sample_method="probabilistic", rejection_sample_method="block")],
    ),
    "dflash: parallel drafting from a block-diffusion draft": (
        ["--model", TARGET, "--method", "dflash", "--draft-model", "/models/dflash",
         "--num-speculative-tokens", "8"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="dflash", model="/models/dflash", num_speculative_tokens=8,
               parallel_drafting=True)],
    ),
    "dspark built into the target, fly verification": (
        ["--model", TARGET, "--method", "dspark", "--num-speculative-tokens", "6",
         "--rejection-sample-method", "fly"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="dspark", num_speculative_tokens=6, parallel_drafting=True,
               rejection_sample_method="fly")],
    ),
    "dspark with adaptive verification: K is the engine's cap": (
        ["--model", TARGET, "--method", "dspark", "--num-speculative-tokens", "7",
         "--adaptive-verification"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="dspark", num_speculative_tokens=7, parallel_drafting=True,
               enable_adaptive_verification=True)],
    ),
    "ngram_gpu with its window": (
        ["--model", TARGET, "--method", "ngram_gpu", "--num-speculative-tokens", "4",
         "--prompt-lookup-min", "2", "--prompt-lookup-max", "5"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="ngram_gpu", num_speculative_tokens=4, prompt_lookup_min=2,
               prompt_lookup_max=5)],
    ),
    "suffix with its knobs and a cap": (
        ["--model", TARGET, "--method", "suffix", "--num-speculative-tokens", "16",
         "--suffix-max-tree-depth", "32", "--suffix-max-cached-requests", "0",
         "--suffix-max-spec-factor", "1.5", "--suffix-min-token-prob", "0.2"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="suffix", num_speculative_tokens=16, suffix_decoding_max_tree_depth=32,
               suffix_decoding_max_cached_requests=0, suffix_decoding_max_spec_factor=1.5,
               suffix_decoding_min_token_prob=0.2)],
    ),
    "suffix without K: vLLM caps it at the tree depth": (
        ["--model", TARGET, "--method", "suffix"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--speculative-config",
         _spec(method="suffix")],
    ),
    "host and port given last win": (
        ["--model", TARGET, "--host", "0.0.0.0", "--port", "8000", "--method", "eagle3",
         "--draft-model", DRAFT, "--num-speculative-tokens", "32",
         "--host", "127.0.0.7", "--port", "18001"],
        ["vllm", "serve", TARGET, "--tensor-parallel-size", "1", "--host", "127.0.0.7",
         "--port", "18001", "--speculative-config",
         _spec(method="eagle3", model=DRAFT, num_speculative_tokens=32)],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_golden_argv(name: str) -> None:
    args, expected = CASES[name]
    config, dry_run = parse_serve_args(args, env={})
    assert not dry_run
    assert vllm_argv(config) == expected


@pytest.mark.parametrize("name", CASES)
def test_to_args_parses_back_to_the_same_config(name: str) -> None:
    config, _ = parse_serve_args(CASES[name][0], env={})
    assert parse_serve_args(config.to_args(), env={})[0] == config


# Each spelling class vLLM's parser reads as an owned flag (the contract test checks
# them against vLLM itself), and the owned flag it sets.
COLLIDING: list[tuple[list[str], str]] = [
    (["--speculative-config", "{}"], "--speculative-config"),
    (["--speculative_config={}"], "--speculative-config"),
    (["-sc", "{}"], "--speculative-config"),
    (["-sc={}"], "--speculative-config"),
    (["-sc.method", "ngram"], "--speculative-config"),
    (["-s", "{}"], "--speculative-config"),
    (["-s.method", "ngram"], "--speculative-config"),
    (["--speculative-config.num_speculative_tokens", "9"], "--speculative-config"),
    (["--speculative", '{"method":"ngram","num_speculative_tokens":9}'], "--speculative-config"),
    (["--speculative_conf.method=ngram"], "--speculative-config"),
    (["--spec-method", "ngram"], "--spec-method"),
    (["--spec_meth=ngram"], "--spec-method"),
    (["--spec-model", "other/draft"], "--spec-model"),
    (["--spec-tokens", "9"], "--spec-tokens"),
    (["--spec-t", "9"], "--spec-tokens"),
    (["--spec", "9"], "--speculative-config"),  # ambiguous in vLLM: refused all the same
    (["--config", "serve.yaml"], "--config"),
    (["--conf=serve.yaml"], "--config"),
    (["--model", "other"], "--model"),
    (["--model=other"], "--model"),
    (["--mod", "other"], "--model"),
    (["--served-model-name", "x"], "--served-model-name"),
    (["--served", "x"], "--served-model-name"),
    (["--served_model", "x"], "--served-model-name"),
    (["--tensor-parallel-size", "8"], "--tensor-parallel-size"),
    (["--tensor-parallel", "8"], "--tensor-parallel-size"),
    (["--tensor_parallel_size", "8"], "--tensor-parallel-size"),
    (["-pp", "2"], "--pipeline-parallel-size"),
    (["--pipeline_parallel", "2"], "--pipeline-parallel-size"),
    (["-dp4"], "--data-parallel-size"),
    (["--data-parallel-size=4"], "--data-parallel-size"),
    (["-tp", "8"], "--tensor-parallel-size"),
    (["-tp=8"], "--tensor-parallel-size"),
    (["-tp8"], "--tensor-parallel-size"),
    (["-t", "8"], "--tensor-parallel-size"),
    (["--host", "0.0.0.0"], "--host"),
    (["--hos", "0.0.0.0"], "--host"),
    (["--host.x", "1"], "--host"),
    (["--port=9000"], "--port"),
    (["--po", "9000"], "--port"),
    (["--max-model-len", "4096", "--port", "9000"], "--port"),
    # After "--" (or a lone "-") vLLM reads the next arg as a positional model.
    (["--max-model-len", "4096", "--", "other/model"], "--model"),
    (["-"], "--model"),
]


@pytest.mark.parametrize(("extra", "owner"), COLLIDING, ids=lambda v: repr(v))
def test_extra_args_that_set_an_owned_flag_are_refused(extra: list[str], owner: str) -> None:
    config, _ = parse_serve_args(["--model", TARGET, "--", *extra], env={})
    with pytest.raises(ConfigError) as error:
        vllm_argv(config)
    message = str(error.value)
    assert "\n" not in message
    assert f"would set {owner}," in message


def test_a_positional_first_extra_arg_is_refused() -> None:
    config, _ = parse_serve_args(["--model", TARGET, "--", "other/model"], env={})
    with pytest.raises(ConfigError, match="'other/model' is positional"):
        vllm_argv(config)


def test_extra_args_that_only_look_similar_pass() -> None:
    extra = [
        "--hosted-thing", "1", "--max-model-len", "4096", "--portability", "--dtype", "auto",
        "--enforce-eager", "--model-impl", "vllm", "--specialize-active-lora", "--seed", "-1",
        "--max-num-seqs=8", "--compilation-config.level", "3", "--tokenizer", "tiny-model",
        # vLLM's other data parallel flags, which go on from -dp in letters
        "-dpl", "1", "--data-parallel-size-local", "1", "-dpb", "mp",
    ]  # fmt: skip
    config, _ = parse_serve_args(["--model", TARGET, "--", *extra], env={})
    assert vllm_argv(config)[-len(extra) :] == extra


@given(st.text(alphabet="-_.=abcdehilmnoprstz", max_size=24))
def test_the_pattern_refuses_exactly_what_some_owned_flag_refuses(arg: str) -> None:
    # The one pattern (also the CEL rule at admission) and the per-flag lookup that
    # names the flag in the message agree on every arg.
    assert bool(re.fullmatch(OWNED_ARG_PATTERN, arg)) == (owned_flag(arg) is not None)


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--method", "peagle", "--num-speculative-tokens", "3"], "needs --draft-model"),
        (["--method", "eagle3", "--draft-model", DRAFT], "needs --num-speculative-tokens"),
        (["--method", "ngram", "--num-speculative-tokens", "0"], "greater than or equal to 1"),
        (["--method", "ngram", "--num-speculative-tokens", "33"], "less than or equal to 32"),
        (["--method", "ngram", "--num-speculative-tokens", "3", "--prompt-lookup-min", "5",
          "--prompt-lookup-max", "2"], "--prompt-lookup-min must be <="),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--prompt-lookup-max", "2"], "apply to methods ngram and ngram_gpu only"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--batch-schedule", "1:8:4"], "K must be <= --num-speculative-tokens (3)"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--batch-schedule", "2:8:3"], "must start at batch size 1"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--batch-schedule", "1:8:3", "--batch-schedule", "8:16:2"], "overlap"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--batch-schedule", "1-8-3"], "is not START:END:K"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--tensor-parallel-size", "4", "--draft-tensor-parallel-size", "2"],
         "must be 1 or the --tensor-parallel-size (4)"),
        (["--method", "ngram", "--num-speculative-tokens", "3", "--draft-sample-method",
          "probabilistic"], "--draft-sample-method needs a draft network"),
        (["--method", "ngram", "--num-speculative-tokens", "3", "--draft-model", DRAFT],
         "method ngram takes no --draft-model"),
        (["--method", "dflash", "--num-speculative-tokens", "3"], "needs --draft-model"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--adaptive-verification"], "--adaptive-verification applies to method dspark only"),
        (["--method", "mtp"], "method mtp needs --num-speculative-tokens"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "1",
          "--rejection-sample-method", "fly"], "fly needs --num-speculative-tokens >= 2"),
        (["--method", "ngram", "--num-speculative-tokens", "3", "--suffix-max-tree-depth", "4"],
         "--suffix-* options apply to method suffix only"),
        (["--method", "suffix", "--suffix-min-token-prob", "1.5"], "less than or equal to 1"),
        (["--method", "peagle", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--draft-sample-method", "random"], "invalid choice"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--data-parallel-size", "2", "--batch-schedule", "1:8:3"],
         "--batch-schedule and --hot-schedule need --data-parallel-size 1"),
        (["--method", "eagle3", "--draft-model", DRAFT, "--num-speculative-tokens", "3",
          "--data-parallel-size", "2", "--hot-schedule"],
         "--batch-schedule and --hot-schedule need --data-parallel-size 1"),
        (["--method", "dspark", "--num-speculative-tokens", "3", "--adaptive-verification",
          "--pipeline-parallel-size", "2"], "--adaptive-verification needs --pipeline-parallel"),
        (["--pipeline-parallel-size", "0"], "greater than or equal to 1"),
        (["--method", "medusa"], "invalid choice"),
        (["--port", "0"], "greater than or equal to 1"),
        (["--bogus"], "unrecognized arguments"),
    ],
)  # fmt: skip
def test_invalid_configs_are_refused_in_one_line(args: list[str], reason: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_serve_args(["--model", TARGET, *args], env={})
    assert reason in str(error.value)
    assert "\n" not in str(error.value)


def test_environment_supplies_engine_profile_seed_and_termination_log() -> None:
    env = {
        "SPECFLEET_ENGINE": "sim",
        "SPECFLEET_SIM_PROFILE": "acceptance: [0.9]",
        "SPECFLEET_SIM_SEED": "7",
        "SPECFLEET_TERMINATION_LOG": "/tmp/why",
    }
    config, _ = parse_serve_args(["--model", TARGET], env=env)
    assert (config.engine, config.sim_profile, config.seed) == (Engine.SIM, "acceptance: [0.9]", 7)
    assert config.termination_log == "/tmp/why"
    flags = ["--engine", "vllm", "--seed", "8", "--termination-log", "/tmp/other"]
    config, _ = parse_serve_args(["--model", TARGET, *flags], env=env)
    assert (config.engine, config.seed, config.termination_log) == (Engine.VLLM, 8, "/tmp/other")


def test_speculative_config_is_none_without_speculation() -> None:
    assert speculative_config(RuntimeConfig(model=TARGET, method=Method.NONE)) is None


@pytest.mark.parametrize(
    ("batch", "k"), [(1, 7), (8, 7), (9, 4), (32, 4), (33, 4), (99, 4), (100, 2), (512, 2)]
)
def test_k_for_batch_follows_the_schedule_like_vllm(batch: int, k: int) -> None:
    # 33..99 is a gap: vLLM carries the previous range's K over it.
    config = RuntimeConfig(
        model=TARGET,
        method=Method.PEAGLE,
        draft_model=DRAFT,
        num_speculative_tokens=7,
        batch_schedule=(
            BatchScheduleEntry(start=1, end=8, k=7),
            BatchScheduleEntry(start=9, end=32, k=4),
            BatchScheduleEntry(start=100, end=512, k=2),
        ),
    )
    assert config.k_for_batch(batch) == k


@pytest.mark.parametrize(
    ("extra", "instead"),
    [
        (["--num-speculative-tokens", "5"], "specfleet-runtime's own --num-speculative-tokens"),
        (["--speculative_model=x/y"], "specfleet-runtime's own --draft-model"),
        (["--speculative-disable-mqa-scorer"], "nothing: vLLM 0.33 has no MQA scorer"),
    ],
)
def test_older_vllm_speculative_flags_are_refused_saying_what_replaced_them(
    extra: list[str], instead: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"use {instead} instead")):
        refuse_collisions(extra)
    # A longer flag that merely starts like one is vLLM's to judge.
    refuse_collisions(["--speculative-model-revision-of-mine", "1"])
