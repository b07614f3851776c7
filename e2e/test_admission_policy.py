"""The chart's pod policy at admission, on the real API server: each escalation of issue
42 is refused by the API server (the chart's ValidatingAdmissionPolicy, or the CRD's own
CEL for the node half), by `specfleet validate` and by the operator, in the same words;
the values that allow them let them in; a permitted model is admitted, and so is the
production example once its ServiceAccount is allowed. The policy is bound to the test's
namespace only (as `watch.namespaces` binds it), so the other tests sharing the cluster
never meet it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from e2e import cluster
from e2e.models import condition, get_model, sim_model
from e2e.operator_process import OperatorProcess
from e2e.waiting import wait_for
from specfleet.operator.accelerator_default import with_default
from specfleet.operator.api import AMD_ACCELERATOR, SpeculativeModel
from specfleet.operator.render import MODEL_LABEL
from tests.invalid_manifests import apply_changes
from tests.test_chart import manifests, render
from tests.test_cli import specfleet
from tests.test_pod_policy import ALLOWING, ESCALATIONS, IDENTITIES

POLICY_TEMPLATE = "templates/pod-policy.yaml"
PRODUCTION = cluster.REPO / "examples" / "production-llama-70b.yaml"
ALLOWING_VALUES = [
    'podPolicy.serviceAccounts=["cluster-admin-bot"]',
    "podPolicy.secretVolumes=true",
    "podPolicy.hostPathCache=true",
]


class Policy:
    """The chart's policy and binding, rendered for one namespace and applied."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.release = f"sf-{uuid.uuid4().hex[:6]}"
        self.name = f"{self.release}-specfleet-{namespace}-pod-policy"  # both objects'

    def apply(self, *values: str) -> list[dict[str, Any]]:
        text = render(
            namespace=self.namespace,
            release=self.release,
            show_only=POLICY_TEMPLATE,
            set_json=[f'watch.namespaces=["{self.namespace}"]', *values],
        ).stdout
        cluster.kubectl("apply", "-f", "-", input=text)
        return manifests(text)

    @property
    def pods_name(self) -> str:
        """The policy over the models' pods' label, and its binding."""
        return f"{self.name}-pods"

    def remove_binding(self, name: str | None = None) -> None:
        cluster.kubectl("delete", "validatingadmissionpolicybinding", name or self.name)

    def delete(self) -> None:
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            for name in (self.name, self.pods_name):
                cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")


@pytest.fixture
def policy(crds: None, model_namespace: str) -> Iterator[Policy]:
    installed = Policy(model_namespace)
    yield installed
    installed.delete()


def _create(manifest: dict[str, Any], namespace: str, *extra: str) -> tuple[bool, str]:
    """Create the model (server-side `extra`: a dry run); admitted, and what kubectl said."""
    result = cluster.kubectl(
        "create", "-n", namespace, *extra, "-f", "-", input=yaml.safe_dump(manifest), check=False
    )
    return result.returncode == 0, result.stderr


def _validate(tmp_path: Path, manifest: dict[str, Any], *flags: str) -> tuple[int, str]:
    path = tmp_path / f"{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    result = specfleet("validate", path, *flags)
    return result.exit_code or 0, result.output


def _refused_in(words: str) -> str:
    """The refusal validate printed for a model, without its file and name."""
    return words.split("): ", 1)[1].strip()


def _escalation(case: str) -> dict[str, Any]:
    return apply_changes(sim_model(f"esc-{case}"), IDENTITIES[case][0])


def _type_check(name: str) -> dict[str, Any] | None:
    """The API server's type check of the policy's CEL against the CRD's schema, once done."""
    shown = cluster.kubectl("get", "validatingadmissionpolicy", name, "-o", "yaml").stdout
    checked: dict[str, Any] | None = yaml.safe_load(shown).get("status", {}).get("typeChecking")
    return None if checked is None else {"done": True, **checked}


def test_admission_validate_and_the_operator_refuse_what_the_install_does_not_allow(
    policy: Policy,
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
    tmp_path: Path,
) -> None:
    rendered = policy.apply()
    assert sorted(d["kind"] for d in rendered) == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicyBinding",
    ]
    first = sorted(IDENTITIES)[0]
    wait_for(
        "the policy to refuse a model",
        lambda: not _create(_escalation(first), model_namespace, "--dry-run=server")[0],
        timeout=30,
    )
    # Every expression type-checks against the CRD's schema (and the pod's): no warning.
    assert {d["metadata"]["name"] for d in rendered} == {policy.name, policy.pods_name}
    for name in (policy.name, policy.pods_name):
        checked = wait_for("the type check", partial(_type_check, name))
        assert checked == {"done": True}, (name, checked)

    for case in sorted(IDENTITIES):
        manifest = _escalation(case)
        code, said = _validate(tmp_path, manifest)
        assert code == 1 and IDENTITIES[case][1] in said, (case, said)
        admitted, refusal = _create(manifest, model_namespace)
        assert not admitted, case
        assert "ValidatingAdmissionPolicy" in refusal, refusal
        # The same words: admission names the field as validate does.
        assert _refused_in(said) in refusal, (case, said, refusal)
        assert _validate(tmp_path, manifest, *ALLOWING)[0] == 0
    for case in sorted(ESCALATIONS):  # the node half: the CRD's own rules, everywhere
        manifest = apply_changes(sim_model(f"esc-{case}"), ESCALATIONS[case][0])
        code, said = _validate(tmp_path, manifest, *ALLOWING)
        admitted, refusal = _create(manifest, model_namespace, "--dry-run=server")
        assert code == 1 and ESCALATIONS[case][1] in said, (case, said)
        assert not admitted and ESCALATIONS[case][1] in refusal, (case, refusal)

    # Written nulls are read as absent, as the operator reads them.
    permitted = apply_changes(
        sim_model("permitted"),
        {
            "spec.runtime.pod": {"serviceAccountName": None},
            "spec.runtime.modelCache": {"hostPath": None},
        },
    )
    assert _validate(tmp_path, permitted)[0] == 0
    assert _create(permitted, model_namespace, "--dry-run=server") == (True, "")

    # The documented refusal (docs/install.md), and the value that lets it in.
    production = yaml.safe_load(PRODUCTION.read_text())
    _, said = _validate(tmp_path, production)
    admitted, refusal = _create(production, model_namespace, "--dry-run=server")
    assert not admitted and _refused_in(said) in refusal, (said, refusal)
    policy.apply('podPolicy.serviceAccounts=["llama-70b-inference"]')
    wait_for(
        "the production example admitted",
        lambda: _create(production, model_namespace, "--dry-run=server")[0],
        timeout=30,
    )

    # The install's values, not the policy's text, say what is allowed.
    policy.apply(*ALLOWING_VALUES)
    wait_for(
        "the allowing values to admit every escalation",
        lambda: all(
            _create(_escalation(case), model_namespace, "--dry-run=server")[0]
            for case in sorted(IDENTITIES)
        ),
        timeout=30,
    )

    # Without the binding the API server stores such a model; the operator (allowing
    # nothing more) refuses it before applying any child, in the same words.
    policy.apply()
    policy.remove_binding()
    manifest = _escalation(first)
    name = manifest["metadata"]["name"]
    wait_for("the model admitted", lambda: _create(manifest, model_namespace)[0], timeout=30)
    _, said = _validate(tmp_path, manifest)

    def refused() -> dict[str, Any] | None:
        found = condition(get_model(api_client, model_namespace, name), "Degraded")
        return found if found and found["status"] == "True" else None

    degraded = wait_for("the operator's refusal", refused, timeout=60)
    assert degraded["reason"] == "PodPolicyRefused"
    assert _refused_in(said) in degraded["message"], (said, degraded)
    assert client.AppsV1Api(api_client).list_namespaced_deployment(model_namespace).items == []


LABELLED = {"metadata": {"labels": {MODEL_LABEL: "llama"}}}
STRAY: dict[str, Any] = {
    "metadata": {"name": "stray", **LABELLED["metadata"]},
    "spec": {"containers": [{"name": "c", "image": "ghcr.io/specfleet/runtime:0.1.0"}]},
}


DEPLOYMENT_CONTROLLER = "system:serviceaccount:kube-system:deployment-controller"
# Someone with every right (the masters group) who is neither the operator nor a
# workload's controller: what RBAC lets a tenant do in its namespace, and more.
TENANT = "tenant-bot"


def _stray_workload(kind: str) -> dict[str, Any]:
    """A workload of `kind` (apps/v1) whose pods would carry the model's label."""
    selector = {"matchLabels": LABELLED["metadata"]["labels"]}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": f"stray-{kind.lower()}"},
        "spec": {
            "selector": selector,
            "template": {"metadata": LABELLED["metadata"], "spec": STRAY["spec"]},
            **({"serviceName": "stray"} if kind == "StatefulSet" else {}),
        },
    }


def _create_as_tenant(manifest: dict[str, Any], namespace: str) -> tuple[bool, str]:
    """`manifest` created as TENANT in a server-side dry run: admitted, and what was said."""
    as_tenant = (f"--as={TENANT}", "--as-group=system:masters", "--dry-run=server")
    return _create(manifest, namespace, *as_tenant)


def test_only_the_models_workloads_make_pods_its_service_selects(
    policy: Policy,
    operator: OperatorProcess,
    api_client: client.ApiClient,
    model_namespace: str,
) -> None:
    """A pod anyone labels as a model's would join the model's Service (the operator
    already ignores it: children.owned_pods). The chart's policy over pods lets only the
    workloads' controllers make or label such a pod, and only the operator and those
    controllers make a workload whose pods carry the label (a tenant's own Deployment
    would have the ReplicaSet controller make them); the model's own pods still come."""
    # This test's operator runs as the cluster's admin, the chart's as its ServiceAccount.
    policy.apply(f'podPolicy.modelWorkloadCreators=["{DEPLOYMENT_CONTROLLER}","admin"]')
    core = client.CoreV1Api(api_client)

    def refusal() -> str | None:
        try:
            core.create_namespaced_pod(model_namespace, STRAY, dry_run="All")
        except client.ApiException as error:
            # The policy's refusal, not another admission's: in a new namespace the
            # ServiceAccount admission also refuses (403) until "default" exists.
            said = str(error.body)
            return said if error.status in (403, 422) and MODEL_LABEL in said else None
        return None

    said = wait_for("the policy to refuse a stray labelled pod", refusal, timeout=30)
    assert f"metadata.labels[{MODEL_LABEL}]" in said and "not admin" in said, said
    # One expression over pods and four workload kinds type-checks against each schema.
    checked = wait_for("the type check", partial(_type_check, policy.pods_name))
    assert checked == {"done": True}, checked
    # Nor may an unlabelled pod be given the label afterwards.
    plain = {"metadata": {"name": "plain"}, "spec": STRAY["spec"]}
    core.create_namespaced_pod(model_namespace, plain)
    with pytest.raises(client.ApiException) as relabel:
        core.patch_namespaced_pod("plain", model_namespace, LABELLED)
    assert f"metadata.labels[{MODEL_LABEL}]" in str(relabel.value.body)
    # Nor may a tenant (authorized for anything) make a workload whose pods carry it.
    for kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        admitted, said = _create_as_tenant(_stray_workload(kind), model_namespace)
        assert not admitted, kind
        assert f"the pod template's metadata.labels[{MODEL_LABEL}]" in said, said
        assert f"not {TENANT}" in said, said

    # The model's own pods, made by its ReplicaSet's controller, are admitted and serve.
    manifest = sim_model("llama")
    manifest["spec"]["tuning"]["enabled"] = False
    cluster.kubectl("apply", "-n", model_namespace, "-f", "-", input=yaml.safe_dump(manifest))

    def ready() -> dict[str, Any] | None:
        body = get_model(api_client, model_namespace, "llama")
        return body if (condition(body, "Ready") or {}).get("status") == "True" else None

    wait_for("the model Ready under the pods' policy", ready, timeout=120)
    # Without the binding, the same stray pod would be admitted: the refusal was the policy's.
    policy.remove_binding(policy.pods_name)
    wait_for("the stray pod admitted", lambda: refusal() is None, timeout=30)
    assert _create_as_tenant(_stray_workload("Deployment"), model_namespace)[0]


DEFAULTING_TEMPLATE = "templates/accelerator-default.yaml"


def _gpu_source(manifest: dict[str, Any]) -> dict[str, Any]:
    """What the default may change in a model, as the operator reads it (the CRD's and the
    model's defaults filled in alike)."""
    runtime = SpeculativeModel.model_validate(manifest).spec.runtime
    fields = {"accelerator", "resource_claim_template", "image", "inject_runtime"}
    return runtime.model_dump(include=fields)


def test_the_installs_default_accelerator_is_written_as_validate_writes_it(
    crds: None, namespace: str
) -> None:
    """The chart's MutatingAdmissionPolicy (defaultAccelerator) on the real API server
    stores what `specfleet validate --default-accelerator` validates: the install's
    accelerator, and with AMD's the ROCm image; a model naming its GPU source keeps it."""
    release = f"sf-{uuid.uuid4().hex[:6]}"
    text = render(
        namespace=namespace,
        release=release,
        show_only=DEFAULTING_TEMPLATE,
        set_json=[f'watch.namespaces=["{namespace}"]', f'defaultAccelerator="{AMD_ACCELERATOR}"'],
    ).stdout
    names = {d["metadata"]["name"] for d in manifests(text)}
    cluster.kubectl("apply", "-f", "-", input=text)
    try:

        def stored(manifest: dict[str, Any]) -> dict[str, Any]:
            shown = cluster.kubectl(
                "create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
                input=yaml.safe_dump(manifest),
            ).stdout  # fmt: skip
            return _gpu_source(json.loads(shown))

        plain = sim_model("plain")
        wait_for(
            "the policy to write the default",
            lambda: stored(plain).get("accelerator") == AMD_ACCELERATOR,
            timeout=30,
        )
        assert stored(plain) == _gpu_source(with_default(plain, AMD_ACCELERATOR))
        for changes in (
            {"spec.runtime.accelerator": "nvidia.com/gpu"},
            {"spec.runtime.resourceClaimTemplate": "h100s"},
            {"spec.runtime.image": "registry/rocm-runtime:1"},
        ):
            manifest = apply_changes(sim_model("named"), changes)
            assert stored(manifest) == _gpu_source(with_default(manifest, AMD_ACCELERATOR))
    finally:
        for kind in ("mutatingadmissionpolicybinding", "mutatingadmissionpolicy"):
            for name in names:
                cluster.kubectl("delete", kind, name, "--ignore-not-found", "--wait=false")
