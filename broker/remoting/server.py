"""The asyncio side of the remoting protocol: one ``Connection`` per TCP client, one server.

Each ``Connection`` is the asyncio adapter of a sans-I/O ``RemotingSession``
(``broker.protocol.session``, shared with the SDK's connection and the broker's outbound one):
the session decodes, numbers the requests the broker starts (CHECK_TRANSACTION_STATE,
NOTIFY_CONSUMER_IDS_CHANGED), matches their answers and builds the error answers; this module
only moves bytes and dispatches.
A handler gets the request and its connection and returns the response, ``None`` (no answer,
e.g. a oneway request) or an awaitable of either (long polling, a sync flush). Responses made
synchronously while one read is processed are written together in one ``writelines``.

One client's mistake never stops the server: a malformed frame closes that connection only; an
unknown request code gets REQUEST_CODE_NOT_SUPPORTED; a handler that raises gets SYSTEM_ERROR.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from pocketmq.broker.protocol import FRAME_SIZE_MAX, RemotingCommand
from pocketmq.broker.protocol.session import RemotingSession

__all__ = ["Connection", "Handler", "RemotingServer", "ServerLimits"]

log = logging.getLogger("pocketmq.remoting")

# A response, an encoded response frame (bytes: the answer to a send, built without a
# command), or None (no answer).
HandlerResult = RemotingCommand | bytes | None
Handler = Callable[[RemotingCommand, "Connection"], HandlerResult | Awaitable[HandlerResult]]


# Responses to one read's requests go out together, but no more than this many at a time: a
# read can hold ~200 sends, and holding every answer until the last is handled leaves the client
# idle meanwhile (the two then take turns instead of working at once).
RESPONSES_PER_WRITE: Final = 32


@dataclass(frozen=True, slots=True)
class ServerLimits:
    frame_size_max: int = FRAME_SIZE_MAX  # RocketMQ's frameMaxLength, 16 MiB
    connections_max: int = 4096
    # Requests of one connection being handled at once (long polls included); past it the
    # connection stops being read until some finish: back-pressure, not memory.
    requests_in_flight_max: int = 1024
    # Bytes waiting in one connection's write buffer before reading from it pauses.
    write_buffer_high: int = 8 * 1024 * 1024
    idle_timeout_s: float = 120.0  # RocketMQ serverChannelMaxIdleTimeSeconds


class Connection(asyncio.Protocol):
    """One client connection. ``attributes`` holds what handlers learn (client id, groups)."""

    _ids = itertools.count(1)

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.id = next(self._ids)
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        # requests, answers and opaque ids; the futures of the broker's own requests are tokens
        self.session: RemotingSession[asyncio.Future[RemotingCommand]] = RemotingSession(
            frame_size_max=server.limits.frame_size_max
        )
        self.attributes: dict[str, Any] = {}
        self.closed = False
        self._pending_writes: list[bytes] | None = None
        self._corked: list[bytes] | None = None
        self._in_flight = 0
        self._reading_paused = False
        self._write_paused = False
        self._tasks: set[asyncio.Task[None]] = set()
        self.last_activity = 0.0

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=self.server.limits.write_buffer_high)  # type: ignore[attr-defined]
        self.last_activity = asyncio.get_running_loop().time()
        self.server._connection_made(self)

    def data_received(self, data: bytes) -> None:
        self.last_activity = asyncio.get_running_loop().time()
        requests, answers, error = self.session.receive_data(data)
        if error is not None:
            log.warning("closing %s: %s", self.remote_address, error)
            self.close()
            return
        for waiter, response in answers:
            if not waiter.done():
                waiter.set_result(response)
        self._pending_writes = []
        try:
            for i, request in enumerate(requests, 1):
                self._dispatch(request)
                if not i % RESPONSES_PER_WRITE and self._pending_writes:
                    pending, self._pending_writes = self._pending_writes, []
                    if self.transport is not None and not self.closed:
                        self.transport.writelines(pending)
        finally:
            pending, self._pending_writes = self._pending_writes, None
            if pending and self.transport is not None and not self.closed:
                self.transport.writelines(pending)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for waiter in self.session.connection_lost():
            if not waiter.done():
                waiter.set_exception(ConnectionError(f"connection to {self.remote_address} lost"))
        for task in list(self._tasks):
            task.cancel()
        self.server._connection_lost(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- dispatch ---------------------------------------------------------------------------

    def _dispatch(self, request: RemotingCommand) -> None:
        handler = self.server.handlers.get(request.code)
        if handler is None:
            self.send_response(request, self.session.not_supported(request))
            return
        try:
            result = handler(request, self)
        except Exception as error:  # one request's failure must not reach the event loop
            self._handler_failed(request, error)
            return
        # The common cases first: a response, or one already encoded (a send's answer).
        if type(result) is RemotingCommand or type(result) is bytes:
            self.send_response(request, result)
        elif isinstance(result, asyncio.Future):
            # A future (a sync-flush send): answered from its callback, no task.
            self._in_flight += 1
            result.add_done_callback(partial(self._future_done, request))
            self._update_reading()
        elif inspect.isawaitable(result):
            self._in_flight += 1
            task = asyncio.ensure_future(self._finish(request, result))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            self._update_reading()
        else:
            self.send_response(request, result)

    async def _finish(self, request: RemotingCommand, pending: Awaitable[HandlerResult]) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._handler_failed(request, error)
        else:
            self.send_response(request, response)
        finally:
            self._in_flight -= 1
            self._update_reading()

    def _future_done(self, request: RemotingCommand, future: asyncio.Future[HandlerResult]) -> None:
        self._in_flight -= 1
        if not future.cancelled():
            error = future.exception()
            if error is None:
                self.send_response(request, future.result())
            elif isinstance(error, Exception):
                self._handler_failed(request, error)
        self._update_reading()

    def _handler_failed(self, request: RemotingCommand, error: Exception) -> None:
        log.exception(
            "request code %s from %s failed", request.code, self.remote_address, exc_info=error
        )
        self.send_response(
            request, self.session.failed(request, f"{type(error).__name__}: {error}")
        )

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        should_pause = (
            self._write_paused or self._in_flight >= self.server.limits.requests_in_flight_max
        )
        if should_pause and not self._reading_paused:
            self.transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self.transport.resume_reading()
            self._reading_paused = False

    # -- writing ----------------------------------------------------------------------------

    def send_response(self, request: RemotingCommand, response: HandlerResult) -> None:
        # None for a oneway request (no answer, as in RocketMQ); a pulled body stays a part of
        # its own, so it goes to the socket without a copy
        parts = self.session.respond(request, response)
        if parts is not None:
            self.write(*parts)

    def write(self, *data: bytes) -> None:
        """Queue bytes (one frame, possibly in parts) for the client."""
        if self.closed or self.transport is None:
            return
        if self._pending_writes is not None:
            self._pending_writes.extend(data)
        elif self._corked is not None:
            self._corked.extend(data)
        else:
            # A response finished by a task (a long poll woken by a message, a sync flush) goes
            # out at once; the ones finished after it in the same loop turn share one system
            # call at the end of the turn.
            self.transport.writelines(data)
            self._corked = []
            asyncio.get_running_loop().call_soon(self._flush_corked)

    def _flush_corked(self) -> None:
        corked, self._corked = self._corked, None
        if corked and self.transport is not None and not self.closed:
            self.transport.writelines(corked)

    async def request(self, command: RemotingCommand, *, timeout_s: float = 3.0) -> RemotingCommand:
        """Send a request to the client (e.g. CHECK_TRANSACTION_STATE) and await its answer;
        ``TimeoutError`` after ``timeout_s``, ``ConnectionError`` if the connection is lost."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[RemotingCommand] = loop.create_future()
        deadline = loop.time() + timeout_s
        self.write(*self.session.send_request(command, waiter, deadline, timeout_s * 1000))
        try:
            async with asyncio.timeout_at(deadline):
                return await waiter
        finally:
            self.session.forget(command.opaque, waiter)

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send a request that gets no answer (NOTIFY_CONSUMER_IDS_CHANGED, a check-back)."""
        self.write(*self.session.send_oneway(command))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()


class RemotingServer:
    """Accepts connections and dispatches their requests through ``handlers`` (code -> handler)."""

    def __init__(
        self,
        handlers: dict[int, Handler],
        *,
        name: str = "remoting",
        limits: ServerLimits | None = None,
        on_disconnect: Callable[[Connection], None] | None = None,
    ) -> None:
        self.handlers = handlers
        self.name = name
        self.limits = limits or ServerLimits()
        self.on_disconnect = on_disconnect
        self.connections: set[Connection] = set()
        self._server: asyncio.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, reuse_address=True
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = asyncio.create_task(self._close_idle(), name=f"{self.name}-idle")
        return self.port

    def _connection_made(self, connection: Connection) -> None:
        if len(self.connections) >= self.limits.connections_max:
            log.warning(
                "%s: refusing %s: %d connections open",
                self.name,
                connection.remote_address,
                len(self.connections),
            )
            connection.close()
            return
        self.connections.add(connection)

    def _connection_lost(self, connection: Connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            if self.on_disconnect is not None:
                try:
                    self.on_disconnect(connection)
                except Exception:
                    log.exception("%s: disconnect handler failed", self.name)

    async def _close_idle(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(10.0, self.limits.idle_timeout_s))
            deadline = loop.time() - self.limits.idle_timeout_s
            for connection in list(self.connections):
                if connection.last_activity < deadline and not connection._in_flight:
                    log.info("%s: closing idle connection %s", self.name, connection.remote_address)
                    connection.close()

    async def close(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None
            # connection_lost runs on a later loop turn; let every connection finish it.
            for _ in range(100):
                if not self.connections:
                    break
                await asyncio.sleep(0.01)
