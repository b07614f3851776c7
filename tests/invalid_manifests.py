"""Invalid SpeculativeModel manifests, shared by the offline tests and the admission tests.

Each case changes the P-EAGLE example at one path and names the field the error
must mention (offline: pydantic's path; at admission: the API server's message).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

DELETE = object()


@dataclass(frozen=True)
class InvalidCase:
    id: str
    changes: dict[str, Any]  # dotted path -> new value (or DELETE)
    field: str  # the field the error must name
    cel: bool = False  # refused by a CEL rule (rather than the schema) at admission


def apply_changes(manifest: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(manifest)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = result
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return result


INVALID_CASES = [
    InvalidCase("tokens-above-max", {"spec.speculation.tokens": 12}, "speculation.tokens", True),
    InvalidCase("tokens-below-min", {"spec.speculation.minTokens": 4}, "speculation.tokens", True),
    InvalidCase("max-above-32", {"spec.speculation.maxTokens": 33}, "maxTokens"),
    InvalidCase("tokens-zero", {"spec.speculation.tokens": 0}, "tokens"),
    InvalidCase("tokens-not-int", {"spec.speculation.tokens": "five"}, "tokens"),
    InvalidCase("floor-zero", {"spec.rollback.minAcceptance": 0}, "minAcceptance"),
    InvalidCase("floor-above-one", {"spec.rollback.minAcceptance": 1.5}, "minAcceptance"),
    InvalidCase("failure-limit-zero", {"spec.rollback.failureLimit": 0}, "failureLimit"),
    InvalidCase("unknown-metric", {"spec.rollback.metric": "Vibes"}, "metric"),
    InvalidCase("draft-missing", {"spec.draft.model": DELETE}, "draft.model", True),
    InvalidCase(
        "eagle3-without-draft",
        {"spec.draft.method": "eagle3", "spec.draft.model": DELETE},
        "draft.model",
        True,
    ),
    InvalidCase("unknown-method", {"spec.draft.method": "medusa2"}, "method"),
    InvalidCase(
        "speculative-config-in-args",
        {"spec.runtime.args": ["--speculative-config", "{}"]},
        "runtime.args",
        True,
    ),
    InvalidCase(
        "speculative-config-equals-in-args",
        {"spec.runtime.args": ['--speculative-config={"method":"ngram"}']},
        "runtime.args",
        True,
    ),
    InvalidCase("replicas-zero", {"spec.replicas": 0}, "replicas"),
    InvalidCase("replicas-negative", {"spec.replicas": -2}, "replicas"),
    InvalidCase("interval-zero", {"spec.tuning.interval": "0s"}, "interval"),
    InvalidCase("interval-no-unit", {"spec.tuning.interval": "60"}, "interval"),
    InvalidCase("cooldown-negative", {"spec.tuning.cooldown": "-5m"}, "cooldown"),
    InvalidCase("unknown-strategy", {"spec.tuning.strategy": "BlueGreen"}, "strategy"),
    InvalidCase("min-draft-tokens-zero", {"spec.tuning.minDraftTokens": 0}, "minDraftTokens"),
    InvalidCase(
        "tp-above-gpus",
        {"spec.runtime.tensorParallelSize": 4, "spec.runtime.gpus": 2},
        "tensorParallelSize",
        True,
    ),
    InvalidCase("port-out-of-range", {"spec.runtime.port": 70000}, "port"),
    InvalidCase("target-missing", {"spec.model": DELETE}, "model"),
    InvalidCase("target-name-empty", {"spec.model.name": ""}, "model.name"),
    InvalidCase(
        "prometheus-without-url", {"spec.metrics.source": "Prometheus"}, "metrics.prometheus", True
    ),
    InvalidCase(
        "ngram-lookup-inverted",
        {
            "spec.draft.method": "ngram",
            "spec.draft.model": DELETE,
            "spec.draft.promptLookupMin": 6,
            "spec.draft.promptLookupMax": 2,
        },
        "promptLookupMin",
        True,
    ),
    InvalidCase("name-not-dns-label", {"metadata.name": "Llama_8B"}, "metadata.name", True),
]
