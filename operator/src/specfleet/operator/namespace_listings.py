"""Namespaces that kopf's namespace observer lists but does not take.

With `--namespace` patterns, kopf (1.45) lists the namespaces once, then starts a watch
of them, and that watch lists them again before it streams changes: that second
listing's events (no type) are dropped. A namespace made between the two listings, as
one made while the operator starts, is not followed until it changes: in one run of the
suite, a test's namespace made right after its operator answered its health check, under
load, was followed only when the test deleted it, a minute later. The same gap opens
each time the watch lists anew (its resource version expired). `take_listed_namespaces`
makes kopf revise its namespaces by every listing, as it does by its first.
"""

from __future__ import annotations

from typing import Any

from kopf._cogs.structs import bodies
from kopf._core.reactor import observation

# kopf's own, which revise_by_every_event hands every event. Alone it still drops listings
# (tests/test_namespace_listings.py): a kopf that takes them makes this module unneeded.
KOPF_PROCESSOR = observation.process_discovered_namespace_event


async def revise_by_every_event(*, raw_event: bodies.RawEvent, **kwargs: Any) -> None:
    """kopf's processor of the namespace watch's events, given a listed namespace as a
    namespace added (a deleted one stays deleted: kopf reads its deletion mark)."""
    if raw_event["type"] is None:
        raw_event = bodies.RawEvent(type="ADDED", object=raw_event["object"])
    await KOPF_PROCESSOR(raw_event=raw_event, **kwargs)


def take_listed_namespaces() -> None:
    """Put `revise_by_every_event` in the place kopf's namespace observer calls (once per
    process, before `kopf.operator`)."""
    observation.process_discovered_namespace_event = revise_by_every_event
