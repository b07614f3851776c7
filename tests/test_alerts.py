"""The alert rules: one source (the chart), checked and unit-tested with the real promtool.

- deploy/prometheus/specfleet-alerts.yaml is the chart's PrometheusRule rendered with the
  default values (update it with SPECFLEET_UPDATE_GOLDEN=1);
- `promtool check rules` accepts it and the non-default rendering;
- `promtool test rules deploy/prometheus/specfleet-alerts.test.yaml` passes, and that file
  has a firing and a not-firing case for every alert;
- the windows and pending periods follow the values (short ones are evaluated for real);
- every alert has a summary, a description and a runbook section that exists;
- the dashboard's expressions are valid PromQL.

promtool comes from Debian's `prometheus` package (`make test` installs it). Without it
these tests fail, they do not skip.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from specfleet.operator import observability
from tests.conftest import REPO
from tests.test_chart import CHART, CUSTOM_VALUES, UPDATE, render

PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS / "specfleet-alerts.yaml"
RULE_TESTS = PROMETHEUS / "specfleet-alerts.test.yaml"
EXAMPLE_CONFIG = PROMETHEUS / "prometheus.example.yaml"
ALERTS_DOC = REPO / "docs" / "alerts.md"
HEADER = (
    "# Generated from charts/specfleet/templates/_alerts.tpl with the chart's default values\n"
    "# by tests/test_alerts.py (SPECFLEET_UPDATE_GOLDEN=1); edit the template, not this file.\n"
    "# For a Prometheus not run by prometheus-operator: list this file under rule_files.\n"
    "# Runbooks: docs/alerts.md.\n"
)
ALERTS = {
    "SpecfleetAcceptanceBelowFloor",
    "SpecfleetRollback",
    "SpecfleetSpeculationInactive",
    "SpecfleetTunerFlapping",
    "SpecfleetMetricsUnavailable",
    "SpecfleetConfigRejected",
    "SpecfleetOperatorDown",
    "SpecfleetNoLeader",
}
# The metrics the rules and the dashboard may use: vLLM's and the operator's contract.
KNOWN_METRICS = {
    "up",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:generation_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "specfleet_reconcile_total",
    "specfleet_reconcile_duration_seconds_bucket",
    "specfleet_speculative_tokens",
    "specfleet_acceptance_rate",
    "specfleet_acceptance_lower_bound",
    "specfleet_mean_acceptance_length",
    "specfleet_goodput_tokens_per_second",
    "specfleet_acceptance_floor",
    "specfleet_acceptance_judged",
    "specfleet_acceptance_metric",
    "specfleet_decisions_total",
    "specfleet_rollbacks_total",
    "specfleet_inconclusive_windows_total",
    "specfleet_scrape_errors_total",
    "specfleet_metrics_available",
    "specfleet_speculation_active",
    "specfleet_speculation_disabled",
    "specfleet_plain_decoding_chosen",
    "specfleet_config_rejected",
    "specfleet_pod_startup_seconds",
    "specfleet_leader",
    "specfleet_api_requests_total",
}


def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail(
            "promtool is not on PATH: install Debian's `prometheus` package "
            "(e2e/install-debian-packages.sh; `make test` runs it)"
        )
    return found


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, check=False, cwd=cwd)


def rule_groups(*, set_json: tuple[str, ...] = (), values: tuple[Path, ...] = ()) -> str:
    """The PrometheusRule's spec (`groups:` ...) as a plain rules file, comments kept."""
    text = render(
        show_only="templates/prometheusrule.yaml",
        set_json=["prometheusRule.enabled=true", *set_json],
        values=values,
    ).stdout
    return textwrap.dedent(text.split("\nspec:\n", 1)[1])


def rules_of(text: str) -> list[dict[str, Any]]:
    groups = yaml.safe_load(text)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def heading_anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of a Markdown page."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            anchors.add(slug)
    return anchors


def test_plain_rules_file_is_the_charts_rendering() -> None:
    expected = HEADER + rule_groups()
    if UPDATE:
        RULES.write_text(expected)
    assert RULES.read_text() == expected, (
        f"{RULES.relative_to(REPO)} is stale: it is rendered from the chart's _alerts.tpl; "
        "run the tests with SPECFLEET_UPDATE_GOLDEN=1"
    )


def test_prometheus_rule_and_plain_file_hold_the_same_rules() -> None:
    documents = [
        d
        for d in yaml.safe_load_all(render(set_json=["prometheusRule.enabled=true"]).stdout)
        if d and d["kind"] == "PrometheusRule"
    ]
    assert documents[0]["spec"] == yaml.safe_load(RULES.read_text())


def test_promtool_checks_the_plain_rules_file() -> None:
    result = run_promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in result.stdout


def test_promtool_checks_the_non_default_rendering(tmp_path: Path) -> None:
    path = tmp_path / "custom.yaml"
    path.write_text(rule_groups(values=(CUSTOM_VALUES,)))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    # operatorDown is disabled in the custom values.
    assert {r["alert"] for r in rules_of(path.read_text())} == ALERTS - {"SpecfleetOperatorDown"}


def test_promtool_unit_tests_pass() -> None:
    result = run_promtool("test", "rules", RULE_TESTS.name, cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert {r["alert"] for r in rules_of(RULES.read_text())} == ALERTS
    assert firing == ALERTS, f"no firing case for {sorted(ALERTS - firing)}"
    assert quiet == ALERTS, f"no not-firing case for {sorted(ALERTS - quiet)}"


def test_every_alert_has_summary_description_and_an_existing_runbook() -> None:
    anchors = heading_anchors(ALERTS_DOC.read_text())
    for rule in rules_of(RULES.read_text()):
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        url = annotations["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == "https://github.com/specfleet/specfleet/blob/main/docs/alerts.md"
        assert anchor == rule["alert"].lower()
        assert anchor in anchors, f"docs/alerts.md has no section #{anchor}"
        assert rule["labels"]["severity"] in ("warning", "critical")


NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def test_the_alerts_page_counts_and_lists_every_alert() -> None:
    """The count in the page's first sentence and its table are the rules file's."""
    doc = ALERTS_DOC.read_text()
    alerts = {r["alert"] for r in rules_of(RULES.read_text())}
    count = re.search(r"specfleet ships (\w+) Prometheus alerts", doc)
    assert count, "docs/alerts.md no longer says how many alerts it ships"
    assert count.group(1) == NUMBER_WORDS[len(alerts)], (
        f"docs/alerts.md says {count.group(1)} alerts; the rules hold {len(alerts)}"
    )
    listed = set(re.findall(r"^\| \[(Specfleet\w+)\]", doc, flags=re.MULTILINE))
    assert listed == alerts, f"the table of docs/alerts.md misses {sorted(alerts - listed)}"


@functools.cache
def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "specfleet.io_speculativemodels.yaml").read_text())
    return dict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def crd_field(path: str) -> dict[str, Any]:
    """The CRD schema of a dotted path such as `status.speculation.off` or
    `spec.runtime.pod.volumes[].name` (KeyError: no such field)."""
    schema = crd_schema()
    for name in path.split("."):
        schema = schema.get("items", schema)["properties"][name.removesuffix("[]")]
    return dict(schema)


def test_status_fields_the_alerts_name_are_written() -> None:
    """An alert or runbook that sends users to a status field names one the operator
    writes: not a field kept only to read an old status on upgrade."""
    texts = [ALERTS_DOC.read_text()]
    texts += [str(r["annotations"]) for r in rules_of(RULES.read_text())]
    paths = {p for text in texts for p in re.findall(r"\bstatus(?:\.[a-zA-Z]+)+", text)}
    assert "status.speculation.off" in paths
    for path in sorted(paths):
        try:
            schema = crd_field(path)
        except KeyError:
            pytest.fail(f"the alerts name {path}, which the CRD does not have")
        assert "not written" not in schema.get("description", ""), (
            f"the alerts name {path}, which the operator no longer writes"
        )


def test_rules_use_only_known_metrics() -> None:
    for rule in rules_of(RULES.read_text()):
        for name in re.findall(r"\b((?:vllm:|specfleet_)[a-z_:]+|up)\s*[{\[]", rule["expr"]):
            assert name in KNOWN_METRICS, f"{rule['alert']} uses unknown metric {name}"


def test_known_metrics_hold_every_series_the_operator_exports() -> None:
    """The operator's side of the contract is read from its registry, not copied."""
    sample = {"counter": "_total", "gauge": "", "histogram": "_bucket"}
    exported = {
        family.name + sample[family.type]
        for collector in vars(observability).values()
        if isinstance(collector, MetricWrapperBase)
        for family in collector.describe()
    }
    assert exported <= KNOWN_METRICS, exported - KNOWN_METRICS


def test_vllm_alerts_group_by_namespace_and_model() -> None:
    for rule in rules_of(RULES.read_text()):
        if "vllm:" in rule["expr"]:
            for clause in re.findall(r"sum by \(([^)]*)\)", rule["expr"]):
                assert clause == "namespace, model", rule["alert"]


def test_windows_floor_and_pending_periods_follow_the_values() -> None:
    rules = {r["alert"]: r for r in rules_of(rule_groups(values=(CUSTOM_VALUES,)))}
    acceptance = rules["SpecfleetAcceptanceBelowFloor"]
    assert acceptance["for"] == "15s"
    assert "[30s]" in acceptance["expr"] and "[10m]" not in acceptance["expr"]
    # The chart's floor applies only where the operator exports none of its own.
    assert "< 0.6\n" in acceptance["expr"]
    assert (
        "< on (namespace, model) max by (namespace, model) (specfleet_acceptance_floor)"
        in (acceptance["expr"])
    )
    assert acceptance["expr"].endswith("> 0.5")
    assert acceptance["labels"] == {"severity": "critical", "team": "ml-platform"}
    assert acceptance["annotations"]["runbook_url"] == (
        "https://runbooks.example.com/specfleet/alerts.md#specfleetacceptancebelowfloor"
    )
    assert "offset 1m" in rules["SpecfleetRollback"]["expr"]
    assert "[30s]" in rules["SpecfleetSpeculationInactive"]["expr"]
    assert rules["SpecfleetTunerFlapping"]["expr"].endswith("[2m])) > 2")
    assert rules["SpecfleetMetricsUnavailable"]["for"] == "30s"
    groups = yaml.safe_load(rule_groups(values=(CUSTOM_VALUES,)))["groups"]
    assert groups[0]["interval"] == "5s"
    job = {
        r["alert"]: r["expr"]
        for r in rules_of(rule_groups(set_json=('alerts.operatorJob="ops/specfleet"',)))
    }
    assert 'up{job="ops/specfleet"}' in job["SpecfleetOperatorDown"]
    assert 'specfleet_leader{job="ops/specfleet"}' in job["SpecfleetNoLeader"]
    assert rules["SpecfleetNoLeader"]["for"] == "30s"


def test_disabled_alerts_are_left_out() -> None:
    text = rule_groups(set_json=("alerts.tunerFlapping.enabled=false",))
    assert {r["alert"] for r in rules_of(text)} == ALERTS - {"SpecfleetTunerFlapping"}


BELOW_FLOOR_ADVICE = (
    "Below the floor the operator keeps the fastest K while speculation still pays "
    "(condition AcceptanceBelowFloor) and switches to plain decoding when it does not; if "
    "this keeps firing, the draft no longer matches the traffic (retrain or replace it), or "
    "the operator is down."
)


def test_short_windows_fire_within_seconds(tmp_path: Path) -> None:
    """The non-default rendering (30s windows, 15s pending) evaluated by promtool at a
    5s step: the shape the end-to-end Prometheus test relies on."""
    (tmp_path / "rules.yaml").write_text(rule_groups(values=(CUSTOM_VALUES,)))
    series = 'namespace="ml",model="llama",track="stable",pod="llama-a"'
    tests: dict[str, Any] = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "5s",
        "tests": [
            {
                "interval": "5s",
                "input_series": [
                    # 100 drafts/s at 40%: under the custom floor (0.6).
                    {
                        "series": f"vllm:spec_decode_num_drafts_total{{{series}}}",
                        "values": "0+500x40",
                    },
                    {
                        "series": "vllm:spec_decode_num_accepted_tokens_per_pos_total"
                        f'{{{series},position="0"}}',
                        "values": "0+200x40",
                    },
                ],
                "alert_rule_test": [
                    # Below the floor from the first rate on, but still pending.
                    {
                        "eval_time": "10s",
                        "alertname": "SpecfleetAcceptanceBelowFloor",
                        "exp_alerts": [],
                    },
                    {
                        "eval_time": "40s",
                        "alertname": "SpecfleetAcceptanceBelowFloor",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "critical",
                                    "team": "ml-platform",
                                    "namespace": "ml",
                                    "model": "llama",
                                },
                                "exp_annotations": {
                                    "summary": "ml/llama acceptance is below its floor",
                                    "description": (
                                        "The figure the floor of ml/llama judges (its "
                                        "spec.rollback.metric, over 30s, stable pods; "
                                        "first-position acceptance when the operator exports "
                                        "nothing) is 40%, under its spec.rollback.minAcceptance "
                                        "(0.6 when the operator exports nothing). "
                                        + BELOW_FLOOR_ADVICE
                                    ),
                                    "runbook_url": "https://runbooks.example.com/specfleet/"
                                    "alerts.md#specfleetacceptancebelowfloor",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "rules.test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = run_promtool("test", "rules", "rules.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_example_prometheus_config_is_valid(tmp_path: Path) -> None:
    """Debian's promtool is built without Kubernetes service discovery, so the check runs
    on a copy with static targets: the rest (relabelling, honor_labels, rule_files) is
    checked as written."""
    config = yaml.safe_load(EXAMPLE_CONFIG.read_text())
    assert config["rule_files"] == [RULES.name]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["specfleet-operator"]["honor_labels"] is True
    assert set(jobs) == {"specfleet-operator", "specfleet-runtime"}
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["alerts"]["operatorJob"] == "specfleet-operator"
    for job in config["scrape_configs"]:
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": ["127.0.0.1:8080"]}]
    config["rule_files"] = [str(RULES)]
    path = tmp_path / "prometheus.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_expressions_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every panel's query, as recording rules, with Grafana's variables
    replaced by what Grafana would send."""
    dashboard = json.loads((CHART / "dashboards" / "specfleet.json").read_text())
    rules = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = (
                target["expr"]
                .replace("$__rate_interval", "1m")
                .replace("$namespace", ".*")
                .replace("$model", ".*")
            )
            assert "$" not in expr, expr
            for name in re.findall(r"\b((?:vllm:|specfleet_)[a-z_:]+)\s*[{\[]", expr):
                assert name in KNOWN_METRICS, f"panel {panel['title']!r}: unknown {name}"
            rules.append({"record": f"specfleet:dashboard:{panel['id']}_{target['refId']}"})
            rules[-1]["expr"] = expr
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
