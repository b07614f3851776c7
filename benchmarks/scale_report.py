"""Tables and the plot of the scale, fan-out and reaction benchmarks, from their JSON.

    .venv/bin/python benchmarks/scale_report.py [--dir DIR] [--plot PNG]

Reads operator_scale.json, scrape_fanout.json and reaction.json (written by
operator_scale.py, scrape_fanout.py and reaction.py), prints the Markdown tables of
docs/benchmarks.md and draws every figure against the number of models.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def scale_table(data: dict[str, Any]) -> str:
    rows = []
    for s in data["summary"]:
        runs = [r for r in data["runs"] if r["count"] == s["count"]]
        each = ", ".join(f"{r['operator']['seconds'] / r['baseline']['seconds']:.2f}" for r in runs)
        rows.append(
            [
                str(s["count"]),
                str(s["repeats"]),
                f"{s['baseline_seconds']:.1f}",
                f"{s['operator_seconds']:.1f}",
                f"{s['ratio']:.2f} ({each})",
                f"{s['models_alone_seconds']:.1f}",
                f"{s['cpu_seconds']:.1f}",
                f"{s['peak_rss_mb']:.0f}",
            ]
        )
    header = [
        "models",
        "runs",
        "baseline: kubectl apply of 3N children (s)",
        "operator: apply N models -> all reconciled (s)",
        "ratio",
        "models alone, no operator (s)",
        "operator CPU (s)",
        "operator peak RSS (MB)",
    ]
    return markdown_table(header, rows)


def latency_table(data: dict[str, Any]) -> str:
    header = [
        "models",
        "apply -> children created p50 (s)",
        "p99 (s)",
        "apply -> status written p50 (s)",
        "p99 (s)",
    ]
    keys = ("children_p50", "children_p99", "status_p50", "status_p99")
    rows = [[str(s["count"]), *(f"{s[k]:.2f}" for k in keys)] for s in data["summary"]]
    return markdown_table(header, rows)


# The operator's own writes (the models' APPLY is kubectl's; events include the
# controllers'), as counted by the API server over each run.
OPERATOR_WRITES = (
    "deployments APPLY",
    "services APPLY",
    "speculativemodels/status PATCH",
    "speculativemodels PATCH",
)


def writes_table(data: dict[str, Any]) -> str:
    rows = []
    for count in sorted({r["count"] for r in data["runs"]}):
        runs = [r["operator"] for r in data["runs"] if r["count"] == count]
        if not all("writes_per_model" in r for r in runs):
            continue  # runs from before the benchmark counted writes
        cells = [
            f"{statistics.median(r['writes_per_model'].get(w, 0.0) for r in runs):.2f} / "
            f"{statistics.median(r['writes_per_model_settled'].get(w, 0.0) for r in runs):.2f}"
            for w in OPERATOR_WRITES
        ]
        rows.append([str(count), *cells])
    return markdown_table(
        ["models", *(f"{w}: until done / settled" for w in OPERATOR_WRITES)], rows
    )


def fanout_table(data: dict[str, Any]) -> str:
    header = [
        "endpoints",
        "scrape() wall (s)",
        "scrape() CPU (s)",
        "evaluation cycle wall (s)",
        "evaluation CPU (s)",
        "servers' CPU (s)",
        "with the slow endpoint: others done (s)",
        "slow one given up (s)",
        "client peak RSS (MB)",
    ]
    rows = []
    for r in data["results"]:
        s, e, w = r["scrape"], r["evaluate"], r["scrape_slow"]
        rows.append(
            [
                str(r["count"]),
                *(f"{v:.2f}" for v in (s["wall_s"], s["cpu_s"], e["wall_s"], e["cpu_s"])),
                *(f"{v:.2f}" for v in (s["server_cpu_s"], w["rest_done_s"], w["slow_done_s"])),
                f"{r['rss_mb']:.0f}",
            ]
        )
    return markdown_table(header, rows)


def reaction_table(data: dict[str, Any]) -> str:
    header = [
        "model",
        "decision",
        "windows after the drift",
        "drift -> decision (s)",
        "seen in status (s)",
    ]
    rows = [
        [
            r["model"],
            f"{r['action']} {r['from']}->{r['to']}",
            str(r["windows"]),
            f"{r['decision_seconds']:.1f}",
            f"{r['seen_seconds']:.1f}",
        ]
        for r in data["results"]
    ]
    s = data["summary"]
    rows.append(
        [
            "**median**",
            "",
            f"{s['windows_median']:.0f}",
            f"{s['decision_seconds_median']:.1f}",
            f"{s['seen_seconds_median']:.1f}",
        ]
    )
    return markdown_table(header, rows)


def plot(
    scale: dict[str, Any], fanout: dict[str, Any], reaction: dict[str, Any], out: Path
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = scale["summary"]
    n = [s["count"] for s in summary]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    ax = axes[0][0]
    ax.plot(
        n, [s["operator_seconds"] for s in summary], "o-", label="operator (apply models -> done)"
    )
    ax.plot(
        n, [s["baseline_seconds"] for s in summary], "s-", label="baseline (kubectl apply children)"
    )
    ax.plot(
        n, [1.5 * s["baseline_seconds"] for s in summary], ":", color="grey", label="1.5 x baseline"
    )
    ax.plot(
        n, [s["models_alone_seconds"] for s in summary], "^--", label="models alone (no operator)"
    )
    ax.set(title="Time to reconcile N models", xlabel="models", ylabel="seconds")
    ax.legend(fontsize=8)
    ax = axes[0][1]
    ax.plot(n, [s["peak_rss_mb"] for s in summary], "o-", label="peak RSS (MB)")
    ax.axhline(300, ls=":", color="grey", label="300 MB target")
    ax.set(title="Operator memory and CPU", xlabel="models", ylabel="MB", ylim=(0, 350))
    twin = ax.twinx()
    twin.plot(n, [s["cpu_seconds"] for s in summary], "s--", color="C1", label="CPU (s)")
    twin.set_ylabel("CPU seconds until reconciled")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="lower right", fontsize=8)
    ax = axes[1][0]
    results = fanout["results"]
    m = [r["count"] for r in results]
    ax.plot(m, [r["scrape"]["wall_s"] for r in results], "o-", label="scrape() wall")
    ax.plot(m, [r["evaluate"]["wall_s"] for r in results], "s-", label="evaluation cycle wall")
    ax.plot(m, [r["evaluate"]["cpu_s"] for r in results], "^--", label="evaluation cycle CPU")
    ax.plot(
        m,
        [r["scrape_slow"]["rest_done_s"] for r in results],
        "x:",
        label="others, next to a slow one",
    )
    ax.axhline(5, ls=":", color="grey", label="5 s target")
    ax.set(title="Scrape fan-out (one pod per model)", xlabel="endpoints", ylabel="seconds")
    ax.legend(fontsize=8)
    ax = axes[1][1]
    ax.plot(n, [s["children_p50"] for s in summary], "o-", label="apply -> children p50")
    ax.plot(n, [s["children_p99"] for s in summary], "o--", label="apply -> children p99")
    ax.plot(n, [s["status_p50"] for s in summary], "s-", label="apply -> status p50")
    ax.plot(n, [s["status_p99"] for s in summary], "s--", label="apply -> status p99")
    rs = reaction["summary"]
    ax.set(
        title=f"Reaction latency (drift -> rollback: {rs['windows_median']:.0f} windows, "
        f"{rs['decision_seconds_median']:.0f} s)",
        xlabel="models applied at once",
        ylabel="seconds",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "build/bench")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/benchmarks-scale.png")
    args = parser.parse_args()
    scale = json.loads((args.dir / "operator_scale.json").read_text())
    fanout = json.loads((args.dir / "scrape_fanout.json").read_text())
    reaction = json.loads((args.dir / "reaction.json").read_text())
    for title, table in (
        ("Reconcile scale", scale_table(scale)),
        ("Apply -> children / status", latency_table(scale)),
        ("Writes per model", writes_table(scale)),
        ("Scrape fan-out", fanout_table(fanout)),
        ("Drift -> rollback", reaction_table(reaction)),
    ):
        print(f"### {title}\n\n{table}\n")
    plot(scale, fanout, reaction, args.plot)
    print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()
