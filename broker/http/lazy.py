"""The HTTP front's port, taken at start; aiohttp and the routes loaded at the first connection.

    front = LazyHttpFront(host, port, advertised_host, build)
    port = await front.start()      # bound and listening; port 0: a free one
    ...
    await front.close()

aiohttp, the routes and the Prometheus client are about 13 MiB resident, and a broker that
nobody asks over HTTP never needs them. So the port is bound and listens from the start (a
port in use is found at start, as before; a client connects as to any listening port), but
nothing accepts until a connection is waiting: then the modules are imported (in a worker
thread, so the loop keeps serving the other ports meanwhile), ``build()`` makes the
``HttpFront`` and it serves the same listening socket, so the waiting connection is accepted by
aiohttp like any later one. The first request waits for that once (a few hundred ms).

This module imports nothing of aiohttp's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from pocketmq.broker.services.loading import import_off_loop
from pocketmq.broker.services.memory import release_free_heap

if TYPE_CHECKING:
    from pocketmq.broker.http.server import HttpFront

__all__ = ["LazyHttpFront"]

log = logging.getLogger("pocketmq.broker.http")

BACKLOG = 128  # aiohttp's own default for its sites


def bind_listeners(host: str, port: int, backlog: int = BACKLOG) -> list[socket.socket]:
    """Non-blocking TCP sockets bound to ``port`` on every address ``host`` names and
    listening, as asyncio's ``create_server`` (behind aiohttp's site) binds them:
    ``SO_REUSEADDR``, IPv6 sockets IPv6-only; with port 0 the later ones take the port the
    first got. OSError saying which port when one cannot be bound."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as error:
        raise OSError(f"HTTP port {host}:{port} is not available: {error}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError as error:
        for sock in sockets:
            sock.close()
        raise OSError(f"HTTP port {host}:{port} is not available: {error}") from None
    return sockets


class LazyHttpFront:
    """Stands for the broker's ``HttpFront`` (same ``start``, ``close``, ``address``); the real
    one is ``front`` once the first connection made ``build`` run."""

    def __init__(
        self, host: str, port: int, advertised_host: str, build: Callable[[], HttpFront]
    ) -> None:
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.build = build
        self.front: HttpFront | None = None
        self._socks: list[socket.socket] = []  # listening, until aiohttp serves them
        self._loading: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def loaded(self) -> bool:
        return self.front is not None

    async def start(self) -> int:
        self._socks = bind_listeners(self.host, self.port)
        self.port = int(self._socks[0].getsockname()[1])  # the port chosen for 0
        loop = asyncio.get_running_loop()
        for sock in self._socks:
            loop.add_reader(sock.fileno(), self._knocked)
        told = (
            "" if f"{self.host}:{self.port}" == self.address else f", advertised as {self.address}"
        )
        log.info(
            "HTTP front listening on http://%s:%d%s (loaded at its first connection)",
            self.host,
            self.port,
            told,
        )
        return self.port

    def _stop_watching(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self._socks:
            loop.remove_reader(sock.fileno())

    def _knocked(self) -> None:
        """A connection waits in a listening socket's queue: load the front, once."""
        self._stop_watching()
        if self._loading is None:
            self._loading = asyncio.create_task(self._load(), name="http-front-load")

    async def _load(self) -> None:
        try:
            await import_off_loop("pocketmq.broker.http.server")
            front = self.build()
            await front.start(socks=self._socks)
        except Exception:
            # The port stays taken but unanswered would look like a hung broker: close it.
            log.exception("HTTP front off: it could not be loaded")
            self._close_listeners()
            return
        self._socks = []  # aiohttp's servers own them now
        self.front = front
        release_free_heap()  # the import's temporaries, in the worker thread's heap

    def _close_listeners(self) -> None:
        socks, self._socks = self._socks, []
        for sock in socks:
            if sock.fileno() >= 0:
                with contextlib.suppress(ValueError, RuntimeError):
                    asyncio.get_running_loop().remove_reader(sock.fileno())
                sock.close()

    async def close(self) -> None:
        if self._loading is not None:
            await self._loading  # under a second; it logs its own failure
        if self.front is not None:
            front, self.front = self.front, None
            await front.close()
        self._close_listeners()
