"""The API models refuse bad specs with a message naming the field, and accept the examples."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from specfleet.operator import api
from specfleet.operator.durations import Duration, parse_duration
from specfleet.operator.errors import validation_errors
from specfleet.operator.rules import Rule
from specfleet.runtime.config import MAX_SPECULATIVE_TOKENS, ConfigError
from specfleet.runtime.vllm_args import OLDER_SPECULATIVE_FLAGS, refuse_collisions
from tests.conftest import REPO
from tests.invalid_manifests import INVALID_CASES, InvalidCase, apply_changes
from tests.test_runtime_vllm_args import COLLIDING

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    assert validation_errors(yaml.safe_load(path.read_text())) == []


def test_the_autoscaled_example_is_valid_and_leaves_replicas_to_the_scaler() -> None:
    manifest = yaml.safe_load((REPO / "examples" / "autoscaling" / "llama-peagle.yaml").read_text())
    assert validation_errors(manifest) == []
    assert "replicas" not in manifest["spec"]
    assert api.SpeculativeModel.model_validate(manifest).spec.replicas == 1


def test_there_are_examples_for_peagle_eagle3_and_ngram() -> None:
    methods = {yaml.safe_load(p.read_text())["spec"]["draft"]["method"] for p in EXAMPLES}
    assert {"peagle", "eagle3", "ngram"} <= methods


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_invalid_specs_are_refused_naming_the_field(
    case: InvalidCase, peagle_manifest: dict[str, Any]
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, case.changes))
    assert errors, f"{case.id} was accepted"
    assert any(case.field in error for error in errors), errors


@pytest.mark.parametrize("rule", api.RULES, ids=lambda r: r.refusals[0].id if r.refusals else "?")
def test_each_rule_refuses_its_cases_itself_blaming_its_field(
    rule: Rule[Any], peagle_manifest: dict[str, Any]
) -> None:
    assert rule.refusals, f"{rule.message}: no refusal to test it with"
    for refusal in rule.refusals:
        errors = validation_errors(apply_changes(peagle_manifest, dict(refusal.changes)))
        (error,) = [e for e in errors if rule.message in e] or [f"none of {errors}"]
        path, _, message = error.partition(": ")
        assert message.startswith(rule.message), (refusal.id, error)
        assert path.endswith(rule.blames or ""), (refusal.id, path, rule.blames)


def test_at_least_twenty_invalid_cases() -> None:
    assert len(INVALID_CASES) >= 20


def test_unknown_fields_are_refused(peagle_manifest: dict[str, Any]) -> None:
    peagle_manifest["spec"]["speculation"]["tokenz"] = 4
    assert validation_errors(peagle_manifest) == [
        "spec.speculation.tokenz: unknown field (did you mean 'tokens'?)"
    ]


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
    assert model.spec.rollback.metric is api.RollbackMetric.FIRST_POSITION_ACCEPTANCE
    assert model.spec.rollback.below_floor is api.BelowFloorPolicy.KEEP_FASTEST
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
def test_floor_accepts_exactly_between_zero_and_one(floor: float) -> None:
    try:
        api.Rollback.model_validate({"minAcceptance": floor})
    except ValueError:
        assert not 0 < floor < 1
    else:
        assert 0 < floor < 1


UNITS = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}


@given(st.dictionaries(st.sampled_from(list(UNITS)), st.integers(1, 999999), min_size=1))
def test_durations_parse_to_the_sum_of_their_parts(parts: dict[str, int]) -> None:
    text = "".join(f"{parts[unit]}{unit}" for unit in UNITS if unit in parts)
    expected = sum(n * UNITS[unit] for unit, n in parts.items())
    assert parse_duration(text).total_seconds() == pytest.approx(expected)


@pytest.mark.parametrize(
    "text", ["0s", "", "5", "1.5m", "-1s", "1d", "s", "30m1h", "1h1h", "1234567h", "5m\n"]
)
def test_bad_durations_are_refused_in_words(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration such as '90s'"):
        parse_duration(text)


DURATION_FIELDS = [
    (model, name, marker)
    for model in (api.Tuning, api.Rollback, api.Rollout, api.Metrics)
    for name, info in model.model_fields.items()
    for marker in info.metadata
    if isinstance(marker, Duration)
]


def test_every_duration_field_has_a_maximum() -> None:
    names = {name for _, name, _ in DURATION_FIELDS}
    assert names == {
        "interval",
        "max_window_age",
        "cooldown",
        "canary_pending_timeout",
        "reprobe_after",
        "timeout",
        "scrape_timeout",
    }


def test_a_duration_field_holds_its_length_and_dumps_the_text_as_written() -> None:
    tuning = api.Tuning.model_validate({"interval": "1m30s"})
    assert tuning.interval == "1m30s"
    assert tuning.interval.length == timedelta(seconds=90)
    assert tuning.cooldown.length == timedelta(minutes=5)  # a default is a Span too
    dumped = tuning.model_dump(by_alias=True)
    assert type(dumped["interval"]) is str and type(dumped["cooldown"]) is str
    assert yaml.safe_dump({"interval": dumped["interval"]}) == "interval: 1m30s\n"
    assert api.Tuning.model_validate(dumped) == tuning


@given(st.text(alphabet="0123456789hms", max_size=32))
def test_an_admitted_duration_never_overflows(text: str) -> None:
    # Rollback adds reprobeAfter to now; the fleet sleeps for the interval.
    for model, name, marker in DURATION_FIELDS:
        try:
            model.model_validate({name: text})
        except ValueError:
            continue
        length = parse_duration(text)
        assert length <= parse_duration(marker.maximum)
        assert datetime.now(UTC) + length > datetime.now(UTC)


def test_a_duration_over_its_maximum_is_refused_in_words() -> None:
    errors = validation_errors(
        {
            "apiVersion": api.API_VERSION,
            "kind": api.KIND,
            "metadata": {"name": "m"},
            "spec": {
                "model": {"name": "t"},
                "draft": {"model": "d"},
                "tuning": {"interval": "99999999999h"},
            },
        }
    )
    assert errors == [
        "spec.tuning.interval: must be a duration such as '90s', '5m' or '1h30m' "
        "(units h, m, s, ms, in that order, no part of 0), at least 1s and at most 1h"
    ]


@pytest.mark.parametrize("case", INVALID_CASES, ids=lambda c: c.id)
def test_errors_say_in_words_what_is_wrong(
    case: InvalidCase, peagle_manifest: dict[str, Any]
) -> None:
    for error in validation_errors(apply_changes(peagle_manifest, case.changes)):
        assert "should match pattern" not in error, error


def test_an_inverted_token_range_blames_the_range_not_tokens(
    peagle_manifest: dict[str, Any],
) -> None:
    changes = {"spec.speculation.minTokens": 6, "spec.speculation.maxTokens": 4}
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    assert errors == [
        "spec.speculation.minTokens: speculation.minTokens must not exceed "
        "speculation.maxTokens (found 6 > 4)"
    ]


def test_validate_cli_reports_field_paths(tmp_path: Path, peagle_manifest: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from specfleet.operator.cli import app

    bad = apply_changes(peagle_manifest, {"spec.speculation.tokens": 12})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    # The production example's ServiceAccount, as its install allows it (podPolicy).
    allowed = ["--allow-service-account", "llama-70b-inference"]
    result = CliRunner().invoke(
        app, ["validate", str(tmp_path / "bad.yaml"), *map(str, EXAMPLES), *allowed]
    )
    assert result.exit_code == 1
    assert (
        "spec.speculation.tokens: speculation.tokens must be between speculation.minTokens "
        "and speculation.maxTokens (found 12, not in 1..8)"
    ) in result.output
    assert result.output.count(": valid") == len(EXAMPLES)


def _validate(*paths: Path) -> Result:

    from specfleet.operator.cli import app

    return CliRunner().invoke(app, ["validate", *map(str, paths)])


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"spec.rollback.minAcceptance": "0.8"},
            "spec.rollback.minAcceptance: must be a number, not the string '0.8': write it "
            "without quotes",
        ),
        ({"spec.replicas": "2"}, "spec.replicas: must be an integer, not the string '2'"),
        (
            {"spec.speculation.tokens": True},
            "spec.speculation.tokens: must be an integer, not true",
        ),
        ({"spec.runtime.image": 5}, "spec.runtime.image: must be a string, not the number 5"),
    ],
)
def test_validate_cli_is_as_strict_on_types_as_the_api_server(
    tmp_path: Path, peagle_manifest: dict[str, Any], change: dict[str, Any], error: str
) -> None:
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(apply_changes(peagle_manifest, change)))
    result = _validate(tmp_path / "m.yaml")
    assert result.exit_code == 1
    assert error in result.output


def test_validate_cli_accepts_an_integer_where_a_number_is_expected(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    changes = {"spec.tuning.minImprovement": 0, "spec.rollback.failureLimit": 3}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(apply_changes(peagle_manifest, changes)))
    result = _validate(tmp_path / "m.yaml")
    assert result.exit_code == 0, result.output


def test_validate_cli_names_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "latin1.yaml").write_bytes("name: caf\xe9\n".encode("latin-1"))
    result = _validate(tmp_path / "latin1.yaml")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"{tmp_path / 'latin1.yaml'}: cannot read: not UTF-8 text" in result.output


@pytest.mark.parametrize("text", ["", "\n", "---\n", "# only a comment\n"])
def test_validate_cli_refuses_a_file_without_documents(tmp_path: Path, text: str) -> None:
    (tmp_path / "empty.yaml").write_text(text)
    result = _validate(tmp_path / "empty.yaml")
    assert result.exit_code == 1
    assert f"{tmp_path / 'empty.yaml'}: no documents in the file" in result.output


def test_validate_cli_refuses_a_file_without_a_model(tmp_path: Path) -> None:
    # A CI check given the wrong file must fail, not pass it.
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    result = _validate(tmp_path / "cm.yaml")
    assert result.exit_code == 1
    expected = f"{tmp_path / 'cm.yaml'}: no SpeculativeModel in the file (1 other document: "
    assert f"{expected}ConfigMap)" in result.output


@pytest.mark.parametrize(("extra", "owner"), COLLIDING, ids=lambda v: repr(v))
def test_runtime_args_are_refused_by_the_runtimes_own_check(
    peagle_manifest: dict[str, Any], extra: list[str], owner: str
) -> None:
    # The API refuses what the runtime refuses, naming the flag the runtime names.
    with pytest.raises(ConfigError, match=f"would set {owner}"):
        refuse_collisions(extra)
    errors = validation_errors(apply_changes(peagle_manifest, {"spec.runtime.args": extra}))
    assert len(errors) == 1
    assert errors[0].startswith("spec.runtime.args: runtime.args may not set a flag")
    assert errors[0].endswith(f", which sets {owner})")


def test_the_env_render_sets_is_the_env_users_may_not_set(peagle_manifest: dict[str, Any]) -> None:
    from specfleet.operator import render
    from specfleet.operator.podspec import DEFAULT_ENV

    # Besides the defaults a user's runtime.env replaces (HOME, USER): they are left out
    # when it sets them.
    home = {"name": "HOME", "value": "/home/me"}
    changes = {"spec.runtime.hfTokenSecretRef": {"name": "hf"}, "spec.runtime.env": [home]}
    model = api.SpeculativeModel.model_validate(apply_changes(peagle_manifest, changes))
    for child in render.manifests(model):
        for container in child["spec"].get("template", {}).get("spec", {}).get("containers", []):
            names = [var["name"] for var in container["env"]]
            rendered = [name for name in names if name not in DEFAULT_ENV]
            assert rendered == list(api.RENDERED_ENV)
            assert names.count("HOME") == 1 and "USER" in names


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"spec.rollback.minAcceptance": 75},
            "spec.rollback.minAcceptance: rollback.minAcceptance must be a fraction between 0 "
            "and 1, both excluded (0.75 is 75%) (found 75: as a fraction, 0.75)",
        ),
        (
            {"spec.speculation.tokens": "3"},
            "spec.speculation.tokens: must be an integer, not the string '3': write it without "
            "quotes",
        ),
        (
            {"spec.tuning.interval": 60},
            "spec.tuning.interval: must be a duration string such as '60s', not the number 60: "
            "write the unit, in quotes if YAML would read a number",
        ),
        (
            {"spec.tuning.interval": "60"},
            "spec.tuning.interval: must be a duration such as '90s', '5m' or '1h30m' (units h, "
            "m, s, ms, in that order, no part of 0), at least 1s and at most 1h: '60' has no "
            "unit, e.g. '60s'",
        ),
        (
            {"spec.tuning.interval": "1ms"},
            "spec.tuning.interval: must be a duration such as '90s', '5m' or '1h30m' (units h, "
            "m, s, ms, in that order, no part of 0), at least 1s and at most 1h",
        ),
        (
            {"metadata.namesapce": "ml"},
            "metadata.namesapce: unknown field (did you mean 'namespace'?)",
        ),
        ({"spce": {}}, "spce: unknown field (did you mean 'spec'?)"),
        (
            {"spec.runtime.args": ["--speculative-model", "x/y"]},
            "spec.runtime.args: runtime.args may not use the speculative decoding flags of vLLM "
            "before 0.8",
        ),
    ],
)
def test_common_mistakes_are_refused_with_their_fix(
    peagle_manifest: dict[str, Any], change: dict[str, Any], error: str
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, change))
    assert any(e.startswith(error) for e in errors), errors


@pytest.mark.parametrize("flag", sorted(OLDER_SPECULATIVE_FLAGS))
def test_an_older_flag_is_refused_with_a_fix_that_is_not_the_same_flag(
    peagle_manifest: dict[str, Any], flag: str
) -> None:
    """The error names the spec field that replaced the flag (or says to drop it), never
    the refused flag again as its fix."""
    (error,) = validation_errors(apply_changes(peagle_manifest, {"spec.runtime.args": [flag]}))
    fix = error.split(f"(found {flag!r}: ", 1)[1]
    assert flag not in fix, error
    assert fix.startswith(("set spec.", "drop it: ")), error


@pytest.mark.parametrize(
    ("text", "fix"),
    [("1h0m0s", "'1h'"), ("5m0s", "'5m'"), ("1m30.5s", "'1m30s500ms'"), ("1.5h", "'1h30m'")],
)
def test_a_duration_as_go_writes_it_is_refused_with_its_fix(text: str, fix: str) -> None:
    with pytest.raises(ValueError) as refused:
        Duration("24h", "").check(text)
    assert f"{text!r} has a part of 0 or a fraction, as Go writes durations; write {fix}" in (
        str(refused.value)
    )
    assert "no part of 0" in str(refused.value)


def test_an_integer_beyond_int64_is_refused_where_it_is(peagle_manifest: dict[str, Any]) -> None:
    """Python's integers have no bound and the schema's fields may not say one: the API
    server would refuse the manifest, so validate does, naming the field."""
    big = apply_changes(peagle_manifest, {"spec.tuning": {"minDraftTokens": 2**63}})
    assert validation_errors(big) == [
        f"spec.tuning.minDraftTokens: {2**63} is beyond a 64-bit integer, which the API "
        "server refuses"
    ]
    assert validation_errors(apply_changes(big, {"spec.tuning.minDraftTokens": 2**63 - 1})) == []


@pytest.mark.parametrize(
    "quantity",
    ["1", "500m", "16Gi", "1.5Gi", "1e3", "1E-3", "+4", ".5", "100k", "3M", "5E", "7Ki", "2n", 4],
)
def test_quantities_compare_as_the_kubernetes_client_reads_them(quantity: str | int) -> None:
    """The core's own reader (the client is I/O the core does not load) agrees with it."""
    from kubernetes.utils.quantity import parse_quantity

    assert api.quantity_value(quantity) == parse_quantity(quantity)


LABEL_KEY = "must be a label key"


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("metadata.labels", {"team": "ml"}, None),
        ("metadata.labels", {"example.com/team": "ml-2"}, None),
        ("metadata.labels", {"team": "a b"}, "metadata.labels.team: must be a label value"),
        ("metadata.labels", {"a b": "ml"}, f"metadata.labels.a b: {LABEL_KEY}"),
        ("metadata.labels", {"Team.com/x": "ml"}, f"metadata.labels.Team.com/x: {LABEL_KEY}"),
        ("metadata.annotations", {"Example.com/Note": "any text"}, None),
        ("metadata.annotations", {"a b": "x"}, "metadata.annotations.a b: must be an annotation"),
        ("spec.runtime.pod.annotations", {"Example.com/Note": "any text"}, None),
        (
            "spec.runtime.pod.annotations",
            {"a b": "x"},
            "spec.runtime.pod.annotations: runtime.pod.annotations keys must be annotation keys",
        ),
    ],
)
def test_labels_and_annotations_are_checked_as_the_api_server_checks_them(
    peagle_manifest: dict[str, Any], field: str, value: dict[str, str], error: str | None
) -> None:
    """The model's own (refused when it is created) and the pods' (refused when its
    Deployments are): validate said valid to both."""
    errors = validation_errors(apply_changes(peagle_manifest, {field: value}))
    expected = [error] if error else []
    assert [e[: len(error or "")] for e in errors] == expected, errors


@pytest.mark.parametrize(
    ("volume", "found"),
    [
        ({"name": "a"}, "none"),
        (
            {"name": "a", "emptyDir": {}, "persistentVolumeClaim": {"claimName": "c"}},
            "emptyDir, persistentVolumeClaim",
        ),
        ({"name": "a", "emptyDir": {}, "rbd": {"image": "i"}}, "emptyDir, rbd"),
    ],
)
def test_a_pod_volume_has_exactly_one_source(
    peagle_manifest: dict[str, Any], volume: dict[str, Any], found: str
) -> None:
    """The API server refuses two, and makes a volume with none an emptyDir, which is
    refused too (say emptyDir: {}); every source is a field of the CRD's schema (the
    untyped ones kept as written), so admission counts them too."""
    manifest = apply_changes(peagle_manifest, {"spec.runtime.pod.volumes": [volume]})
    (error,) = validation_errors(manifest)
    assert error.startswith(
        "spec.runtime.pod.volumes[0]: runtime.pod.volumes must each have exactly one volume source"
    )
    assert error.endswith(f"(found {found})")


TWO_MOUNTS = {
    "spec.runtime.pod.volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
    "spec.runtime.pod.volumeMounts": [
        {"name": "a", "mountPath": "/data"},
        {"name": "b", "mountPath": "/data"},
    ],
}
FIELD_REF = {"fieldRef": {"fieldPath": "metadata.name"}}


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        (TWO_MOUNTS, "spec.runtime.pod.volumeMounts: runtime.pod.volumeMounts may not mount two"),
        (
            {"spec.runtime.env": [{"name": "A", "value": "1", "valueFrom": FIELD_REF}]},
            "spec.runtime.env[0].valueFrom: runtime.env: a variable takes value or valueFrom",
        ),
        ({"spec.runtime.env": [{"name": "A", "value": "", "valueFrom": FIELD_REF}]}, None),
    ],
)
def test_mounts_and_env_the_api_server_refuses_in_the_pods_are_refused(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], error: str | None
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    assert [e[: len(error or "")] for e in errors] == ([error] if error else []), errors


@pytest.mark.parametrize(
    ("toleration", "error"),
    [
        ({"operator": "Exists"}, None),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, None),
        ({"key": "a", "value": "b", "effect": "NoExecute", "tolerationSeconds": 60}, None),
        ({"value": "x"}, "[0].operator: runtime.tolerations: a toleration without a key"),
        ({"key": "a", "operator": "Exists", "value": "x"}, "[0].value: runtime.tolerations:"),
        ({"key": "a", "tolerationSeconds": 5}, "[0].tolerationSeconds: runtime.tolerations:"),
        ({"key": "a b"}, "[0].key: must be empty or a label key"),
        ({"key": "a", "value": "x y"}, "[0].value: must be a label value"),
    ],
)
def test_tolerations_are_checked_as_the_api_server_checks_the_pods(
    peagle_manifest: dict[str, Any], toleration: dict[str, Any], error: str | None
) -> None:
    errors = validation_errors(
        apply_changes(peagle_manifest, {"spec.runtime.tolerations": [toleration]})
    )
    expected = f"spec.runtime.tolerations{error}" if error else ""
    assert [e[: len(expected)] for e in errors] == ([expected] if error else []), errors


SPREAD = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
POD = "spec.runtime.pod."


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        (
            {
                f"{POD}topologySpreadConstraints": [
                    SPREAD,
                    {**SPREAD, "whenUnsatisfiable": "ScheduleAnyway"},
                ]
            },
            None,
        ),
        ({f"{POD}topologySpreadConstraints": [{**SPREAD, "minDomains": 2}]}, None),
        (
            {
                f"{POD}topologySpreadConstraints": [
                    {**SPREAD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}
                ]
            },
            f"{POD}topologySpreadConstraints[0].minDomains: runtime.pod.topologySpreadConstraints",
        ),
        (
            {f"{POD}topologySpreadConstraints": [SPREAD, {**SPREAD, "maxSkew": 2}]},
            f"{POD}topologySpreadConstraints: runtime.pod.topologySpreadConstraints may not repeat",
        ),
        (
            {f"{POD}topologySpreadConstraints": [{**SPREAD, "topologyKey": "a b"}]},
            f"{POD}topologySpreadConstraints[0].topologyKey: must be a label key",
        ),
        ({f"{POD}schedulerName": "a b"}, f"{POD}schedulerName: must be an object's name"),
    ],
)
def test_spread_and_scheduler_are_checked_as_the_api_server_checks_the_pods(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], error: str | None
) -> None:
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    assert [e[: len(error or "")] for e in errors] == ([error] if error else []), errors


def _kubernetes_local_path(path: str) -> bool:
    """ValidateLocalNonReservedPath of Kubernetes 1.37 (pkg/apis/core/validation), as it
    judges a file's path in a configMap, secret, downwardAPI or projected volume."""
    return (
        path != ""
        and not path.startswith("/")
        and ".." not in path.split("/")
        and not path.startswith("..")
    )


@given(st.text(alphabet="./ab", max_size=12))
def test_a_volume_files_path_is_refused_as_kubernetes_refuses_it(path: str) -> None:
    """The schema's pattern (RE2: no lookahead) says what Kubernetes' code says."""
    assert bool(re.fullmatch(api.RELATIVE_PATH_PATTERN, path)) == _kubernetes_local_path(path)
