"""Speculation off: disabled when no K clears the floor, or stopped when plain decoding
is faster (not a rollback: the draft is fine); the re-probe that may bring it back is
scheduled here (`reprobes`). Floor, trials and config trials all switch it off or clear
the floor's condition through these, so they sit below all three."""

from __future__ import annotations

from specfleet.operator.api import ConditionType, Off, OffReason, Placement
from specfleet.operator.conditions import condition_status
from specfleet.operator.outcomes import ActionKind
from specfleet.operator.reprobes import next_reprobe
from specfleet.operator.run import Run
from specfleet.operator.windows import Judged


def disable(
    run: Run,
    reason: str,
    metric: float | None,
    goodput: float | None,
    kind: ActionKind = ActionKind.DISABLE,
    why: OffReason = OffReason.NO_K_CLEARS_FLOOR,
    acceptance: list[float] | None = None,
) -> None:
    """Speculation off; a re-probe not yet proven has failed (the back-off doubles). A
    canary measuring plain decoding ends with it: the stable pods now decode plainly."""
    sp = run.sp
    ends = sp.trial is not None and sp.trial.plain and sp.trial.placement is Placement.CANARY
    if ends:
        sp.trial = None
    run.act(
        kind,
        why,
        reason
        + ("; the canary of plain decoding ends" if ends else "")
        + "; serving without speculation",
        warning=True,
        from_tokens=sp.tokens,
        to_tokens=None,
        acceptance=metric,
        goodput=goodput,
    )
    failed = sp.reprobing.failed_reprobes + 1 if sp.reprobing else 0
    sp.reprobing = None
    sp.off = Off(
        reason=why,
        message=reason,
        acceptance=acceptance,
        reprobe_at=next_reprobe(run, failed),
        failed_reprobes=failed,
    )
    run.changed(None)
    run.condition(ConditionType.SPECULATION_ACTIVE, "False", "Disabled", reason)
    clear_below_floor(run, "Disabled", "speculation is off")


def stop_speculation(
    run: Run, reason: str, judged: Judged | None, conditional: list[float]
) -> None:
    """Plain decoding because it is faster than every K: not a rollback, the draft is
    fine; `conditional` is the acceptance a re-probe starts from."""
    metric = judged.metric.value if judged and judged.metric else None
    disable(
        run,
        reason,
        metric,
        judged.goodput if judged else None,
        kind=ActionKind.STOP_SPECULATION,
        why=OffReason.NO_K_PAYS,
        acceptance=[round(c, 4) for c in conditional],
    )


def clear_below_floor(run: Run, reason: str, message: str) -> None:
    if condition_status(run.status.conditions, ConditionType.ACCEPTANCE_BELOW_FLOOR) == "True":
        run.condition(ConditionType.ACCEPTANCE_BELOW_FLOOR, "False", reason, message)
