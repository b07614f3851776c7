"""kopf's namespace observer and the namespaces its watch lists (namespace_listings.py):
a namespace made between kopf's first listing and its watch's own is followed."""

from __future__ import annotations

import asyncio
from typing import Any

from kopf._cogs.structs import references
from kopf._core.reactor import observation

from specfleet.operator import namespace_listings

PATTERNS = ["t-op-*"]  # a glob, as --namespace takes it


def listed(name: str, **metadata: Any) -> dict[str, Any]:
    """A namespace as a watch's listing yields it: an event with no type."""
    return {"type": None, "object": {"metadata": {"name": name, **metadata}}}


def revised(processor: Any, *events: dict[str, Any]) -> set[Any]:
    async def run() -> set[Any]:
        insights = references.Insights()
        for event in events:
            await processor(raw_event=event, namespaces=PATTERNS, insights=insights)
        return set(insights.namespaces)

    return asyncio.run(run())


def test_kopf_alone_drops_the_namespaces_its_watch_lists() -> None:
    """The reason for the module: if this fails, kopf takes them itself; drop the module."""
    assert revised(namespace_listings.KOPF_PROCESSOR, listed("t-op-late")) == set()


def test_a_listed_namespace_that_matches_is_followed_and_one_that_does_not_is_not() -> None:
    taken = revised(
        namespace_listings.revise_by_every_event, listed("t-op-late"), listed("kube-system")
    )
    assert taken == {"t-op-late"}


def test_a_namespace_deleted_after_it_was_listed_is_dropped() -> None:
    deleted = {"type": "DELETED", "object": {"metadata": {"name": "t-op-late"}}}
    taken = revised(namespace_listings.revise_by_every_event, listed("t-op-late"), deleted)
    assert taken == set()


def test_the_operator_puts_it_where_kopf_calls() -> None:
    namespace_listings.take_listed_namespaces()
    assert observation.process_discovered_namespace_event is (
        namespace_listings.revise_by_every_event
    )
