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
import importlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from pocketmq.broker.services.memory import release_free_heap

if TYPE_CHECKING:
    from pocketmq.broker.http.server import HttpFront

__all__ = ["LazyHttpFront"]

log = logging.getLogger("pocketmq.broker.http")

BACKLOG = 128  # aiohttp's own default for its sites


def bind_listener(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A non-blocking TCP socket bound to ``host:port`` and listening (``SO_REUSEADDR``, as
    aiohttp's site sets it); OSError saying which port when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as error:
        raise OSError(f"HTTP port {host}:{port} is not available: {error}") from None
    sock.setblocking(False)
    return sock


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
        self._sock: socket.socket | None = None
        self._loading: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def loaded(self) -> bool:
        return self.front is not None

    async def start(self) -> int:
        self._sock = bind_listener(self.host, self.port)
        self.port = int(self._sock.getsockname()[1])  # the port chosen for 0
        asyncio.get_running_loop().add_reader(self._sock.fileno(), self._knocked)
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

    def _knocked(self) -> None:
        """A connection waits in the listening socket's queue: load the front, once."""
        assert self._sock is not None
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        if self._loading is None:
            self._loading = asyncio.create_task(self._load(), name="http-front-load")

    async def _load(self) -> None:
        assert self._sock is not None
        try:
            # The imports are the slow part (~0.2-0.5 s of CPU): off the loop, which keeps its
            # turns between the import's bytecodes.
            await asyncio.to_thread(importlib.import_module, "pocketmq.broker.http.server")
            front = self.build()
            await front.start(sock=self._sock)
            release_free_heap()  # the import's temporaries, in the worker thread's heap
        except Exception:
            # The port stays taken but unanswered would look like a hung broker: close it.
            log.exception("HTTP front off: it could not be loaded")
            self._close_listener()
            return
        self.front = front

    def _close_listener(self) -> None:
        if self._sock is not None:
            sock, self._sock = self._sock, None
            if self.front is None:  # aiohttp's server owns it once started
                with contextlib.suppress(ValueError, RuntimeError):
                    asyncio.get_running_loop().remove_reader(sock.fileno())
                sock.close()

    async def close(self) -> None:
        if self._loading is not None:
            await self._loading  # under a second; it logs its own failure
        if self.front is not None:
            front, self.front = self.front, None
            await front.close()
            self._sock = None
        self._close_listener()
