"""The API models refuse bad specs with a message naming the field, and accept the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from specfleet.operator import api
from specfleet.runtime.config import MAX_SPECULATIVE_TOKENS
from tests.conftest import REPO
from tests.invalid_manifests import INVALID_CASES, InvalidCase, apply_changes

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    assert api.validation_errors(yaml.safe_load(path.read_text())) == []


def test_there_are_examples_for_peagle_eagle3_and_ngram() -> None:
    methods = {yaml.safe_load(p.read_text())["spec"]["draft"]["method"] for p in EXAMPLES}
    assert {"peagle", "eagle3", "ngram"} <= methods


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_invalid_specs_are_refused_naming_the_field(
    case: InvalidCase, peagle_manifest: dict[str, Any]
) -> None:
    errors = api.validation_errors(apply_changes(peagle_manifest, case.changes))
    assert errors, f"{case.id} was accepted"
    assert any(case.field in error for error in errors), errors


def test_at_least_twenty_invalid_cases() -> None:
    assert len(INVALID_CASES) >= 20


def test_unknown_fields_are_refused(peagle_manifest: dict[str, Any]) -> None:
    peagle_manifest["spec"]["speculation"]["tokenz"] = 4
    assert api.validation_errors(peagle_manifest) == ["spec.speculation.tokenz: unknown field"]


def test_defaults_fill_a_minimal_manifest() -> None:
    model = api.SpeculativeModel.model_validate(
        {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {"name": "m"},
            "spec": {"model": {"name": "t"}, "draft": {"model": "d"}},
        }
    )
    assert model.spec.draft.method is api.DraftMethod.PEAGLE
    assert model.spec.rollback.min_acceptance == 0.75
    assert model.spec.rollback.metric is api.RollbackMetric.DRAFT_ACCEPTANCE_RATE
    assert model.spec.speculation.tokens == 3


def test_round_trip_uses_camel_case(peagle_manifest: dict[str, Any]) -> None:
    model = api.SpeculativeModel.model_validate(peagle_manifest)
    dumped = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert dumped["spec"]["speculation"]["minTokens"] == 1
    assert api.SpeculativeModel.model_validate(dumped) == model


@given(minimum=st.integers(1, 32), tokens=st.integers(-5, 40), maximum=st.integers(-5, 40))
def test_token_bounds_accept_exactly_the_ordered_triples(
    minimum: int, tokens: int, maximum: int
) -> None:
    ok = minimum <= tokens <= maximum <= MAX_SPECULATIVE_TOKENS
    data = {"tokens": tokens, "minTokens": minimum, "maxTokens": maximum}
    try:
        api.Speculation.model_validate(data)
    except ValueError:
        assert not ok
    else:
        assert ok


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_floor_accepts_exactly_zero_to_one(floor: float) -> None:
    try:
        api.Rollback.model_validate({"minAcceptance": floor})
    except ValueError:
        assert not 0 < floor <= 1
    else:
        assert 0 < floor <= 1


@given(st.lists(st.tuples(st.integers(1, 999), st.sampled_from(["ms", "s", "m", "h"])), min_size=1))
def test_durations_parse_to_the_sum_of_their_parts(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    seconds = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    expected = sum(n * seconds[unit] for n, unit in parts)
    assert api.parse_duration(text).total_seconds() == pytest.approx(expected)


@pytest.mark.parametrize("text", ["0s", "", "5", "1.5m", "-1s", "1d", "s"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="positive duration"):
        api.parse_duration(text)


def test_validate_cli_reports_field_paths(tmp_path: Path, peagle_manifest: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from specfleet.operator.cli import app

    bad = apply_changes(peagle_manifest, {"spec.speculation.tokens": 12})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "bad.yaml"), *map(str, EXAMPLES)])
    assert result.exit_code == 1
    assert "spec.speculation: speculation.tokens (12) must be between" in result.output
    assert result.output.count(": valid") == len(EXAMPLES)
