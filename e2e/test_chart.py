"""The Helm chart against the real API server: admission of every rendered object, and
the operator's RBAC checked both ways with `kubectl auth can-i`.

The ServiceMonitor, PodMonitor and PrometheusRule are judged by prometheus-operator's own
CRDs (v0.85.0, from the Go module e2e/build-monitoring.sh builds the operator from).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml

from e2e import cluster
from e2e.waiting import wait_for
from tests.test_chart import CUSTOM_VALUES, manifests, render


def extra_namespace() -> Iterator[str]:
    name = f"t-chart-other-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def other_namespace(control_plane: None) -> Iterator[str]:
    """A second namespace (watched in the namespaced renderings)."""
    yield from extra_namespace()


@pytest.fixture
def unwatched_namespace(control_plane: None) -> Iterator[str]:
    """A namespace the operator must have no permission in."""
    yield from extra_namespace()


def release_name() -> str:
    return f"sf-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------------- admission


@pytest.mark.parametrize("variant", ["default", "custom", "everything-cluster-wide"])
def test_every_rendered_object_is_admitted(
    variant: str, crds: None, monitoring_crds: None, namespace: str, other_namespace: str
) -> None:
    if variant == "default":
        text = render(namespace=namespace, release=release_name()).stdout
    elif variant == "custom":
        text = render(
            namespace=namespace,
            release=release_name(),
            values=[CUSTOM_VALUES],
            set_json=[f'watch.namespaces=["{namespace}","{other_namespace}"]'],
        ).stdout
    else:
        text = render(
            namespace=namespace,
            release=release_name(),
            set_json=[
                "serviceMonitor.enabled=true",
                "podMonitor.enabled=true",
                "prometheusRule.enabled=true",
            ],
        ).stdout
    documents = manifests(text)
    result = cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == len(documents), result.stdout
    assert "Warning" not in result.stderr, result.stderr
    kinds = {d["kind"] for d in documents}
    if variant != "default":
        assert {"ServiceMonitor", "PodMonitor", "PrometheusRule"} <= kinds


def test_the_monitoring_crds_catch_a_misspelled_field(
    monitoring_crds: None, namespace: str
) -> None:
    """The monitoring kinds are really judged: a typo is refused, not pruned silently."""
    text = render(namespace=namespace, set_json=["podMonitor.enabled=true"]).stdout
    monitor = next(d for d in manifests(text) if d["kind"] == "PodMonitor")
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "5s"
    result = cluster.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        input=yaml.safe_dump(monitor),
        check=False,
    )
    assert result.returncode != 0
    assert "intervall" in result.stderr


def test_the_chart_crd_is_accepted_as_an_upgrade(crds: None) -> None:
    """The documented upgrade path: server-side apply of the chart's crds/ over the
    installed CRD changes nothing that the server refuses."""
    result = cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        str(cluster.REPO / "charts" / "specfleet" / "crds"),
    )
    assert "serverside-applied (server dry run)" in result.stdout


# ---------------------------------------------------------------------------- RBAC


class Identity:
    """The chart's ServiceAccount, installed for real (SA + RBAC only, no Deployment)."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name  # the release's full name, as the chart names its ServiceAccount
        self.user = f"system:serviceaccount:{namespace}:{name}"

    def can(
        self, verb: str, resource: str, *, namespace: str | None = None, name: str | None = None
    ) -> bool:
        resource, _, subresource = resource.partition("/")
        named = resource if name is None else f"{resource}/{name}"
        args = ["auth", "can-i", verb, named, f"--as={self.user}"]
        if subresource:
            args.append(f"--subresource={subresource}")
        args += ["--all-namespaces"] if namespace is None else ["-n", namespace]

        def answer() -> str | None:
            result = cluster.kubectl(*args, check=False)
            said = result.stdout.strip()
            if said in ("yes", "no"):
                return said
            # A dropped connection (a busy shared API server) is asked again; any other
            # output is an answer this test does not understand.
            assert "Unable to connect to the server" in result.stderr, result.stdout + result.stderr
            return None

        return wait_for(f"kubectl auth can-i {verb} {resource}", answer, timeout=30) == "yes"


def install_rbac(namespace: str, set_json: list[str]) -> Iterator[Identity]:
    release = release_name()
    text = "".join(
        render(namespace=namespace, release=release, set_json=set_json, show_only=template).stdout
        for template in ("templates/serviceaccount.yaml", "templates/rbac.yaml")
    )
    documents = manifests(text)
    cluster.kubectl("apply", "-f", "-", input=text)
    account = next(d for d in documents if d["kind"] == "ServiceAccount")
    yield Identity(namespace, account["metadata"]["name"])
    for document in documents:
        if document["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            cluster.kubectl(
                "delete", document["kind"], document["metadata"]["name"], "--ignore-not-found"
            )
    cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false", input=text)


@pytest.fixture
def cluster_wide(crds: None, namespace: str) -> Iterator[Identity]:
    yield from install_rbac(namespace, [])


@pytest.fixture
def namespaced(crds: None, namespace: str, other_namespace: str) -> Iterator[Identity]:
    yield from install_rbac(namespace, [f'watch.namespaces=["{other_namespace}"]'])


# What the operator does, one (verb, resource) a line: docs/install.md has the reasons.
NEEDED = [
    ("get", "speculativemodels.specfleet.io"),
    ("list", "speculativemodels.specfleet.io"),
    ("watch", "speculativemodels.specfleet.io"),
    ("update", "speculativemodels.specfleet.io/status"),
    ("get", "deployments.apps"),
    ("list", "deployments.apps"),
    ("watch", "deployments.apps"),
    ("create", "deployments.apps"),
    ("patch", "deployments.apps"),
    ("get", "services"),
    ("list", "services"),
    ("watch", "services"),
    ("create", "services"),
    ("patch", "services"),
    ("get", "poddisruptionbudgets.policy"),
    ("list", "poddisruptionbudgets.policy"),
    ("watch", "poddisruptionbudgets.policy"),
    ("create", "poddisruptionbudgets.policy"),
    ("patch", "poddisruptionbudgets.policy"),
    ("list", "pods"),
    ("watch", "pods"),
    ("list", "replicasets.apps"),
    ("watch", "replicasets.apps"),
    ("create", "events"),
]
# What it must not do.
FORBIDDEN = [
    # Secrets: the kubelet resolves the HF token's secretKeyRef, never the operator.
    ("get", "secrets"),
    ("list", "secrets"),
    ("watch", "secrets"),
    # SpeculativeModels belong to the user / Git: the operator writes only their status.
    ("patch", "speculativemodels.specfleet.io"),
    ("delete", "speculativemodels.specfleet.io"),
    ("deletecollection", "speculativemodels.specfleet.io"),
    ("create", "speculativemodels.specfleet.io"),
    ("update", "speculativemodels.specfleet.io"),
    ("patch", "speculativemodels.specfleet.io/status"),
    # Pods are only listed and watched; Events only created, never patched.
    ("get", "pods"),
    ("patch", "events"),
    ("create", "events.events.k8s.io"),
    # Children are deleted by the garbage collector, never by the operator.
    ("delete", "deployments.apps"),
    ("update", "deployments.apps"),
    ("delete", "services"),
    ("delete", "poddisruptionbudgets.policy"),
    ("delete", "pods"),
    ("create", "pods"),
    ("create", "pods/exec"),
    ("get", "pods/log"),
    # Kinds it does not manage.
    ("get", "configmaps"),
    ("create", "configmaps"),
    ("get", "statefulsets.apps"),
    ("get", "replicasets.apps"),
    ("get", "daemonsets.apps"),
    ("create", "jobs.batch"),
    ("get", "ingresses.networking.k8s.io"),
    ("get", "networkpolicies.networking.k8s.io"),
    ("get", "persistentvolumeclaims"),
    ("get", "serviceaccounts"),
    ("create", "serviceaccounts/token"),
    ("get", "roles.rbac.authorization.k8s.io"),
    ("create", "rolebindings.rbac.authorization.k8s.io"),
    ("get", "leases.coordination.k8s.io"),
    ("get", "endpointslices.discovery.k8s.io"),
]
CLUSTER_SCOPED_FORBIDDEN = [
    ("get", "nodes"),
    ("list", "namespaces"),
    ("create", "namespaces"),
    ("get", "customresourcedefinitions.apiextensions.k8s.io"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("get", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ("escalate", "clusterroles.rbac.authorization.k8s.io"),
    ("bind", "clusterroles.rbac.authorization.k8s.io"),
    ("impersonate", "users"),
    ("impersonate", "serviceaccounts"),
    ("create", "certificatesigningrequests.certificates.k8s.io"),
]


def answers(
    identity: Identity, checks: list[tuple[str, str]], namespace: str | None
) -> dict[str, bool]:
    return {
        f"{verb} {resource}": identity.can(verb, resource, namespace=namespace)
        for verb, resource in checks
    }


def test_cluster_wide_operator_can_do_its_job_everywhere(
    cluster_wide: Identity, other_namespace: str
) -> None:
    for namespace in (None, cluster_wide.namespace, other_namespace):
        denied = [k for k, v in answers(cluster_wide, NEEDED, namespace).items() if not v]
        assert not denied, f"the operator cannot {denied} in {namespace or 'all namespaces'}"


def test_cluster_wide_operator_cannot_do_anything_else(
    cluster_wide: Identity, other_namespace: str
) -> None:
    for namespace in (None, cluster_wide.namespace, other_namespace):
        allowed = [k for k, v in answers(cluster_wide, FORBIDDEN, namespace).items() if v]
        assert not allowed, f"the operator can {allowed} in {namespace or 'all namespaces'}"
    allowed = [k for k, v in answers(cluster_wide, CLUSTER_SCOPED_FORBIDDEN, None).items() if v]
    assert not allowed, f"the operator can {allowed} at cluster scope"


def test_cluster_wide_operator_cannot_read_secrets_cluster_wide(cluster_wide: Identity) -> None:
    assert not cluster_wide.can("get", "secrets")
    assert not cluster_wide.can("list", "secrets")
    assert not cluster_wide.can("get", "secrets", namespace="kube-system")
    assert not cluster_wide.can("get", "secrets", namespace=cluster_wide.namespace)


def test_the_operator_reaches_only_its_own_schedule_key_secret(
    cluster_wide: Identity, other_namespace: str
) -> None:
    """hotSchedules.keySecret empty: the operator creates its key's Secret in its own
    namespace and reads that one Secret by name, nothing else."""
    own, key = cluster_wide.namespace, f"{cluster_wide.name}-schedule-key"
    assert cluster_wide.can("get", "secrets", namespace=own, name=key)
    assert cluster_wide.can("create", "secrets", namespace=own)
    assert not cluster_wide.can("get", "secrets", namespace=own, name="another-secret")
    assert not cluster_wide.can("get", "secrets", namespace=other_namespace, name=key)
    assert not cluster_wide.can("create", "secrets", namespace=other_namespace)
    for verb in ("update", "patch", "delete", "list", "watch"):
        assert not cluster_wide.can(verb, "secrets", namespace=own, name=key), verb


def test_namespaced_operator_works_only_in_watched_namespaces(
    namespaced: Identity, other_namespace: str, unwatched_namespace: str
) -> None:
    watched = answers(namespaced, NEEDED, other_namespace)
    assert all(watched.values()), f"cannot {[k for k, v in watched.items() if not v]}"
    for namespace in (None, unwatched_namespace, namespaced.namespace):
        allowed = [k for k, v in answers(namespaced, NEEDED, namespace).items() if v]
        assert not allowed, f"can {allowed} in {namespace or 'all namespaces'}"
    forbidden = FORBIDDEN + CLUSTER_SCOPED_FORBIDDEN
    allowed = [k for k, v in answers(namespaced, forbidden, other_namespace).items() if v]
    assert not allowed, f"the operator can {allowed} in its watched namespace"
    allowed = [k for k, v in answers(namespaced, CLUSTER_SCOPED_FORBIDDEN, None).items() if v]
    assert not allowed, f"the operator can {allowed} at cluster scope"
