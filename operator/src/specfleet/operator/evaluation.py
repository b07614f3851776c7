"""One tuning evaluation: read the pods' metrics, decide, report the decision.

The decision itself is `tuner.decide`, a pure function; which pods to read is
`pod_reading`'s (pure too), the scrape or Prometheus query `metrics`', the operator's own
metrics `observability`'s: this module joins them, in that order, and keeps each model's
window tracker between evaluations.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from specfleet.operator import metrics, observability, pod_reading, tuner
from specfleet.operator.api import SpeculativeModel
from specfleet.operator.keys import Key, key_of_model
from specfleet.operator.metrics import Outbound
from specfleet.operator.observations import (
    Observation,
    PodSample,
    SourceUnavailable,
    WindowTracker,
)
from specfleet.operator.outcomes import ROLLBACK_ACTIONS, Action, ActionKind
from specfleet.operator.status import ObservedChildren
from specfleet.operator.workqueue import without_slot

log = logging.getLogger("specfleet.evaluation")


class Evaluator:
    def __init__(self, outbound: Outbound | None = None) -> None:
        self.trackers: dict[Key, WindowTracker] = {}
        self.outbound = outbound or Outbound()

    def forget(self, key: Key) -> None:
        self.trackers.pop(key, None)

    async def evaluate(
        self, model: SpeculativeModel, children: ObservedChildren, now: datetime
    ) -> tuner.Decided:
        """Read the children, fetch the pods' counters, decide, count and export; the data
        goes down once: the pure reading, the I/O, the tracker, the tuner, the metrics."""
        key = key_of_model(model)
        tracker = self.trackers.setdefault(key, WindowTracker())
        reading = pod_reading.read(model, children)
        try:
            fetch = metrics.fetch(*key, model.spec.metrics, reading.targets, self.outbound)
            samples: list[PodSample] = []
            if fetch is not None:  # no pod to scrape yet keeps the slot: no wait
                async with without_slot():  # the wait is the tenant's
                    samples = await fetch
        except SourceUnavailable as error:
            # No pod has data. The tracker keeps its readings: the next answer spans the gap.
            observation = Observation(stable=None, canary=None, prometheus_error=str(error))
        else:
            observation = tracker.observe(samples, reading.tokens, reading.hot_tracks)
        observation = replace(
            observation,
            canary_pending=reading.canary_pending,
            runtime_failures=reading.runtime_failures,
        )
        decided = tuner.decide_planned(
            model.spec,
            model.status,
            observation,
            now,
            reading.plans,
            generation=model.metadata.generation,
        )
        observability.count_scrape_errors(key, observation)
        observability.export_status(key, decided.status)
        return decided

    def count(self, model: SpeculativeModel, actions: list[Action]) -> list[Action]:
        """Count the decisions in the operator's metrics; return those worth an Event."""
        labels = key_of_model(model)
        eventful = []
        for action in actions:
            if action.kind == ActionKind.INCONCLUSIVE:
                observability.INCONCLUSIVE_WINDOWS.labels(*labels, action.reason).inc()
                continue  # counted, not worth an Event every interval
            observability.DECISIONS.labels(*labels, action.kind).inc()
            if action.kind in ROLLBACK_ACTIONS:
                observability.ROLLBACKS.labels(*labels, action.reason).inc()
            log.info("%s/%s: %s: %s", *labels, action.kind, action.message)
            eventful.append(action)
        return eventful
