"""The keys users of popular charts set: image digest and a registry mirror, log level and
format, PodDisruptionBudget settings, topology spread, extra volumes, a NetworkPolicy, and
Kubernetes quantities in every spelling the API server takes."""

from __future__ import annotations

import json

import pytest

from tests.test_chart import container, one, render, rendered

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("set_json", "image"),
    [
        ([], "ghcr.io/specfleet/operator:0.1.0"),
        ([f'image.digest="{DIGEST}"'], f"ghcr.io/specfleet/operator@{DIGEST}"),
        (
            ['global.imageRegistry="mirror.example:5000"'],
            "mirror.example:5000/specfleet/operator:0.1.0",
        ),
        (
            ['global.imageRegistry="mirror.example"', 'image.repository="team/operator"'],
            "mirror.example/team/operator:0.1.0",
        ),
    ],
)
def test_image_digest_and_registry_mirror(set_json: list[str], image: str) -> None:
    assert container(rendered(set_json=set_json))["image"] == image


def test_log_level_and_format_reach_the_operator() -> None:
    args = container(rendered(set_json=['logLevel="DEBUG"', 'logFormat="json"']))["args"]
    assert args[args.index("--log-level") + 1] == "DEBUG"
    assert args[args.index("--log-format") + 1] == "json"


def test_pod_disruption_budget_settings() -> None:
    assert one(rendered(), "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    spec = one(
        rendered(set_json=['podDisruptionBudget.minAvailable="50%"']), "PodDisruptionBudget"
    )["spec"]
    assert spec["minAvailable"] == "50%" and "maxUnavailable" not in spec


def test_topology_spread_and_extra_volumes_are_passed_through() -> None:
    spread = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
    documents = rendered(
        set_json=[
            f"topologySpreadConstraints={json.dumps([spread])}",
            'extraVolumes=[{"name":"ca","configMap":{"name":"ca"}}]',
            'extraVolumeMounts=[{"name":"ca","mountPath":"/etc/ca"}]',
        ]
    )
    pod = one(documents, "Deployment")["spec"]["template"]["spec"]
    assert pod["topologySpreadConstraints"] == [spread]
    assert {"name": "ca", "configMap": {"name": "ca"}} in pod["volumes"]
    assert {"name": "ca", "mountPath": "/etc/ca"} in container(documents)["volumeMounts"]


def test_network_policy_admits_scrapes_and_probes_only() -> None:
    assert not [d for d in rendered() if d["kind"] == "NetworkPolicy"]
    peer = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    policy = one(
        rendered(
            set_json=[
                "networkPolicy.enabled=true",
                f"networkPolicy.metricsFrom={json.dumps([peer])}",
            ]
        ),
        "NetworkPolicy",
    )["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [
        {"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [peer]},
        {"ports": [{"port": "health", "protocol": "TCP"}]},
    ]


def test_network_policy_without_metrics_from_admits_only_the_release_namespace() -> None:
    """The operator's /metrics names every tenant's models (issue 42): an enabled policy
    with no metricsFrom admits scrapes from the release's own namespace, not from anyone."""
    policy = one(rendered(set_json=["networkPolicy.enabled=true"]), "NetworkPolicy")
    [metrics, health] = policy["spec"]["ingress"]
    assert metrics == {
        "ports": [{"port": "metrics", "protocol": "TCP"}],
        "from": [{"podSelector": {}}],
    }
    assert "from" not in health  # the kubelet's probes come from the node
    assert policy["metadata"]["namespace"] == "specfleet-system"


@pytest.mark.parametrize("quantity", ["1e9", "1Ei", "1.5Gi", "500m", ".5", "2E3", "128974848"])
def test_quantities_the_api_server_takes_are_accepted(quantity: str) -> None:
    result = render(set_json=[f'resources.limits.memory="{quantity}"'], check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "set_json",
    [
        'resources.limits.memory="1 Gi"',
        'resources.limits.memory="1gb"',
        'image.digest="sha256:short"',
        'logFormat="yaml"',
        'logLevel="TRACE"',
        "networkPolicy.egress=[]",
    ],
)
def test_schema_refuses_mistakes(set_json: str) -> None:
    result = render(set_json=[set_json], check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
