"""The watches of the models' children: for each child kind, one stream that lists, then
watches from the listing's resourceVersion, and hands every object to the fleet's cache.

kopf watched them before, and ran each event through its per-object machinery: a task
and a queue for every object, kept with the object's last whole body for 5 s after its
last event, and its handler's arguments built anew for every event. The children need
none of it (the cache keeps a trimmed part of each, level-triggered), and at 1,000
models it was a third of the operator's CPU. kopf still watches the models.

Where a stream lists again (at the start, after a 410 Gone, or after a failure it could
not resume from), the fleet is told (`on_listed`): what was deleted meanwhile sent no
event, and the fleet lists for itself. Failures are retried with a growing pause, never
given up: a kind the cluster does not serve (LeaderWorkerSet without its CRD) is asked
for again each minute, as its CRD may come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from specfleet.operator import observability
from specfleet.operator.children import CHILD_KINDS, ChildKind
from specfleet.operator.kube import PAGE, REQUEST_TIMEOUT, Credentials, Session

log = logging.getLogger("specfleet.child_watches")

# As kopf's watches were set (handlers.configure): the API server ends a watch after
# WATCH_SECONDS, and a connection quiet for longer than READ_SECONDS is taken for dead.
WATCH_SECONDS = 120
READ_SECONDS = 150.0
CONNECT_SECONDS = 10.0
# Pauses between failed attempts: doubling from the first to the last.
FIRST_PAUSE = 1.0
LAST_PAUSE = 60.0

Remember = Callable[[dict[str, Any], bool], None]


class Expired(Exception):
    """The resourceVersion a watch resumes from is no longer kept (410 Expired): list
    again. (kube.Gone is another thing: an object deleted.)"""


class Refused(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"{status}: {text[:300]}")
        self.status = status


@dataclass
class ChildWatches:
    """One stream per child kind, cluster-wide or per namespace followed."""

    credentials: Credentials
    instance: str
    selector: str
    remember: Remember
    on_listed: Callable[[], None]
    kinds: tuple[ChildKind, ...] = CHILD_KINDS
    request_timeout: float = REQUEST_TIMEOUT
    _tasks: dict[tuple[str, str | None], asyncio.Task[None]] = field(default_factory=dict)
    _client: Session = field(init=False)

    def __post_init__(self) -> None:
        self._client = Session(self.instance)

    def follow(self, namespace: str | None) -> None:
        """Watch the children in `namespace` (None: in every namespace), once."""
        for kind in self.kinds:
            if (kind.kind, namespace) in self._tasks:
                continue
            task = asyncio.create_task(
                self._watch(kind, namespace), name=f"watch {kind.plural} in {namespace or '*'}"
            )
            self._tasks[kind.kind, namespace] = task

    def followed(self) -> set[str | None]:
        return {namespace for _, namespace in self._tasks}

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
        await self._client.close()

    async def _watch(self, kind: ChildKind, namespace: str | None) -> None:
        """List, then watch from there, for as long as the operator runs."""
        version: str | None = None
        pause = FIRST_PAUSE
        told: set[int] = set()  # the lasting refusals logged once already
        while True:
            try:
                if version is None:
                    version = await self._list(kind, namespace)
                    self.on_listed()
                async for event in self._events(kind, namespace, version):
                    version = self._take(kind, event) or version
                    pause = FIRST_PAUSE
            except Expired:
                version = None
                continue
            except asyncio.CancelledError:
                raise
            except Exception as error:
                # A refusal that will not pass by itself is asked again less often.
                refused = error.status if isinstance(error, Refused) else 0
                lasting = refused in (401, 403, 404)
                if lasting:
                    level = logging.DEBUG if refused in told else logging.WARNING
                    told.add(refused)
                else:
                    level = logging.WARNING if pause >= 8 else logging.DEBUG
                log.log(level, "watching %s in %s: %s", kind.plural, namespace or "*", error)
                await asyncio.sleep(LAST_PAUSE if lasting else pause)
                pause = min(pause * 2, LAST_PAUSE)
                if lasting:
                    version = None

    def _take(self, kind: ChildKind, event: dict[str, Any]) -> str | None:
        """Hand one event's object to the cache; the version to resume from."""
        kind_of_event = event.get("type")
        body = event.get("object") or {}
        if kind_of_event == "ERROR":
            if body.get("code") == 410:
                raise Expired(body.get("message", ""))
            raise Refused(int(body.get("code") or 0), str(body.get("message", "")))
        version = (body.get("metadata") or {}).get("resourceVersion")
        if kind_of_event in ("ADDED", "MODIFIED", "DELETED"):
            body.setdefault("kind", kind.kind)
            self.remember(body, kind_of_event == "DELETED")
        return str(version) if version else None

    @contextlib.asynccontextmanager
    async def _get(
        self,
        verb: str,
        kind: ChildKind,
        namespace: str | None,
        query: dict[str, str],
        timeout: aiohttp.ClientTimeout,
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One GET of the kind's collection, counted; its response, once it is a 200."""
        token = self.credentials.token()
        async with self._client().get(
            self.credentials.host + kind.collection(namespace),
            params={"labelSelector": self.selector, **query},
            headers={"Authorization": token} if token else {},
            ssl=self.credentials.ssl_context,
            proxy=self.credentials.proxy,
            timeout=timeout,
        ) as response:
            observability.API_REQUESTS.labels(verb, kind.plural, str(response.status)).inc()
            if response.status == 410:
                raise Expired(f"{verb}: the version asked for is no longer kept")
            if response.status != 200:
                raise Refused(response.status, await response.text())
            yield response

    async def _list(self, kind: ChildKind, namespace: str | None) -> str:
        """Every child of the kind (a page at a time) into the cache; the listing's
        resourceVersion."""
        token = ""
        while True:
            query = {"limit": str(PAGE), **({"continue": token} if token else {})}
            timeout = aiohttp.ClientTimeout(total=self.request_timeout)
            async with self._get("LIST", kind, namespace, query, timeout) as response:
                listing = orjson.loads(await response.read())
            for item in listing.get("items") or []:
                item["kind"] = kind.kind
                self.remember(item, False)
            metadata = listing.get("metadata") or {}
            token = metadata.get("continue") or ""
            if not token:
                return str(metadata.get("resourceVersion", ""))

    async def _events(
        self, kind: ChildKind, namespace: str | None, version: str
    ) -> AsyncIterator[dict[str, Any]]:
        """The events of one watch request, each a decoded line."""
        query = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        timeout = aiohttp.ClientTimeout(sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS)
        async with self._get("WATCH", kind, namespace, query, timeout) as response:
            # Lines are split here, not by aiohttp's readline, which refuses lines longer
            # than its buffer (an object with large annotations).
            line = bytearray()
            async for chunk in response.content.iter_any():
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    line += chunk[start:end]
                    if line.strip():
                        yield orjson.loads(line)
                    line.clear()
                    start = end + 1
                line += chunk[start:]
