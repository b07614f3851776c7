"""kopf handlers: each parses what it is given and hands it to the fleet.

No finalizers: children are deleted by the garbage collector through owner
references, so an uninstalled operator never leaves objects stuck in deletion.
kopf keeps its bookkeeping in annotations (declared storage), never in status,
where the CRD's structural schema would prune it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from specfleet.operator import render
from specfleet.operator.api import GROUP, PLURAL, VERSION
from specfleet.operator.fleet import Fleet, key_of

log = logging.getLogger("specfleet.handlers")
MANAGED = {"app.kubernetes.io/managed-by": "specfleet"}
KOPF_ANNOTATION_PREFIX = "kopf.specfleet.io"


class Runtime:
    """The fleet the handlers talk to; set by `specfleet operator` before kopf starts."""

    fleet: Fleet | None = None
    # Namespace globs (e.g. "team-*") need kopf to list and watch Namespaces.
    scan_namespaces: bool = False
    loop_task: asyncio.Task[None] | None = None
    stop: asyncio.Event | None = None


def fleet() -> Fleet:
    if Runtime.fleet is None:
        raise RuntimeError("specfleet operator was started without a fleet")
    return Runtime.fleet


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
        prefix=KOPF_ANNOTATION_PREFIX
    )
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Without timeouts a watch can go quiet forever behind a dropped connection.
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150
    settings.watching.connect_timeout = 10
    settings.posting.level = logging.WARNING
    # The chart grants no access to Namespaces (least privilege); with plain namespace
    # names or cluster-wide watching kopf takes them as given instead of scanning.
    settings.scanning.disabled = not Runtime.scan_namespaces
    Runtime.stop = asyncio.Event()
    Runtime.loop_task = asyncio.create_task(fleet().run(Runtime.stop))


@kopf.on.cleanup()
async def shutdown(**_: Any) -> None:
    if Runtime.stop is not None:
        Runtime.stop.set()
    if Runtime.loop_task is not None:
        await Runtime.loop_task


@kopf.on.event(GROUP, VERSION, PLURAL)
async def model_event(type: str, body: kopf.Body, **_: Any) -> None:
    fleet().remember_model(dict(body), deleted=type == "DELETED")


@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
@kopf.on.resume(GROUP, VERSION, PLURAL)
async def reconcile(body: kopf.Body, **_: Any) -> None:
    fleet().remember_model(dict(body))
    await fleet().reconcile(key_of(dict(body)))


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels={render.MODEL_LABEL: kopf.PRESENT, **MANAGED})
async def child_event(type: str, body: kopf.Body, **_: Any) -> None:
    fleet().remember_child(dict(body), deleted=type == "DELETED")
