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

Hostile clients are bounded by ``ServerLimits``, each a named limit: bytes held in frames not
yet whole, all connections together (past it the frames that began first go); a deadline per
frame from its first byte (bytes trickling in do not extend it: slowloris); a first frame due
soon after connecting; an idle timeout counted from the last whole frame, not the last byte;
and, at the connection cap, the oldest connection that never sent a whole frame makes room for
the new one. Closes for a limit are counted (``RemotingServer.closed_by``) and logged at most
once per ``warning_interval_s`` per limit, with how many and the last address.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import itertools
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from ssl import SSLContext
from typing import Any, Final

from pocketmq.broker.protocol import FRAME_SIZE_MAX, RemotingCommand
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.session import RemotingSession
from pocketmq.broker.remoting.tls import sniffing_server

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
    # Connections the kernel may hold before they are accepted (RocketMQ serverSocketBacklog);
    # asyncio's 100 drops handshakes of a burst, which then wait seconds for a retry.
    backlog: int = 1024
    # Requests of one connection being handled at once (long polls included); past it the
    # connection stops being read until some finish: back-pressure, not memory.
    requests_in_flight_max: int = 1024
    # Bytes waiting in one connection's write buffer before reading from it pauses.
    write_buffer_high: int = 8 * 1024 * 1024
    # RocketMQ serverChannelMaxIdleTimeSeconds; counted from the last whole frame received
    # (a byte now and then does not keep a connection alive), never while requests are held.
    idle_timeout_s: float = 120.0
    # Bytes held in frames not yet whole, all connections of this server together. Each frame
    # may be 16 MiB, so 4,096 half-sent ones would hold 64 GiB; past this cap the connections
    # whose partial frames began first are closed until the rest fits.
    buffered_bytes_max: int = 256 * 1024 * 1024
    # A frame must be whole this long after its first byte arrived (slowloris).
    frame_timeout_s: float = 30.0
    # A new connection must send a whole frame this soon; until then it is the first to make
    # room when connections reach connections_max.
    first_request_timeout_s: float = 15.0
    # At most one log line per limit this often (a flood of closes is one line with a count).
    warning_interval_s: float = 10.0

    @classmethod
    def with_settings(
        cls, settings: Iterable[str], base: ServerLimits | None = None
    ) -> ServerLimits:
        """``base`` (default: the defaults) with ``name=value`` settings applied, e.g.
        ``["frame_timeout_s=5", "connections_max=100"]`` (``pocketmq ... --limit``);
        ``ValueError`` names an unknown limit or a value that is not a positive number."""
        base = base or cls()
        names = [field.name for field in dataclasses.fields(cls)]
        values: dict[str, Any] = {}
        for setting in settings:
            name, sep, text = setting.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in names:
                raise ValueError(f"{setting!r}: not name=value with a name of {', '.join(names)}")
            kind = type(getattr(base, name))
            try:
                value = kind(text.strip())
            except ValueError:
                what = "a whole number" if kind is int else "a number"
                raise ValueError(f"{name}: {text!r} is not {what}") from None
            if not value > 0:
                raise ValueError(f"{name}: {text!r} is not more than 0")
            values[name] = value
        return dataclasses.replace(base, **values)


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
        self._loop: asyncio.AbstractEventLoop | None = None
        # loop times: connected, the last whole frame received, the first byte of the frame
        # still partial (None: none is)
        self.connected_at = 0.0
        self.last_activity = 0.0
        self.frame_started: float | None = None
        self.served = False  # a whole frame has arrived
        self.buffered = 0  # bytes of the partial frame, as counted in the server's total
        self._released = False  # taken out of the server's accounting

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        transport.set_write_buffer_limits(high=self.server.limits.write_buffer_high)  # type: ignore[attr-defined]
        self._loop = loop = asyncio.get_running_loop()
        self.connected_at = self.last_activity = loop.time()
        self.server._connection_made(self)

    def data_received(self, data: bytes) -> None:
        if self.closed:  # closed by a limit: what was still in flight is dropped
            return
        session = self.session
        requests, answers, error = session.receive_data(data)
        if error is not None:
            log.warning("closing %s: %s", self.remote_address, error)
            self.server.closed_by["malformed"] += 1
            self.close()
            return
        buffered = session.buffered_bytes
        if requests or answers:
            # Only whole frames count as activity; what is left starts a new frame now.
            now = self._loop.time()  # type: ignore[union-attr]
            self.last_activity = now
            self.frame_started = now if buffered else None
            if not self.served:
                self.served = True
                self.server._served(self)
        elif buffered and self.frame_started is None:
            self.frame_started = self._loop.time()  # type: ignore[union-attr]
        if buffered != self.buffered:
            server = self.server
            server.buffered_bytes += buffered - self.buffered
            self.buffered = buffered
            if server.buffered_bytes > server.limits.buffered_bytes_max:
                server._over_buffer_cap()
                if self.closed:
                    return
            if server.buffered_bytes > server.buffered_bytes_peak:
                server.buffered_bytes_peak = server.buffered_bytes
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
        # Counted in flight while answered, as in _finish: write() tells a lone answer by it.
        try:
            if not future.cancelled():
                error = future.exception()
                if error is None:
                    self.send_response(request, future.result())
                elif isinstance(error, Exception):
                    self._handler_failed(request, error)
        finally:
            self._in_flight -= 1
            self._update_reading()

    def _handler_failed(self, request: RemotingCommand, error: Exception) -> None:
        if isinstance(error, RemoteProtocolError):
            # The client's fault (a header field missing or unparsable, a body that does not
            # decode): one line, no traceback.
            log.warning(
                "request code %s from %s refused: %s", request.code, self.remote_address, error
            )
        else:
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
            if self.frame_started is not None:
                # The frame could not arrive while we did not read: its deadline starts again.
                self.frame_started = asyncio.get_running_loop().time()

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
            # out at once; while other requests of this connection are being handled, the ones
            # finished after it in the same loop turn share one system call at the end of the
            # turn. The answer to the only request in hand (one send awaited at a time) corks
            # nothing: no callback, no extra turn of the loop.
            self.transport.writelines(data)
            if self._in_flight > 1:
                self._corked = []
                self._loop.call_soon(self._flush_corked)  # type: ignore[union-attr]

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
            self.server._connection_closing(self)
            self.session.discard_buffered()
            self.transport.close()


# Why a connection was closed by the server (RemotingServer.closed_by keys), and how it is logged.
_CLOSE_REASONS: Final = {
    "frame_timeout": "whose frame was not whole {limit} s after its first byte",
    "first_request_timeout": "that sent no whole frame within {limit} s",
    "idle": "idle for {limit} s",
    "buffered_bytes": "to keep partial frames under {limit} bytes in all",
    "evicted": "that had sent no whole frame, to admit new ones at {limit} connections",
    "refused": "at {limit} connections, none of them idle",
}
_LIMIT_OF: Final = {
    "frame_timeout": "frame_timeout_s",
    "first_request_timeout": "first_request_timeout_s",
    "idle": "idle_timeout_s",
    "buffered_bytes": "buffered_bytes_max",
    "evicted": "connections_max",
    "refused": "connections_max",
}


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
        # Bytes of partial frames, all connections together (kept by the connections).
        self.buffered_bytes = 0
        self.buffered_bytes_peak = 0  # the most held once the cap was enforced
        # Connections closed by the server, by reason (the keys of _CLOSE_REASONS, "malformed").
        self.closed_by: Counter[str] = Counter()
        # Connections without a whole frame yet, oldest first: the first to make room.
        self._unserved: dict[Connection, None] = {}
        self._closing = 0  # connections we closed whose connection_lost has not come yet
        self._unlogged: Counter[str] = Counter()  # closes not logged yet, by reason
        self._last_address: dict[str, str] = {}
        self._logged_at: dict[str, float] = {}
        self._server: asyncio.Server | None = None
        self._more_servers: list[asyncio.Server] = []  # listen_also: same handlers, other ports
        self._ssl: SSLContext | None = None  # start's: the other ports serve TLS alike
        self._idle_task: asyncio.Task[None] | None = None
        self.port = 0

    async def start(
        self, host: str = "127.0.0.1", port: int = 0, ssl: SSLContext | None = None
    ) -> int:
        """Listen on ``host:port`` (0: a free port); returns the port. With ``ssl`` a
        connection opening with a TLS handshake is served over TLS and any other in plaintext,
        as RocketMQ's remoting server in its default permissive ``tls.server.mode``."""
        self._ssl = ssl
        self._server = await self._listen(host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._idle_task = asyncio.create_task(self._housekeeping(), name=f"{self.name}-limits")
        return self.port

    async def listen_also(self, host: str, port: int) -> int:
        """Accept connections on one more port (0: a free one), served as those of ``start``:
        the same handlers, limits, TLS and connection set. Returns the port."""
        server = await self._listen(host, port)
        self._more_servers.append(server)
        return int(server.sockets[0].getsockname()[1])

    async def _listen(self, host: str, port: int) -> asyncio.Server:
        if self._ssl is None:
            loop = asyncio.get_running_loop()
            return await loop.create_server(
                lambda: Connection(self),
                host,
                port,
                reuse_address=True,
                backlog=self.limits.backlog,
            )
        return await sniffing_server(  # type: ignore[return-value]
            lambda: Connection(self), host, port, self._ssl, backlog=self.limits.backlog
        )

    @property
    def open_connections(self) -> int:
        """Connections open and not being closed by us."""
        return len(self.connections) - self._closing

    def _connection_made(self, connection: Connection) -> None:
        if self.open_connections >= self.limits.connections_max:
            victim = self._room_for_one()
            if victim is None:
                self._closed_for("refused", connection)
                return
            self._closed_for("evicted", victim)
        self.connections.add(connection)
        self._unserved[connection] = None
        log.debug("%s: connection from %s", self.name, connection.remote_address)

    def _room_for_one(self) -> Connection | None:
        """The connection to close for a new one: the oldest that never sent a whole frame,
        else the one idle longest with no request in hand; None if every one is busy."""
        for connection in self._unserved:
            return connection
        idle = [c for c in self.connections if not c.closed and not c._in_flight]
        return min(idle, key=lambda c: c.last_activity) if idle else None

    def _served(self, connection: Connection) -> None:
        self._unserved.pop(connection, None)

    def _release(self, connection: Connection) -> bool:
        """Take ``connection`` out of the accounting, once; True if this call did."""
        if connection._released:
            return False
        connection._released = True
        self.buffered_bytes -= connection.buffered
        connection.buffered = 0
        self._unserved.pop(connection, None)
        return True

    def _connection_closing(self, connection: Connection) -> None:
        if connection in self.connections and self._release(connection):
            self._closing += 1

    def _connection_lost(self, connection: Connection) -> None:
        if connection in self.connections:
            self.connections.discard(connection)
            log.debug("%s: connection from %s closed", self.name, connection.remote_address)
            if not self._release(connection):  # released when we closed it
                self._closing -= 1
            if self.on_disconnect is not None:
                try:
                    self.on_disconnect(connection)
                except Exception:
                    log.exception("%s: disconnect handler failed", self.name)

    def _over_buffer_cap(self) -> None:
        """Partial frames hold more than the cap: close the connections whose frames began
        first (a quick client's frame is younger than an attacker's held ones) until under."""
        holders = sorted(
            (c for c in self.connections if c.buffered and not c.closed),
            key=lambda c: c.frame_started or 0.0,
        )
        for connection in holders:
            if self.buffered_bytes <= self.limits.buffered_bytes_max:
                break
            self._closed_for("buffered_bytes", connection)

    def _closed_for(self, reason: str, connection: Connection) -> None:
        connection.close()
        self.closed_by[reason] += 1
        self._unlogged[reason] += 1
        self._last_address[reason] = connection.remote_address
        self._log_closes(reason)

    def _log_closes(self, reason: str) -> None:
        """One line for the closes of ``reason`` not logged yet, at most once per interval."""
        count = self._unlogged[reason]
        if not count:
            return
        now = asyncio.get_running_loop().time()
        last = self._logged_at.get(reason)
        if last is not None and now - last < self.limits.warning_interval_s:
            return
        self._logged_at[reason] = now
        del self._unlogged[reason]
        level = logging.INFO if reason == "idle" else logging.WARNING
        what = _CLOSE_REASONS[reason].format(limit=getattr(self.limits, _LIMIT_OF[reason]))
        log.log(
            level,
            "%s: %s %d connection%s %s (last: %s)",
            self.name,
            "refused" if reason == "refused" else "closed",
            count,
            "" if count == 1 else "s",
            what,
            self._last_address[reason],
        )

    def sweep(self, now: float) -> None:
        """Close the connections past a deadline at loop time ``now`` (run by housekeeping)."""
        limits = self.limits
        frame_deadline = now - limits.frame_timeout_s
        first_deadline = now - limits.first_request_timeout_s
        idle_deadline = now - limits.idle_timeout_s
        for connection in list(self.connections):
            if connection.closed:
                continue
            started = connection.frame_started
            paused = connection._reading_paused
            if started is not None and not paused:
                if started < frame_deadline:
                    self._closed_for("frame_timeout", connection)
            elif not connection.served:
                if started is None and connection.connected_at < first_deadline:
                    self._closed_for("first_request_timeout", connection)
            # Idle also while reading is paused for a client that does not read its answers
            # (nothing in flight): it would otherwise hold its buffers for ever.
            elif connection.last_activity < idle_deadline and not connection._in_flight:
                self._closed_for("idle", connection)
        for reason in list(self._unlogged):
            self._log_closes(reason)

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        limits = self.limits
        shortest = min(
            limits.frame_timeout_s, limits.first_request_timeout_s, limits.idle_timeout_s
        )
        interval = max(0.05, min(1.0, shortest / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                self.sweep(loop.time())
            except Exception:  # a bug here must not end the sweeping for good
                log.exception("%s: connection housekeeping failed", self.name)

    async def close(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        more, self._more_servers = self._more_servers, []
        for server in more:
            server.close()
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.close()
            await self._server.wait_closed()
            self._server = None
        for server in more:
            await server.wait_closed()
            # connection_lost runs on a later loop turn; let every connection finish it.
            for _ in range(100):
                if not self.connections:
                    break
                await asyncio.sleep(0.01)
