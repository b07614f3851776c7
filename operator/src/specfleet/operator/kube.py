"""The operator's requests to the API server: server-side apply of children, status
patches, Events, and the few reads the watches cannot answer (who owns an object the
operator is about to create; a model's newest version after a conflict).

The fleet's requests (`Cluster`) are asyncio's, on the operator's event loop (aiohttp):
in worker threads, the generated client's blocking calls and each reply's hand-back to
the loop were a third of the operator's CPU at 1,000 models. `call`, blocking, serves
the Lease and the schedule key, which run in threads of their own. Every request is one
attempt (nothing is retried) with a timeout (`REQUEST_TIMEOUT`) shorter than the leader
election's margin between a leader's last write and a standby's first: a write that
leaves just before the fence closes is answered or abandoned before another replica may
write. What failed is tried again by the operator's own loops (the work queue, the
Lease's tries), each try through the fence again.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specfleet.operator import observability
from specfleet.operator.api import GROUP, KIND, PLURAL, VERSION
from specfleet.operator.children import child_kind

FIELD_MANAGER = "specfleet-operator"
# Seconds any one request may take, on the client and (the `timeout` parameter) on the
# API server (`specfleet operator --request-timeout`). ElectionConfig.problems() holds it
# under lease-duration - renew-deadline.
REQUEST_TIMEOUT = 4.0
# The fleet's requests in flight at once (the rest wait their turn before the fence is
# checked): as many as the thread pool that sent them before had threads on two cores.
IN_FLIGHT = 6
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


class NotLeading(Exception):
    """A write was refused because this replica does not hold the leader Lease."""


class Conflict(Exception):
    """A status write's precondition failed: someone wrote the model since it was read."""


class Gone(Exception):
    """The object written to does not exist any more (404)."""


class Exists(Exception):
    """A create-only apply found an object of that name already there (409)."""


# The resourceVersion a create-only apply carries as its precondition: no object ever has
# it (etcd's revisions count up from 1), so an apply onto any existing object fails with
# 409 Conflict, while an apply that creates drops it (an object being created has none).
NO_OBJECT_HAS_THIS_VERSION = str(2**63 - 1)
# A listing's page: a reply's memory stays bounded (the whole listing of one kind at
# 1,000 models, decoded at once, left the operator 40-90 MB larger for good). A page of
# 500 Deployments is 2.2 MB of JSON and 12 MB decoded, the rise in resident size at
# each 2-minute listing; a page of 100 is a fifth of that, for 4 more requests a kind.
PAGE = 100


@dataclass(frozen=True)
class Page:
    """One page of a listing: its objects, the listing's resourceVersion (each page of
    one listing has the first page's), and where the next page starts ("": none)."""

    items: list[dict[str, Any]]
    version: str
    next: str


def user_agent(instance: str) -> str:
    return f"{FIELD_MANAGER}/{instance}"


def api_client(instance: str) -> Any:
    """In-cluster credentials when running in a pod, else $KUBECONFIG / ~/.kube/config.
    The user agent names this replica, so the API server's audit log says which one wrote."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client_for(client.Configuration.get_default_copy(), instance)


def client_for(configuration: client.Configuration, instance: str) -> Any:
    """The blocking client of the Lease's and the schedule key's requests (`call`), whose
    configuration `Credentials.of` reads for the fleet's. urllib3 would retry a failed
    connect, and a timed-out read of an idempotent method, up to 3 times with a full
    timeout each and no fence in between: a Lease renewal the server committed would be
    sent again with its old resourceVersion. So no retries here."""
    configuration.retries = False
    api = client.ApiClient(configuration)
    api.user_agent = user_agent(instance)
    return api


def call(
    api: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    content_type: str = "application/json",
    query: list[tuple[str, Any]] | None = None,
    timeout: float = REQUEST_TIMEOUT,
) -> dict[str, Any]:
    """One request, its response as raw JSON: callers keep dicts, and the client's model
    classes cost CPU. Raises ApiException on an error status; urllib3's timeout errors
    when the API server does not answer within `timeout` seconds."""
    # The API server drops the request too once `timeout` has passed (its request deadline).
    server_timeout = ("timeout", f"{max(1, int(timeout))}s")
    request = api.param_serialize(
        method=method,
        resource_path=path,
        query_params=[*(query or []), server_timeout],
        header_params={"Content-Type": content_type, "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    verb, resource = request_kind(method, path, content_type)
    try:
        response = api.call_api(*request, _request_timeout=timeout)
    except Exception:
        observability.API_REQUESTS.labels(verb, resource, "0").inc()  # no answer
        raise
    observability.API_REQUESTS.labels(verb, resource, str(response.status)).inc()
    response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(http_resp=response)
    result: dict[str, Any] = orjson.loads(response.data)
    return result


def request_kind(method: str, path: str, content_type: str) -> tuple[str, str]:
    """(verb, resource) of a request, as the API server's own metrics name them: a
    server-side apply is APPLY, a GET of a collection LIST; the resource carries its
    subresource (`speculativemodels/status`)."""
    parts = [part for part in path.split("/") if part]
    if "namespaces" in parts[:-1]:
        parts = parts[parts.index("namespaces") + 2 :]
    else:  # cluster-scoped: /api/v1/RESOURCE[/NAME] or /apis/GROUP/VERSION/RESOURCE[/NAME]
        parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    resource = "/".join([parts[0], *parts[2:3]]) if parts else ""
    verb = method
    if method == "PATCH" and content_type == APPLY:
        verb = "APPLY"
    elif method == "GET" and len(parts) == 1:
        verb = "LIST"
    return verb, resource


def always() -> bool:
    return True


class Session:
    """This replica's HTTP session (its user agent; JSON replies), made on first use, on
    the event loop, with no limit on its connections: the fleet's requests wait for their
    turn (`IN_FLIGHT`) before the fence, and each watch holds a connection while it runs
    (aiohttp's default of 100 would leave the 101st waiting: 17 namespaces of 6 kinds)."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._session: aiohttp.ClientSession | None = None

    def __call__(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                headers={"User-Agent": user_agent(self.instance), "Accept": "application/json"},
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to reach it, read from the client configuration
    the Lease's requests use (`api_client`): the same identity for every request."""

    host: str
    ssl_context: ssl.SSLContext | bool
    token: Callable[[], str | None]
    proxy: str | None = None

    @classmethod
    def of(cls, configuration: Any) -> Credentials:
        context: ssl.SSLContext | bool = False
        if str(configuration.host).startswith("https"):
            if configuration.verify_ssl:
                context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
                if not configuration.assert_hostname and configuration.assert_hostname is not None:
                    context.check_hostname = False
            else:
                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if configuration.cert_file:
                context.load_cert_chain(configuration.cert_file, configuration.key_file)

        def token() -> str | None:
            # Read each time: an in-cluster token is refreshed by the client's hook.
            setting = configuration.auth_settings().get("BearerToken") or {}
            value = setting.get("value")
            return str(value) if value else None

        return cls(str(configuration.host).rstrip("/"), context, token, configuration.proxy)


class Cluster:
    """The fleet's requests. `may_write` is the leader election's fence (always true for
    a replica running alone): it is checked just before each write leaves, once the
    write has its turn (`IN_FLIGHT`), so a replica that lost the Lease while a reconcile
    was in flight sends nothing."""

    def __init__(
        self,
        credentials: Credentials,
        instance: str,
        may_write: Callable[[], bool],
        timeout: float = REQUEST_TIMEOUT,
    ) -> None:
        self.credentials = credentials
        self.instance = instance
        self.may_write = may_write
        self.timeout = timeout
        self._turns = asyncio.Semaphore(IN_FLIGHT)
        self._client = Session(instance)

    async def close(self) -> None:
        await self._client.close()

    def _fence(self) -> None:
        if not self.may_write():
            raise NotLeading("this replica does not hold the leader Lease")

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        query: list[tuple[str, str]] | None = None,
    ) -> dict[str, Any]:
        """One request, its reply as raw JSON (the fleet keeps dicts); a write only once
        the fence lets it leave. Raises ApiException on an error status, TimeoutError
        when the API server does not answer within the timeout (which it is told too:
        it drops the request then)."""
        verb, resource = request_kind(method, path, content_type)
        params = [*(query or []), ("timeout", f"{max(1, int(self.timeout))}s")]
        headers = {"Content-Type": content_type} if body is not None else {}
        data = orjson.dumps(body) if body is not None else None
        async with self._turns:
            if method != "GET":
                self._fence()
            token = self.credentials.token()
            if token:
                headers["Authorization"] = token
            try:
                async with self._client().request(
                    method,
                    self.credentials.host + path,
                    params=params,
                    data=data,
                    headers=headers,
                    ssl=self.credentials.ssl_context,
                    proxy=self.credentials.proxy,
                    timeout=aiohttp.ClientTimeout(total=self.timeout),
                ) as response:
                    status, reason = response.status, response.reason
                    reply = await response.read()
            except TimeoutError as error:
                observability.API_REQUESTS.labels(verb, resource, "0").inc()
                raise TimeoutError(
                    f"{verb} {path}: timed out, no answer in {self.timeout:g} s"
                ) from error
            except Exception:
                observability.API_REQUESTS.labels(verb, resource, "0").inc()  # no answer
                raise
        observability.API_REQUESTS.labels(verb, resource, str(status)).inc()
        if not 200 <= status <= 299:
            raise ApiException(status=status, reason=reason, body=reply.decode(errors="replace"))
        result: dict[str, Any] = orjson.loads(reply)
        return result

    async def _get(self, path: str) -> dict[str, Any] | None:
        """One GET; None when there is no such object."""
        try:
            return await self._call("GET", path)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def get_model(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The model as the API server has it now, or None when it is gone."""
        return await self._get(_model_path(namespace, name))

    async def get_child(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An object of a child kind by name, whoever owns it, or None."""
        return await self._get(child_kind(kind).path(namespace, name))

    async def list_models(self, namespace: str, start: str = "") -> Page:
        """A page of the models in `namespace`: the first, or the one `start` (a page's
        `next`) names."""
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
        return await self._list(path, None, start)

    async def list_children(
        self, kind: str, namespace: str, selector: str, start: str = ""
    ) -> Page:
        """A page of the objects of a child kind in `namespace` that match the label
        `selector`; none of a kind the cluster does not serve (LeaderWorkerSet without
        its CRD)."""
        path = child_kind(kind).collection(namespace)
        try:
            return await self._list(path, selector, start)
        except ApiException as error:
            if error.status == 404:
                return Page([], "", "")
            raise

    async def _list(self, path: str, selector: str | None, start: str) -> Page:
        query = [("labelSelector", selector)] if selector else []
        query += [("limit", str(PAGE))] + ([("continue", start)] if start else [])
        listing = await self._call("GET", path, query=query)
        kind = str(listing.get("kind", "")).removesuffix("List")
        items = [{"kind": kind, **item} for item in listing.get("items") or []]
        metadata = listing["metadata"]
        return Page(items, str(metadata["resourceVersion"]), metadata.get("continue") or "")

    async def apply(self, manifest: dict[str, Any], create_only: bool = False) -> dict[str, Any]:
        """Server-side apply of a child; returns the object as the server now has it.
        Re-applying the same manifest changes nothing, not even the resourceVersion,
        which keeps GitOps diffs and watches quiet. `create_only`: only if no object of
        that name exists, whoever made it (else Exists, and nothing is changed): one
        request where a GET and then an apply would cost two and leave a gap between
        them. A POST would create too, but its fields would be recorded as an Update, not
        as this manager's apply, and later applies could not remove them."""
        meta = manifest["metadata"]
        kind = child_kind(manifest["kind"])
        if not kind.applied:
            raise ValueError(f"the operator does not apply {kind.kind}s")
        if create_only:
            manifest = {
                **manifest,
                "metadata": {**meta, "resourceVersion": NO_OBJECT_HAS_THIS_VERSION},
            }
        try:
            return await self._call(
                "PATCH",
                kind.path(meta["namespace"], meta["name"]),
                manifest,
                APPLY,
                [("fieldManager", FIELD_MANAGER), ("force", "true")],
            )
        except ApiException as error:
            if create_only and error.status == 409:
                raise Exists(f"{kind.kind} {meta['namespace']}/{meta['name']}") from error
            raise

    async def post_event(
        self, involved: dict[str, Any], kind: str, reason: str, message: str, warning: bool
    ) -> None:
        """A core/v1 Event on `involved` (an object reference): always a new one."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await self._call(
            "POST",
            f"/api/v1/namespaces/{involved['namespace']}/events",
            {
                "metadata": {
                    "generateName": f"{involved['name']}.",
                    "namespace": involved["namespace"],
                },
                "involvedObject": {**involved, "kind": kind},
                "type": "Warning" if warning else "Normal",
                "reason": reason,
                "message": message[:1000],
                "source": {"component": FIELD_MANAGER},
                "reportingComponent": FIELD_MANAGER,
                "reportingInstance": self.instance,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )

    async def replace_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str
    ) -> dict[str, Any]:
        """Replace status; the model as written. Raises Conflict when someone wrote since
        `resource_version`, Gone when the model does not exist any more. A PUT of the
        status subresource: the API server keeps all but status as it has it, so the body
        carries no spec, and it costs the server less than a merge patch (no patch to
        apply to the stored object: docs/benchmarks.md, "What a status write costs")."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": resource_version},
            "status": status,
        }
        try:
            return await self._call("PUT", f"{_model_path(namespace, name)}/status", body)
        except ApiException as error:
            if error.status == 404:
                raise Gone(f"{namespace}/{name}") from error
            if error.status == 409:
                raise Conflict(f"{namespace}/{name}") from error
            raise


def _model_path(namespace: str, name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
