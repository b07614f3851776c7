"""The keys users of popular charts set: image digest and a registry mirror, log level and
format, PodDisruptionBudget settings, topology spread, extra volumes, a NetworkPolicy, and
Kubernetes quantities in every spelling the API server takes."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.conftest import REPO
from tests.test_chart import container, one, render, rendered
from tests.test_cli import specfleet

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
    assert policy["policyTypes"] == ["Ingress", "Egress"]
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


NETWORK_POLICY = "networkPolicy.enabled=true"


def _egress(*set_json: str) -> list[dict[str, Any]]:
    policy = one(rendered(set_json=[NETWORK_POLICY, *set_json]), "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    egress: list[dict[str, Any]] = policy["egress"]
    return egress


def _tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"port": port, "protocol": "TCP"} for port in ports]


def test_network_policy_lets_the_operator_reach_only_what_it_needs() -> None:
    """The API server on its ports, DNS at the cluster's DNS pods, the inference pods in
    any namespace; no Prometheus when the install allows none (issue 42)."""
    api_server, dns, pods = _egress()
    assert api_server == {"ports": _tcp(443, 6443)}
    assert dns == {
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
    }
    [peer] = pods["to"]
    assert "ports" not in pods and peer["namespaceSelector"] == {}


def test_network_policy_egress_follows_the_installs_values() -> None:
    urls = [
        "http://prometheus.monitoring:9090",
        "https://thanos.monitoring/prometheus",
        "http://prometheus.other:9090/",
        "http://[fd00::1]:9091",
        "http://prometheus.plain",
    ]
    api_server_peer = {"ipBlock": {"cidr": "10.0.0.10/32"}}
    prometheus_peer = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    api_server, _, pods, prometheus = _egress(
        f"evaluation.allowedPrometheusUrls={json.dumps(urls)}",
        f"networkPolicy.egress.apiServer={json.dumps([api_server_peer])}",
        "networkPolicy.egress.apiServerPorts=[6443]",
        f"networkPolicy.egress.prometheus={json.dumps([prometheus_peer])}",
        'watch.namespaces=["team-a","team-b"]',
    )
    assert api_server == {"ports": _tcp(6443), "to": [api_server_peer]}
    # Each allowed URL's port, as the operator connects to it, once each.
    ports = list(
        dict.fromkeys(urlsplit(url).port or DEFAULT_PORTS[urlsplit(url).scheme] for url in urls)
    )
    assert prometheus == {"ports": _tcp(*ports), "to": [prometheus_peer]}
    assert pods["to"][0]["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
        ]
    }


DEFAULT_PORTS = {"http": 80, "https": 443}


def test_network_policy_selects_the_pods_the_operator_renders() -> None:
    """The inference pods' rule selects the pods `specfleet render` makes (their labels),
    and no pod without the operator's labels."""
    [peer] = _egress()[2]["to"]
    result = specfleet("render", REPO / "examples" / "llama-peagle.yaml")
    assert result.exit_code == 0, result.output
    deployments = [d for d in yaml.safe_load_all(result.output) if d and d["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert _selects(peer["podSelector"], labels)
        assert not _selects(
            peer["podSelector"], {"specfleet.io/model": labels["specfleet.io/model"]}
        )


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector's matchExpressions (In, Exists) against `labels`."""
    for expression in selector["matchExpressions"]:
        key, operator = expression["key"], expression["operator"]
        if key not in labels:
            return False
        if operator == "In" and labels[key] not in expression["values"]:
            return False
    return True
