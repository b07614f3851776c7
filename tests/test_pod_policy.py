"""What creating a SpeculativeModel may not grant: pods with the node's files, root on the
node, added capabilities or the host's namespaces. `specfleet validate` and the CRD
(judged by the API server's own validation code) refuse each, naming the field."""

from __future__ import annotations

import asyncio
import dataclasses
import string
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.operator import api, crd, pod_policy, reference
from specfleet.operator.errors import validation_errors
from specfleet.operator.fleet import Fleet
from specfleet.operator.pod_policy import PodPolicy
from tests.conftest import REPO
from tests.fake_cluster import FakeCluster, ScriptedEvaluator
from tests.invalid_manifests import apply_changes
from tests.test_chart import CHART, container, rendered
from tests.test_cli import specfleet
from tests.test_crd import crdcheck

BIDIRECTIONAL = {"name": "host", "mountPath": "/host", "mountPropagation": "Bidirectional"}
# The escalations of issue 42, item 1, and what the refusal must say.
ESCALATIONS: dict[str, tuple[dict[str, Any], str]] = {
    "host-root": (
        {
            "spec.runtime.pod.volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            "spec.runtime.pod.volumeMounts": [BIDIRECTIONAL],
        },
        "runtime.pod.volumes may not be hostPath",
    ),
    "containerd-socket": (
        {
            "spec.runtime.pod.volumes": [
                {"name": "host", "hostPath": {"path": "/run/containerd/containerd.sock"}}
            ],
            "spec.runtime.pod.volumeMounts": [BIDIRECTIONAL],
        },
        "runtime.pod.volumes may not be hostPath",
    ),
    "privileged": (
        {"spec.runtime.pod.containerSecurityContext": {"privileged": True}},
        "runtime.pod.containerSecurityContext.privileged may not be true",
    ),
    "sys-admin": (
        {
            "spec.runtime.pod.containerSecurityContext": {
                "capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN"]}
            }
        },
        "capabilities.add may add only NET_BIND_SERVICE",
    ),
    "windows-host-process": (
        {"spec.runtime.pod.containerSecurityContext": {"windowsOptions": {"hostProcess": True}}},
        "may not set windowsOptions.hostProcess",
    ),
}
# Not in the API at all: refused offline as unknown fields, and by the API server's
# strict field validation (kubectl's default) rather than by a rule.
HOST_NAMESPACES = ["hostNetwork", "hostPID", "hostIPC", "hostUsers"]


@pytest.mark.parametrize("case", sorted(ESCALATIONS))
def test_validate_refuses_each_escalation_naming_the_field(
    tmp_path: Path, peagle_manifest: dict[str, Any], case: str
) -> None:
    changes, message = ESCALATIONS[case]
    manifest = apply_changes(peagle_manifest, changes)
    errors = validation_errors(manifest)
    assert any(message in error and "spec.runtime.pod" in error for error in errors), errors
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = specfleet("validate", path)
    assert result.exit_code == 1 and message in result.output


@pytest.mark.parametrize("field", HOST_NAMESPACES)
def test_validate_refuses_host_namespaces(peagle_manifest: dict[str, Any], field: str) -> None:
    manifest = apply_changes(peagle_manifest, {f"spec.runtime.pod.{field}": True})
    assert any(f"spec.runtime.pod.{field}" in error for error in validation_errors(manifest))


def test_the_crd_refuses_what_validate_refuses(
    tmp_path: Path, peagle_manifest: dict[str, Any]
) -> None:
    cases = sorted(ESCALATIONS)
    manifests = [apply_changes(peagle_manifest, ESCALATIONS[case][0]) for case in cases]
    restricted = {
        "spec.runtime.pod.containerSecurityContext": {
            "privileged": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
        },
        "spec.runtime.pod.volumes": [{"name": "scratch", "emptyDir": {}}],
    }
    allowed = apply_changes(peagle_manifest, restricted)
    assert validation_errors(allowed) == []
    report = crdcheck(tmp_path, *manifests, allowed)
    for case, errors in zip(cases, report["objects"], strict=False):
        assert any(ESCALATIONS[case][1] in error for error in errors), (case, errors)
    assert report["objects"][-1] == []


# What only the operator's install may allow (the chart's podPolicy).
IDENTITIES: dict[str, tuple[dict[str, Any], str]] = {
    "service-account": (
        {"spec.runtime.pod.serviceAccountName": "cluster-admin-bot"},
        "spec.runtime.pod.serviceAccountName: 'cluster-admin-bot' is not a ServiceAccount",
    ),
    "secret-volume": (
        {"spec.runtime.pod.volumes": [{"name": "keys", "secret": {"secretName": "other-team"}}]},
        "spec.runtime.pod.volumes[0].secret: this operator's install allows no Secret",
    ),
    "secret-volume-after-scratch": (
        {
            "spec.runtime.pod.volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "keys", "secret": {"secretName": "other-team"}},
            ]
        },
        "spec.runtime.pod.volumes[1].secret: this operator's install allows no Secret",
    ),
    "token-for-another-audience": (
        {
            "spec.runtime.pod.volumes": [
                {
                    "name": "token",
                    "projected": {
                        "sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]
                    },
                }
            ]
        },
        "spec.runtime.pod.volumes[0].projected: this operator's install allows no Secret",
    ),
    "host-path-cache": (
        {"spec.runtime.modelCache": {"hostPath": "/"}},
        "spec.runtime.modelCache.hostPath: this operator's install allows no model cache",
    ),
}
ALLOWING = [
    "--allow-service-account",
    "cluster-admin-bot",
    "--allow-secret-volumes",
    "--allow-host-path-cache",
]


@pytest.mark.parametrize("case", sorted(IDENTITIES))
def test_validate_refuses_an_identity_the_install_does_not_allow(
    tmp_path: Path, peagle_manifest: dict[str, Any], case: str
) -> None:
    changes, message = IDENTITIES[case]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(apply_changes(peagle_manifest, changes)))
    refused = specfleet("validate", path)
    assert refused.exit_code == 1 and message in refused.output, refused.output
    assert specfleet("validate", path, *ALLOWING).exit_code == 0


@pytest.mark.parametrize("case", sorted(IDENTITIES))
def test_the_operator_refuses_an_identity_the_install_does_not_allow(
    peagle_manifest: dict[str, Any], case: str
) -> None:
    changes, message = IDENTITIES[case]
    name = peagle_manifest["metadata"]["name"]
    allowing = PodPolicy(frozenset(["cluster-admin-bot"]), True, host_path_cache=True)
    for policy, applied in ((PodPolicy(), False), (allowing, True)):
        cluster = FakeCluster()
        fleet = Fleet(cluster, ScriptedEvaluator(), pod_policy=policy)  # type: ignore[arg-type]
        cluster.create_model(apply_changes(peagle_manifest, changes))
        cluster.deliver(fleet)
        asyncio.run(fleet.reconcile(("team", name)))
        assert (("Deployment", "team", name) in cluster.objects) is applied
        degraded = next(
            c for c in cluster.model(name)["status"]["conditions"] if c["type"] == "Degraded"
        )
        if applied:
            assert degraded["status"] == "False"
        else:
            assert degraded["status"] == "True" and degraded["reason"] == "PodPolicyRefused"
            assert message in degraded["message"]


def test_the_chart_passes_its_pod_policy_to_the_operator() -> None:
    values = [
        'podPolicy.serviceAccounts=["weights-reader"]',
        "podPolicy.secretVolumes=true",
        "podPolicy.hostPathCache=true",
    ]
    args = container(rendered(set_json=values))["args"]
    assert [a for a in args if a.startswith("--allow") or a == "weights-reader"] == [
        "--allow-service-account",
        "weights-reader",
        "--allow-secret-volumes",
        "--allow-host-path-cache",
    ]
    assert not any(a.startswith("--allow") for a in container(rendered())["args"])


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        ({"spec.runtime.pod.securityContext": {"runAsUser": 0}}, True),
        ({"spec.runtime.pod.containerSecurityContext": {"runAsUser": 0}}, True),
        (
            {
                "spec.runtime.pod.securityContext": {"runAsUser": 0},
                "spec.runtime.pod.containerSecurityContext": {"runAsUser": 1000},
            },
            False,
        ),
        ({"spec.runtime.pod.securityContext": {"runAsUser": 0, "runAsNonRoot": False}}, False),
    ],
)
def test_validate_refuses_root_with_the_default_run_as_non_root(
    peagle_manifest: dict[str, Any], changes: dict[str, Any], refused: bool
) -> None:
    """The kubelet refuses to start a container whose user is 0 under runAsNonRoot, which
    render sets unless told otherwise (issue 43)."""
    errors = validation_errors(apply_changes(peagle_manifest, changes))
    expected = ["spec.runtime.pod: runtime.pod security contexts may not set runAsUser 0"]
    assert [e[: len(expected[0])] for e in errors] == (expected if refused else []), errors


# ---------------------------------------------------------------------------- admission

POLICY_TEMPLATE = "templates/pod-policy.yaml"


def _policy_and_binding(**kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    documents = rendered(show_only=POLICY_TEMPLATE, **kwargs)
    policy = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in documents if d["kind"] == "ValidatingAdmissionPolicyBinding")
    return policy, binding


def test_the_chart_renders_the_generated_admission_policy() -> None:
    """The chart's policy holds the CEL generated from the allowances, one variable per
    podPolicy value rendered from the values, and a binding that denies."""
    generated = pod_policy.admission_policy()
    policy, binding = _policy_and_binding()
    spec = policy["spec"]
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"] == generated["matchConstraints"]
    assert spec["validations"] == generated["validations"]
    assert spec["variables"] == [
        {"name": "serviceAccounts", "expression": "[]"},
        {"name": "secretVolumes", "expression": "false"},
        {"name": "hostPathCache", "expression": "false"},
        *generated["variables"],
    ]
    assert binding["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


def test_the_admission_policy_takes_the_installs_values() -> None:
    policy, binding = _policy_and_binding(
        set_json=[
            'podPolicy.serviceAccounts=["weights-reader","a.b","weights-reader"]',
            "podPolicy.secretVolumes=true",
            "podPolicy.hostPathCache=true",
            'watch.namespaces=["team-a","team-b"]',
        ]
    )
    values = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    # Sorted and once each, as the operator's refusal lists them.
    assert values["serviceAccounts"] == '["a.b","weights-reader"]'
    assert (values["secretVolumes"], values["hostPathCache"]) == ("true", "true")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": ["team-a", "team-b"],
                }
            ]
        }
    }
    kinds = {d["kind"] for d in rendered(set_json=["podPolicy.admission=false"])}
    assert not kinds & {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_releases_in_two_namespaces_claim_different_policies() -> None:
    """Cluster-scoped objects of the same release name in two namespaces would be one
    object that two Helm releases claim: the second install fails."""
    names = {
        document["metadata"]["name"]
        for namespace in ("team-a", "team-b")
        for document in _policy_and_binding(namespace=namespace)
    }
    assert names == {"specfleet-team-a-pod-policy", "specfleet-team-b-pod-policy"}


def test_each_podpolicy_value_is_an_allowance() -> None:
    """The chart's podPolicy values are the allowances', the pods' policy's creators and
    the switch for admission."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["podPolicy"]
    policy = pod_policy.admission_policy()
    assert set(values) == {*policy["values"], *policy["pods"]["values"], "admission"}


@pytest.mark.parametrize("allowance", pod_policy.ALLOWANCES, ids=lambda a: a.value)
def test_python_and_cel_fill_the_same_words(
    peagle_manifest: dict[str, Any], allowance: pod_policy.Allowance
) -> None:
    slots = {slot for _, slot, _, _ in string.Formatter().parse(allowance.words) if slot}
    assert set(allowance.slots) == slots
    refused = [
        found
        for changes, _ in IDENTITIES.values()
        for found in allowance.refused(
            api.SpeculativeModel.model_validate(apply_changes(peagle_manifest, changes)).spec,
            PodPolicy(),
        )
    ]
    assert refused and all(set(found) == slots for found in refused)


def test_the_charts_policy_is_stale_when_an_allowance_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "README.md").write_text((REPO / "README.md").read_text())
    alerts = tmp_path / reference.ALERTS_FILE
    alerts.parent.mkdir(parents=True)
    alerts.write_text((REPO / reference.ALERTS_FILE).read_text())
    crd.write_files(tmp_path)
    changed = dataclasses.replace(pod_policy.ALLOWANCES[0], words="another refusal")
    monkeypatch.setattr(pod_policy, "ALLOWANCES", (changed, *pod_policy.ALLOWANCES[1:]))
    stale = {p.relative_to(tmp_path) for p in crd.stale_files(tmp_path)}
    assert stale == {crd.POD_POLICY_FILE}
