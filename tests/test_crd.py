"""The generated CRD is structural, complete and up to date with the models."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from specfleet.operator import api, crd
from tests.conftest import REPO


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, prop in schema.get("properties", {}).items():
        yield from _nodes(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _nodes(schema[key], f"{path}[{key}]")


def test_committed_generated_files_are_fresh() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "specfleet.operator.cli", "crds", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_check_names_the_stale_file_when_a_model_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "README.md").write_text((REPO / "README.md").read_text())
    crd.write_files(tmp_path)
    assert crd.stale_files(tmp_path) == []

    class ChangedSpec(api.SpeculativeModelSpec):
        priority: int = Field(default=0, description="A field added by the test.")

    monkeypatch.setattr(api, "SpeculativeModelSpec", ChangedSpec)
    stale = {p.relative_to(tmp_path).as_posix() for p in crd.stale_files(tmp_path)}
    assert stale == {
        f"crds/{crd.CRD_FILE}",
        f"charts/specfleet/crds/{crd.CRD_FILE}",
        "docs/api-reference.md",
        "README.md",
    }


def test_schema_is_structural() -> None:
    schema = crd.open_api_schema()
    for path, node in _nodes(schema):
        assert "$ref" not in node and "anyOf" not in node and "allOf" not in node, path
        assert node.get("additionalProperties") is not False, path
        typed = "type" in node or node.get("x-kubernetes-int-or-string")
        assert typed, f"{path or '(root)'} has no type"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_every_cross_field_rule_has_a_cel_rule() -> None:
    messages = [rule["message"] for _, rule in crd._validations(crd.open_api_schema(), "")]
    for fragment in [
        "speculation.tokens must be between",
        "draft.model is required",
        "may not set --speculative-config",
        "tensorParallelSize must not exceed",
        "metrics.prometheus.url is required",
        "metadata.name must be a DNS-1035 label",
    ]:
        assert any(fragment in m for m in messages), fragment


def test_crd_has_status_subresource_printer_columns_and_short_name() -> None:
    version = crd.custom_resource_definition()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    names = [c["name"].upper() for c in version["additionalPrinterColumns"]]
    assert names == ["K", "ACCEPT", "ALEN", "PHASE", "READY", "AGE"]
    assert "specmodel" in crd.custom_resource_definition()["spec"]["names"]["shortNames"]


def test_defaults_reach_nested_objects() -> None:
    spec = crd.open_api_schema()["properties"]["spec"]
    assert spec["properties"]["rollback"]["default"]["minAcceptance"] == 0.75
    assert spec["properties"]["rollback"]["properties"]["minAcceptance"]["default"] == 0.75


def test_status_fields_added_since_release_have_no_schema_default() -> None:
    """The API server fills schema defaults into stored status. An operator older than
    the CRD (mid-upgrade, or after `helm rollback`, which leaves CRDs as they are) never
    writes such a field, so it saw its status differ on every tick, rewrote it, and lost
    its evaluations' writes to the conflicts: seen on the local control plane."""
    acceptance = crd.open_api_schema()["properties"]["status"]["properties"]["acceptance"]
    for name in ("podsLeftOut", "morePodsLeftOut"):
        assert "default" not in acceptance["properties"][name], name
        assert name not in acceptance["default"], name


def test_api_reference_lists_every_spec_field() -> None:
    reference = crd.api_reference()
    for name in ("spec.speculation.tokens", "spec.rollback.minAcceptance", "status.history"):
        assert f"`{name}`" in reference
