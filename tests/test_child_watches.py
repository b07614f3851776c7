"""The children's own watches (child_watches.py) against a stand-in API server on a real
socket: list, then watch from the listing's version; a 410 lists again and tells the
fleet, a dropped connection resumes where it was; every object reaches the cache."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kopf
import pytest

from specfleet.operator import child_watches, handlers
from specfleet.operator.child_watches import ChildWatches
from specfleet.operator.children import DEPLOYMENT, LEADER_WORKER_SET, POD
from specfleet.operator.fleet import CHILD_SELECTOR, Fleet
from specfleet.operator.kube import PAGE, Credentials
from tests.api_servers import JsonHandler, status
from tests.fake_cluster import FakeCluster, ScriptedEvaluator

Answer = tuple[int, Any]  # a JSON body, or for a watch a list of events (then held open)
EMPTY: dict[str, Any] = {
    "kind": "DeploymentList",
    "metadata": {"resourceVersion": "1"},
    "items": [],
}


class ScriptedApiServer:
    """Answers each GET with the next scripted answer for its path and verb (a listing,
    or a watch: its events, sent one line each, then the connection held until the test
    ends, or closed when the script says so); records each request."""

    def __init__(self) -> None:
        self.script: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.closing = threading.Event()
        self.drop = object()  # a watch event that closes the connection instead
        server = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.0"

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.requests.append((url.path, query, dict(self.headers)))
                verb = "WATCH" if query.get("watch") == "true" else "LIST"
                queue = server.script.get((url.path, verb)) or []
                nothing: Answer = (200, [] if verb == "WATCH" else EMPTY)
                answer = queue.pop(0) if queue else nothing
                code, body = answer
                if verb == "LIST" or code != 200:
                    self._answer(code, body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                for event in body:
                    if event is server.drop:
                        return
                    self.wfile.write(json.dumps(event).encode() + b"\n")
                    self.wfile.flush()
                server.closing.wait()

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, args=(0.05,), daemon=True).start()

    def on(self, path: str, verb: str, *answers: Answer) -> None:
        self.script.setdefault((path, verb), []).extend(answers)

    def watches(self, path: str) -> list[dict[str, str]]:
        return [q for p, q, _ in self.requests if p == path and q.get("watch") == "true"]

    def lists(self, path: str) -> list[dict[str, str]]:
        return [q for p, q, _ in self.requests if p == path and q.get("watch") != "true"]

    def close(self) -> None:
        self.closing.set()
        self.http.shutdown()


@pytest.fixture
def server() -> Iterator[ScriptedApiServer]:
    scripted = ScriptedApiServer()
    yield scripted
    scripted.close()


class Cache:
    """What the watches hand over: (kind, name, resourceVersion, deleted), and listings."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, bool]] = []
        self.listings = 0

    def remember(self, body: dict[str, Any], deleted: bool) -> None:
        meta = body["metadata"]
        self.seen.append((body["kind"], meta["name"], meta["resourceVersion"], deleted))

    def listed(self) -> None:
        self.listings += 1


def deployment(name: str, version: str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "resourceVersion": version, **extra}}


def listing(version: str, *items: dict[str, Any], more: str = "") -> Answer:
    metadata = {"resourceVersion": version, **({"continue": more} if more else {})}
    return 200, {"kind": "DeploymentList", "metadata": metadata, "items": list(items)}


def event(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "object": {"kind": "Deployment", **body}}


def watching(
    server: ScriptedApiServer,
    cache: Cache,
    until: Callable[[], bool],
    namespace: str | None = "team",
    kinds: tuple[Any, ...] = (DEPLOYMENT,),
    token: str | None = "Bearer t0k3n",
) -> None:
    """Run the watches until `until()` holds (10 s at most)."""

    async def run() -> None:
        watches = ChildWatches(
            Credentials(server.url, False, lambda: token),
            "replica-a",
            CHILD_SELECTOR,
            cache.remember,
            cache.listed,
            kinds=kinds,
            request_timeout=2.0,
        )
        watches.follow(namespace)
        deadline = time.monotonic() + 10
        while not until() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await watches.close()

    asyncio.run(run())
    assert until(), f"not reached; cache {cache.seen}, requests {server.requests}"


PATH = DEPLOYMENT.collection("team")


def test_a_watch_lists_page_by_page_then_watches_from_the_listings_version(
    server: ScriptedApiServer,
) -> None:
    server.on(
        PATH,
        "LIST",
        listing("5", deployment("a", "3"), more="page-2"),
        listing("9", deployment("b", "4")),
    )
    server.on(
        PATH,
        "WATCH",
        (
            200,
            [
                event("ADDED", deployment("c", "10")),
                event("MODIFIED", deployment("a", "11")),
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
                event("DELETED", deployment("b", "12")),
                server.drop,
            ],
        ),
    )
    cache = Cache()
    watching(server, cache, lambda: len(server.watches(PATH)) >= 2)
    assert cache.seen == [
        ("Deployment", "a", "3", False),
        ("Deployment", "b", "4", False),
        ("Deployment", "c", "10", False),
        ("Deployment", "a", "11", False),
        ("Deployment", "b", "12", True),
    ]
    assert cache.listings == 1  # a dropped connection resumes: no listing, nothing lost
    first, second = server.lists(PATH)
    assert first["labelSelector"] == CHILD_SELECTOR and first["limit"] == str(PAGE)
    assert second["continue"] == "page-2"
    watches = server.watches(PATH)
    assert [w["resourceVersion"] for w in watches[:2]] == ["9", "12"]
    assert all(w["labelSelector"] == CHILD_SELECTOR for w in watches)
    assert watches[0]["allowWatchBookmarks"] == "true"
    headers = server.requests[0][2]
    assert headers["Authorization"] == "Bearer t0k3n"
    assert headers["User-Agent"].endswith("/replica-a")


def test_a_bookmark_is_where_the_next_watch_resumes(server: ScriptedApiServer) -> None:
    server.on(PATH, "LIST", listing("5"))
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}
    server.on(PATH, "WATCH", (200, [bookmark, server.drop]))
    cache = Cache()
    watching(server, cache, lambda: len(server.watches(PATH)) >= 2)
    assert [w["resourceVersion"] for w in server.watches(PATH)[:2]] == ["5", "15"]
    assert cache.seen == []


def test_a_410_lists_again_and_tells_the_fleet(server: ScriptedApiServer) -> None:
    """The version a watch resumes from is gone: deletions meanwhile sent no event, so
    the watch lists again and the fleet hears of it (it then lists for itself)."""
    gone = {"type": "ERROR", "object": status(410, "Expired")}
    server.on(
        PATH, "LIST", listing("5", deployment("a", "3")), listing("40", deployment("a", "33"))
    )
    server.on(PATH, "WATCH", (200, [gone]), (410, status(410, "Expired")))
    cache = Cache()
    watching(server, cache, lambda: cache.listings >= 3)
    assert [w["resourceVersion"] for w in server.watches(PATH)[:2]] == ["5", "40"]
    assert cache.seen[:2] == [("Deployment", "a", "3", False), ("Deployment", "a", "33", False)]


def test_a_line_longer_than_aiohttps_readline_buffer_is_read_whole(
    server: ScriptedApiServer,
) -> None:
    big = deployment("big", "10", annotations={"note": "x" * (300 * 2**10)})
    server.on(PATH, "LIST", listing("5"))
    server.on(PATH, "WATCH", (200, [event("ADDED", big)]))
    cache = Cache()
    watching(server, cache, lambda: bool(cache.seen))
    assert cache.seen == [("Deployment", "big", "10", False)]


def test_a_kind_the_cluster_does_not_serve_leaves_the_others_watched(
    server: ScriptedApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No LeaderWorkerSet CRD: 404, asked again after a pause (its CRD may come), while
    the Deployments are watched as ever."""
    monkeypatch.setattr(child_watches, "LAST_PAUSE", 0.05)
    lws = LEADER_WORKER_SET.collection("team")
    server.on(lws, "LIST", (404, status(404, "NotFound")), listing("7"))
    server.on(PATH, "LIST", listing("5"))
    server.on(PATH, "WATCH", (200, [event("ADDED", deployment("a", "6"))]))
    cache = Cache()
    kinds = (DEPLOYMENT, LEADER_WORKER_SET)
    watching(server, cache, lambda: len(server.watches(lws)) >= 1, kinds=kinds)
    assert ("Deployment", "a", "6", False) in cache.seen
    assert len(server.lists(lws)) == 2


def test_cluster_wide_watches_ask_for_every_namespace(server: ScriptedApiServer) -> None:
    cache = Cache()
    everywhere = POD.collection(None)
    assert everywhere == "/api/v1/pods"
    watching(server, cache, lambda: len(server.watches(everywhere)) >= 1, None, (POD,), None)
    assert "Authorization" not in server.requests[0][2]


def test_the_operator_follows_plain_namespaces_at_start_and_a_globs_as_models_come(
    server: ScriptedApiServer,
) -> None:
    """Cluster-wide: one watch a kind. Namespaces named: each at the start. A glob
    (kopf's `team-*`, `!x`, `a,b`): a namespace once a model there is seen."""

    async def followed(
        namespaces: tuple[str, ...] | None, model_in: str
    ) -> tuple[set[str | None], set[str | None]]:
        watches = ChildWatches(
            Credentials(server.url, False, lambda: None), "r", CHILD_SELECTOR, print, print
        )
        fleet = Fleet(FakeCluster(), ScriptedEvaluator())  # type: ignore[arg-type]
        run = handlers.Running(fleet, child_watches=watches, namespaces=namespaces)
        handlers.follow_children(run)
        at_start = watches.followed()
        model_event: Any = handlers.model_event  # kopf types the decorated handler
        body = {"metadata": {"name": "m", "namespace": model_in, "uid": "u"}}
        await model_event(type="ADDED", body=body, memo=handlers.memo_for(run))
        after = watches.followed()
        await watches.close()
        return at_start, after

    assert asyncio.run(followed(None, "a")) == ({None}, {None})
    assert asyncio.run(followed(("a", "b"), "a")) == ({"a", "b"}, {"a", "b"})
    assert asyncio.run(followed(("team-*",), "team-1")) == (set(), {"team-1"})
    fleet = Fleet(FakeCluster(), ScriptedEvaluator())  # type: ignore[arg-type]
    assert handlers.Running(fleet, namespaces=("!x",)).scanning_namespaces()


class _Election:
    """An election `lead_then_run` waits on, won when the test sets `acquired`."""

    def __init__(self) -> None:
        self.acquired = asyncio.Event()
        self.on_fence_open: Callable[[], None] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    def may_write(self) -> bool:
        return self.acquired.is_set()


def test_a_standby_watches_no_child_until_it_leads_then_every_namespace_its_models_are_in(
    server: ScriptedApiServer,
) -> None:
    """A standby keeps only the models: it follows no child, wherever its models are;
    once it holds the Lease it follows the namespaces named plainly and those of the
    models it saw (a glob's), before the fleet lists and reconciles."""

    async def followed(namespaces: tuple[str, ...]) -> tuple[set[str | None], set[str | None]]:
        watches = ChildWatches(
            Credentials(server.url, False, lambda: None), "r", CHILD_SELECTOR, print, print
        )
        fleet = Fleet(FakeCluster(), ScriptedEvaluator())  # type: ignore[arg-type]
        election = _Election()
        run = handlers.Running(
            fleet,
            election=election,  # type: ignore[arg-type]
            child_watches=watches,
            namespaces=namespaces,
        )
        leading = asyncio.create_task(handlers.lead_then_run(kopf.OperatorSettings(), run))
        model_event: Any = handlers.model_event  # kopf types the decorated handler
        for namespace in ("team-1", "plain"):
            body = {"metadata": {"name": "m", "namespace": namespace, "uid": "u"}}
            await model_event(type="ADDED", body=body, memo=handlers.memo_for(run))
        await asyncio.sleep(0.05)
        as_standby = watches.followed()
        election.acquired.set()
        await asyncio.sleep(0.05)
        as_leader = watches.followed()
        run.stop.set()
        await leading
        await watches.close()
        return as_standby, as_leader

    assert asyncio.run(followed(("team-*", "plain"))) == (set(), {"team-1", "plain"})
    assert asyncio.run(followed(("plain",))) == (set(), {"plain"})


def test_more_watches_than_aiohttps_default_pool_each_get_a_connection(
    server: ScriptedApiServer,
) -> None:
    """Each watch holds its connection: 20 namespaces of 6 kinds is more than the 100
    connections aiohttp allows a session by default, and the last ones never started."""
    namespaces = [f"team-{i}" for i in range(20)]
    cache = Cache()

    async def run() -> int:
        watches = ChildWatches(
            Credentials(server.url, False, lambda: None), "r", CHILD_SELECTOR,
            cache.remember, cache.listed,
        )  # fmt: skip
        for namespace in namespaces:
            watches.follow(namespace)
        # Seconds each idle, a minute beside real vLLM: only a stuck watch waits it out.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            started = sum(1 for _, q, _ in server.requests if q.get("watch") == "true")
            if started >= 6 * len(namespaces):
                break
            await asyncio.sleep(0.05)
        await watches.close()
        return started

    assert asyncio.run(run()) == 6 * len(namespaces)
