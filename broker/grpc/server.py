"""The gRPC front-end's life cycle: a ``grpc.aio`` server inside the broker's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.grpc.service import GrpcSettings, MessagingService
from pocketmq.broker.grpc.stubs import service_pb2_grpc

__all__ = ["GrpcFrontend", "GrpcSettings"]

log = logging.getLogger("pocketmq.grpc")

# A request carries at most one 4 MiB body plus properties; the rest is room for batches.
MESSAGE_SIZE_MAX = 16 * 1024 * 1024
CONCURRENT_STREAMS_MAX = 1000  # per connection: receives are long polls, keep them bounded
HOUSEKEEPING_S = 10.0


class GrpcFrontend:
    def __init__(self, broker: BrokerCore, settings: GrpcSettings) -> None:
        import grpc

        self.broker = broker
        self.settings = settings
        self.service = MessagingService(broker, settings)
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MESSAGE_SIZE_MAX),
                ("grpc.max_send_message_length", MESSAGE_SIZE_MAX),
                ("grpc.max_concurrent_streams", CONCURRENT_STREAMS_MAX),
                ("grpc.so_reuseport", 0),
            ]
        )
        service_pb2_grpc.add_MessagingServiceServicer_to_server(self.service, self.server)
        self._housekeeping: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.settings.advertised_host}:{self.settings.port}"

    async def start(self) -> int:
        target = f"{self.settings.host}:{self.settings.port}"
        try:
            port = self.server.add_insecure_port(target)
        except RuntimeError as error:  # grpc says "Failed to bind" this way
            raise OSError(f"gRPC port {target} is not available: {error}") from None
        if port == 0:
            raise OSError(f"gRPC port {target} is not available (in use?)")
        self.settings.port = port
        await self.server.start()
        self._housekeeping = asyncio.create_task(self._expire_loop(), name="grpc-housekeeping")
        log.info("gRPC front-end (apache.rocketmq.v2) on %s", self.address)
        return port

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
        # Long polls and telemetry streams are cut; clients reconnect elsewhere.
        await self.server.stop(grace=0.5)
