"""What creating a SpeculativeModel may not grant: pods with the node's files, root on the
node, added capabilities or the host's namespaces. `specfleet validate` and the CRD
(judged by the API server's own validation code) refuse each, naming the field."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from specfleet.operator.errors import validation_errors
from specfleet.operator.fleet import Fleet
from specfleet.operator.pod_policy import PodPolicy
from tests.fake_cluster import FakeCluster, ScriptedEvaluator
from tests.invalid_manifests import apply_changes
from tests.test_chart import container, rendered
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
