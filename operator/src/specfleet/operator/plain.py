"""Plain decoding when it is faster than every K at this load (a large batch makes
verification compute-bound): not a rollback, the draft is fine.

The fitted cost predicts plain decoding from the Ks the pods ran, and the split of a
step between target and draft is where it knows least: on an engine unlike its prior it
can predict plain decoding faster where every K pays. So a prediction only starts a
trial of plain decoding on a canary (K=0, measured beside the stable pods, judged as
any trial); speculation stops when that trial measures plain decoding faster. In place
(or on pods without step times) there is no canary to measure on: speculation stops on
rollback.failureLimit windows of prediction, and a re-probe measures it back on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specfleet.operator.floor import stop_speculation
from specfleet.operator.outcomes import TrialStart
from specfleet.operator.prediction import fastest_and_plain, window_conditional
from specfleet.operator.trials import start_trial
from specfleet.operator.windows import Judged

if TYPE_CHECKING:
    from specfleet.operator.tuner import Run


def stop_if_plain_is_faster(run: Run, judged: Judged) -> bool:
    """Start a trial of plain decoding (or stop speculation, in place) after
    rollback.failureLimit conclusive windows in a row predict it faster than every K.
    True while plain decoding is predicted faster (gathering the windows, on trial, or
    stopped): no trial of a K is proposed then."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None
    conditional = window_conditional(judged.window)
    batch = judged.window.batch_per_pod
    fastest, plain = fastest_and_plain(spec, conditional, batch, run.cost)
    if plain < fastest.goodput * (1 + run.required_gain()) or 0 in sp.rejected_tokens:
        # Not predicted faster, or a trial measured it no faster lately: the measurement
        # stands over the prediction until reprobeAfter.
        sp.plain_faster_windows = 0
        return False
    # As a rollback: one window (one slow minute, one odd batch) is not enough evidence;
    # nor is it the time to try another K (True: no proposal while the evidence grows).
    sp.plain_faster_windows += 1
    if sp.plain_faster_windows < spec.rollback.failure_limit:
        return True
    reason = (
        f"plain decoding is predicted {plain / fastest.goodput - 1:+.1%} over the fastest "
        f"K={fastest.tokens} at batch {batch:.1f}"
    )
    if not measure_first(run, judged, reason):
        stop_speculation(run, reason, judged, conditional)
    return True


def measure_first(run: Run, judged: Judged, reason: str) -> bool:
    """Whether plain decoding, predicted faster for `reason`, is measured on a canary
    before speculation goes off: started now, or on trial already. Not in place, nor on
    pods without step times (nothing to measure beside), nor once a canary measured it no
    faster lately (then speculation stays until reprobeAfter)."""
    sp = run.sp
    if sp.trial is not None:
        return True  # a canary is measuring: decide on what it finds
    if 0 in sp.rejected_tokens:
        return True
    if run.in_place or judged.window is None or judged.window.step_seconds is None:
        return False
    message = f"{reason}; measuring it on a canary first"
    start_trial(run, judged, 0, None, message, TrialStart.PLAIN_PREDICTED)
    return True
