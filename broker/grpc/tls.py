"""The permissive gRPC port: TLS and plaintext on one port, as RocketMQ's proxy serves them.

grpcio cannot serve TLS and plaintext on one port (the proxy's ``ProxyAndTlsProtocolNegotiator``
decides per connection), so ``SniffingFront`` listens on the public port and each connection's
first byte (0x16 opens a TLS handshake) picks a loopback listener of the same grpc server, one
with TLS, one without; the bytes are then spliced both ways. TLS itself stays in grpc's core: the
front only moves bytes, and a client's handshake is with grpc.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

__all__ = ["SniffingFront"]

log = logging.getLogger("pocketmq.grpc")

TLS_RECORD_HANDSHAKE: Final = 0x16  # the content type of a ClientHello's record
# A connection must send its first byte this soon or is closed (grpc's own handshake timeout
# starts only once the loopback connection is made).
FIRST_BYTE_TIMEOUT_S: Final = 15.0


class _Back(asyncio.Protocol):
    """The loopback connection to grpc: what it sends goes back to the client."""

    def __init__(self, front: _Front) -> None:
        self.front = front
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.front.transport is not None:
            self.front.transport.write(data)

    def eof_received(self) -> bool:
        if self.front.transport is not None and self.front.transport.can_write_eof():
            self.front.transport.write_eof()
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.front.close()

    # The client reads slowly: stop reading grpc until its buffer drains.
    def pause_writing(self) -> None:
        if self.front.transport is not None:
            self.front.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.front.transport is not None:
            self.front.transport.resume_reading()


class _Front(asyncio.Protocol):
    """One client connection of the public port: its first byte picks the listener."""

    def __init__(self, owner: SniffingFront) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.back: _Back | None = None
        self.early: list[bytes] = []  # bytes before the loopback connection is up
        self.peer = ""
        self.local_port = 0  # of the loopback connection: the key of ``owner.peers``
        self.closed = False
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = _grpc_peer(transport.get_extra_info("peername"))
        self.owner.connections.add(self)
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(FIRST_BYTE_TIMEOUT_S, self.close)

    def data_received(self, data: bytes) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.write(data)
            return
        first = not self.early
        self.early.append(data)
        if not first:
            return
        if self._timer is not None:
            self._timer.cancel()
        tls = data[0] == TLS_RECORD_HANDSHAKE
        self.owner.counts["tls" if tls else "plaintext"] += 1
        assert self.transport is not None
        self.transport.pause_reading()  # until the loopback connection is up
        task = asyncio.ensure_future(self._connect(tls))
        self.owner.tasks.add(task)
        task.add_done_callback(self.owner.tasks.discard)

    async def _connect(self, tls: bool) -> None:
        loop = asyncio.get_running_loop()
        back = _Back(self)
        try:
            tls_port, plain_port = await self.owner.backend_ports()
        except Exception:  # logged once by backend_ports
            self.close()
            return
        port = tls_port if tls else plain_port
        try:
            await loop.create_connection(lambda: back, "127.0.0.1", port)
        except OSError as error:
            log.warning("gRPC front: loopback listener %s refused: %s", port, error)
            self.close()
            return
        if self.closed or back.transport is None:
            if back.transport is not None:
                back.transport.close()
            return
        self.back = back
        sockname = back.transport.get_extra_info("sockname")
        self.local_port = sockname[1] if sockname else 0
        self.owner.peers[self.local_port] = self.peer
        back.transport.writelines(self.early)
        self.early = []
        if self.transport is not None:
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.back is not None and self.back.transport is not None:
            if self.back.transport.can_write_eof():
                self.back.transport.write_eof()
                return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def pause_writing(self) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.back is not None and self.back.transport is not None:
            self.back.transport.resume_reading()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        self.owner.connections.discard(self)
        self.owner.peers.pop(self.local_port, None)
        if self.transport is not None:
            self.transport.close()
        if self.back is not None and self.back.transport is not None:
            self.back.transport.close()


def _grpc_peer(peername: Any) -> str:
    """A socket's peer address as grpc writes it: ``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``."""
    if not peername:
        return ""
    host, port = peername[0], peername[1]
    return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"


class SniffingFront:
    """The public port of a grpc server that listens on two loopback ports, one with TLS.

    The ports are given, or ``backend`` gives them: it is awaited once, when the first
    connection has sent its first byte, and starts the grpc server (``lazy.py``).

    ``peers`` maps the local port of each loopback connection to the client's own address, so
    calls are logged and stamped (``__BORNHOST``) with the client's address, not the front's
    (``peer_of``)."""

    def __init__(
        self,
        tls_port: int = 0,
        plain_port: int = 0,
        backend: Callable[[], Awaitable[tuple[int, int]]] | None = None,
    ) -> None:
        self.tls_port = tls_port
        self.plain_port = plain_port
        self.backend = backend
        self.connections: set[_Front] = set()
        self.peers: dict[int, str] = {}
        self.counts = {"tls": 0, "plaintext": 0}
        self.tasks: set[asyncio.Future[None]] = set()
        self._server: asyncio.Server | None = None
        self._backend_start: asyncio.Future[tuple[int, int]] | None = None

    async def backend_ports(self) -> tuple[int, int]:
        """The TLS and plaintext loopback ports; the first call starts ``backend``, once (a
        failure is logged once and raised to every connection waiting or to come)."""
        if self.backend is None:
            return self.tls_port, self.plain_port
        if self._backend_start is None:
            self._backend_start = asyncio.ensure_future(self._run_backend(self.backend))
        return await asyncio.shield(self._backend_start)

    async def _run_backend(
        self, backend: Callable[[], Awaitable[tuple[int, int]]]
    ) -> tuple[int, int]:
        try:
            self.tls_port, self.plain_port = await backend()
        except Exception:
            log.exception("gRPC front-end could not be started")
            raise
        return self.tls_port, self.plain_port

    async def backend_settled(self) -> None:
        """Wait for a backend start under way (at close: then it can be stopped)."""
        if self._backend_start is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._backend_start)

    async def start(self, host: str, port: int, backlog: int = 1024) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Front(self), host, port, reuse_address=True, backlog=backlog
        )
        return int(self._server.sockets[0].getsockname()[1])

    def peer_of(self, grpc_peer: str) -> str:
        """The client's address behind ``grpc_peer`` (a loopback connection of this front),
        or ``grpc_peer`` itself for a connection that did not come through it."""
        _, _, port = grpc_peer.rpartition(":")
        try:
            return self.peers.get(int(port), grpc_peer)
        except ValueError:
            return grpc_peer

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close()
        for task in list(self.tasks):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
