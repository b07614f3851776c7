"""Local HTTP servers that behave as a hostile tenant's would: a pod or a Prometheus that
redirects the operator elsewhere, a server holding what the operator must never repeat,
and a tarpit that accepts connections and never answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

# What a metadata endpoint or an internal service would hand the operator's pod.
SECRET = "AKIA-SECRET-7f3c"


@asynccontextmanager
async def serving(
    app: web.Application, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """`app` served at host:port (0: any free port); yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    try:
        yield f"http://{host}:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def secret_holder() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback server that answers every path with the secret, in the reason phrase,
    the body and as Prometheus text; yields its URL and the paths it was asked for."""
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path_qs)
        body = f'{{"status": "error", "error": "{SECRET}"}}\nvllm:{SECRET}{{ {SECRET}\n'
        return web.Response(status=403, reason=SECRET, text=body)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    async with serving(app) as url:
        yield url, asked


@asynccontextmanager
async def redirector(to: str, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """A server that answers every path with a 302 to `to`."""

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound(to)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    async with serving(app, host, port) as url:
        yield url


@asynccontextmanager
async def tarpit(host: str = "127.0.0.1") -> AsyncIterator[tuple[str, list[asyncio.StreamWriter]]]:
    """A server that accepts every connection and never answers; yields its URL and the
    connections it holds."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, host, 0)
    try:
        yield f"http://{host}:{server.sockets[0].getsockname()[1]}", held
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
