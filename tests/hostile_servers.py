"""Local HTTP servers that behave as a hostile tenant's would: a pod or a Prometheus that
redirects the operator elsewhere, a server holding what the operator must never repeat,
a tarpit that accepts connections and never answers, and pods serving /metrics pages that
are costly to parse (in a process of their own: serving them must not load the loop that
is measured)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

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


# Pages within every cap of the reader before issue 42 (1 MiB kept, 4,096 lines, 64 KiB a
# line), each costing prometheus_client's parser over half a second of CPU.
_SERIES = "vllm:spec_decode_num_drafts_total"


def escaped_page() -> bytes:
    """15 lines, each one label value of 32,000 escaped quotes (0.65 s to parse)."""
    line = f'{_SERIES}{{model_name="' + '\\"' * 32_000 + '"} 1\n'
    return (line * 15).encode()


def many_labels_page() -> bytes:
    """31 lines of 32 labels, each value 512 escaped quotes: within the label caps of
    metrics.check_labels, and 0.5 s to parse."""
    labels = ",".join(f'l{i}="' + '\\"' * 512 + '"' for i in range(32))
    return (f"{_SERIES}{{{labels}}} 1\n" * 31).encode()


PAGES = {"escaped": escaped_page, "many-labels": many_labels_page}


@contextmanager
def hostile_pages(real_page: Path) -> Iterator[str]:
    """A server in another process answering /escaped/<n> and /many-labels/<n> with the
    pages above and /vllm/<n> with `real_page`; yields its base URL."""
    server = subprocess.Popen(
        [sys.executable, __file__, "pages", str(real_page)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def _serve_pages(real_page: Path) -> None:
    bodies = {name: make() for name, make in PAGES.items()}
    bodies["vllm"] = real_page.read_bytes()

    async def page(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.match_info["kind"]], content_type="text/plain")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/{kind}/{n}", page)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


if __name__ == "__main__" and sys.argv[1:2] == ["pages"]:
    _serve_pages(Path(sys.argv[2]))
