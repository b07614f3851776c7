"""Every command line refuses bad files and common mistakes in words that say the fix,
never with a traceback, and exits non-zero for them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner, Result

from specfleet.operator.cli import app
from specfleet.runtime import cli as runtime_cli
from tests.conftest import REPO
from tests.invalid_manifests import apply_changes

BAD_FILES: dict[str, bytes | None] = {
    "missing": None,
    "empty": b"",
    "not-utf8": "name: caf\xe9\n".encode("latin-1"),
    "not-yaml": b"a: [1, 2\nb: }\n",
    "wrong-kind": b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
}


def bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.yaml"
    content = BAD_FILES[kind]
    if content is not None:
        path.write_bytes(content)
    return path


def specfleet(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


def assert_refused_in_words(result: Result, path: Path) -> None:
    assert result.exit_code not in (0, None), result.output
    # Only typer's own exit: any other exception would be a traceback for the user.
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert str(path) in result.output
    assert len(result.output.splitlines()) <= 5, result.output


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize(
    "command",
    [["validate"], ["render"], ["simulate", "--scenario"], ["crds", "--check", "--root"]],
    ids=lambda c: c[0],
)
def test_every_command_refuses_every_bad_file_in_words(
    tmp_path: Path, command: list[str], kind: str
) -> None:
    path = bad_file(tmp_path, kind)
    assert_refused_in_words(specfleet(*command, path), path)


@pytest.mark.parametrize("kind", BAD_FILES)
def test_the_runtime_refuses_every_bad_sim_profile_in_words(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = bad_file(tmp_path, kind)
    log = tmp_path / "termination-log"
    args = ["serve", "--model", "m", "--engine", "sim", "--sim-profile", str(path)]
    code = runtime_cli.main([*args, "--dry-run", "--termination-log", str(log)])
    err = capsys.readouterr().err
    if kind == "empty":  # an empty profile is the default one (docs/runtime.md)
        assert code == 0, err
        return
    assert code == 1
    assert err.startswith("specfleet-runtime: sim profile"), err
    assert len(err.splitlines()) == 1, err
    assert not log.exists()  # a dry run's failure is for stderr only


def test_a_failing_serve_writes_the_termination_log_and_a_dry_run_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    args = ["serve", "--model", "m", "--method", "eagle3", "--termination-log", str(log)]
    assert runtime_cli.main([*args, "--dry-run"]) == 1
    assert not log.exists()
    assert "needs --draft-model" in capsys.readouterr().err
    assert runtime_cli.main(args) == 1
    assert "needs --draft-model" in log.read_text()


def test_runtime_help_lists_every_flag_docs_runtime_md_lists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runtime_cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    table = (REPO / "docs" / "runtime.md").read_text()
    documented = set(re.findall(r"^\| `(--[a-z-]+)", table, re.M)) | set(
        re.findall(r"`(--[a-z-]+)[ `]", table.split("| `--model", 1)[1].split("\n\n", 1)[0])
    )
    assert len(documented) >= 20
    for flag in documented:
        assert re.search(rf"^\s+{flag}\b", shown, re.M), flag


def write(tmp_path: Path, name: str, *documents: Any) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def test_validate_refuses_a_misspelt_kind(tmp_path: Path, peagle_manifest: dict[str, Any]) -> None:
    path = write(tmp_path, "m.yaml", {**peagle_manifest, "kind": "SpeculativeModels"})
    result = specfleet("validate", path)
    assert result.exit_code == 1
    assert "kind 'SpeculativeModels' is not 'SpeculativeModel'" in result.output
    assert "spell it 'SpeculativeModel'" in result.output


def test_validate_refuses_a_key_given_twice(tmp_path: Path) -> None:
    text = (REPO / "examples" / "llama-peagle.yaml").read_text()
    path = tmp_path / "twice.yaml"
    path.write_text(text + "  rollback:\n    failureLimit: 3\n")
    assert "  rollback:" in text  # the example has one: the file now has two
    result = specfleet("validate", path)
    assert result.exit_code == 1
    assert re.search(
        r"key 'rollback' is given twice in one mapping \(first on line \d+\)", (result.output)
    ), result.output


@pytest.mark.parametrize("budget", [0, "0%"])
def test_validate_warns_of_a_disruption_budget_that_blocks_every_drain(
    tmp_path: Path, peagle_manifest: dict[str, Any], budget: int | str
) -> None:
    """maxUnavailable 0 is admitted (a team may want drains to wait for it) and rendered
    as written; validate passes it with a warning naming the field."""
    changes = {"spec.runtime.disruptionBudget": {"maxUnavailable": budget}}
    path = write(tmp_path, "m.yaml", apply_changes(peagle_manifest, changes))
    result = specfleet("validate", path)
    assert result.exit_code == 0, result.output
    assert f"{path} (llama-8b): valid" in result.stdout
    assert (
        f"{path} (llama-8b): warning: spec.runtime.disruptionBudget.maxUnavailable: "
        f"{budget!r} lets no drain evict a Ready stable pod"
    ) in result.stderr
    for fine in (1, "1%"):  # a percentage rounds up: 1% of any count evicts one
        changes = {"spec.runtime.disruptionBudget": {"maxUnavailable": fine}}
        path = write(tmp_path, "m.yaml", apply_changes(peagle_manifest, changes))
        result = specfleet("validate", path)
        assert result.exit_code == 0, result.output
        assert "warning" not in result.stderr, result.stderr


# render takes one file.
@pytest.mark.parametrize(
    ("command", "apart"),
    [("validate", False), ("validate", True), ("render", False)],
    ids=["validate-one-file", "validate-two-files", "render"],
)
def test_validate_and_render_refuse_models_whose_children_collide(
    tmp_path: Path, peagle_manifest: dict[str, Any], apart: bool, command: str
) -> None:
    llama = apply_changes(peagle_manifest, {"metadata.name": "llama"})
    canary = apply_changes(peagle_manifest, {"metadata.name": "llama-canary"})
    paths = (
        [write(tmp_path, "a.yaml", llama), write(tmp_path, "b.yaml", canary)]
        if apart
        else [write(tmp_path, "a.yaml", llama, canary)]
    )
    result = specfleet(command, *paths)
    assert result.exit_code == 1
    assert "(llama-canary): its Deployment llama-canary is also one of model llama's" in (
        result.output
    )
    assert "kind: Deployment" not in result.output
    # In other namespaces they do not meet.
    canary["metadata"]["namespace"] = "elsewhere"
    paths = (
        [write(tmp_path, "a.yaml", llama), write(tmp_path, "b.yaml", canary)]
        if apart
        else [write(tmp_path, "a.yaml", llama, canary)]
    )
    assert specfleet(command, *paths).exit_code == 0


def test_render_of_a_file_without_a_model_says_so(tmp_path: Path) -> None:
    path = bad_file(tmp_path, "wrong-kind")
    result = specfleet("render", path)
    assert result.exit_code == 1
    assert "no SpeculativeModel in the file (1 other document: ConfigMap)" in result.output


def test_simulate_names_the_policy_field_it_refuses(tmp_path: Path) -> None:
    scenario = yaml.safe_load((REPO / "scenarios" / "code-to-chat.yaml").read_text())
    scenario.pop("variants", None)
    scenario["policy"] = {"speculation": {"tokens": 50}, "rollback": {"minAcceptance": 75}}
    path = write(tmp_path, "s.yaml", scenario)
    result = specfleet("simulate", "--scenario", path)
    assert result.exit_code == 2
    assert "policy.speculation.tokens: Input should be less than or equal to 32" in (result.output)
    assert "policy.rollback.minAcceptance: rollback.minAcceptance must be a fraction" in (
        result.output
    )
    assert "Traceback" not in result.output


def test_standalone_help_fits_the_chart_that_runs_two_replicas_with_it() -> None:
    from tests.test_chart import container, one, rendered

    documents = rendered()
    assert "--standalone" in container(documents)["args"]
    assert one(documents, "Deployment")["spec"]["replicas"] > 1
    shown = " ".join(specfleet("operator", "--help").output.replace("│", " ").split())
    option = shown.split("--standalone", 1)[1].split(" --period", 1)[0]
    assert "one replica" not in option.split("--peering: ", 1)[0], option
    assert "elect a leader on a Lease" in option, option


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("status.speculation.tokens", 99),
        ("status.speculation.tokens", -1),
        (
            "status.speculation.trial",
            {"tokens": 40, "startedAt": "2026-01-01T00:00:00Z", "stableReplicas": 1},
        ),
    ],
)
@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_status_k_out_of_range_is_refused_naming_it(
    tmp_path: Path, peagle_manifest: dict[str, Any], command: str, field: str, value: Any
) -> None:
    """A status K the pods would run (kubectl edit, a copy of a live object) outside vLLM's
    range: refused with its field, not "valid" and then a traceback while rendering."""
    path = write(tmp_path, "m.yaml", apply_changes(peagle_manifest, {field: value}))
    result = specfleet(command, path)
    assert_refused_in_words(result, path)
    assert "status.speculation." in result.output and "valid\n" not in result.output


@pytest.mark.parametrize("command", ["validate", "render"])
def test_standard_input_and_a_kind_list_are_read(
    peagle_manifest: dict[str, Any], command: str
) -> None:
    """`-` is standard input, as kubectl's `-f -`; a `kind: List` (kubectl get -o yaml)
    holds its models as items."""
    listed = {"apiVersion": "v1", "kind": "List", "items": [peagle_manifest]}
    for text in (yaml.safe_dump(peagle_manifest), yaml.safe_dump(listed)):
        result = CliRunner().invoke(app, [command, "-"], input=text)
        assert result.exit_code == 0, result.output
        if command == "render":
            kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
            kinds_rendered = ["Deployment", "Deployment", "Service", "PodDisruptionBudget"]
            assert kinds == kinds_rendered, result.output


@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_model_given_twice_in_one_file_is_refused(
    tmp_path: Path, peagle_manifest: dict[str, Any], command: str
) -> None:
    path = write(tmp_path, "m.yaml", peagle_manifest, peagle_manifest)
    result = specfleet(command, path)
    assert result.exit_code == 1
    name = peagle_manifest["metadata"]["name"]
    assert f"({name}): model {name} is given twice in the same namespace" in result.output
    if command == "render":
        assert "kind: Deployment" not in result.output


def test_render_writes_no_owner_reference_without_a_uid(peagle_manifest: dict[str, Any]) -> None:
    """Offline the model has no uid, and the API server refuses an owner reference whose
    uid is empty: the children are rendered without one."""
    result = CliRunner().invoke(app, ["render", "-"], input=yaml.safe_dump(peagle_manifest))
    for child in yaml.safe_load_all(result.stdout):
        assert child["metadata"]["ownerReferences"] == [], child["metadata"]


def test_a_namespace_the_api_server_would_refuse_is_refused(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    bad = apply_changes(peagle_manifest, {"metadata.namespace": "Team_A"})
    path = write(tmp_path, "m.yaml", bad)
    result = specfleet("validate", path)
    assert result.exit_code == 1
    assert "metadata.namespace: must be a namespace name" in result.output
    result = specfleet("render", REPO / "examples" / "llama-peagle.yaml", "--namespace", "Bad NS!")
    assert result.exit_code == 2
    assert "'Bad NS!': must be a namespace name" in " ".join(
        result.output.replace("│", " ").split()
    )


def test_an_exponent_yaml_reads_as_a_string_is_refused_with_the_number_to_write(
    tmp_path: Path,
) -> None:
    """YAML 1.1 reads `5e-1` (no dot) as a string: unquoting it, the usual fix for a
    quoted number, would change nothing."""
    text = (REPO / "examples" / "llama-peagle.yaml").read_text()
    assert "minAcceptance: 0.75" in text
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("minAcceptance: 0.75", "minAcceptance: 5e-1"))
    result = specfleet("validate", path)
    assert result.exit_code == 1
    assert (
        "spec.rollback.minAcceptance: must be a number, not the string '5e-1': YAML reads an "
        "exponent without a dot as a string, quoted or not; write 0.5"
    ) in " ".join(result.output.split())


def test_the_runtime_writes_the_default_termination_log_only_in_a_pod(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside a pod (no /dev/termination-log mounted) a failure goes to stderr only: the
    runtime creates no file in /dev; a path it is given is written."""
    default = tmp_path / "termination-log"
    monkeypatch.setattr(runtime_cli, "DEFAULT_TERMINATION_LOG", str(default))
    assert runtime_cli.fail("no GPU", str(default)) == 1
    assert not default.exists()
    assert "no GPU" in capsys.readouterr().err
    default.touch()  # as the kubelet mounts it
    runtime_cli.fail("no GPU", str(default))
    assert default.read_text() == "no GPU\n"
    given = tmp_path / "given"
    runtime_cli.fail("no GPU", str(given))
    assert given.read_text() == "no GPU\n"
