"""`make demo`: the specfleet story on a local control plane, narrated live.

Brings up the control plane (building it once), installs the chart, applies a
P-EAGLE model on the simulated engine, and shows K, acceptance and decisions while
the tuner raises K through a canary, acceptance drifts below the floor, and the
operator rolls back. Ends with a summary, a plot, and a clean teardown; exits
non-zero if the story did not happen.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kubernetes import client, config

from e2e import cluster
from e2e.story import FAILURE_LIMIT, INTERVAL_SECONDS, MODEL, STALE_ACCEPTANCE, Frame, Story

NAMESPACE = "specfleet-demo"
HEADINGS = [("time", 6), ("K", 3), ("canary", 6), ("accept", 6), ("ALEN", 5), ("phase", -11)]
COLUMNS = "  ".join(
    f"{name:<{-width}}" if width < 0 else f"{name:>{width}}" for name, width in HEADINGS
)
COLUMNS += "  last decision"


class LiveView:
    """One status line refreshed in place on a terminal; a line every 5 s elsewhere."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.last_print = 0.0

    def milestone(self, text: str, story: Story) -> None:
        if self.tty:
            sys.stdout.write("\r\033[K")
        print(f"[{time.monotonic() - story.started:5.0f}s] {text}", flush=True)

    def frame(self, frame: Frame) -> None:
        def number(value: float | None, digits: int) -> str:
            return "-" if value is None else f"{value:.{digits}f}"

        line = (
            f"{frame.seconds:5.0f}s  {frame.tokens if frame.tokens is not None else '-':>3}  "
            f"{frame.candidate or '-':>6}  {number(frame.judged, 3):>6}  "
            f"{number(frame.mean_length, 2):>5}  {frame.phase:<11}  {frame.last_decision}"
        )
        if self.tty:
            sys.stdout.write("\r\033[K" + line)
            sys.stdout.flush()
        elif time.monotonic() - self.last_print >= 5:
            print(line, flush=True)
            self.last_print = time.monotonic()


def plot(
    story: Story,
    path: Path,
    floor: float = 0.75,
    title: str = "specfleet demo: canary tuning, drift below the floor, rollback",
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frames = story.frames
    seconds = [f.seconds for f in frames]
    figure, (k_axis, accept_axis) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    k_axis.step(
        seconds, [f.tokens or 0 for f in frames], where="post", label="K in effect (stable)"
    )
    k_axis.step(
        seconds, [f.candidate or 0 for f in frames], where="post", linestyle=":", label="canary K"
    )
    k_axis.set_ylabel("speculative tokens K")
    k_axis.legend(loc="upper left")
    # The floor line goes with the figure it judges (kubectl's ACCEPT); vLLM's draft
    # acceptance rate, which falls as K grows, is drawn fainter for reference.
    accept_axis.plot(seconds, [f.judged for f in frames], label="acceptance the floor judges")
    accept_axis.plot(
        seconds, [f.acceptance for f in frames], alpha=0.5, label="draft acceptance rate"
    )
    accept_axis.axhline(floor, color="red", linestyle="--", label=f"floor {floor}")
    accept_axis.set_ylabel("acceptance")
    accept_axis.set_xlabel("seconds")
    if story.drift_seconds is not None:
        for axis in (k_axis, accept_axis):
            axis.axvline(story.drift_seconds, color="grey", linestyle="-.", label="drift")
    accept_axis.legend(loc="lower left")
    figure.suptitle(title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)


def open_stage(namespace: str) -> tuple[bool, client.ApiClient]:
    """The control plane up and a fresh namespace; whether this call started the plane."""
    started_cluster = not cluster.is_up()
    cluster.up()
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", check=False)
    cluster.kubectl("create", "namespace", namespace)
    return started_cluster, config.new_client_from_config(
        config_file=str(cluster.kubeconfig_path())
    )


def close_stage(story: Story, namespace: str, started_cluster: bool, keep: bool, ok: bool) -> int:
    """Uninstall and tear down (unless `keep`); the exit code: 0 if the story happened and
    nothing was left behind."""
    if not keep:
        left = story.uninstall()
        if left:
            print(f"left behind after uninstall: {left}", file=sys.stderr)
            ok = False
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        if started_cluster:
            cluster.down()
    print("demo " + ("passed" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plot", type=Path, default=Path("build/demo/specfleet-demo.png"))
    parser.add_argument(
        "--keep", action="store_true", help="leave the cluster and the demo running"
    )
    args = parser.parse_args()

    view = LiveView()
    print(
        "specfleet demo: bringing up the local control plane (the first run builds it)", flush=True
    )
    started_cluster, api_client = open_stage(NAMESPACE)
    profile = cluster.STATE / "demo-profile.yaml"
    story = Story(api_client, NAMESPACE, profile, show=view.frame)
    ok = False
    try:
        story.install_chart()
        view.milestone("helm install: the operator runs as the chart's pod", story)
        story.apply_model()
        view.milestone(f"kubectl apply: SpeculativeModel {MODEL} (P-EAGLE, K=2, floor 0.75)", story)
        print(COLUMNS, flush=True)
        story.wait_until_serving()
        view.milestone("pods Ready; the tuner measures acceptance every 5 s", story)
        promoted = story.wait_for_promotion()
        tokens = promoted["status"]["speculation"]["tokens"]
        view.milestone(f"canary promoted: K 2 -> {tokens}; rolling the stable pods", story)
        story.wait_until_serving()
        story.drift(STALE_ACCEPTANCE)
        view.milestone("drift: the draft goes stale, speculation no longer pays", story)
        rolled_back = story.wait_for_rollback()
        decision = story.rollback_decision(rolled_back)
        assert decision is not None
        windows = story.windows_to_rollback()
        view.milestone(
            f"{decision['action']}: K {decision.get('fromTokens')} -> {decision.get('toTokens')} "
            f"after {windows} window(s) of {INTERVAL_SECONDS}s: {decision['reason']}",
            story,
        )
        story.linger(20)  # the rolled-back pods take over
        ok = windows <= FAILURE_LIMIT + 1
        events = sorted(set(story.events()))
        print(
            f"\nsummary: K 2 -> {tokens} through a canary, then {decision['action']} to "
            f"{decision.get('toTokens')} within {windows} window(s) (limit {FAILURE_LIMIT + 1}); "
            f"events: {', '.join(events)}",
            flush=True,
        )
        plot(story, args.plot)
        print(f"plot: {args.plot}", flush=True)
    except Exception as error:  # the story did not happen: say where, fail the command
        print(f"\ndemo failed: {error}", file=sys.stderr, flush=True)
    finally:
        code = close_stage(story, NAMESPACE, started_cluster, args.keep, ok)
    return code


if __name__ == "__main__":
    sys.exit(main())
