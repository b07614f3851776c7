"""Plain decoding when it is faster than every K at this load (a large batch makes
verification compute-bound): not a rollback, the draft is fine.

The fitted cost predicts plain decoding from the Ks the pods ran, and the split of a
step between target and draft is where it knows least: on an engine unlike its prior it
can predict plain decoding faster where every K pays. So a prediction only starts a
trial of plain decoding (K=0, judged as any trial: on a canary beside the stable pods,
or in place after a baseline at the K that runs); speculation stops when that trial
measures plain decoding faster. On pods without step times there is nothing to measure:
speculation stops on rollback.failureLimit windows of prediction, and a re-probe
measures it back on."""

from __future__ import annotations

from enum import Enum

from specfleet.operator.outcomes import TrialStart
from specfleet.operator.prediction import conditional_for, fastest_and_plain
from specfleet.operator.run import Run
from specfleet.operator.speculation_off import stop_speculation
from specfleet.operator.trials import start_trial
from specfleet.operator.windows import Judged


def stop_if_plain_is_faster(run: Run, judged: Judged) -> bool:
    """Start a trial of plain decoding (or stop speculation, without step times) after
    rollback.failureLimit conclusive windows in a row predict it faster than every K.
    True while plain decoding is predicted faster (gathering the windows, on trial, or
    stopped): no trial of a K is proposed then."""
    sp, spec = run.sp, run.spec
    assert judged.window is not None
    conditional = conditional_for(judged.window, run.sp.good_acceptance)
    batch = judged.window.batch_per_pod
    fastest, plain = fastest_and_plain(spec, conditional, batch, run.cost)
    if plain < fastest.goodput * (1 + run.required_gain()) or 0 in sp.rejected_tokens:
        # Not predicted faster, or a trial measured it no faster lately: the measurement
        # stands over the prediction until reprobeAfter.
        sp.since_change.plain_faster_windows = 0
        return False
    # As a rollback: one window (one slow minute, one odd batch) is not enough evidence;
    # nor is it the time to try another K (True: no proposal while the evidence grows).
    sp.since_change.plain_faster_windows += 1
    if sp.since_change.plain_faster_windows < spec.rollback.failure_limit:
        return True
    reason = (
        f"plain decoding is predicted {plain / fastest.goodput - 1:+.1%} over the fastest "
        f"K={fastest.tokens} at batch {batch:.1f}"
    )
    measure_or_stop(run, judged, reason)
    return True


def measure_or_stop(run: Run, judged: Judged, reason: str) -> None:
    """Plain decoding, predicted faster for `reason`, measured first (`measure_first`);
    where no trial can measure it, speculation stops on the prediction."""
    if not measure_first(run, judged, reason):
        assert judged.window is not None
        stop_speculation(
            run, reason, judged, conditional_for(judged.window, run.sp.good_acceptance)
        )


class PlainMeasure(Enum):
    """How plain decoding, predicted faster, is measured before speculation goes off."""

    ON_TRIAL = "on-trial"  # a trial is measuring: decide on what it finds
    MEASURED_LATELY = "measured-lately"  # measured no faster lately: until reprobeAfter
    START = "start"  # a trial of plain decoding starts now (on a canary, or in place)
    CANNOT = "cannot"  # tuning off, or pods without step times: no trial could

    @property
    def measured_first(self) -> bool:
        """Speculation stays meanwhile: measured (or measuring) first."""
        return self is not PlainMeasure.CANNOT


def how_measured(run: Run, judged: Judged) -> PlainMeasure:
    """How plain decoding, predicted faster, is measured first. Changes nothing."""
    if run.sp.trial is not None:
        return PlainMeasure.ON_TRIAL
    if 0 in run.sp.rejected_tokens:
        return PlainMeasure.MEASURED_LATELY
    if not run.spec.tuning.enabled or judged.window is None or judged.window.step_seconds is None:
        return PlainMeasure.CANNOT
    return PlainMeasure.START


def start_measuring(run: Run, judged: Judged, reason: str) -> None:
    """A trial of plain decoding, predicted faster for `reason`."""
    where = "in place" if run.trials_in_place else "on a canary"
    message = f"{reason}; measuring it {where} first"
    start_trial(run, judged, 0, None, message, TrialStart.PLAIN_PREDICTED)


def measure_first(run: Run, judged: Judged, reason: str) -> bool:
    """Whether plain decoding, predicted faster for `reason`, is measured before
    speculation goes off (True: speculation stays meanwhile), starting its trial where
    `how_measured` says one starts now. False, and speculation stops on the prediction,
    with tuning off or on pods without step times: no trial would run, or none could
    measure it."""
    how = how_measured(run, judged)
    if how is PlainMeasure.START:
        start_measuring(run, judged, reason)
    return how.measured_first
