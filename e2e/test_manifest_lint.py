"""kubeconform and kube-score on what users apply (issue 43): every example, the pods
`specfleet render` makes of each, the CRDs and the chart as `helm template` renders it,
by default and with the production values. kubeconform's schemas are the local API
server's own (its OpenAPI document) and the CRDs'; every kube-score finding is either
fixed or explained in docs/install.md, and an explanation no finding needs fails too."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from e2e import cluster
from e2e.manifest_lint import (
    Finding,
    documents,
    explained_checks,
    kube_score,
    kubeconform,
    write_api_server_schemas,
    write_crd_schemas,
)
from tests.test_chart import CHART, render

REPO = Path(__file__).parent.parent
EXAMPLES = sorted((REPO / "examples").glob("**/*.yaml"))
INSTALL_DOC = REPO / "docs" / "install.md"
HEADING = "### What kube-score finds, and why it stays"
INFERENCE_PODS = "inference pods"
OPERATOR = "the operator's chart"


@pytest.fixture(scope="module")
def linters() -> Path:
    return cluster.build_linters() / "bin"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """The files to lint, by where a finding in them would be fixed."""
    out = tmp_path_factory.mktemp("rendered")
    pods = []
    for example in EXAMPLES:
        kinds = {d.get("kind") for d in documents([example])}
        if "SpeculativeModel" not in kinds:
            continue
        result = subprocess.run(
            [str(Path(sys.executable).parent / "specfleet"), "render", str(example)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"specfleet render {example}: {result.stderr}"
        path = out / f"{example.stem}.rendered.yaml"
        path.write_text(result.stdout)
        pods.append(path)
    chart = []
    for name, values in (("default", ()), ("production", (CHART / "ci/production-values.yaml",))):
        path = out / f"chart-{name}.yaml"
        path.write_text(render(values=values).stdout)
        chart.append(path)
    return {INFERENCE_PODS: pods, OPERATOR: chart}


@pytest.fixture(scope="module")
def schemas(
    control_plane: None, rendered: dict[str, list[Path]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("schemas")
    crds = documents(
        sorted((REPO / "crds").glob("*.yaml"))
        + sorted((cluster.build_monitoring() / "crds").glob("*.yaml"))
        + sorted((cluster.build_keda() / "crds").glob("*.yaml"))
        + sorted((cluster.build_lws() / "crds").glob("*.yaml"))
    )
    from_crds = write_crd_schemas(crds, directory)
    kinds = {
        (str(d["apiVersion"]), str(d["kind"]))
        for d in documents([*EXAMPLES, *(REPO / "crds").glob("*.yaml")])
        + documents([p for files in rendered.values() for p in files])
    }
    openapi = json.loads(cluster.kubectl("get", "--raw", "/openapi/v2").stdout)
    from_server = write_api_server_schemas(openapi, kinds - from_crds, directory)
    assert kinds <= from_crds | from_server, f"no schema for {kinds - from_crds - from_server}"
    yield directory


def test_kubeconform_accepts_every_example_its_pods_the_crds_and_the_chart(
    linters: Path, schemas: Path, rendered: dict[str, list[Path]]
) -> None:
    files = [*EXAMPLES, *sorted((REPO / "crds").glob("*.yaml"))]
    files += [p for paths in rendered.values() for p in paths]
    assert kubeconform(linters / "kubeconform", schemas, files) == []


def test_kubeconform_with_these_schemas_refuses_an_unknown_field_and_a_wrong_type(
    linters: Path, schemas: Path, rendered: dict[str, list[Path]], tmp_path: Path
) -> None:
    """The schemas are strict and typed: a misspelt field in a rendered Deployment and
    in an example, and a quantity that is neither a string nor a number, are errors."""
    rendered_deployments = [
        d for d in documents(rendered[INFERENCE_PODS][:1]) if d["kind"] == "Deployment"
    ]
    misspelt, mistyped = copy.deepcopy(rendered_deployments[0]), rendered_deployments[0]
    misspelt["spec"]["replica"] = misspelt["spec"].pop("replicas")
    mistyped["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = True
    model = next(d for d in documents(EXAMPLES) if d["kind"] == "SpeculativeModel")
    model["spec"]["tunning"] = {}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([misspelt, mistyped, model]))
    complaints = kubeconform(linters / "kubeconform", schemas, [bad])
    assert len(complaints) == 3, complaints
    # kubeconform validates documents side by side: its complaints come in any order.
    for word in ("'replica'", "/requests/cpu", "'tunning'"):
        assert sum(word in complaint for complaint in complaints) == 1, (word, complaints)


def test_every_kube_score_finding_is_explained_and_every_explanation_is_needed(
    linters: Path, rendered: dict[str, list[Path]]
) -> None:
    server = json.loads(cluster.kubectl("version", "-o", "json").stdout)["serverVersion"]
    version = f"v{server['major']}.{server['minor']}"
    explained = explained_checks(INSTALL_DOC.read_text(), HEADING)
    assert explained, f"no table under {HEADING!r} in {INSTALL_DOC}"
    found: dict[tuple[str, str], list[Finding]] = {}
    for where, files in rendered.items():
        for finding in kube_score(linters / "kube-score", files, version):
            found.setdefault((finding.check, where), []).append(finding)
    unexplained = {key: found[key][:3] for key in found.keys() - explained.keys()}
    assert not unexplained, f"kube-score findings not explained in {INSTALL_DOC}: {unexplained}"
    stale = explained.keys() - found.keys()
    assert not stale, f"explained in {INSTALL_DOC} but no longer found: {sorted(stale)}"
    for (check, where), findings in sorted(found.items()):
        print(f"{check} ({where}): {len(findings)} findings")
