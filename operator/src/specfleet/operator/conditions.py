"""Status conditions with Kubernetes semantics: lastTransitionTime moves only on a change."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from specfleet.operator.api import Condition, ConditionType

ConditionStatus = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class ConditionChange:
    """A condition to set (`set_condition`), as a decision returns it."""

    type: ConditionType
    status: ConditionStatus
    reason: str
    message: str


def set_condition(
    conditions: list[Condition],
    type: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int | None,
) -> list[Condition]:
    """A new list with `type` set; its transition time is kept unless `status` changed."""
    previous = next((c for c in conditions if c.type == type), None)
    changed = previous is None or previous.status != status
    updated = Condition(
        type=type,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now if changed or previous is None else previous.last_transition_time,
        observed_generation=generation,
    )
    return (
        [updated if c.type == type else c for c in conditions]
        if previous
        else [
            *conditions,
            updated,
        ]
    )


def condition_status(conditions: list[Condition], type: ConditionType) -> ConditionStatus:
    found = next((c for c in conditions if c.type == type), None)
    return found.status if found else "Unknown"
