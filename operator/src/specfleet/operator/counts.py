"""vLLM's speculative-decoding counters, as one type.

Every record that carries them (one pod's reading, a track's window, a window still
collecting, a trial's totals) holds or extends `Counts`, combines them with its addition
and difference, and asks it whether they can come from an engine (`implausible`): a new
vLLM counter is a field here and a line in the parser (`observations.COUNTER_FIELDS`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Self

_Op = Callable[[float, float], float]
# Counts are whole tokens and sums of whole floats are exact: half a token tells a
# rounding error from counters that do not add up.
_SLACK = 0.5


def _padded(values: tuple[float, ...], length: int) -> tuple[float, ...]:
    return values + (0.0,) * (length - len(values))


@dataclass(frozen=True)
class Counts:
    """Counter values over some span: cumulative on a pod, or a difference of two readings.

    `accepted_per_position` is as long as the deepest position counted; a shorter one
    reads as zeros beyond its end.
    """

    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    accepted_per_position: tuple[float, ...] = ()
    generation_tokens: float = 0.0
    # Speed: vLLM's inter-token latency sum and count (the step time a decoding request
    # sees, and how many it saw) and its engine steps (iteration-tokens observations).
    decode_seconds: float = 0.0
    decode_steps: float = 0.0
    engine_steps: float = 0.0

    def counts(self) -> Counts:
        """Only the counters of a record that carries more (gauges, seconds, pods)."""
        return Counts(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Counts)})

    def with_counts(self, counts: Counts) -> Self:
        """This record with its counters replaced by `counts`."""
        return dataclasses.replace(
            self, **{f.name: getattr(counts, f.name) for f in dataclasses.fields(Counts)}
        )

    def __add__(self, other: Counts) -> Counts:
        positions = max(len(self.accepted_per_position), len(other.accepted_per_position))
        return self._combine(other, positions, lambda a, b: a + b)

    def __sub__(self, other: Counts) -> Counts:
        """The counts since `other`, an earlier reading (positions: as many as this one)."""
        return self._combine(other, len(self.accepted_per_position), lambda a, b: a - b)

    def _combine(self, other: Counts, positions: int, op: _Op) -> Counts:
        mine = _padded(self.accepted_per_position, positions)
        theirs = _padded(other.accepted_per_position, positions)
        values = {name: op(getattr(self, name), getattr(other, name)) for name in SCALAR_COUNTERS}
        return Counts(
            **values,
            accepted_per_position=tuple(op(a, b) for a, b in zip(mine, theirs, strict=False)),
        )

    @staticmethod
    def sum(items: Iterable[Counts]) -> Counts:
        total = Counts()
        for item in items:
            total = total + item
        return total

    def named(self) -> list[tuple[str, float]]:
        """Every value with its name in words (for messages), positions last."""
        return [
            *((name.replace("_", " "), getattr(self, name)) for name in SCALAR_COUNTERS),
            *(
                (f"accepted tokens at position {i}", v)
                for i, v in enumerate(self.accepted_per_position)
            ),
        ]

    def implausible(self, k: int) -> str | None:
        """Why these counts (cumulative, or a window's difference) cannot come from engines
        drafting at most k tokens, or None. vLLM counts a draft's accepted tokens once in
        the total and once at each position they reached, so the positions add up to it."""
        for name, value in self.named():
            if value < 0:
                return f"{name} are negative ({value:g})"
        drafts, drafted, accepted = self.drafts, self.draft_tokens, self.accepted_tokens
        positions = self.accepted_per_position
        if len(positions) > k:
            return f"accepted tokens at position {len(positions) - 1} with K={k}"
        if drafts <= 0:
            if drafted > _SLACK or accepted > _SLACK:
                return f"{drafted:g} draft tokens and {accepted:g} accepted without any drafts"
            return None
        if accepted > drafted + _SLACK:
            return f"{accepted:g} accepted tokens exceed the {drafted:g} drafted"
        if positions and abs(sum(positions) - accepted) > _SLACK:
            return (
                f"accepted tokens per position sum to {sum(positions):g}, "
                f"not the {accepted:g} accepted"
            )
        if accepted > k * drafts + _SLACK:
            return f"mean acceptance length {1 + accepted / drafts:.2f} exceeds K+1 = {k + 1}"
        return None


SCALAR_COUNTERS = tuple(
    f.name for f in dataclasses.fields(Counts) if f.name != "accepted_per_position"
)
