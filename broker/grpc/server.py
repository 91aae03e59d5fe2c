"""The gRPC front-end's life cycle: a ``grpc.aio`` server inside the broker's event loop.

The service's handlers are registered here rather than by the generated
``add_MessagingServiceServicer_to_server``: a request body that is not the method's protobuf
would make the generated deserializer raise inside ``grpc.aio``, which logs a traceback and
answers UNKNOWN for every such call. Here the body is parsed leniently and a malformed one is
answered INVALID_ARGUMENT with one log line, for unary calls and for a message of a stream.

TLS (``GrpcTls``), as RocketMQ's proxy ``tls.server.mode``: ``permissive`` (the default) serves
TLS and plaintext on the one public port through ``broker.tls.SniffingFront`` in front of two
loopback listeners of the grpc server; ``enforcing`` is grpc's own TLS port; ``off`` its
plaintext port. The certificate is given, or made self-signed in the data folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NoReturn

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.grpc.lazy import TLS_MODES, GrpcTls
from pocketmq.broker.grpc.service import GrpcSettings, MessagingService
from pocketmq.broker.grpc.stubs import service_pb2
from pocketmq.broker.grpc.tls import SniffingFront

__all__ = ["TLS_MODES", "GrpcFrontend", "GrpcSettings", "GrpcTls", "checked_handler"]

log = logging.getLogger("pocketmq.grpc")

# A request carries at most one 4 MiB body plus properties; the rest is room for batches.
MESSAGE_SIZE_MAX = 16 * 1024 * 1024
CONCURRENT_STREAMS_MAX = 1000  # per connection: receives are long polls, keep them bounded
HOUSEKEEPING_S = 10.0
# A connection must finish the HTTP/2 handshake this soon or is closed (grpc's default of
# 120 s lets idle sockets pile up); the remoting ports' first_request_timeout_s, in ms.
HANDSHAKE_TIMEOUT_MS = 15_000
SERVICE_NAME = "MessagingService"


class _ClientContext:
    """A call's context as grpc's, but ``peer()`` the client's own address behind the
    sniffing front rather than the front's loopback connection."""

    __slots__ = ("_context", "_peer")

    def __init__(self, context: Any, peer: str) -> None:
        self._context = context
        self._peer = peer

    def peer(self) -> str:
        return self._peer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def _with_peer(
    peer_of: Callable[[str], str] | None, handle: Callable[..., Any]
) -> Callable[..., Any]:
    if peer_of is None:
        return handle
    if inspect.isasyncgenfunction(handle):

        async def streamed(request: Any, context: Any) -> AsyncIterator[Any]:
            async for response in handle(request, _ClientContext(context, peer_of(context.peer()))):
                yield response

        return streamed

    async def unary(request: Any, context: Any) -> Any:
        return await handle(request, _ClientContext(context, peer_of(context.peer())))

    return unary


class Malformed:
    """What the lenient deserializer hands on for a body that is not the method's protobuf."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _lenient(message_type: Any) -> Callable[[bytes], Any]:
    parse = message_type.FromString

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as error:  # protobuf's DecodeError, or whatever a broken body raises
            return Malformed(str(error) or type(error).__name__)

    return deserialize


async def _refuse(method: str, context: Any, bad: Malformed) -> NoReturn:
    import grpc

    log.warning("gRPC %s from %s: malformed request: %s", method, context.peer(), bad.reason)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {bad.reason}")
    raise AssertionError("context.abort returned")  # it always raises


async def _until_malformed(
    requests: AsyncIterator[Any], found: list[Malformed]
) -> AsyncIterator[Any]:
    """The messages of a request stream up to the first malformed one (kept in ``found``):
    the handler sees the stream end there and finishes; the call is then refused."""
    async for request in requests:
        if type(request) is Malformed:
            found.append(request)
            return
        yield request


def _unary_unary(name: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> Any:
        if type(request) is Malformed:
            await _refuse(name, context, request)
        return await behaviour(request, context)

    return handle


def _unary_stream(name: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(request: Any, context: Any) -> AsyncIterator[Any]:
        if type(request) is Malformed:
            await _refuse(name, context, request)
        async for response in behaviour(request, context):
            yield response

    return handle


def _stream_unary(name: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(requests: AsyncIterator[Any], context: Any) -> Any:
        found: list[Malformed] = []
        response = await behaviour(_until_malformed(requests, found), context)
        if found:
            await _refuse(name, context, found[0])
        return response

    return handle


def _stream_stream(name: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
    async def handle(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        found: list[Malformed] = []
        async for response in behaviour(_until_malformed(requests, found), context):
            yield response
        if found:
            await _refuse(name, context, found[0])

    return handle


def checked_handler(servicer: Any, peer_of: Callable[[str], str] | None = None) -> Any:
    """The ``grpc.GenericRpcHandler`` of every method of ``apache.rocketmq.v2.MessagingService``
    on ``servicer``, each parsing its requests leniently (see the module's docstring);
    ``peer_of`` maps grpc's peer address to the client's (behind the sniffing front)."""
    import grpc

    service = service_pb2.DESCRIPTOR.services_by_name[SERVICE_NAME]
    handlers: dict[str, Any] = {}
    for method in service.methods:
        name = method.name
        behaviour = getattr(servicer, name)
        request_type = getattr(service_pb2, method.input_type.name)
        response_type = getattr(service_pb2, method.output_type.name)
        codec = {
            "request_deserializer": _lenient(request_type),
            "response_serializer": response_type.SerializeToString,
        }
        if method.client_streaming and method.server_streaming:
            handlers[name] = grpc.stream_stream_rpc_method_handler(
                _with_peer(peer_of, _stream_stream(name, behaviour)), **codec
            )
        elif method.client_streaming:
            handlers[name] = grpc.stream_unary_rpc_method_handler(
                _with_peer(peer_of, _stream_unary(name, behaviour)), **codec
            )
        elif method.server_streaming:
            handlers[name] = grpc.unary_stream_rpc_method_handler(
                _with_peer(peer_of, _unary_stream(name, behaviour)), **codec
            )
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(
                _with_peer(peer_of, _unary_unary(name, behaviour)), **codec
            )
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


class GrpcFrontend:
    def __init__(
        self, broker: BrokerCore, settings: GrpcSettings, tls: GrpcTls | None = None
    ) -> None:
        import grpc

        self.broker = broker
        self.settings = settings
        self.tls = tls or GrpcTls(mode="off")
        self.service = MessagingService(broker, settings)
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MESSAGE_SIZE_MAX),
                ("grpc.max_send_message_length", MESSAGE_SIZE_MAX),
                ("grpc.max_concurrent_streams", CONCURRENT_STREAMS_MAX),
                ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
                ("grpc.so_reuseport", 0),
            ]
        )
        self.front: SniffingFront | None = None
        # The front is known before the server starts; its peer map is filled per connection.
        peer_of = self._peer_of if self.tls.mode == "permissive" else None
        self.server.add_generic_rpc_handlers((checked_handler(self.service, peer_of),))
        self._housekeeping: asyncio.Task[None] | None = None
        self.cert_file: Path | None = None  # the certificate served, when TLS is on

    def _peer_of(self, peer: str) -> str:
        return self.front.peer_of(peer) if self.front is not None else peer

    @property
    def address(self) -> str:
        return f"{self.settings.advertised_host}:{self.settings.port}"

    def _credentials(self) -> Any:
        import grpc

        assert self.tls.cert is not None and self.tls.key is not None
        self.cert_file = self.tls.cert
        return grpc.ssl_server_credentials(
            [(self.tls.key.read_bytes(), self.tls.cert.read_bytes())]
        )

    def _add_port(self, target: str, credentials: Any = None) -> int:
        try:
            if credentials is None:
                port = self.server.add_insecure_port(target)
            else:
                port = self.server.add_secure_port(target, credentials)
        except RuntimeError as error:  # grpc says "Failed to bind" this way
            raise OSError(f"gRPC port {target} is not available: {error}") from None
        if port == 0:
            raise OSError(f"gRPC port {target} is not available (in use?)")
        return int(port)

    async def start(self) -> int:
        target = f"{self.settings.host}:{self.settings.port}"
        mode = self.tls.mode
        if mode == "off":
            port = self._add_port(target)
        elif mode == "enforcing":
            port = self._add_port(target, self._credentials())
        else:
            # grpcio serves one kind per port: TLS and plaintext on two loopback ports, the
            # public one a front that sends each connection to one of them by its first byte.
            tls_port = self._add_port("127.0.0.1:0", self._credentials())
            plain_port = self._add_port("127.0.0.1:0")
            self.front = SniffingFront(tls_port, plain_port)
        await self.server.start()
        if self.front is not None:
            try:
                port = await self.front.start(self.settings.host, self.settings.port)
            except OSError as error:
                await self.server.stop(grace=None)
                raise OSError(f"gRPC port {target} is not available: {error}") from None
        self.settings.port = port
        self._start_housekeeping()
        served = {"off": "plaintext", "enforcing": "TLS", "permissive": "TLS and plaintext"}
        log.info("gRPC front-end (apache.rocketmq.v2) on %s, %s", self.address, served[mode])
        return port

    async def start_behind(self, front: SniffingFront) -> tuple[int, int]:
        """Permissive mode behind ``front``, already listening on the public port (``lazy.py``
        starts grpc at its first connection): grpc's TLS and plaintext loopback ports."""
        assert self.tls.mode == "permissive"
        self.front = front
        tls_port = self._add_port("127.0.0.1:0", self._credentials())
        plain_port = self._add_port("127.0.0.1:0")
        await self.server.start()
        self._start_housekeeping()
        log.info("gRPC front-end (apache.rocketmq.v2) loaded, serving %s", self.address)
        return tls_port, plain_port

    def _start_housekeeping(self) -> None:
        self._housekeeping = asyncio.create_task(self._expire_loop(), name="grpc-housekeeping")

    async def _expire_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            try:
                self.service.sessions.expire(loop.time())
            except Exception:
                log.exception("gRPC session housekeeping failed")

    async def close(self) -> None:
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        if self.front is not None:
            await self.front.close()  # first: no new connection reaches the loopback ports
        # Long polls and telemetry streams are cut; clients reconnect elsewhere.
        await self.server.stop(grace=0.5)
