"""GitOps support: the Argo CD health check (run by a real Lua interpreter on statuses
built from the API models), and the Argo CD / Flux examples in deploy/gitops/.

lua5.4 comes from Debian (e2e/install-debian-packages.sh; `make test` runs it). Argo CD
runs Lua 5.1 (gopher-lua); the script uses nothing newer.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from specfleet.operator import api
from tests.conftest import REPO

GITOPS = REPO / "deploy" / "gitops"
HEALTH_LUA = GITOPS / "argocd" / "speculativemodel-health.lua"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def lua_literal(value: Any) -> str:
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid Lua string literal here
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        items = (f"[{json.dumps(str(k))}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(type(value))


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """Run the health check as Argo CD does: `obj` is a global, the chunk returns `hs`."""
    lua = shutil.which("lua5.4")
    if not lua:
        pytest.fail("lua5.4 is not on PATH: run e2e/install-debian-packages.sh (make test does)")
    program = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = (function()\n{HEALTH_LUA.read_text()}\nend)()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    result = subprocess.run([lua, "-"], input=program, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    status, _, message = result.stdout.partition("\n")
    return status, message


def model(generation: int = 2, status: api.SpeculativeModelStatus | None = None) -> dict[str, Any]:
    manifest = yaml.safe_load((REPO / "examples" / "llama-peagle.yaml").read_text())
    manifest["metadata"]["generation"] = generation
    if status is not None:
        manifest["status"] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dict(manifest)


def condition(
    kind: api.ConditionType,
    status: str,
    reason: str = "",
    message: str = "",
    generation: int | None = 2,
) -> api.Condition:
    return api.Condition.model_validate(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": NOW,
            "observedGeneration": generation,
        }
    )


def status(*conditions: api.Condition, observed: int | None = 2) -> api.SpeculativeModelStatus:
    return api.SpeculativeModelStatus(observed_generation=observed, conditions=list(conditions))


READY = api.ConditionType.READY
PROGRESSING = api.ConditionType.PROGRESSING
DEGRADED = api.ConditionType.DEGRADED

CASES = [
    ("no-status", model(), "Progressing", "Waiting for the specfleet operator to report status"),
    (
        "old-generation",
        model(status=status(condition(READY, "True", "Ready"), observed=1)),
        "Progressing",
        "Waiting for the specfleet operator to observe generation 2",
    ),
    (
        "no-observed-generation",
        model(status=status(observed=None)),
        "Progressing",
        "Waiting for the specfleet operator to observe generation 2",
    ),
    (
        "ready",
        model(status=status(condition(READY, "True", "Ready", "2/2 stable pods ready, K=3"))),
        "Healthy",
        "Ready: 2/2 stable pods ready, K=3",
    ),
    (
        "degraded-wins-over-ready",
        model(
            status=status(
                condition(READY, "True", "Ready"),
                condition(DEGRADED, "True", "SpeculationDisabled", "acceptance 0.41 < 0.75"),
            )
        ),
        "Degraded",
        "SpeculationDisabled: acceptance 0.41 < 0.75",
    ),
    (
        "config-rejected",
        model(
            status=status(
                condition(READY, "True", "Ready"),
                condition(DEGRADED, "False"),
                condition(
                    api.ConditionType.CONFIG_REJECTED,
                    "True",
                    "NoGain",
                    "config 3f2a rejected; the stable pods stay on config 9c1b",
                ),
            )
        ),
        "Degraded",
        "NoGain: config 3f2a rejected; the stable pods stay on config 9c1b",
    ),
    (
        "config-promoted",
        model(
            status=status(
                condition(READY, "True", "Ready"),
                condition(api.ConditionType.CONFIG_REJECTED, "False", "GoodputGain"),
            )
        ),
        "Healthy",
        "Ready",
    ),
    (
        "canary-in-progress",
        model(
            status=status(
                condition(READY, "True", "Ready"),
                condition(DEGRADED, "False"),
                condition(PROGRESSING, "True", "Canary", "trying K=5 on the canary"),
            )
        ),
        "Progressing",
        "Canary: trying K=5 on the canary",
    ),
    (
        "not-ready",
        model(status=status(condition(READY, "False", "PodsNotReady"))),
        "Progressing",
        "PodsNotReady",
    ),
    (
        "no-conditions-yet",
        model(status=status()),
        "Progressing",
        "Waiting for the Ready condition",
    ),
    (
        "ready-condition-is-stale",
        model(status=status(condition(READY, "True", "Ready", generation=1))),
        "Progressing",
        "Ready describes generation 1, not 2",
    ),
    (
        "ready-without-a-message",
        model(status=status(condition(READY, "True"))),
        "Healthy",
        "Ready",
    ),
]


@pytest.mark.parametrize(
    ("obj", "expected", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_argocd_health_check(obj: dict[str, Any], expected: str, message: str) -> None:
    assert health(obj) == (expected, message)


def test_health_check_reads_fields_the_crd_has() -> None:
    """The check reads status.observedGeneration and conditions[].type/status/reason/
    message/observedGeneration: all in the generated CRD's status schema."""
    crd = yaml.safe_load((REPO / "crds" / "specfleet.io_speculativemodels.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert "observedGeneration" in schema["properties"]
    item = schema["properties"]["conditions"]["items"]["properties"]
    for field in ("type", "status", "reason", "message", "observedGeneration"):
        assert field in item, field
    text = HEALTH_LUA.read_text()
    for name in ("observedGeneration", '"Ready"', '"Degraded"', '"Progressing"'):
        assert name in text


def test_argocd_config_map_and_docs_carry_the_same_lua() -> None:
    lua = HEALTH_LUA.read_text()
    config_map = yaml.safe_load((GITOPS / "argocd" / "argocd-cm.yaml").read_text())
    assert config_map["data"]["resource.customizations.health.specfleet.io_SpeculativeModel"] == lua
    indented = "".join(("    " + line if line.strip() else line) for line in lua.splitlines(True))
    assert indented in (REPO / "docs" / "gitops.md").read_text()


def test_gitops_examples_are_well_formed() -> None:
    applications = list(yaml.safe_load_all((GITOPS / "argocd" / "applications.yaml").read_text()))
    assert [a["kind"] for a in applications] == ["Application", "Application"]
    assert applications[0]["spec"]["source"]["path"] == "charts/specfleet"
    # Top-level Applications sync independently: a sync wave would order nothing, so the
    # models' Application waits for the CRD by retrying instead.
    for application in applications:
        annotations = application["metadata"].get("annotations", {})
        assert "argocd.argoproj.io/sync-wave" not in annotations, application["metadata"]
    models = applications[1]["spec"]["syncPolicy"]
    assert "SkipDryRunOnMissingResource=true" in models["syncOptions"]
    assert models["retry"]["limit"] > 0
    flux = {
        d["kind"]: d
        for d in yaml.safe_load_all((GITOPS / "flux" / "specfleet.yaml").read_text())
        if d["kind"] != "Kustomization"
    }
    release = flux["HelmRelease"]["spec"]
    assert release["install"]["crds"] == release["upgrade"]["crds"] == "CreateReplace"
    assert release["chart"]["spec"]["chart"] == "./charts/specfleet"
    kustomizations = [
        d
        for d in yaml.safe_load_all((GITOPS / "flux" / "specfleet.yaml").read_text())
        if d["kind"] == "Kustomization"
    ]
    models = next(k for k in kustomizations if k["metadata"]["name"] == "specfleet-models")
    assert models["spec"]["dependsOn"] == [{"name": "specfleet"}]
    assert models["spec"]["wait"] is True
    # Values in the examples are valid chart values.
    from tests.test_chart import render

    for values in (applications[0]["spec"]["source"]["helm"]["valuesObject"], release["values"]):
        render(set_json=[f"{key}={json.dumps(value)}" for key, value in values.items()])


def test_docs_say_why_the_operator_never_writes_spec() -> None:
    gitops = (REPO / "docs" / "gitops.md").read_text()
    assert "The operator never\nwrites a SpeculativeModel's `spec`" in gitops
    install = (REPO / "docs" / "install.md").read_text()
    assert "kubectl apply --server-side -f charts/specfleet/crds/" in install
    assert "no opt-in CRD upgrade hook" in install


def test_docs_name_every_verb_the_operator_has_on_speculativemodels() -> None:
    """docs/gitops.md says what the operator may do to a SpeculativeModel, "nothing more":
    exactly the verbs of the chart's rendered ClusterRole."""
    from tests.test_chart import one, permissions, rendered

    granted = permissions(one(rendered(), "ClusterRole")["rules"])
    verbs = {verb for group, resource, verb in granted if resource == "speculativemodels"}
    status = {verb for group, resource, verb in granted if resource == "speculativemodels/status"}
    gitops = " ".join((REPO / "docs" / "gitops.md").read_text().split())
    sentence = gitops.split("its RBAC grants ", 1)[1].split("nothing more", 1)[0]
    on_models, _, on_status = sentence.partition(" on SpeculativeModels and ")
    assert set(re.findall(r"`(\w+)`", on_models)) == verbs, sentence
    assert set(re.findall(r"`(\w+)`", on_status)) == status, sentence
