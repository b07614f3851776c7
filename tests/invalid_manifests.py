"""Invalid SpeculativeModel manifests, shared by the offline tests and the admission tests.

Each case changes the P-EAGLE example at one path and names the field the error
must mention (offline: pydantic's path; at admission: the API server's message).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from specfleet.operator.api import MAX_ARG_LENGTH

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
    InvalidCase(
        "min-tokens-above-max",
        {"spec.speculation.minTokens": 6, "spec.speculation.maxTokens": 4},
        "speculation.minTokens",
        True,
    ),
    InvalidCase("tokens-zero", {"spec.speculation.tokens": 0}, "tokens"),
    InvalidCase("tokens-not-int", {"spec.speculation.tokens": "five"}, "tokens"),
    InvalidCase("floor-zero", {"spec.rollback.minAcceptance": 0}, "minAcceptance"),
    InvalidCase("floor-above-one", {"spec.rollback.minAcceptance": 1.5}, "minAcceptance"),
    # A floor of 1 disables speculation even at 100% acceptance.
    InvalidCase("floor-one", {"spec.rollback.minAcceptance": 1.0}, "minAcceptance"),
    # Types the OpenAPI schema refuses (YAML makes these easy to write by accident).
    InvalidCase("floor-string", {"spec.rollback.minAcceptance": "0.8"}, "minAcceptance"),
    InvalidCase("replicas-string", {"spec.replicas": "2"}, "replicas"),
    InvalidCase("tokens-bool", {"spec.speculation.tokens": True}, "tokens"),
    InvalidCase("tuning-enabled-string", {"spec.tuning.enabled": "yes"}, "tuning.enabled"),
    InvalidCase("image-int", {"spec.runtime.image": 5}, "runtime.image"),
    InvalidCase("args-item-int", {"spec.runtime.args": [8192]}, "runtime.args[0]"),
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
    # runtime.args setting a flag specfleet renders, one case per spelling class that
    # vLLM 0.33's parser reads as that flag (the runtime's contract test checks them).
    *[
        InvalidCase(f"args-{name}", {"spec.runtime.args": args}, "runtime.args", True)
        for name, args in [
            ("speculative-config", ["--speculative-config", "{}"]),
            ("speculative-config-equals", ['--speculative-config={"method":"ngram"}']),
            ("speculative-abbreviated", ["--speculative", '{"method":"ngram"}']),
            ("speculative-underscore", ["--speculative_config", "{}"]),
            ("speculative-key", ["--speculative-config.num_speculative_tokens", "9"]),
            ("speculative-short", ["-sc", "{}"]),
            ("speculative-short-equals", ["-sc={}"]),
            ("speculative-short-key", ["-sc.method", "ngram"]),
            ("speculative-short-abbreviated", ["-s", "{}"]),
            ("spec-method", ["--spec-method", "ngram"]),
            ("spec-model", ["--spec-model", "other/draft"]),
            ("spec-tokens-abbreviated", ["--spec-t", "9"]),
            ("spec-ambiguous", ["--spec", "9"]),
            ("config-file", ["--config", "/etc/serve.yaml"]),
            ("model", ["--model", "other/model"]),
            ("model-equals", ["--model=other/model"]),
            ("served-abbreviated", ["--served", "x"]),
            ("served-underscore-abbreviated", ["--served_model", "x"]),
            ("tensor-parallel-abbreviated", ["--tensor-parallel", "8"]),
            ("tp-short", ["-tp", "8"]),
            ("tp-glued", ["-tp8"]),
            ("tp-short-abbreviated", ["-t", "8"]),
            ("host-abbreviated", ["--hos", "0.0.0.0"]),
            ("host-key", ["--host.x", "1"]),
            ("port-after-others", ["--max-model-len", "8192", "--port=9000"]),
            ("end-of-options", ["--max-model-len", "8192", "--", "other/model"]),
            ("positional-model", ["other/model"]),
        ]
    ],
    InvalidCase(
        "args-item-too-long",
        {"spec.runtime.args": ["--chat-template", "x" * (MAX_ARG_LENGTH + 1)]},
        "runtime.args",
    ),
    InvalidCase("replicas-zero", {"spec.replicas": 0}, "replicas"),
    InvalidCase("replicas-negative", {"spec.replicas": -2}, "replicas"),
    InvalidCase("interval-zero", {"spec.tuning.interval": "0s"}, "interval", True),
    InvalidCase("interval-no-unit", {"spec.tuning.interval": "60"}, "interval", True),
    InvalidCase("cooldown-negative", {"spec.tuning.cooldown": "-5m"}, "cooldown", True),
    # Durations past their maximum: these overflowed datetime or asyncio arithmetic.
    InvalidCase("interval-too-long", {"spec.tuning.interval": "99999999999h"}, "interval", True),
    InvalidCase("interval-over-max", {"spec.tuning.interval": "61m"}, "interval", True),
    InvalidCase("cooldown-over-max", {"spec.tuning.cooldown": "721h"}, "cooldown", True),
    InvalidCase(
        "reprobe-after-too-long", {"spec.rollback.reprobeAfter": "99999999h"}, "reprobeAfter", True
    ),
    InvalidCase(
        "canary-pending-timeout-over-max",
        {"spec.tuning.canaryPendingTimeout": "25h"},
        "canaryPendingTimeout",
        True,
    ),
    InvalidCase(
        "scrape-timeout-over-max", {"spec.metrics.scrapeTimeout": "6m"}, "scrapeTimeout", True
    ),
    InvalidCase(
        "max-window-age-over-max", {"spec.tuning.maxWindowAge": "25h"}, "maxWindowAge", True
    ),
    InvalidCase("unknown-below-floor-policy", {"spec.rollback.belowFloor": "Panic"}, "belowFloor"),
    InvalidCase("unknown-schedule-mode", {"spec.speculation.schedule": {"mode": "Often"}}, "mode"),
    InvalidCase(
        "schedule-bands-while-off",
        {"spec.speculation.schedule": {"mode": "Off", "bands": [{"tokens": 3}]}},
        "schedule.bands",
        True,
    ),
    InvalidCase(
        "fixed-schedule-band-without-tokens",
        {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"maxTokens": 3}]}},
        "schedule",
        True,
    ),
    InvalidCase(
        "learned-schedule-band-with-tokens",
        {"spec.speculation.schedule": {"mode": "Learned", "bands": [{"tokens": 3}]}},
        "schedule band tokens",
        True,
    ),
    InvalidCase(
        "fixed-schedule-drafting-nowhere",
        {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"tokens": 0}]}},
        "band with tokens above 0",
        True,
    ),
    InvalidCase(
        "schedule-last-band-with-edge",
        {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"upToBatch": 4, "tokens": 3}]}},
        "upToBatch",
        True,
    ),
    InvalidCase(
        "schedule-edges-decreasing",
        {
            "spec.speculation.schedule": {
                "mode": "Fixed",
                "bands": [
                    {"upToBatch": 8, "tokens": 3},
                    {"upToBatch": 4, "tokens": 2},
                    {"tokens": 2},
                ],
            }
        },
        "upToBatch",
        True,
    ),
    InvalidCase(
        "schedule-three-ks",
        {
            "spec.speculation.schedule": {
                "mode": "Fixed",
                "bands": [
                    {"upToBatch": 1, "tokens": 5},
                    {"upToBatch": 8, "tokens": 3},
                    {"tokens": 1},
                ],
            }
        },
        "K values",
        True,
    ),
    InvalidCase(
        "schedule-band-above-max-tokens",
        {"spec.speculation.schedule": {"mode": "Fixed", "bands": [{"tokens": 9}]}},
        "maxTokens",
        True,
    ),
    InvalidCase(
        "schedule-band-min-above-max",
        {
            "spec.speculation.schedule": {
                "mode": "Learned",
                "bands": [{"minTokens": 5, "maxTokens": 3}],
            }
        },
        "minTokens",
        True,
    ),
    InvalidCase("duration-units-out-of-order", {"spec.tuning.cooldown": "30m1h"}, "cooldown", True),
    InvalidCase("unknown-strategy", {"spec.tuning.strategy": "BlueGreen"}, "strategy"),
    InvalidCase("min-draft-tokens-zero", {"spec.tuning.minDraftTokens": 0}, "minDraftTokens"),
    InvalidCase(
        "tp-above-gpus",
        {"spec.runtime.tensorParallelSize": 4, "spec.runtime.gpus": 2},
        "tensorParallelSize",
        True,
    ),
    InvalidCase(
        "tp-without-gpus",
        {"spec.runtime.tensorParallelSize": 2, "spec.runtime.gpus": 0},
        "tensorParallelSize",
        True,
    ),
    InvalidCase(
        "draft-tp-neither-one-nor-target",
        {
            "spec.runtime.gpus": 4,
            "spec.runtime.tensorParallelSize": 4,
            "spec.draft.tensorParallelSize": 2,
        },
        "draft.tensorParallelSize",
        True,
    ),
    InvalidCase("port-out-of-range", {"spec.runtime.port": 70000}, "port"),
    # What the API server refuses for the children, refused up front.
    InvalidCase(
        "env-name-with-equals",
        {"spec.runtime.env": [{"name": "A=B", "value": "1"}]},
        "runtime.env[0].name",
    ),
    InvalidCase(
        "env-name-not-ascii",
        {"spec.runtime.env": [{"name": "CAFÉ", "value": "1"}]},
        "runtime.env[0].name",
    ),
    InvalidCase(
        "memory-not-a-quantity",
        {"spec.runtime.resources": {"requests": {"memory": "lots"}}},
        "runtime.resources.requests.memory",
    ),
    InvalidCase(
        "cpu-negative",
        {"spec.runtime.resources": {"limits": {"cpu": -1}}},
        "runtime.resources.limits.cpu",
    ),
    InvalidCase(
        "memory-negative",
        {"spec.runtime.resources": {"limits": {"memory": "-1Gi"}}},
        "runtime.resources.limits.memory",
    ),
    InvalidCase(
        "node-selector-value-with-space",
        {"spec.runtime.nodeSelector": {"pool": "a b"}},
        "runtime.nodeSelector.pool",
    ),
    InvalidCase(
        "node-selector-value-too-long",
        {"spec.runtime.nodeSelector": {"pool": "a" * 64}},
        "runtime.nodeSelector.pool",
    ),
    InvalidCase(
        "node-selector-key-with-space",
        {"spec.runtime.nodeSelector": {"gpu pool": "a"}},
        "runtime.nodeSelector",
        True,
    ),
    InvalidCase(
        "node-selector-key-bad-prefix",
        {"spec.runtime.nodeSelector": {"Example.com/pool": "a"}},
        "runtime.nodeSelector",
        True,
    ),
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
    # Each method takes the fields it needs and none it does not.
    InvalidCase("ngram-with-draft-model", {"spec.draft.method": "ngram"}, "draft.model", True),
    InvalidCase("suffix-with-draft-model", {"spec.draft.method": "suffix"}, "draft.model", True),
    InvalidCase(
        "dflash-without-draft-model",
        {"spec.draft.method": "dflash", "spec.draft.model": DELETE},
        "draft.model",
        True,
    ),
    InvalidCase(
        "draft-model-method-without-draft-model",
        {"spec.draft.method": "draft_model", "spec.draft.model": DELETE},
        "draft.model",
        True,
    ),
    InvalidCase(
        "sample-method-on-a-lookup",
        {
            "spec.draft.method": "ngram",
            "spec.draft.model": DELETE,
            "spec.draft.sampleMethod": "probabilistic",
        },
        "draft.sampleMethod",
        True,
    ),
    InvalidCase("sample-method-unknown", {"spec.draft.sampleMethod": "beam"}, "sampleMethod"),
    # synthetic is vLLM's test mode, not offered.
    InvalidCase(
        "rejection-synthetic", {"spec.draft.rejectionSampleMethod": "synthetic"}, "rejection"
    ),
    InvalidCase(
        "rejection-on-plain-decoding",
        {
            "spec.draft.method": "none",
            "spec.draft.model": DELETE,
            "spec.draft.rejectionSampleMethod": "block",
        },
        "draft.rejectionSampleMethod",
        True,
    ),
    InvalidCase(
        "fly-with-k-one",
        {"spec.draft.rejectionSampleMethod": "fly", "spec.speculation.minTokens": 1},
        "speculation.minTokens",
        True,
    ),
    InvalidCase(
        "suffix-knobs-on-eagle3", {"spec.draft.suffix": {"maxTreeDepth": 8}}, "draft.suffix", True
    ),
    InvalidCase(
        "suffix-with-a-k-range",
        {"spec.draft.method": "suffix", "spec.draft.model": DELETE},
        "speculation",
        True,
    ),
    InvalidCase(
        "suffix-min-token-prob-above-one",
        {
            "spec.draft.method": "suffix",
            "spec.draft.model": DELETE,
            "spec.speculation": {"tokens": 8, "minTokens": 8, "maxTokens": 8},
            "spec.draft.suffix": {"minTokenProb": 1.5},
        },
        "minTokenProb",
    ),
]
