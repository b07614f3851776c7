"""Readers of status bodies an earlier version of the operator wrote: each turns an
old shape into today's before pydantic validates it, and the CRD keeps the old fields in
its schema so the API server does not prune them first (tests/data/status-v1)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from specfleet.runtime.config import Drafting

# Schemas of fields a status written by an earlier version has, and today's does not.
NUMBER: dict[str, Any] = {"type": "number"}
NUMBERS: dict[str, Any] = {"type": "array", "items": NUMBER}
OBJECTS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}
STRING: dict[str, Any] = {"type": "string"}
INTEGER: dict[str, Any] = {"type": "integer"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
OBJECT: dict[str, Any] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
# A trial's fields in status.speculation before `trial` (read with status.canary).
FLAT_TRIAL = ("candidateTokens", "candidateSchedule", "canaryStartedAt")


def old_fields(**fields: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Fields of a status written by an earlier version, kept in the CRD's schema so the
    API server does not prune them before a reader below turns them into today's shape."""

    def add(schema: dict[str, Any]) -> None:
        for name, item in fields.items():
            schema["properties"][name] = {**item, "description": "Read on upgrade; not written."}

    return add


def nest_counts(data: Any, legacy: dict[str, tuple[str, str]]) -> Any:
    """A status body written before `Counts` kept the counters flat beside the other
    fields: `legacy` maps each old key to the object and key it now lives under. Old keys
    are dropped whenever they appear (an earlier release's merge patch left them beside
    the new objects); they are moved only into an object the body does not have yet."""
    if not isinstance(data, dict) or not legacy.keys() & data.keys():
        return data
    rest = {key: value for key, value in data.items() if key not in legacy}
    moved: dict[str, dict[str, Any]] = {}
    for key, (into, name) in legacy.items():
        if key in data and into not in data:
            moved.setdefault(into, {})[name] = data[key]
    return {**rest, **moved}


# The counters a status written before `Counts` kept flat: fixed, whatever Counts grows.
FLAT_COUNTERS = (
    "drafts",
    "draftTokens",
    "acceptedTokens",
    "generationTokens",
    "decodeSeconds",
    "decodeSteps",
    "engineSteps",
)


def _trial_of(
    canary: dict[str, Any],
    flat: dict[str, Any],
    speculation: dict[str, Any],
    status: dict[str, Any],
) -> dict[str, Any]:
    """`speculation.trial` from a status before it: the old `canary` object and the
    trial's flat fields. In place and switched, the candidate schedule was the stable
    one; a start time and replicas at the start were always written since trials were
    in status but the first versions: the changes then, and the pods that existed."""
    in_place = None
    if canary.get("inPlace"):
        pending = bool(canary.get("baselinePending"))
        in_place = {
            "previousTokens": canary.get("previousTokens")
            if canary.get("previousTokens") is not None
            else speculation.get("tokens"),
            "previousSchedule": canary.get("previousSchedule"),
            "switched": not pending,
        }
        schedule = flat["candidateSchedule"] if pending else speculation.get("schedule")
    else:
        schedule = flat["candidateSchedule"]
    replicas = canary.get("stableReplicas")
    return {
        "tokens": canary.get("candidateTokens"),
        "schedule": schedule,
        "startedAt": flat["canaryStartedAt"] or speculation.get("changedAt"),
        "inPlace": in_place,
        "stableReplicas": replicas if replicas is not None else status.get("replicas", 0),
        "stable": canary.get("stable") or {},
        "canary": canary.get("canary") or {},
    }


# TrackTotals before `Counts`: `acceptedFirst` was the first position, and the decode
# counters were summed over the timed windows only.
TRACK_TOTALS_FLAT_COUNTERS = {
    "drafts": ("counts", "drafts"),
    "draftTokens": ("counts", "draftTokens"),
    "acceptedTokens": ("counts", "acceptedTokens"),
    "generatedTokens": ("counts", "generationTokens"),
    "decodeSeconds": ("timed", "decodeSeconds"),
    "decodeSteps": ("timed", "decodeSteps"),
    "engineSteps": ("timed", "engineSteps"),
}
_OPEN_WINDOW_FLAT_COUNTERS = {
    **{key: ("counts", key) for key in FLAT_COUNTERS},
    "acceptedPerPosition": ("counts", "acceptedPerPosition"),
}
# status.speculation before its states were objects: read into them, then dropped.
_FLAT_STATES = (
    "disabled",
    "disabledReason",
    "disabledAcceptance",
    "reprobeAt",
    "failedReprobes",
    "reprobedAt",
    "lastKnownGoodTokens",
    "lastKnownGoodSchedule",
)


def track_totals_from_flat(data: Any) -> Any:
    """A TrackTotals body written before `Counts`."""
    if isinstance(data, dict) and "acceptedFirst" in data:
        data = dict(data)
        first = data.pop("acceptedFirst")
        data.setdefault("acceptedPerPosition", [first])
        data = nest_counts(
            data,
            {
                **TRACK_TOTALS_FLAT_COUNTERS,
                "acceptedPerPosition": ("counts", "acceptedPerPosition"),
            },
        )
    return nest_counts(data, TRACK_TOTALS_FLAT_COUNTERS)


def open_window_from_flat(data: Any) -> Any:
    """An OpenWindow body written before `Counts`."""
    return nest_counts(data, _OPEN_WINDOW_FLAT_COUNTERS)


def drafting_from_parallel(data: Any) -> Any:
    """status.speculation written before drafting styles had `parallelDrafting`: read it
    as its style, so the step cost learned for it is kept."""
    if isinstance(data, dict) and "parallelDrafting" in data:
        data = dict(data)
        parallel = data.pop("parallelDrafting")
        data.setdefault("drafting", Drafting.PARALLEL if parallel else Drafting.SEQUENTIAL)
    return data


def rejected_from_flat(data: Any) -> Any:
    """status.speculation written before `rejected` kept its three fields flat; with no
    `rejectedUntil` nothing was rejected."""
    legacy = ("rejectedTokens", "rejectedSchedule", "rejectedUntil")
    if not isinstance(data, dict) or not any(key in data for key in legacy):
        return data
    data = dict(data)
    tokens, schedule, until = (data.pop(key, None) for key in legacy)
    if until is not None and "rejected" not in data:
        data["rejected"] = {"tokens": tokens or [], "schedule": schedule, "until": until}
    return data


# What status.speculation kept flat of the K in effect before `sinceChange`: old key, new key.
FLAT_SINCE_CHANGE = {
    "changedAt": "at",
    "windows": "windows",
    "failingWindows": "failingWindows",
    "plainFasterWindows": "plainFasterWindows",
    "baselineAcceptance": "baselineAcceptance",
}


def since_change_from_flat(data: Any) -> Any:
    """status.speculation written before `sinceChange` kept what was seen of the K in
    effect flat beside it. Old keys are dropped whenever they appear (an earlier release's
    merge patch left them beside the new object); they are read only into a body without one."""
    if not isinstance(data, dict) or not FLAT_SINCE_CHANGE.keys() & data.keys():
        return data
    old = {key: data[key] for key in FLAT_SINCE_CHANGE if key in data}
    data = {key: value for key, value in data.items() if key not in FLAT_SINCE_CHANGE}
    if "sinceChange" not in data:
        data["sinceChange"] = {
            FLAT_SINCE_CHANGE[key]: value for key, value in old.items() if value is not None
        }
    return data


# A config trial's placement, kept flat before it was the K trial's `inPlace` object.
FLAT_CONFIG_PLACEMENT = ("switched", "previousTokens", "previousSchedule")


def config_trial_in_place_from_flat(data: Any) -> Any:
    """status.config.trial written before its placement was an `InPlace` object kept it
    flat: `inPlace` a boolean beside `switched`, `previousTokens` and `previousSchedule`
    (the K and schedule before, set at the switch). An in-place trial not yet switched had
    no K before: none was read before the switch, which sets it, so its own K stands in.
    Old keys are dropped whenever they appear (an earlier release's merge patch left them
    beside the new object)."""
    if not isinstance(data, dict):
        return data
    flat = isinstance(data.get("inPlace"), bool)
    if not flat and not any(key in data for key in FLAT_CONFIG_PLACEMENT):
        return data
    old = {key: data.get(key) for key in FLAT_CONFIG_PLACEMENT}
    data = {key: value for key, value in data.items() if key not in FLAT_CONFIG_PLACEMENT}
    if not flat:
        return data
    if not data.pop("inPlace"):
        return data
    previous = old["previousTokens"]
    data["inPlace"] = {
        "previousTokens": data.get("tokens") if previous is None else previous,
        "previousSchedule": old["previousSchedule"],
        "switched": bool(old["switched"]),
    }
    return data


def states_from_flat(data: Any, *, no_k_clears_floor: str, no_k_pays: str) -> Any:
    """status.speculation written before the states were objects kept them flat:
    `disabled` with its reason, acceptance and re-probe time is `off` (for the reason
    given: no K clears the floor, or no K pays); a re-probe not yet proven
    (`reprobedAt`) is `reprobing`; the two last-known-good fields are one object. Old
    keys are dropped whenever they appear (an earlier release's merge patch left them
    beside the new objects); they are read only into objects the body does not have yet.
    A trial's flat fields are read with status.canary (`trial_from_flat`)."""
    flat = (*_FLAT_STATES, *FLAT_TRIAL)
    if not isinstance(data, dict) or not any(key in data for key in flat):
        return data
    old = {key: data[key] for key in flat if key in data}
    data = {key: value for key, value in data.items() if key not in flat}
    failed = old.get("failedReprobes") or 0
    if old.get("disabled") and "off" not in data:
        acceptance = old.get("disabledAcceptance")
        data["off"] = {
            # Plain decoding was chosen exactly when its acceptance was kept.
            "reason": no_k_clears_floor if acceptance is None else no_k_pays,
            "message": old.get("disabledReason") or "speculation disabled by rollback",
            "acceptance": acceptance,
            # Never set: due at once, as an unset time was read then.
            "reprobeAt": old.get("reprobeAt") or datetime.fromtimestamp(0, UTC),
            "failedReprobes": failed,
        }
    reprobed = old.get("reprobedAt")
    if not old.get("disabled") and reprobed is not None and "reprobing" not in data:
        data["reprobing"] = {"since": reprobed, "failedReprobes": failed}
    tokens = old.get("lastKnownGoodTokens")
    if tokens is not None and "lastKnownGood" not in data:
        data["lastKnownGood"] = {"tokens": tokens, "schedule": old.get("lastKnownGoodSchedule")}
    return data


def trial_from_flat(data: Any) -> Any:
    """A status written before `speculation.trial` kept a trial in `canary` (its totals,
    in place or not) and in speculation's flat `candidateTokens`, `candidateSchedule`
    and `canaryStartedAt`, which a config trial's canary shared. Read into
    `speculation.trial` and the config trial's `schedule`; the old keys are dropped
    whenever they appear (an earlier release's merge patch left them beside the new ones)."""
    if not isinstance(data, dict):
        return data
    speculation = data.get("speculation")
    speculation = dict(speculation) if isinstance(speculation, dict) else {}
    if "canary" not in data and not any(key in speculation for key in FLAT_TRIAL):
        return data
    data = dict(data)
    canary = data.pop("canary", None)
    flat = {key: speculation.pop(key, None) for key in FLAT_TRIAL}
    if canary is not None and "trial" not in speculation:
        speculation["trial"] = _trial_of(canary, flat, speculation, data)
    config = data.get("config")
    trial = config.get("trial") if isinstance(config, dict) else None
    if isinstance(trial, dict) and not trial.get("inPlace") and "schedule" not in trial:
        trial = {**trial, "schedule": flat["candidateSchedule"]}
        data["config"] = {**config, "trial": trial}
    data["speculation"] = speculation
    return data
