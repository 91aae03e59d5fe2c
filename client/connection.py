"""The asyncio adapter around the sans-I/O remoting codec, and a pool of connections.

``Connection`` is an ``asyncio.Protocol`` around a sans-I/O ``RemotingSession`` (the broker's
remoting ends use the same one): bytes in go through the session; a response resolves the
future its request was sent with; a request from the peer (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED and CHECK_TRANSACTION_STATE over the client's own connection) goes
to a handler table. At most ``requests_inflight_max`` requests wait for a
response at once; further callers wait for a slot (back-pressure instead of memory).

``ConnectionPool`` keeps one connection per ``"host:port"`` and reconnects on demand.

Given ``Credentials``, every request is signed as RocketMQ's ``AclClientRPCHook`` signs it
(``AccessKey`` and ``Signature`` in its ``extFields``), for a broker or name server with ACL.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import os
import ssl as ssl_module
from collections.abc import Awaitable, Callable, MutableMapping
from ssl import SSLContext
from typing import Final, NamedTuple, cast

from pocketmq.broker.protocol import (
    FRAME_SIZE_MAX,
    RPC_ONEWAY,
    LanguageCode,
    MQVersion,
    RemotingCommand,
    RemotingHeader,
    ResponseCode,
)
from pocketmq.broker.protocol.session import RemotingSession
from pocketmq.broker.protocol.signing import sign_fields

from .errors import ClientClosedError, ConnectionLostError, RequestTimeoutError, error_for_code

__all__ = [
    "CLIENT_LANGUAGE",
    "CLIENT_VERSION",
    "Connection",
    "ConnectionPool",
    "Credentials",
    "RequestHandler",
    "check_response",
    "make_request",
    "split_addr",
    "tls_context",
]

log = logging.getLogger("pocketmq.client.connection")

# >= V4_9_4 (401): a real name server then answers route data in standard JSON.
CLIENT_VERSION: Final = int(MQVersion.V5_3_3)
CLIENT_LANGUAGE: Final = LanguageCode.PYTHON


class Credentials(NamedTuple):
    """An ACL account's keys (RocketMQ's ``SessionCredentials``); a plain ``(ak, sk)``
    tuple is accepted wherever these are."""

    access_key: str
    secret_key: str
    security_token: str | None = None


def as_credentials(value: Credentials | tuple[str, ...] | None) -> Credentials | None:
    if value is None:
        return None
    credentials = Credentials(*value)
    if not credentials.access_key or not credentials.secret_key:
        raise ValueError("credentials need an access key and a secret key")
    return credentials


# handler(connection, request) -> response, or None for no response
RequestHandler = Callable[["Connection", RemotingCommand], Awaitable[RemotingCommand | None]]


def make_request(
    code: int,
    header: RemotingHeader | None = None,
    *,
    body: bytes | None = None,
    ext_fields: dict[str, str] | None = None,
) -> RemotingCommand:
    """A JSON-header request from this SDK (language PYTHON, version 479)."""
    fields = header.to_ext_fields() if header is not None else ext_fields
    return RemotingCommand(
        code=int(code),
        language=CLIENT_LANGUAGE,
        version=CLIENT_VERSION,
        ext_fields=fields,
        body=body,
    )


def check_response(response: RemotingCommand, *ok_codes: int) -> RemotingCommand:
    """Return ``response`` if its code is success (or one of ``ok_codes``), else raise."""
    if response.code == ResponseCode.SUCCESS or response.code in ok_codes:
        return response
    raise error_for_code(response.code, response.remark)


def split_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port)."""
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {addr!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


# Frames sent in one turn of the event loop are corked, but at most this many: after a read of
# ~200 responses, ~200 requests follow in one turn, and the broker would wait for the last one.
FRAMES_PER_WRITE: Final = 32


def tls_context(ca_file: str | os.PathLike[str] | None = None) -> SSLContext:
    """The TLS context of a client's connections: verifying the server's certificate against
    ``ca_file`` (hostname included), or, without one, not verifying it, as RocketMQ's own
    clients do in its default test mode (an insecure trust manager): encrypted, but not
    authenticated."""
    if ca_file is not None:
        return ssl_module.create_default_context(cafile=os.fspath(ca_file))
    context = ssl_module.SSLContext(ssl_module.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl_module.CERT_NONE
    return context


class Connection(asyncio.Protocol):
    """One TCP connection to a name server or broker. Create with ``await Connection.open``.

    The asyncio adapter of a ``RemotingSession`` (``broker/protocol/session.py``), which keeps
    the opaque ids, the requests waiting for an answer and their deadlines: this class moves
    the bytes, resolves the futures, runs one timer for the deadlines, caps the requests in
    flight and runs the handlers of the peer's requests.
    """

    def __init__(
        self,
        addr: str,
        *,
        requests_inflight_max: int = 1024,
        handlers: MutableMapping[int, RequestHandler] | None = None,
        frame_size_max: int = FRAME_SIZE_MAX,
        credentials: Credentials | None = None,
    ) -> None:
        if requests_inflight_max < 1:
            raise ValueError("requests_inflight_max must be at least 1")
        self.addr = addr
        self.credentials = credentials
        self._session: RemotingSession[asyncio.Future[RemotingCommand]] = RemotingSession(
            frame_size_max=frame_size_max, language=CLIENT_LANGUAGE, version=CLIENT_VERSION
        )
        self._handlers: MutableMapping[int, RequestHandler] = {} if handlers is None else handlers
        self._transport: asyncio.Transport | None = None
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_at = math.inf
        self._free_slots = requests_inflight_max
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._out: list[bytes] | None = None  # frames waiting for the end of this loop turn
        self._out_frames = 0  # how many
        self._handler_tasks: set[asyncio.Task[None]] = set()
        self._lost_reason: str | None = None
        # Kept: on Python 3.11 every asyncio.get_running_loop() is a getpid() system call.
        self._loop = asyncio.get_running_loop()
        self._closed = self._loop.create_future()

    # -- opening and closing ---------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        addr: str,
        *,
        connect_timeout_ms: float = 3000,
        requests_inflight_max: int = 1024,
        handlers: MutableMapping[int, RequestHandler] | None = None,
        frame_size_max: int = FRAME_SIZE_MAX,
        credentials: Credentials | None = None,
        ssl: SSLContext | None = None,
    ) -> Connection:
        """Connect to ``addr`` ("host:port"), over TLS with ``ssl`` (``tls_context``);
        ``ConnectionLostError`` if that fails, the TLS handshake included."""
        host, port = split_addr(addr)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout_ms / 1000):
                _, protocol = await loop.create_connection(
                    lambda: cls(
                        addr,
                        requests_inflight_max=requests_inflight_max,
                        handlers=handlers,
                        frame_size_max=frame_size_max,
                        credentials=credentials,
                    ),
                    host,
                    port,
                    ssl=ssl,
                    server_hostname=host if ssl is not None else None,
                )
        except TimeoutError:
            raise ConnectionLostError(addr, "connect timed out") from None
        except OSError as e:
            raise ConnectionLostError(addr, f"connect failed: {e}") from e
        return protocol

    @property
    def is_closed(self) -> bool:
        return self._lost_reason is not None or self._transport is None

    @property
    def requests_pending(self) -> int:
        return self._session.requests_pending

    @property
    def _deadlines(self) -> dict[int, float]:
        """opaque -> deadline (loop time) of each request waiting for its answer."""
        return self._session.deadlines()

    def close(self) -> None:
        """Start a graceful close: buffered writes are flushed, then ``connection_lost`` runs."""
        if self._transport is None:  # never connected: nothing will call connection_lost
            self.connection_lost(None)
        elif self._lost_reason is None:
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def aclose(self) -> None:
        self.close()
        await self.wait_closed()

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        requests, answers, error = self._session.receive_data(data)
        for future, response in answers:
            if not future.done():
                future.set_result(response)
        for request in requests:
            self._dispatch(request)
        if error is not None:
            # The stream is lost (as Java's NettyDecoder closes the channel); what was decoded
            # before the bad frame is delivered above.
            log.warning("%s: closing after a protocol error: %s", self.addr, error)
            self._lost_reason = f"protocol error: {error}"
            if self._transport is not None:
                self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lost_reason is None:
            self._lost_reason = f"connection lost: {exc}" if exc else "connection closed"
        reason = self._lost_reason
        for future in self._session.connection_lost():
            if not future.done():
                future.set_exception(ConnectionLostError(self.addr, reason))
        self._wake_writers(ConnectionLostError(self.addr, reason))
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry, self._expiry_at = None, math.inf
        for task in self._handler_tasks:
            task.cancel()
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers(None)

    # -- requests --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._lost_reason is not None:
            raise ConnectionLostError(self.addr, self._lost_reason)
        if self._transport is None or self._transport.is_closing():
            raise ConnectionLostError(self.addr, "connection is closing")

    async def invoke(self, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """Send request ``cmd`` and return the response (whatever its code).

        Raises ``RequestTimeoutError`` (including the wait for an in-flight slot) or
        ``ConnectionLostError``. ``cmd.opaque`` and ``cmd.flag`` are overwritten.
        """
        self._check_open()
        if self.credentials is not None:
            self._sign(cmd)
        loop = self._loop
        deadline = loop.time() + timeout_ms / 1000
        # This runs for every request: the common case (a free slot, a socket buffer with room)
        # costs no semaphore, no asyncio.timeout and no extra coroutine; only the waits do.
        if self._free_slots > 0:
            self._free_slots -= 1
        else:
            await self._wait_for_slot(deadline, cmd.code, timeout_ms)
            self._check_open()  # it may have closed meanwhile
        try:
            future: asyncio.Future[RemotingCommand] = loop.create_future()
            parts = self._session.send_request(cmd, future, deadline, timeout_ms)
            if deadline < self._expiry_at:
                self._schedule_expiry(deadline)
            try:
                self._send(parts, alone=self._session.requests_pending == 1)
                if self._paused:
                    await self._wait_for_drain(deadline, cmd.code, timeout_ms)
                return await future
            except BaseException:
                # cancelled, or the write failed: an answer, a timeout or a lost connection
                # took the request out of the session already
                self._session.forget(cmd.opaque, future)
                raise
        finally:
            if self._slot_waiters:
                self._release_slot()
            else:
                self._free_slots += 1

    # Timeouts: one loop timer per connection, not one per request (a timer per request was a
    # tenth of a request's cost). It is set for the earliest deadline; requests due later wait
    # for the next round, which sets it again for the earliest one left.

    def _schedule_expiry(self, when: float) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        self._expiry_at = when
        self._expiry = self._loop.call_at(when, self._expire_due)

    def _expire_due(self) -> None:
        self._expiry, self._expiry_at = None, math.inf
        now = self._loop.time()
        expired, next_at = self._session.expire(now)
        for future, code, timeout_ms in expired:
            if not future.done():
                future.set_exception(RequestTimeoutError(self.addr, code, timeout_ms))
        if next_at != math.inf:
            # a timer may fire a little early: never sooner than a millisecond from now
            self._schedule_expiry(max(next_at, now + 0.001))

    async def _wait_for_slot(self, deadline: float, code: int, timeout_ms: float) -> None:
        # A released slot is handed straight to the first waiter, so nobody jumps the queue.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except BaseException as e:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # handed a slot while being cancelled: pass it on
            else:
                waiter.cancel()  # _release_slot skips it
            if isinstance(e, TimeoutError):
                raise RequestTimeoutError(self.addr, code, timeout_ms) from None
            raise

    def _release_slot(self) -> None:
        waiters = self._slot_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._free_slots += 1

    async def _wait_for_drain(self, deadline: float, code: int, timeout_ms: float) -> None:
        # The socket buffer is full: wait instead of queueing more.
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            raise RequestTimeoutError(self.addr, code, timeout_ms) from None

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        """Send request ``cmd`` with the oneway bit: the peer sends no response."""
        self._check_open()
        if self.credentials is not None:
            self._sign(cmd)
        self._send(self._session.send_oneway(cmd))
        if self._paused:  # the socket buffer is full: wait instead of queueing more
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def _sign(self, cmd: RemotingCommand) -> None:
        # A new dict: the producer's ext_fields may be a template shared by many sends.
        credentials = self.credentials
        assert credentials is not None
        cmd.ext_fields = sign_fields(
            cmd.ext_fields,
            cmd.body,
            credentials.access_key,
            credentials.secret_key,
            credentials.security_token,
        )

    def _send(self, parts: list[bytes], *, alone: bool = False) -> None:
        # The callers have checked the connection is open. A request sent while no other one
        # waits for its answer (``alone``: one send awaited at a time) is written at once and
        # nothing is corked: no end-of-turn callback, so no extra turn of the event loop per
        # send. Otherwise the first frame of a turn goes out at once and the frames after it
        # in the same turn are corked and go out together at the end of the turn or every
        # FRAMES_PER_WRITE, so many sends in flight do not cost one syscall each.
        if self._out is None:
            assert self._transport is not None
            if alone:
                self._transport.writelines(parts)
                return
            self._out = []
            self._loop.call_soon(self._flush_out)
            self._transport.writelines(parts)
        else:
            out = self._out
            out.extend(parts)
            self._out_frames += 1
            if self._out_frames >= FRAMES_PER_WRITE:
                self._out = []
                self._out_frames = 0
                assert self._transport is not None
                self._transport.writelines(out)

    def _flush_out(self) -> None:
        out, self._out = self._out, None
        self._out_frames = 0
        if out and self._transport is not None and not self._transport.is_closing():
            self._transport.writelines(out)

    def _wake_writers(self, error: Exception | None) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if error is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(error)

    # -- requests from the peer ------------------------------------------------------------

    def _dispatch(self, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            if cmd.flag & RPC_ONEWAY:
                log.debug("%s: oneway request %d without a handler", self.addr, cmd.code)
            else:
                self._respond(cmd, self._session.not_supported(cmd))
            return
        task = asyncio.get_running_loop().create_task(self._run_handler(handler, cmd))
        self._handler_tasks.add(task)
        task.add_done_callback(self._handler_tasks.discard)

    async def _run_handler(self, handler: RequestHandler, cmd: RemotingCommand) -> None:
        try:
            response = await handler(self, cmd)
        except Exception as e:  # a handler bug must not kill the connection
            log.exception("%s: handler for request %d failed", self.addr, cmd.code)
            response = self._session.failed(cmd, str(e))
        self._respond(cmd, response)

    def _respond(self, request: RemotingCommand, response: RemotingCommand | None) -> None:
        parts = self._session.respond(request, response)
        if parts is not None and self._lost_reason is None and self._transport is not None:
            if not self._transport.is_closing():
                self._transport.writelines(parts)


class ConnectionPool:
    """One connection per address, opened on first use and re-opened after it drops.

    ``handlers`` (request code -> handler) is shared by every connection, so handlers
    registered later apply to connections that already exist.
    """

    def __init__(
        self,
        *,
        connect_timeout_ms: float = 3000,
        requests_inflight_max: int = 1024,
        frame_size_max: int = FRAME_SIZE_MAX,
        credentials: Credentials | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        self.connect_timeout_ms = connect_timeout_ms
        self.credentials = credentials
        self.ssl = ssl  # every connection over TLS (RocketMQ's tls.enable is per client)
        self.requests_inflight_max = requests_inflight_max
        self.frame_size_max = frame_size_max
        self.handlers: dict[int, RequestHandler] = {}
        self._connections: dict[str, Connection] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False

    @property
    def addresses(self) -> list[str]:
        """Addresses with an open connection."""
        return [a for a, c in self._connections.items() if not c.is_closed]

    async def get(self, addr: str) -> Connection:
        """The open connection to ``addr``, connecting if there is none."""
        conn = self._connections.get(addr)
        if conn is not None and not conn.is_closed:
            return conn
        if self._closed:
            raise ClientClosedError("connection pool is closed")
        lock = self._locks.setdefault(addr, asyncio.Lock())
        async with lock:
            conn = self._connections.get(addr)
            if conn is not None and not conn.is_closed:
                return conn
            conn = await Connection.open(
                addr,
                connect_timeout_ms=self.connect_timeout_ms,
                requests_inflight_max=self.requests_inflight_max,
                handlers=self.handlers,
                frame_size_max=self.frame_size_max,
                credentials=self.credentials,
                ssl=self.ssl,
            )
            if self._closed:  # closed while we were connecting
                await conn.aclose()
                raise ClientClosedError("connection pool is closed")
            self._connections[addr] = conn
            return conn

    def cached(self, addr: str) -> Connection | None:
        """The open connection to ``addr`` if there is one (no connecting)."""
        conn = self._connections.get(addr)
        return conn if conn is not None and not conn.is_closed else None

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """Send ``cmd`` to ``addr``; connecting counts against ``timeout_ms``."""
        conn = self.cached(addr)
        if conn is not None:  # the common case: one coroutine less
            return await conn.invoke(cmd, timeout_ms)
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = await self.get(addr)
        remaining_ms = max(timeout_ms - (loop.time() - start) * 1000, 1.0)
        return await conn.invoke(cmd, remaining_ms)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        conn = await self.get(addr)
        await conn.invoke_oneway(cmd)

    async def close(self) -> None:
        """Close every connection and wait until they are closed."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        for conn in connections:
            conn.close()
        await asyncio.gather(*(c.wait_closed() for c in connections))
