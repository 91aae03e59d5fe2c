"""The gRPC front as the broker holds it; in the default TLS mode, grpc loaded at first use.

    front = LazyGrpcFront(host, port, advertised_host, tls, build)
    port = await front.start()      # the public port bound and listening; 0: a free one
    ...
    await front.close()

grpcio, the protocol stubs and the service are about 15 MiB resident, and a broker that no
5.x SDK talks to never needs them. In the ``permissive`` TLS mode (the default) the public port
is ``tls.SniffingFront``'s anyway, a Python listener that splices each connection to one of
grpc's two loopback listeners: here it listens from the start, and the first connection that
sends a byte makes ``build()`` run (the imports in a worker thread, so the loop keeps serving
the other ports) and grpc's server start; that connection and every later one are then spliced
as before. The client's first call waits for that once (tens of ms); nothing else differs.
In the ``off`` and ``enforcing`` modes grpc's own listener is the public port, so grpc is
loaded and started at once.

This module imports nothing of grpc's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pocketmq.broker.grpc.tls import SniffingFront
from pocketmq.broker.services.loading import import_off_loop
from pocketmq.broker.services.memory import release_free_heap

__all__ = ["TLS_MODES", "GrpcTls", "LazyGrpcFront"]

log = logging.getLogger("pocketmq.grpc")

TLS_MODES = ("off", "permissive", "enforcing")


@dataclass
class GrpcTls:
    """TLS on the gRPC port: ``mode`` one of ``TLS_MODES``; ``cert``/``key`` the PEM files
    served (the broker gives its own or the self-signed pair), needed unless mode is off."""

    mode: str = "permissive"
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if self.mode not in TLS_MODES:
            raise ValueError(f"gRPC TLS mode {self.mode!r}: one of {', '.join(TLS_MODES)}")
        if self.mode != "off" and (self.cert is None or self.key is None):
            raise ValueError(f"gRPC TLS mode {self.mode}: a certificate and key are needed")


class GrpcFrontend(Protocol):
    """What this module needs of ``server.GrpcFrontend`` (not imported: it imports grpc)."""

    async def start(self) -> int: ...

    async def start_behind(self, front: SniffingFront) -> tuple[int, int]: ...

    async def close(self) -> None: ...


class LazyGrpcFront:
    """Stands for the broker's ``GrpcFrontend`` (same ``start``, ``close``, ``address``); the
    real one is ``frontend`` once built (at start, or at the first connection in permissive
    mode)."""

    def __init__(
        self,
        host: str,
        port: int,
        advertised_host: str,
        tls: GrpcTls,
        build: Callable[[], GrpcFrontend],
    ) -> None:
        self.host = host
        self.port = port
        self.advertised_host = advertised_host
        self.tls = tls
        self.build = build
        self.frontend: GrpcFrontend | None = None
        self.front: SniffingFront | None = None

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def loaded(self) -> bool:
        return self.frontend is not None

    async def start(self) -> int:
        if self.tls.mode != "permissive":
            self.frontend = await self._built()
            self.port = await self.frontend.start()
            return self.port
        self.front = SniffingFront(backend=self._start_behind_front)
        try:
            self.port = await self.front.start(self.host, self.port)
        except OSError as error:
            raise OSError(f"gRPC port {self.host}:{self.port} is not available: {error}") from None
        log.info(
            "gRPC front-end (apache.rocketmq.v2) listening on %s, TLS and plaintext "
            "(loaded at its first connection)",
            self.address,
        )
        return self.port

    async def _built(self) -> GrpcFrontend:
        await import_off_loop("pocketmq.broker.grpc.server")
        return self.build()

    async def _start_behind_front(self) -> tuple[int, int]:
        """grpc's server behind the listening front: its TLS and plaintext loopback ports."""
        assert self.front is not None
        frontend = await self._built()
        ports = await frontend.start_behind(self.front)
        self.frontend = frontend
        release_free_heap()  # the import's temporaries, in the worker thread's heap
        return ports

    async def close(self) -> None:
        if self.front is not None:
            await self.front.close()  # first: no new connection reaches grpc
            await self.front.backend_settled()  # a start under way: then it is stopped too
        if self.frontend is not None:
            frontend, self.frontend = self.frontend, None
            await frontend.close()
