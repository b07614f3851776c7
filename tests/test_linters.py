"""Others' linters on what users apply: the chart rendered with its default and its
production values (charts/specfleet/ci/production-values.yaml) and `specfleet render` of
every example. kubernetes-validate (schemas of Kubernetes 1.37 shipped in its wheel, no
download) validates every object strictly, the API server's own code (podcheck) every
Deployment; yamllint (.yamllint.yaml) checks the text.
helm lint --strict runs in tests/test_chart.py. Zero findings, or an entry in
tests/linter-exceptions.yaml that says why."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner
from yamllint import linter
from yamllint.config import YamlLintConfig

from specfleet.operator import api
from specfleet.operator.cli import app
from tests.conftest import REPO
from tests.kubernetes_schemas import KUBERNETES_VERSION
from tests.test_chart import CHART, render

PRODUCTION_VALUES = CHART / "ci" / "production-values.yaml"
EXCEPTIONS = yaml.safe_load((REPO / "tests" / "linter-exceptions.yaml").read_text())
EXAMPLES = sorted(
    path
    for path in (REPO / "examples").rglob("*.yaml")
    if any(d and d.get("kind") == api.KIND for d in yaml.safe_load_all(path.read_text()))
)


@functools.cache
def rendering(name: str) -> str:
    if name == "chart-default":
        return render().stdout
    if name == "chart-production":
        return render(values=(PRODUCTION_VALUES,)).stdout
    result = CliRunner().invoke(app, ["render", str(REPO / name), "--namespace", "ml"])
    assert result.exit_code == 0, result.output
    return result.stdout


NAMES = ["chart-default", "chart-production", *(str(p.relative_to(REPO)) for p in EXAMPLES)]


def kind_of(document: dict[str, Any]) -> str:
    return f"{document['apiVersion']} {document['kind']}"


def test_every_speculative_model_example_is_linted() -> None:
    assert len(EXAMPLES) >= 10
    assert "examples/llama-peagle.yaml" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_kubernetes_validate_finds_nothing(name: str) -> None:
    skipped = {e["kind"] for e in EXCEPTIONS["kubernetes-validate"]}
    documents = [d for d in yaml.safe_load_all(rendering(name)) if d]
    assert documents
    for document in documents:
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert kind_of(document) in skipped, f"{name}: no schema for {kind_of(document)}"
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{name}: {kind_of(document)} {document['metadata']['name']}: {error}")


def test_each_kubernetes_validate_exception_is_needed() -> None:
    kinds = {
        kind_of(d)
        for name in NAMES
        for d in yaml.safe_load_all(rendering(name))
        if d and d["apiVersion"].startswith(("monitoring.coreos.com/", "leaderworkerset.x-k8s.io/"))
    }
    for exception in EXCEPTIONS["kubernetes-validate"]:
        assert exception["why"], exception
        assert exception["kind"] in kinds, f"{exception['kind']} is never rendered: drop it"


@pytest.mark.parametrize("name", NAMES)
def test_yamllint_finds_nothing(name: str) -> None:
    config = YamlLintConfig(file=str(REPO / ".yamllint.yaml"))
    problems = [
        f"{p.line}:{p.column} {p.desc} ({p.rule})" for p in linter.run(rendering(name), config)
    ]
    assert problems == [], f"{name}: {problems}"


def test_the_linters_can_fail() -> None:
    """A Deployment with a misspelt field and a trailing space: both linters object."""
    text = rendering("chart-default").replace("  replicas: 2\n", "  replica: 2 \n", 1)
    deployment = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "Deployment")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    config = YamlLintConfig(file=str(REPO / ".yamllint.yaml"))
    assert [p.rule for p in linter.run(text, config)] == ["trailing-spaces"]


def _as_deployments(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A Deployment as it is; a LeaderWorkerSet's leader and worker pod templates each in a
    Deployment of the group's name; nothing of other kinds."""
    if document["kind"] == "Deployment":
        return [document]
    if document["kind"] != "LeaderWorkerSet":
        return []
    group = document["spec"]["leaderWorkerTemplate"]
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {**document["metadata"], "name": f"{document['metadata']['name']}-{role}"},
            "spec": {
                "replicas": document["spec"]["replicas"],
                "selector": {"matchLabels": group[f"{role}Template"]["metadata"]["labels"]},
                "template": group[f"{role}Template"],
            },
        }
        for role in ("leader", "worker")
    ]


def test_the_api_server_s_validation_finds_nothing_in_rendered_deployments(
    tmp_path: Path,
) -> None:
    """Beyond the schemas: every Deployment render writes of the examples and the chart,
    and each LeaderWorkerSet's leader and worker templates (as Deployments: podcheck knows
    no LeaderWorkerSet), pass the API server's own validation of a Deployment being created
    (names, quantities, volumes, affinity, probes, security contexts...), run offline by
    podcheck."""
    from tests.test_crd import podcheck

    deployments = [
        d
        for name in NAMES
        for document in yaml.safe_load_all(rendering(name))
        if document
        for d in _as_deployments(document)
    ]
    assert len(deployments) >= len(EXAMPLES) * 2
    report = podcheck(tmp_path, *deployments)
    found = {
        d["metadata"]["name"]: errors
        for d, errors in zip(deployments, report, strict=True)
        if errors
    }
    assert found == {}
