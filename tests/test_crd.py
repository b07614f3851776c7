"""The generated CRD is structural, complete and up to date with the models."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import Field

from specfleet.operator import api, crd, reference
from specfleet.operator.errors import validation_errors
from specfleet.runtime.vllm_args import OWNED_ARG_PATTERNS, OWNED_FLAGS
from tests.conftest import REPO
from tests.invalid_manifests import INVALID_CASES, apply_changes
from tests.kubernetes_schemas import KUBERNETES_VERSION, definitions, differences


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
    alerts = tmp_path / reference.ALERTS_FILE  # docs/reference.md's alerts table reads it
    alerts.parent.mkdir(parents=True)
    alerts.write_text((REPO / reference.ALERTS_FILE).read_text())
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


def test_every_cel_rule_of_the_crd_is_a_declared_rule() -> None:
    """The CRD's rules are the list's (and each duration field's own), nothing else.
    (status.speculation.requestedSchedule repeats the schedule's.)"""
    crd_rules = [rule for _, rule in crd._validations(crd.open_api_schema(), "")]
    declared = [rule.validation() for rule in api.RULES]
    durations = [rule for rule in crd_rules if "duration(self)" in rule["rule"]]
    assert len(durations) == 7
    key = functools.partial(json.dumps, sort_keys=True)
    assert set(map(key, crd_rules)) == set(map(key, declared + durations))
    assert len(set(map(key, declared))) == len(declared)


def test_every_cross_field_rule_has_a_cel_rule() -> None:
    messages = [rule["message"] for _, rule in crd._validations(crd.open_api_schema(), "")]
    for fragment in [
        "speculation.tokens must be between",
        "speculation.minTokens must not exceed speculation.maxTokens",
        "draft.tensorParallelSize must be 1 or the target's tensor parallel size",
        "runtime.nodeSelector keys must be label keys",
        "draft.model is required",
        "runtime.args may not set a flag specfleet renders",
        "runtime.args may not start with a positional argument",
        "must not exceed runtime.gpus per pod times nodesPerReplica (and must be 1 when",
        "runtime.parallelism.nodesPerReplica above 1 needs data 1",
        "runtime.parallelism.nodesPerReplica must divide tensor x pipeline",
        "speculation.switching Hot needs runtime.parallelism.data 1",
        "draft.adaptiveVerification needs runtime.parallelism.pipeline 1",
        "metrics.prometheus.url is required",
        "metadata.name must be a DNS-1035 label",
    ]:
        assert any(fragment in m for m in messages), fragment


def test_crd_has_status_subresource_printer_columns_and_short_name() -> None:
    version = crd.custom_resource_definition()["spec"]["versions"][0]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    names = [c["name"].upper() for c in version["additionalPrinterColumns"]]
    assert names == [
        "K",
        "ACCEPT",
        "FLOOR",
        "ALEN",
        "PHASE",
        "READY",
        "REJECTED",
        "AGE",
        "METRIC",
        "RATE",
        "CONFIG",
    ]
    # ACCEPT is the figure the floor judges, beside the floor; the rest only in -o wide.
    paths = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert paths["Accept"] == ".status.acceptance.judged"
    assert paths["Floor"] == ".spec.rollback.minAcceptance"
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Metric", "Rate", "Config"]
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


def test_every_duration_has_a_rule_with_its_maximum_in_words() -> None:
    rules = {path: rule for path, rule in crd._validations(crd.open_api_schema(), "")}
    for path, maximum in [
        ("spec.tuning.interval", "1h"),
        ("spec.tuning.cooldown", "720h"),
        ("spec.tuning.canaryPendingTimeout", "24h"),
        ("spec.rollback.reprobeAfter", "720h"),
        ("spec.metrics.scrapeTimeout", "5m"),
    ]:
        assert f"duration('{maximum}')" in rules[path]["rule"], path
        assert rules[path]["message"].endswith(f"at most {maximum}"), path
        assert "^" not in rules[path]["message"], path


def test_no_cel_rule_has_a_backslash() -> None:
    # In a CEL string literal a backslash starts an escape, so a regex's `\.` does not
    # compile: patterns shared with CEL spell a literal dot as `[.]`.
    for path, rule in crd._validations(crd.open_api_schema(), ""):
        assert "\\" not in rule["rule"], path


def test_the_args_rules_are_the_runtimes_patterns_for_every_owned_flag() -> None:
    rules = [rule["rule"] for path, rule in crd._validations(crd.open_api_schema(), "")]
    for pattern in OWNED_ARG_PATTERNS.values():
        assert f"self.args.all(a, !a.matches('{pattern}'))" in rules
    assert [o for group in OWNED_ARG_PATTERNS for o in group] == list(OWNED_FLAGS)


# ------------------------------------------- the API server's own checks, run offline


@functools.cache
def crdcheck_binary() -> Path:
    """e2e/controlplane/crdcheck, built with the control plane (named by its source)."""
    from e2e import cluster

    source = (REPO / "e2e" / "controlplane" / "crdcheck" / "main.go").read_bytes()
    built = cluster.build_binaries() / f"crdcheck-{hashlib.sha256(source).hexdigest()[:12]}"
    if not built.exists():
        pytest.fail(f"{built} was not built: run `make tools`")
    return built


def crdcheck(tmp_path: Path, *objects: dict[str, Any]) -> dict[str, Any]:
    paths = []
    for index, obj in enumerate(objects):
        paths.append(tmp_path / f"object-{index}.yaml")
        paths[-1].write_text(yaml.safe_dump(obj))
    result = subprocess.run(
        [crdcheck_binary(), REPO / "crds" / crd.CRD_FILE, *paths],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def podcheck(tmp_path: Path, *deployments: dict[str, Any]) -> list[list[str]]:
    """Each Deployment's errors, as the API server judges one being created
    (e2e/controlplane/podcheck: its strict decoding, defaulting and validation code)."""
    source = (REPO / "e2e" / "controlplane" / "podcheck" / "main.go").read_bytes()
    binary = crdcheck_binary().parent / f"podcheck-{hashlib.sha256(source).hexdigest()[:12]}"
    paths = []
    for index, deployment in enumerate(deployments):
        paths.append(tmp_path / f"deployment-{index}.yaml")
        paths[-1].write_text(yaml.safe_dump(deployment))
    result = subprocess.run([binary, *paths], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    report: list[list[str]] = json.loads(result.stdout)
    return report


def test_the_crd_fits_client_side_apply() -> None:
    """The docs apply it server-side, but a plain `kubectl apply -f crds/` keeps the whole
    object as JSON in an annotation, which the API server caps at 256 KiB: the typed pod
    settings (volume sources, affinity) took it from 100 KB to some 140 KB."""
    written = yaml.safe_load((REPO / "crds" / crd.CRD_FILE).read_text())
    assert len(json.dumps(written, separators=(",", ":"))) < 256 * 1024


def test_the_api_server_accepts_the_crd(tmp_path: Path) -> None:
    assert crdcheck(tmp_path)["crdErrors"] == []


def test_every_rule_costs_less_than_the_api_server_allows(tmp_path: Path) -> None:
    report = crdcheck(tmp_path)
    limits = report["limits"]
    assert report["rules"], "no CEL rule was costed"
    for rule in report["rules"]:
        assert rule["cost"] <= limits["staticRule"], rule
    assert sum(rule["cost"] for rule in report["rules"]) <= limits["staticCRD"]


def test_the_longest_admissible_args_are_judged_by_the_rule(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    # The args rule runs a regex over every character: at the schema's largest args it
    # must stay under the per-call cost limit, or the API server refuses the object for
    # its cost instead of judging it.
    args = ["--x" + "y" * (api.MAX_ARG_LENGTH - 3)] * api.MAX_ARGS
    manifest = apply_changes(peagle_manifest, {"spec.runtime.args": args})
    assert crdcheck(tmp_path, manifest)["objects"] == [[]]
    assert validation_errors(manifest) == []


def test_the_api_servers_validation_refuses_every_invalid_case_naming_the_field(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    # The admission test (e2e/test_control_plane.py) runs the same table against a real
    # API server; this runs it through the same validation code without one.
    cases = [case for case in INVALID_CASES if not (case.unknown_field or case.duplicate_key)]
    manifests = [apply_changes(peagle_manifest, case.changes) for case in cases]
    examples = [yaml.safe_load(p.read_text()) for p in sorted((REPO / "examples").glob("*.yaml"))]
    report = crdcheck(tmp_path, *manifests, *examples)
    for case, errors in zip(cases, report["objects"], strict=False):
        assert errors, f"{case.id} was admitted"
        assert any(case.field in error for error in errors), (case.id, errors)
    assert report["objects"][len(cases) :] == [[]] * len(examples)


# Pages that show both `kubectl get specmodel` and its `-o wide` with their columns.
PAGES_WITH_COLUMNS = [
    "README.md",
    "docs/troubleshooting.md",
    "charts/specfleet/templates/NOTES.txt",
]


@pytest.mark.parametrize(
    "page",
    sorted(
        {*PAGES_WITH_COLUMNS, *(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))}
    ),
)
def test_pages_list_every_printer_column(page: str) -> None:
    """Where a page shows `kubectl get specmodel` with the columns it prints, it names every
    printer column, in order: the default ones, and after `+` the ones `-o wide` adds."""
    default = [c["name"].upper() for c in api.PRINTER_COLUMNS if not c.get("priority")]
    wide = [c["name"].upper() for c in api.PRINTER_COLUMNS if c.get("priority")]
    shown: dict[bool, list[str]] = {}
    for line in (REPO / page).read_text().splitlines():
        command, _, comment = line.partition("#")
        if "kubectl get specmodel" in command and comment and "jsonpath" not in command:
            shown["-o wide" in command] = re.findall(r"\b[A-Z]+\b", comment)
    if page in PAGES_WITH_COLUMNS:
        assert shown.keys() == {False, True}, f"{page} no longer shows the columns"
    expected = {False: default, True: wide}
    assert {k: expected[k] for k in shown} == shown, f"{page}: the columns are {default} + {wide}"


# ------------------------------------- the pods' volumes and affinity, as Kubernetes has them

# A volume of each source the models type, and one the CRD keeps as written.
VALID_VOLUMES: list[dict[str, Any]] = [
    {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
    {
        "name": "templates",
        "configMap": {
            "name": "chat-templates",
            "items": [{"key": "llama.jinja", "path": "llama/chat.jinja", "mode": 0o444}],
            "defaultMode": 0o440,
            "optional": True,
        },
    },
    {"name": "certs", "secret": {"secretName": "tls", "defaultMode": 0o400}},
    {"name": "weights", "persistentVolumeClaim": {"claimName": "hub", "readOnly": True}},
    {
        "name": "compile-cache",
        "ephemeral": {
            "volumeClaimTemplate": {
                "metadata": {"labels": {"team": "ml"}},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "fast-ssd",
                    "resources": {"requests": {"storage": "50Gi"}},
                },
            }
        },
    },
    {
        "name": "s3",
        "csi": {
            "driver": "s3.csi.aws.com",
            "readOnly": True,
            "volumeAttributes": {"bucketName": "weights"},
            "nodePublishSecretRef": {"name": "s3-credentials"},
        },
    },
    {
        "name": "oci-weights",
        "image": {"reference": "registry.example/llama:8b", "pullPolicy": "IfNotPresent"},
    },
    {"name": "nas", "nfs": {"server": "nas.example", "path": "/exports/hub", "readOnly": True}},
    {
        "name": "podinfo",
        "downwardAPI": {
            "items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "team", "fieldRef": {"fieldPath": "metadata.labels['team']"}},
                {
                    "path": "memory",
                    "resourceFieldRef": {
                        "containerName": "vllm",
                        "resource": "limits.memory",
                        "divisor": "1Mi",
                    },
                },
            ]
        },
    },
    {
        "name": "identity",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"audience": "sts.amazonaws.com", "path": "token"}},
                {"configMap": {"name": "ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            ]
        },
    },
    {
        "name": "legacy",
        "iscsi": {
            "targetPortal": "10.0.0.1:3260",
            "iqn": "iqn.2001-04.com.example:weights",
            "lun": 0,
        },
    },
]
VALID_AFFINITY: dict[str, Any] = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]},
                        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},
                    ]
                },
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]},
            ]
        },
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 50,
                "preference": {
                    "matchExpressions": [
                        {"key": "spot", "operator": "DoesNotExist"},
                        # No label value: the API server leaves a preferred term's unchecked.
                        {"key": "gpu", "operator": "NotIn", "values": ["H100 80GB"]},
                    ]
                },
            }
        ],
    },
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "llama"}},
                    "matchLabelKeys": ["pod-template-hash"],
                },
            }
        ]
    },
    "podAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "topologyKey": "topology.kubernetes.io/zone",
                "labelSelector": {
                    "matchExpressions": [{"key": "app", "operator": "In", "values": ["cache"]}]
                },
                "namespaces": ["ml"],
            }
        ]
    },
}


def test_the_pod_types_have_exactly_kubernetes_fields() -> None:
    """The CRD's volumes and affinity take exactly the fields of Kubernetes' own schema
    (kubernetes-validate's, 1.37), nested ones too, and refuse any other key: but the
    sources kept as written and what a claim template may set of its metadata."""
    pod = crd.open_api_schema()["properties"]["spec"]["properties"]["runtime"]["properties"]
    pod = pod["pod"]["properties"]
    found = [
        difference
        for key, kind in [("volumes", "Volume"), ("affinity", "Affinity")]
        for difference in differences(
            key,
            pod[key],
            {"type": "array", "items": definitions()[f"io.k8s.api.core.v1.{kind}"]}
            if key == "volumes"
            else definitions()[f"io.k8s.api.core.v1.{kind}"],
            lambda node: bool(node.get("x-kubernetes-preserve-unknown-fields")),
        )
    ]
    typed = {"emptyDir", "configMap", "secret", "persistentVolumeClaim", "ephemeral", "csi"}
    untyped = set(api.VOLUME_SOURCES) - typed - {"image", "nfs", "downwardAPI", "projected"}
    assert sorted(found) == sorted(
        [
            *(f"volumes[].{source} takes any key" for source in untyped),
            "volumes[].projected.sources[].clusterTrustBundle takes any key",
            "volumes[].projected.sources[].podCertificate takes any key",
            "volumes[].ephemeral.volumeClaimTemplate.metadata: ['annotations', 'labels'] != "
            "Kubernetes' ['annotations', 'creationTimestamp', 'deletionGracePeriodSeconds', "
            "'deletionTimestamp', 'finalizers', 'generateName', 'generation', 'labels', "
            "'managedFields', 'name', 'namespace', 'ownerReferences', 'resourceVersion', "
            "'selfLink', 'uid']",
        ]
    )
    volume = definitions()["io.k8s.api.core.v1.Volume"]["properties"]
    assert set(api.VOLUME_SOURCES) == set(volume) - {"name"}


def test_a_volume_of_each_source_and_an_affinity_are_valid_admitted_and_rendered(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    """validate and the API server's validation (crdcheck) agree they are valid, and the
    Deployment render writes from them is valid by Kubernetes' own schema, strictly."""
    import kubernetes_validate
    from typer.testing import CliRunner

    from specfleet.operator.cli import app

    manifest = apply_changes(
        peagle_manifest,
        {"spec.runtime.pod.volumes": VALID_VOLUMES, "spec.runtime.pod.affinity": VALID_AFFINITY},
    )
    assert validation_errors(manifest) == []
    assert crdcheck(tmp_path, manifest)["objects"] == [[]]
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(app, ["render", str(tmp_path / "model.yaml")])
    assert result.exit_code == 0, result.output
    (deployment, *_) = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Deployment"]
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    pod = deployment["spec"]["template"]["spec"]
    assert pod["affinity"] == VALID_AFFINITY
    assert pod["volumes"][-len(VALID_VOLUMES) :] == VALID_VOLUMES


def _rendered_deployment(manifest: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    from typer.testing import CliRunner

    from specfleet.operator.cli import app

    (tmp_path / "model.yaml").write_text(yaml.safe_dump(manifest))
    result = CliRunner().invoke(app, ["render", str(tmp_path / "model.yaml")])
    assert result.exit_code == 0, result.output
    (deployment, *_) = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "Deployment"]
    return dict(deployment)


POD_FIELDS = {"spec.runtime.pod.volumes", "spec.runtime.pod.affinity"}
# Refused by specfleet, not by Kubernetes: a pod holding the node's files, and a volume
# with no source, which Kubernetes would quietly make an emptyDir.
POLICY_CASES = {"pod-volume-host-path", "pod-volume-without-source"}


def test_kubernetes_refuses_in_the_pods_what_validate_refuses_in_volumes_and_affinity(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    """Each invalid case of the pods' volumes or affinity (refused by validate and by
    admission, above), written into a Deployment render makes, is refused by the API
    server's own validation of a Deployment being created; the valid ones are not. So
    validate and admission refuse what Kubernetes would, no more: they agree with it."""
    cases = [
        case
        for case in INVALID_CASES
        if set(case.changes) <= POD_FIELDS and case.id not in POLICY_CASES
    ]
    assert len(cases) >= 30
    valid = apply_changes(
        peagle_manifest,
        {"spec.runtime.pod.volumes": VALID_VOLUMES, "spec.runtime.pod.affinity": VALID_AFFINITY},
    )
    rendered = _rendered_deployment(valid, tmp_path)
    deployments = [rendered]
    for case in cases:
        deployment = copy.deepcopy(rendered)
        pod = deployment["spec"]["template"]["spec"]
        pod["volumes"] = pod["volumes"][: -len(VALID_VOLUMES)]
        pod["volumes"] += case.changes.get("spec.runtime.pod.volumes", [])
        pod["affinity"] = case.changes.get("spec.runtime.pod.affinity", VALID_AFFINITY)
        deployments.append(deployment)
    report = podcheck(tmp_path, *deployments)
    assert report[0] == []
    admitted = [case.id for case, errors in zip(cases, report[1:], strict=True) if not errors]
    assert admitted == []


VALID_ENV: list[dict[str, Any]] = [
    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
    {
        "name": "MEMORY",
        "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
    },
    {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
    {
        "name": "KEY",
        "valueFrom": {"secretKeyRef": {"name": "keys", "key": "api.key", "optional": True}},
    },
]
ENV_FIELD = "spec.runtime.env"


def test_a_variable_from_each_source_is_valid_and_kubernetes_refuses_what_validate_does(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    """validate, the API server's validation of the model (crdcheck) and of the Deployment
    render makes of it (podcheck) agree on valueFrom: each source is valid, and each
    invalid case validate and admission refuse, Kubernetes refuses in the pods."""
    valid = apply_changes(peagle_manifest, {ENV_FIELD: VALID_ENV})
    assert validation_errors(valid) == []
    assert crdcheck(tmp_path, valid)["objects"] == [[]]
    rendered = _rendered_deployment(valid, tmp_path)
    container = rendered["spec"]["template"]["spec"]["containers"][0]
    assert container["env"][-len(VALID_ENV) :] == VALID_ENV
    cases = [c for c in INVALID_CASES if set(c.changes) == {ENV_FIELD} and "valueFrom" in c.field]
    assert len(cases) >= 7
    deployments = [rendered]
    for case in cases:
        deployment = copy.deepcopy(rendered)
        env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        env[-len(VALID_ENV) :] = case.changes[ENV_FIELD]
        deployments.append(deployment)
    report = podcheck(tmp_path, *deployments)
    assert report[0] == []
    assert [case.id for case, errors in zip(cases, report[1:], strict=True) if not errors] == []
