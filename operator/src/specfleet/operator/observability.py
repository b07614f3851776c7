"""The operator's own Prometheus metrics (names are part of the chart's alert contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from specfleet.operator import rollback_metrics
from specfleet.operator.api import ConditionType, RollbackMetric, SpeculativeModelStatus
from specfleet.operator.conditions import condition_status
from specfleet.operator.keys import Key
from specfleet.operator.observations import PROMETHEUS_UNAVAILABLE, Observation

RECONCILES = Counter(
    "specfleet_reconcile_total", "Reconciles by handler and result.", ["handler", "result"]
)
RECONCILE_SECONDS = Histogram(
    "specfleet_reconcile_duration_seconds", "Reconcile duration by handler.", ["handler"]
)
API_REQUESTS = Counter(
    "specfleet_api_requests_total",
    "Requests the operator sent to the API server, by verb (APPLY: server-side apply; "
    "LIST: a GET of a collection; WATCH: a watch of the children) and resource (with "
    "/status for the subresource), and by code (the HTTP status; 0 when no answer came). "
    "Not kopf's watch and listings of the models.",
    ["verb", "resource", "code"],
)
LEADER = Gauge(
    "specfleet_leader",
    "1 while this replica holds the leader Lease and may write, 0 on a standby.",
)
MODEL = ["namespace", "model"]
SPECULATIVE_TOKENS = Gauge(
    "specfleet_speculative_tokens", "K per track (0: no pods of that track).", [*MODEL, "track"]
)
ACCEPTANCE_RATE = Gauge(
    "specfleet_acceptance_rate", "Draft acceptance rate of the last window.", MODEL
)
ACCEPTANCE_LOWER_BOUND = Gauge(
    "specfleet_acceptance_lower_bound", "Lower confidence bound of the rollback metric.", MODEL
)
MEAN_ACCEPTANCE_LENGTH = Gauge(
    "specfleet_mean_acceptance_length", "Mean acceptance length of the last window.", MODEL
)
GOODPUT = Gauge(
    "specfleet_goodput_tokens_per_second", "Generated tokens per second, last window.", MODEL
)
ACCEPTANCE_FLOOR = Gauge("specfleet_acceptance_floor", "rollback.minAcceptance.", MODEL)
ACCEPTANCE_JUDGED = Gauge(
    rollback_metrics.ACCEPTANCE_JUDGED,
    "The rollback metric (rollback.metric) in the last window: the figure the floor judges.",
    MODEL,
)
ACCEPTANCE_METRIC = Gauge(
    "specfleet_acceptance_metric",
    "1 for the rollback metric the floor judges (rollback.metric), 0 for the others.",
    [*MODEL, "metric"],
)
DECISIONS = Counter("specfleet_decisions_total", "Tuning decisions by action.", [*MODEL, "action"])
ROLLBACKS = Counter("specfleet_rollbacks_total", "Rollbacks by reason.", [*MODEL, "reason"])
INCONCLUSIVE_WINDOWS = Counter(
    "specfleet_inconclusive_windows_total", "Windows that decided nothing.", [*MODEL, "reason"]
)
SCRAPE_ERRORS = Counter(
    "specfleet_scrape_errors_total",
    "Pods whose metrics an evaluation left out, and Prometheus queries that failed, by "
    "reason (status.acceptance.podsLeftOut names the pods).",
    [*MODEL, "reason"],
)
METRICS_AVAILABLE = Gauge("specfleet_metrics_available", "MetricsAvailable condition (0/1).", MODEL)
SPECULATION_ACTIVE = Gauge(
    "specfleet_speculation_active", "SpeculationActive condition (0/1).", MODEL
)
SPECULATION_DISABLED = Gauge(
    "specfleet_speculation_disabled", "Speculation disabled by rollback (0/1).", MODEL
)
PLAIN_DECODING_CHOSEN = Gauge(
    "specfleet_plain_decoding_chosen",
    "Speculation stopped because plain decoding measured faster: no K pays (0/1).",
    MODEL,
)
CONFIG_REJECTED = Gauge(
    "specfleet_config_rejected",
    "1 while a new config (draft model, method, image, vLLM args) is held back and the "
    "stable pods run the last good one (condition ConfigRejected, status.config.rejected).",
    MODEL,
)
POD_STARTUP_SECONDS = Gauge(
    "specfleet_pod_startup_seconds",
    "Median seconds from a pod's creation to Ready (status.startupSeconds): a restart's cost.",
    MODEL,
)
PER_MODEL = [
    POD_STARTUP_SECONDS,
    SPECULATIVE_TOKENS,
    ACCEPTANCE_RATE,
    ACCEPTANCE_LOWER_BOUND,
    MEAN_ACCEPTANCE_LENGTH,
    GOODPUT,
    ACCEPTANCE_FLOOR,
    DECISIONS,
    ROLLBACKS,
    INCONCLUSIVE_WINDOWS,
    SCRAPE_ERRORS,
    METRICS_AVAILABLE,
    SPECULATION_ACTIVE,
    SPECULATION_DISABLED,
    PLAIN_DECODING_CHOSEN,
    ACCEPTANCE_JUDGED,
    ACCEPTANCE_METRIC,
    CONFIG_REJECTED,
]


def forget_model(namespace: str, model: str) -> None:
    """Drop every series of a deleted model, counters too, so dashboards and alerts stop
    seeing it and a thousand deleted models leave no series behind."""
    for metric in PER_MODEL:
        metric.remove_by_labels({"namespace": namespace, "model": model})


def export_acceptance_metric(namespace: str, model: str, metric: RollbackMetric) -> None:
    """Which metric a model's floor judges, one series per metric, so an alert can pick
    each model's own figure and compare it with its own floor."""
    for each in RollbackMetric:
        ACCEPTANCE_METRIC.labels(namespace, model, each.value).set(1 if each is metric else 0)


def count_scrape_errors(labels: Key, observation: Observation) -> None:
    """Each pod left out of an evaluation's windows, and a Prometheus that did not answer."""
    for error in observation.errors.values():
        SCRAPE_ERRORS.labels(*labels, error.reason.value).inc()
    if observation.prometheus_error is not None:
        SCRAPE_ERRORS.labels(*labels, PROMETHEUS_UNAVAILABLE).inc()


def export_status(labels: Key, status: SpeculativeModelStatus) -> None:
    """What an evaluation decided, as the gauges alerts read: the acceptance window and
    the conditions it sets (Unknown sets none)."""
    window = status.acceptance
    for gauge, value in (
        (ACCEPTANCE_RATE, window.rate),
        (ACCEPTANCE_JUDGED, window.judged),
        (ACCEPTANCE_LOWER_BOUND, window.lower_bound),
        (MEAN_ACCEPTANCE_LENGTH, window.mean_length),
        (GOODPUT, window.goodput),
    ):
        if value is not None:
            gauge.labels(*labels).set(value)
    for gauge, kind in (
        (METRICS_AVAILABLE, ConditionType.METRICS_AVAILABLE),
        (SPECULATION_ACTIVE, ConditionType.SPECULATION_ACTIVE),
    ):
        state = condition_status(status.conditions, kind)
        if state != "Unknown":
            gauge.labels(*labels).set(1 if state == "True" else 0)
