"""Namespaces taking turns at something shared (the reconcile slots, the /metrics parsing
thread): what one namespace queues waits behind one item of each other namespace waiting,
not behind all of them, so a tenant with many models or hostile pods cannot hold the
others back by its numbers."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Turns(Generic[T]):
    """Items waiting by namespace, in arrival order within each; `take` serves the
    namespaces in turn. Not thread-safe: its owner holds the lock or the event loop."""

    def __init__(self) -> None:
        # In turn order: a namespace goes to the back once one of its items is taken.
        self._waiting: OrderedDict[str, deque[T]] = OrderedDict()

    def add(self, namespace: str, item: T) -> None:
        self._waiting.setdefault(namespace, deque()).append(item)

    def remove(self, namespace: str, item: T) -> None:
        """Take `item` out of its namespace's place in line, if it is there."""
        items = self._waiting.get(namespace)
        if items is not None and item in items:
            items.remove(item)
            if not items:
                del self._waiting[namespace]

    def take(self, serve: Callable[[T], bool]) -> T | None:
        """The first item of the namespace whose turn it is, once `serve` accepts it; an
        item it refuses (given up on while waiting) is dropped and costs its namespace
        no turn. None when nothing is accepted."""
        while self._waiting:
            namespace, items = next(iter(self._waiting.items()))
            item = items.popleft()
            served = serve(item)
            if not items:
                del self._waiting[namespace]
            elif served:
                self._waiting.move_to_end(namespace)
            if served:
                return item
        return None

    def __iter__(self) -> Iterator[T]:
        for items in self._waiting.values():
            yield from items
