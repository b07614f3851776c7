"""Tables and the plot of the scale, fan-out and reaction benchmarks, from their JSON.

    .venv/bin/python benchmarks/scale_report.py [--dir DIR] [--plot PNG]
    .venv/bin/python benchmarks/scale_report.py --docs [--dir DIR]   # docs/benchmarks.md
    .venv/bin/python benchmarks/scale_report.py --check                # docs still match?

Reads operator_scale.json, scrape_fanout.json and reaction.json (written by
operator_scale.py, scrape_fanout.py and reaction.py), prints the Markdown tables of
docs/benchmarks.md and draws every figure against the number of models.

`--docs` writes the operator-scale figures into docs/benchmarks.md (between the
GENERATED markers) from DIR/operator_scale.json, with the commit they were measured on,
and keeps the runs it used in docs/benchmarks-scale.json (committed: the tests check
the table against it). `--check` exits 1 when the table differs from that JSON, or when
the controller's request path is not what it was at the commit measured on: a stale figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
DOCS_JSON = ROOT / "docs" / "benchmarks-scale.json"
BEGIN = "<!-- BEGIN GENERATED: operator scale (benchmarks/scale_report.py --docs) -->"
END = "<!-- END GENERATED: operator scale -->"
# The controller's request path: a change to any of these is measured again.
REQUEST_PATH = [
    "operator/src/specfleet/operator/kube.py",
    "operator/src/specfleet/operator/fleet.py",
    "operator/src/specfleet/operator/handlers.py",
    "operator/src/specfleet/operator/child_watches.py",
    "operator/src/specfleet/operator/workqueue.py",
]


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
        "baseline: kubectl apply of the N models' children (s)",
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
# controllers'), as counted by the API server over each run: a status write was a merge
# patch (PATCH) until 2388f30, a PUT since. Only those some run made are shown.
OPERATOR_WRITES = (
    "deployments APPLY",
    "services APPLY",
    "poddisruptionbudgets APPLY",
    "speculativemodels/status PATCH",
    "speculativemodels/status PUT",
    "speculativemodels PATCH",
)


def writes_table(data: dict[str, Any]) -> str:
    counted = [r["operator"] for r in data["runs"] if "writes_per_model" in r["operator"]]
    writes = [
        w for w in OPERATOR_WRITES if any(r["writes_per_model_settled"].get(w) for r in counted)
    ]
    rows = []
    for count in sorted({r["count"] for r in data["runs"]}):
        runs = [r["operator"] for r in data["runs"] if r["count"] == count]
        if not all("writes_per_model" in r for r in runs):
            continue  # runs from before the benchmark counted writes
        cells = [
            f"{statistics.median(r['writes_per_model'].get(w, 0.0) for r in runs):.2f} / "
            f"{statistics.median(r['writes_per_model_settled'].get(w, 0.0) for r in runs):.2f}"
            for w in writes
        ]
        rows.append([str(count), *cells])
    return markdown_table(["models", *(f"{w}: until done / settled" for w in writes)], rows)


def _spread(values: list[float], digits: int = 1) -> str:
    """Median, and every run in brackets when there are several."""
    median = f"{statistics.median(values):.{digits}f}"
    if len(values) < 2:
        return median
    return f"{median} ({', '.join(f'{v:.{digits}f}' for v in values)})"


def docs_scale_table(data: dict[str, Any]) -> str:
    """Per N: the operator against kubectl (each run's ratio), the models' own apply with
    and without the operator, CPU, peak RSS and the RSS each model adds."""
    rows = []
    for count in sorted({r["count"] for r in data["runs"]}):
        runs = [r for r in data["runs"] if r["count"] == count]
        base = [r["baseline"]["seconds"] for r in runs]
        op = [r["operator"]["seconds"] for r in runs]
        ratios = [o / b for o, b in zip(op, base, strict=True)]
        rows.append(
            [
                str(count),
                str(len(runs)),
                _spread(base),
                _spread(op),
                f"**{_spread(ratios, 2)}**",
                _spread([r["operator"]["apply_models_seconds"] for r in runs]),
                _spread([r["baseline"]["models_seconds"] for r in runs]),
                _spread([r["operator"]["cpu_seconds"] for r in runs]),
                _spread([r["operator"]["cpu_seconds_settled"] for r in runs]),
                _spread([r["operator"]["peak_rss_mb"] for r in runs], 0),
                _spread([r["operator"].get("rss_per_model_kb", float("nan")) for r in runs], 0),
            ]
        )
    header = [
        "models",
        "runs",
        "kubectl apply of the N models' children (s)",
        "operator: apply N models -> all reconciled (s)",
        "ratio",
        "models' apply, operator running (s)",
        "models' apply alone (s)",
        "operator CPU until reconciled (s)",
        "until settled (s)",
        "peak RSS (MB)",
        "RSS per model (KB)",
    ]
    return markdown_table(header, rows)


def requests_table(data: dict[str, Any]) -> str:
    """The operator's own requests per model (its specfleet_api_requests_total), by
    resource and verb, until every model was reconciled / until the fleet settled:
    medians over the runs at each N."""
    keys = sorted(
        {
            key
            for r in data["runs"]
            for phase in ("requests_per_model", "requests_per_model_settled")
            for key, value in r["operator"].get(phase, {}).items()
            if value >= 0.005
        }
    )
    rows = []
    for count in sorted({r["count"] for r in data["runs"]}):
        runs = [r["operator"] for r in data["runs"] if r["count"] == count]
        if not all("requests_per_model" in r for r in runs):
            continue
        cells = []
        for key in keys:
            done = statistics.median(r["requests_per_model"].get(key, 0.0) for r in runs)
            settled = statistics.median(r["requests_per_model_settled"].get(key, 0.0) for r in runs)
            cells.append(f"{done:.2f} / {settled:.2f}")
        total = statistics.median(sum(r["requests_per_model"].values()) for r in runs)
        total_settled = statistics.median(
            sum(r["requests_per_model_settled"].values()) for r in runs
        )
        rows.append([str(count), *cells, f"{total:.2f} / {total_settled:.2f}"])
    return markdown_table(["models", *keys, "all"], rows)


def machine_cpu_table(data: dict[str, Any]) -> str | None:
    """Per N, kubectl's apply of the children beside the operator's run: the wall time,
    the share of the machine's cores busy, and each process's CPU seconds (medians, each
    run in brackets); None for runs from before the benchmark measured them."""
    measured = (
        "machine_cpu" in r[phase] for r in data["runs"] for phase in ("baseline", "operator")
    )
    if not data["runs"] or not all(measured):
        return None
    phases = [
        (count, phase)
        for count in sorted({r["count"] for r in data["runs"]})
        for phase in ("baseline", "operator")
    ]

    def figures(count: int, phase: str) -> list[dict[str, Any]]:
        return [r[phase] for r in data["runs"] if r["count"] == count]

    names = sorted(
        {
            n
            for r in data["runs"]
            for p in ("baseline", "operator")
            for n in r[p]["machine_cpu"]["seconds"]
        }
    )
    rows = [
        ["wall (s)", *(_spread([f["seconds"] for f in figures(*p)]) for p in phases)],
        [
            "cores busy (%)",
            *(
                _spread([100 * f["machine_cpu"]["busy_share"] for f in figures(*p)], 0)
                for p in phases
            ),
        ],
    ]
    for name in names:
        cells = []
        for p in phases:
            seconds = [f["machine_cpu"]["seconds"].get(name) for f in figures(*p)]
            known = [v for v in seconds if v is not None]
            cells.append(_spread(known) if known else "-")
        rows.append([f"{name}, CPU (s)", *cells])

    # What the machine did for the run but the operator's own process: a run cannot
    # take less than this over the cores, whatever the operator's code costs.
    def others(figure: dict[str, Any]) -> float:
        cpu: dict[str, float] = figure["machine_cpu"]["seconds"]
        return sum(seconds for name, seconds in cpu.items() if name != "operator")

    rows.append(
        [
            "all but the operator, CPU (s)",
            *(_spread([others(f) for f in figures(*p)]) for p in phases),
        ]
    )
    titles = {"baseline": "kubectl apply of the children", "operator": "operator's run"}
    header = ["", *(f"{count} models: {titles[phase]}" for count, phase in phases)]
    return markdown_table(header, rows)


def measured_on(data: dict[str, Any]) -> list[str]:
    return sorted({str(r.get("commit", "?")) for r in data["runs"]})


def docs_block(data: dict[str, Any]) -> str:
    commits = measured_on(data)
    dirty = any(r.get("uncommitted_changes") for r in data["runs"])
    return "\n".join(
        [
            BEGIN,
            "",
            f"Measured at commit {', '.join(commits)}"
            + (" (with uncommitted changes to the operator)" if dirty else "")
            + "; generated from `docs/benchmarks-scale.json` (a copy of "
            "`build/bench/operator_scale.json`). The medians, each run in brackets:",
            "",
            docs_scale_table(data),
            "",
            "The operator's requests per model, until every model was reconciled / until "
            "the fleet settled (its own `specfleet_api_requests_total`; LISTs are its "
            "listings after a relist and every 2 minutes):",
            "",
            requests_table(data),
            "",
            *machine_block(data),
            END,
        ]
    )


def machine_block(data: dict[str, Any]) -> list[str]:
    table = machine_cpu_table(data)
    if table is None:
        return []
    return [
        "What the machine's cores did meanwhile (both phases on the same 2 cores; the "
        "operator's phase runs from the models' apply until the last model is reconciled; "
        "CPU seconds of each process over it, from /proc):",
        "",
        table,
        "",
    ]


def replace_block(text: str, block: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def current_block(text: str) -> str:
    return text[text.index(BEGIN) : text.index(END) + len(END)]


def stale(data: dict[str, Any]) -> str | None:
    """Why the figures are stale (the request path is not what it was at the commit
    measured on: changed since, and not changed back), or None; None too where git
    cannot say (no history)."""
    for commit in measured_on(data):
        differs = subprocess.run(
            ["git", "diff", "--quiet", commit, "--", *REQUEST_PATH],
            cwd=ROOT,
            capture_output=True,
        )
        if differs.returncode == 1:
            return f"measured at {commit}, but the request path differs from it now"
    return None


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
    parser.add_argument(
        "--docs", action="store_true", help="write the scale figures into docs/benchmarks.md"
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the docs' figures are stale"
    )
    args = parser.parse_args()
    if args.docs:
        data = json.loads((args.dir / "operator_scale.json").read_text())
        DOCS_JSON.write_text(json.dumps(data, indent=2) + "\n")
        DOCS.write_text(replace_block(DOCS.read_text(), docs_block(data)))
        print(f"wrote {DOCS} and {DOCS_JSON}")
        return
    if args.check:
        data = json.loads(DOCS_JSON.read_text())
        problems = []
        if current_block(DOCS.read_text()) != docs_block(data):
            problems.append(f"{DOCS} differs from {DOCS_JSON}: run scale_report.py --docs")
        why = stale(data)
        if why:
            problems.append(f"stale: {why}; run operator_scale.py and scale_report.py --docs")
        for problem in problems:
            print(problem, file=sys.stderr)
        sys.exit(1 if problems else 0)
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
