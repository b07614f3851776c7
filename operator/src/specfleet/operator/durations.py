"""Durations of the API ("30s", "5m", "1h30m"): their format, their length, and the
annotation that checks a duration field offline and at admission alike and hands the
code its length (`Span`), worked out once at validation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from specfleet.operator.rules import CheckedAnnotation, cel_validation

# A Go-style duration, e.g. "30s", "5m", "1h30m": each unit at most once, in the order
# h, m, s, ms, each part positive and at most six digits. The bounds keep every value
# inside int64 nanoseconds, so CEL's duration() never overflows on a value that
# matches, and the per-field maximum is then a plain comparison.
_DURATION_PARTS = [r"(?:[1-9][0-9]{0,5}" + unit + ")?" for unit in ("h", "m", "s", "ms")]
DURATION_PATTERN = "^" + "".join(_DURATION_PARTS) + "$"
_DURATION_PART = re.compile(r"([1-9][0-9]*)(ms|s|m|h)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_WORDS = (
    "a duration such as '90s', '5m' or '1h30m' (units h, m, s, ms, in that order, no part of 0)"
)
# What Go's time.Duration.String() writes ("1h0m0s", "1m30.5s"): the same units, with
# zero parts and fractions, which the pattern leaves out (a fix is suggested instead).
_GO_DURATION = re.compile(r"(?:[0-9.]+h)?(?:[0-9.]+m)?(?:[0-9.]+s)?(?:[0-9.]+ms)?")
_GO_PART = re.compile(r"([0-9.]+)(ms|s|m|h)")
# The shortest duration any field takes. The operator works in seconds (it evaluates
# every model each few seconds; a scrape takes milliseconds to seconds): a window,
# a back-off or a timeout under a second only makes it spin or give up at once.
MINIMUM = "1s"


def parse_duration(text: str) -> timedelta:
    """The length of a duration such as "1h30m"; raises ValueError saying the format."""
    if not text or not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{text!r} is not {_DURATION_WORDS}")
    seconds = sum(int(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
    return timedelta(seconds=seconds)


def _hint(text: str, length: timedelta | None) -> str:
    """The fix of a common slip, spelled out: a number without its unit, or a duration as
    Go writes it (kubectl, Argo CD and Go programs print "1h0m0s")."""
    if text.isdigit():
        return f": {text!r} has no unit, e.g. '{text}s'"
    if length is not None or not text or not _GO_DURATION.fullmatch(text):
        return ""
    try:
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in _GO_PART.findall(text))
    except ValueError:
        return ""
    if seconds <= 0:
        return ""
    whole = round(seconds * 1000)
    parts = [(whole // 3_600_000, "h"), (whole // 60_000 % 60, "m"), (whole // 1000 % 60, "s")]
    fix = "".join(f"{n}{u}" for n, u in [*parts, (whole % 1000, "ms")] if n)
    if fix == text:
        return ""
    return f": {text!r} has a part of 0 or a fraction, as Go writes durations; write {fix!r}"


class Span(str):
    """A duration field's value: the text as written (what the API server stores and
    `kubectl get` shows) and its `length`, parsed once when the field is validated, so
    that no decision parses a spec's text again. Made by `Duration.check`."""

    length: timedelta

    def __new__(cls, text: str) -> Span:
        span = super().__new__(cls, text)
        span.length = parse_duration(text)
        return span

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        # A string on the wire and when dumped; `Duration.check` makes the Span, after it
        # has refused a bad text in the words admission uses.
        return core_schema.str_schema(
            serialization=core_schema.plain_serializer_function_ser_schema(str)
        )


@dataclass(frozen=True)
class Duration(CheckedAnnotation):
    """Marks a duration field (`Annotated[Span, Duration(...)]`), with its documented
    maximum and its description.

    Checked by CEL at admission rather than a schema pattern, because the API server's
    pattern error quotes the regex while a rule's message says it in words."""

    maximum: str
    description: str

    @property
    def words(self) -> str:
        return f"must be {_DURATION_WORDS}, at least {MINIMUM} and at most {self.maximum}"

    def check(self, text: str) -> Span:
        try:
            span = Span(text)
        except ValueError:
            raise ValueError(self.words + _hint(text, None)) from None
        if not parse_duration(MINIMUM) <= span.length <= parse_duration(self.maximum):
            raise ValueError(self.words + _hint(text, span.length))
        return span

    def _refuse_a_number(self, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise ValueError(
                f"must be a duration string such as '{value:g}s', not the number {value:g}: "
                "write the unit, in quotes if YAML would read a number"
            )
        return value

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        checked = super().__get_pydantic_core_schema__(source, handler)
        return core_schema.no_info_before_validator_function(self._refuse_a_number, checked)

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["description"] = f"{self.description} From {MINIMUM} to {self.maximum}."
        json_schema["maxLength"] = 32  # bounds the rule's cost estimate; 29 is the longest match
        json_schema["x-kubernetes-validations"] = [
            cel_validation(
                f"self != '' && self.matches('{DURATION_PATTERN}') && "
                f"duration(self) >= duration('{MINIMUM}') && "
                f"duration(self) <= duration('{self.maximum}')",
                self.words,
            )
        ]
        return json_schema
