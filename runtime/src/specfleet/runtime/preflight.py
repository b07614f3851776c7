"""Checks run before the engine starts, so a bad pod fails in seconds with a reason.

Each failure is a `PreflightError` whose message is one line: the CLI writes it to the
pod's termination log, and the operator shows it in its Degraded condition.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specfleet.runtime.config import Method, RejectionSampleMethod, RuntimeConfig


class PreflightError(Exception):
    """A failed check; the message is one line."""


# vLLM 0.33's registry names for EAGLE-3 drafts (P-EAGLE drafts are EAGLE-3 drafts
# trained for parallel drafting) and the speculators library's class names.
EAGLE3_ARCHITECTURE_MARKERS = ("eagle3", "peagle")
EAGLE3_SPECULATOR_TYPES = ("eagle3", "peagle")
# Where vLLM 0.33 looks for the parallel-drafting mask token (speculators' peagle
# configs carry `mask_token_id`, which vLLM maps to `pard_token`).
MASK_TOKEN_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")
# Where a target's config.json says how many MTP layers it has, by model family (vLLM
# 0.33's hf_config_override): DeepSeek, GLM, Qwen3-Next, Kimi and most others;
# Qwen3.5; MiniMax; the transformers backend. Inkling nests it under mtp_config.
MTP_LAYER_KEYS = (
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "num_mtp_modules",
    "num_mtp_layers",
)
# vLLM 0.33 names a DFlash draft `DFlash<architecture>` unless it already says DFlash;
# these are the names its registry runs.
DFLASH_ARCHITECTURES = (
    "DFlashDraftModel",
    "DFlash2DraftModel",
    "DFlash2BeamDraftModel",
    "LiLiCorrDraftModel",
    "DFlashLagunaForCausalLM",
    "DFlashMuseGlimmerAssistantModel",
    "DFlashQwen3XPressModel",
)
# DSpark drafts vLLM 0.33 recognizes; any other draft it takes for DeepSeek-V4's own
# DSpark layers and fails only when loading the weights.
DSPARK_ARCHITECTURES = (
    "Qwen3DSparkModel",
    "Qwen3OmniDSparkModel",
    "MuseSparkDSparkModel",
    "Gemma4DSparkModel",
    "K3DSparkModel",
    "DSparkDraftModel",
)
# Targets whose DSpark layers ship inside the checkpoint (no draft.model needed).
DSPARK_BUILT_IN_TARGETS = ("deepseek_v4", "deepseek_v41")
# DeepSeek-V4.1's mtp.* layers are DSpark stages: vLLM refuses method mtp on it.
NO_CLASSIC_MTP = ("deepseek_v41",)
# Words vLLM 0.33 looks for in a draft's path to pick the method itself, overriding an
# explicit draft_model or mtp, and the method each picks.
PATH_METHODS = (
    ("eagle-", "eagle"),
    ("eagle3", "eagle3"),
    ("dflash", "dflash"),
    ("dspark", "dspark"),
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
# Files any of which lets transformers load a tokenizer from the directory.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json")
# A safetensors file starts with its header's length (8 bytes, little-endian), then the
# header: JSON naming each tensor. Larger headers than this are not real checkpoints.
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class ModelConfigFile:
    """A model's config.json, with lookups that see through nested layer configs."""

    path: Path
    data: Mapping[str, Any]

    def get(self, key: str) -> Any:
        # Multimodal targets nest the language model under text_config; speculators
        # drafts nest the decoder layer under transformer_layer_config.
        for scope in (
            self.data,
            self.data.get("text_config"),
            self.data.get("transformer_layer_config"),
        ):
            if isinstance(scope, Mapping) and scope.get(key) is not None:
                return scope[key]
        return None

    def first_int(self, keys: tuple[str, ...]) -> int | None:
        """The first of these keys set to an integer (not a boolean)."""
        for key in keys:
            value = self.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        return None

    @property
    def architectures(self) -> list[str]:
        found = self.get("architectures")
        return [str(a) for a in found] if isinstance(found, list) else []

    @property
    def speculators_type(self) -> str | None:
        value = self.data.get("speculators_model_type")
        return str(value) if value is not None else None


def is_local(name: str) -> bool:
    """Whether vLLM would load the model from disk (an existing directory) or a path."""
    return Path(name).is_dir() or name.startswith(("/", "./", "../", "~"))


def read_config(name: str, role: str) -> ModelConfigFile:
    directory = Path(name).expanduser()
    if not directory.is_dir():
        raise PreflightError(f"{role} model directory {name} does not exist")
    path = directory / "config.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise PreflightError(f"{role} model {name} has no config.json") from None
    except (OSError, ValueError) as error:
        raise PreflightError(f"{role} model {path} is not readable JSON: {error}") from None
    if not isinstance(data, dict):
        raise PreflightError(f"{role} model {path} is not a JSON object")
    return ModelConfigFile(path, data)


def safetensors_names(path: Path) -> set[str]:
    """The tensor names in a safetensors file, from its header alone (no torch)."""
    try:
        with path.open("rb") as file:
            prefix = file.read(8)
            size = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else -1
            if not 0 < size <= min(MAX_SAFETENSORS_HEADER, path.stat().st_size - 8):
                raise ValueError("no safetensors header")
            header = json.loads(file.read(size))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except (OSError, ValueError) as error:  # JSON and UTF-8 errors are ValueErrors
        raise PreflightError(
            f"weights {path} are not a readable safetensors file: {error}"
        ) from None
    return {name for name in header if name != "__metadata__"}


def weight_names(directory: Path, role: str) -> set[str] | None:
    """Tensor names of a model directory's safetensors weights; None when it has only
    other formats (.bin, .pt: not readable without torch). No weights at all fails."""
    files = sorted(p for p in directory.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    if not files:
        raise PreflightError(
            f"{role} model {directory} has no weights ({', '.join(WEIGHT_SUFFIXES)} files)"
        )
    safetensors = [p for p in files if p.suffix == ".safetensors"]
    if not safetensors:
        return None
    names: set[str] = set()
    for path in safetensors:
        names |= safetensors_names(path)
    return names


def check_target_files(config: RuntimeConfig, target: ModelConfigFile) -> None:
    directory = target.path.parent
    weight_names(directory, "target")
    own_tokenizer = any(
        a == "--tokenizer" or a.startswith("--tokenizer=") for a in config.extra_args
    )
    if not own_tokenizer and not any((directory / f).is_file() for f in TOKENIZER_FILES):
        raise PreflightError(
            f"target model {directory} has no tokenizer ({', '.join(TOKENIZER_FILES)}) "
            "and no --tokenizer is given"
        )


def check_draft_files(method: Method, draft: ModelConfigFile) -> None:
    names = weight_names(draft.path.parent, "draft")
    if (
        method is Method.PEAGLE
        and names is not None
        and not any("mask_hidden" in name for name in names)
    ):
        raise PreflightError(
            f"P-EAGLE draft {draft.path.parent} has no mask_hidden tensor in its weights "
            "(vLLM's parallel drafting needs it): it was not trained for parallel "
            "drafting; use method eagle3"
        )


def aux_layer_ids(draft: ModelConfigFile) -> list[int] | None:
    """The target layers an EAGLE-3 draft reads (0: embeddings, i: layer i's output)."""
    eagle_config = draft.get("eagle_config")
    ids = draft.get("eagle_aux_hidden_state_layer_ids")
    if ids is None and isinstance(eagle_config, Mapping):
        ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
    return [i for i in ids if isinstance(i, int)] if isinstance(ids, list) else None


def _is_eagle3(draft: ModelConfigFile) -> bool:
    if draft.speculators_type in EAGLE3_SPECULATOR_TYPES:
        return True
    return any(m in a.lower() for a in draft.architectures for m in EAGLE3_ARCHITECTURE_MARKERS)


def _is_eagle(draft: ModelConfigFile) -> bool:
    if draft.speculators_type == "eagle":
        return True
    return any("eagle" in a.lower() and not _is_eagle3(draft) for a in draft.architectures)


def mask_token(draft: ModelConfigFile) -> int | None:
    return draft.first_int(MASK_TOKEN_KEYS)


def check_draft_kind(method: Method, draft: ModelConfigFile) -> None:
    """The draft is the kind of model the method runs."""
    described = (
        f"architectures={draft.architectures} speculators_model_type={draft.speculators_type}"
    )
    if method in (Method.PEAGLE, Method.EAGLE3) and not _is_eagle3(draft):
        raise PreflightError(
            f"draft {draft.path.parent} is not an EAGLE-3/P-EAGLE draft ({described})"
        )
    if method is Method.EAGLE and not (_is_eagle(draft) or _is_eagle3(draft)):
        raise PreflightError(f"draft {draft.path.parent} is not an EAGLE draft ({described})")
    if method is Method.DRAFT_MODEL and (_is_eagle(draft) or _is_eagle3(draft)):
        raise PreflightError(
            f"draft {draft.path.parent} is an EAGLE head, not a model that drafts on its own "
            f"({described}); use method eagle3 or peagle"
        )
    if method is Method.PEAGLE:
        token = mask_token(draft)
        if token is None:
            raise PreflightError(
                f"P-EAGLE draft {draft.path.parent} has no mask token "
                f"(one of {', '.join(MASK_TOKEN_KEYS)} in config.json): it was not trained "
                "for parallel drafting; use method eagle3"
            )
        vocab = draft.get("vocab_size")
        if isinstance(vocab, int) and not 0 <= token < vocab:
            raise PreflightError(
                f"P-EAGLE draft mask token {token} is outside its vocabulary (0..{vocab - 1})"
            )


def mtp_layers(model: ModelConfigFile) -> int | None:
    """How many multi-token-prediction layers a checkpoint has, if its config says."""
    layers = model.first_int(MTP_LAYER_KEYS)
    if layers is None:  # Inkling nests them under mtp_config
        nested = ModelConfigFile(model.path, model.data.get("mtp_config") or {})
        layers = nested.first_int(MTP_LAYER_KEYS)
    return layers


def check_mtp(config: RuntimeConfig, target: ModelConfigFile) -> None:
    """The target carries MTP layers, and K is a count vLLM can run them for."""
    if target.get("model_type") in NO_CLASSIC_MTP:
        raise PreflightError(
            f"target {target.path.parent} is DeepSeek-V4.1, whose MTP layers are DSpark "
            "stages: vLLM refuses method mtp on it; use method dspark"
        )
    layers = mtp_layers(target)
    if not layers:
        raise PreflightError(
            f"target {target.path.parent} has no MTP layers (none of "
            f"{', '.join(MTP_LAYER_KEYS)} > 0 in config.json): method mtp runs the target's "
            "own multi-token-prediction heads (DeepSeek-V3, Qwen3-Next, GLM-4.5, ...); for "
            "another target use a separate draft (eagle3, draft_model)"
        )
    k = config.num_speculative_tokens or 0
    if k > layers and k % layers:
        raise PreflightError(
            f"K={k} does not fit the target's {layers} MTP layers: vLLM runs them in turn, "
            f"so K must be at most {layers} or a multiple of it"
        )


def _dflash_name(architecture: str) -> str:
    if architecture.startswith("DFlash") or architecture.endswith("DFlash"):
        return architecture
    return architecture if architecture == "LiLiCorrDraftModel" else f"DFlash{architecture}"


# vLLM 0.33 overrides an explicit draft_model (or mtp) by what it finds in the draft: a
# word in its path, MTP layers, a DSpark architecture. These refuse what would run as
# another method than the one the spec names.
def check_path_names_no_other_method(method: Method, draft_path: str) -> None:
    if method not in (Method.DRAFT_MODEL, Method.MTP):
        return
    lowered = draft_path.lower()
    for word, other in PATH_METHODS:
        if word in lowered:
            raise PreflightError(
                f"draft path {draft_path} contains {word!r}: vLLM 0.33 would run it as "
                f"method {other}, not {method}; serve it from a path without that word"
            )


def check_draft_is_no_other_method(method: Method, draft: ModelConfigFile) -> None:
    if method is not Method.DRAFT_MODEL:
        return
    if mtp_layers(draft):
        raise PreflightError(
            f"draft {draft.path.parent} has MTP layers: vLLM 0.33 would run it as method "
            "mtp, not draft_model; use method mtp with it as draft.model"
        )
    if set(draft.architectures) & set(DSPARK_ARCHITECTURES):
        raise PreflightError(
            f"draft {draft.path.parent} is a DSpark draft: vLLM 0.33 would run it as method "
            "dspark, not draft_model; use method dspark"
        )


def check_dflash_draft(draft: ModelConfigFile) -> None:
    if not any(_dflash_name(a) in DFLASH_ARCHITECTURES for a in draft.architectures):
        raise PreflightError(
            f"draft {draft.path.parent} is not a DFlash draft (architectures="
            f"{draft.architectures}; vLLM 0.33 runs {', '.join(DFLASH_ARCHITECTURES)})"
        )


def check_dspark(target: ModelConfigFile | None, draft: ModelConfigFile | None) -> None:
    if draft is not None:
        if not set(draft.architectures) & set(DSPARK_ARCHITECTURES):
            raise PreflightError(
                f"draft {draft.path.parent} is not a DSpark draft (architectures="
                f"{draft.architectures}; vLLM 0.33 runs {', '.join(DSPARK_ARCHITECTURES)})"
            )
        return
    if target is not None and target.get("model_type") not in DSPARK_BUILT_IN_TARGETS:
        raise PreflightError(
            f"method dspark without a draft model runs the DSpark layers inside the target, "
            f"which only DeepSeek-V4 checkpoints have (model_type "
            f"{target.get('model_type')!r}); give draft.model a DSpark draft"
        )


def check_compatible(method: Method, target: ModelConfigFile, draft: ModelConfigFile) -> None:
    """The draft emits the target's tokens; an EAGLE draft reads its hidden states."""
    target_vocab, draft_vocab = target.get("vocab_size"), draft.get("vocab_size")
    if isinstance(target_vocab, int) and isinstance(draft_vocab, int):
        if draft_vocab != target_vocab:
            raise PreflightError(
                f"draft vocabulary size {draft_vocab} != target vocabulary size {target_vocab}"
            )
        reduced = draft.get("draft_vocab_size")
        if isinstance(reduced, int) and not 0 < reduced <= target_vocab:
            raise PreflightError(
                f"draft_vocab_size {reduced} must be in 1..target vocabulary size {target_vocab}"
            )
    if method not in (Method.PEAGLE, Method.EAGLE3, Method.EAGLE):
        return  # only EAGLE heads read the target's hidden states by layer
    layers = target.get("num_hidden_layers")
    ids = aux_layer_ids(draft)
    if isinstance(layers, int) and ids is not None:
        outside = [i for i in ids if not 0 <= i <= layers]
        if outside:
            raise PreflightError(
                f"draft reads target layers {outside} (eagle_aux_hidden_state_layer_ids), "
                f"the target has {layers} (ids 0..{layers})"
            )
    target_hidden = target.get("hidden_size")
    # EAGLE-3 drafts may name the target's width explicitly when their own differs.
    expected = draft.get("target_hidden_size") or draft.get("hidden_size")
    if isinstance(target_hidden, int) and isinstance(expected, int) and expected != target_hidden:
        raise PreflightError(
            f"draft expects target hidden size {expected}, target has {target_hidden}"
        )


def visible_gpus(env: Mapping[str, str], use_torch: bool) -> int | None:
    """GPUs this process can use; None when nothing tells (then the check is skipped)."""
    if use_torch and importlib.util.find_spec("torch") is not None:
        torch = importlib.import_module("torch")
        return int(torch.cuda.device_count())
    # NVIDIA's, then ROCm's (AMD GPUs): torch counts either kind as cuda devices.
    for variable in (
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
    ):
        value = env.get(variable)
        if value is None:
            continue
        value = value.strip()
        if value in ("", "none", "void", "-1"):
            return 0
        if value == "all":
            return None
        return len([d for d in value.split(",") if d.strip()])
    return None


def is_vllm_cpu_build() -> bool:
    """Whether this Python's vLLM is the CPU build (distribution vllm-cpu), which needs
    no GPU at all."""
    for name in ("vllm", "vllm-cpu"):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return name == "vllm-cpu"
    return False


def check_gpus(config: RuntimeConfig, gpus: int | None) -> str:
    if gpus is None:
        return (
            "GPU count unknown (no torch, no CUDA_, NVIDIA_, HIP_ or ROCR_VISIBLE_DEVICES): skipped"
        )
    sizes = f"tensor parallel size {config.tensor_parallel_size}"
    if config.pipeline_parallel_size > 1 or config.data_parallel_size > 1:
        sizes += f" x pipeline {config.pipeline_parallel_size} x data {config.data_parallel_size}"
    if config.nnodes > 1:
        sizes += f" over {config.nnodes} nodes"
    if config.gpus_needed > gpus:
        raise PreflightError(f"{sizes} needs {config.gpus_needed} GPUs, {gpus} visible")
    return f"{gpus} GPU(s) visible for {sizes}"


def check_engine_supports(config: RuntimeConfig, use_torch: bool) -> None:
    """What the installed vLLM cannot run, said before it starts (only where vLLM is)."""
    if not use_torch:
        return
    if config.method is Method.SUFFIX and importlib.util.find_spec("arctic_inference") is None:
        raise PreflightError(
            "method suffix needs the arctic-inference package, which this image lacks "
            "(vLLM 0.33: pip install arctic-inference==0.1.1)"
        )
    if config.rejection_sample_method is RejectionSampleMethod.FLY and is_vllm_cpu_build():
        raise PreflightError(
            "rejection sample method fly is not supported by vLLM's CPU build; use standard"
        )


def hub_cache(env: Mapping[str, str]) -> Path:
    """Where the hub client (and vLLM, without --download-dir) keeps downloads."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    home = env.get("HF_HOME") or str(Path(env.get("HOME", "~")) / ".cache" / "huggingface")
    return Path(home).expanduser() / "hub"


def cached_weights(name: str, cache: Path) -> Path | None:
    """The snapshot of hub model `name` in the cache that has weights (the one `main`
    points at when it does), or None: the engine downloads them."""
    repo = cache / ("models--" + name.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    preferred = [snapshots / ref.read_text().strip()] if ref.is_file() else []
    for snapshot in [*preferred, *sorted(snapshots.iterdir())]:
        if snapshot.is_dir() and any(
            f.name.endswith(WEIGHT_SUFFIXES) and f.exists() for f in snapshot.iterdir()
        ):
            return snapshot
    return None


def cache_report(name: str, role: str, env: Mapping[str, str]) -> str:
    """Whether a hub model's weights are in the model cache: a restart that finds them
    loads from disk rather than downloading."""
    cache = hub_cache(env)
    try:
        found = cached_weights(name, cache)
    except OSError as error:
        # E.g. a non-root pod whose HOME is root's: a report, not a reason to stop.
        return (
            f"preflight: {role} {name}: the model cache ({cache}) cannot be read "
            f"({error.strerror}): set HF_HOME or spec.runtime.modelCache to a readable path"
        )
    if found is not None:
        return f"preflight: {role} {name}: weights found in the model cache ({found})"
    return f"preflight: {role} {name}: not in the model cache ({cache}): the engine downloads it"


def run(
    config: RuntimeConfig,
    env: Mapping[str, str],
    use_torch: bool,
    log: Callable[[str], None],
) -> None:
    """Run every check; raise PreflightError on the first failure, log what was checked.

    The configs are checked against each other before the files are looked at: a draft
    that cannot fit the target is the reason to report, whatever else is missing."""
    target = None
    if is_local(config.model):
        target = read_config(config.model, "target")
    else:
        log(f"preflight: target {config.model} is a hub name: file checks skipped")
        log(cache_report(config.model, "target", env))
    method = config.method
    draft = None
    if config.draft_model and method.takes_draft_model:
        check_path_names_no_other_method(method, config.draft_model)
        if is_local(config.draft_model):
            draft = read_config(config.draft_model, "draft")
            check_draft_is_no_other_method(method, draft)
            check_draft_kind(method, draft)
            if method is Method.DFLASH:
                check_dflash_draft(draft)
            if target is not None:
                check_compatible(method, target, draft)
        else:
            log(f"preflight: draft {config.draft_model} is a hub name: file checks skipped")
            log(cache_report(config.draft_model, "draft", env))
    if method is Method.MTP:
        mtp_model = draft or (None if config.draft_model else target)
        if mtp_model is not None:
            check_mtp(config, mtp_model)
            layers, k = mtp_layers(mtp_model), config.num_speculative_tokens
            log(f"preflight: {layers} MTP layer(s) for K={k}")
    if method is Method.DSPARK and (draft is not None or not config.draft_model):
        check_dspark(target, draft)
    check_engine_supports(config, use_torch)
    if target is not None:
        check_target_files(config, target)
        log(f"preflight: target {config.model}: config.json, weights and tokenizer found")
    if draft is not None:
        check_draft_files(config.method, draft)
        log(f"preflight: draft {config.draft_model}: fits method {config.method}")
    if use_torch and is_vllm_cpu_build():
        log("preflight: vLLM's CPU build (vllm-cpu): no GPUs needed, GPU check skipped")
    else:
        log("preflight: " + check_gpus(config, visible_gpus(env, use_torch)))
