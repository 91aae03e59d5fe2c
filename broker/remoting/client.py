"""A small outbound connection for the broker's own requests (registration with name servers).

The SDK has its own, fuller client; the broker may not import it (layering), and it needs only
request/response with a timeout and a reconnect on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools

from pocketmq.broker.protocol import FrameDecoder, RemotingCommand, encode_frame

__all__ = ["OutboundConnection"]


class OutboundConnection:
    def __init__(self, address: str, *, timeout_s: float = 3.0) -> None:
        host, _, port = address.rpartition(":")
        self.host = host or "127.0.0.1"
        self.port = int(port)
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._opaque = itertools.count(1)
        self._lock = asyncio.Lock()

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        """One request at a time on this connection; reconnects if the last one broke."""
        async with self._lock:
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel that arrives
                # as the exchange completes, and the caller's task then never stops.
                async with asyncio.timeout(self.timeout_s):
                    return await self._exchange(command)
            except BaseException:
                await self.close()
                raise

    async def _exchange(self, command: RemotingCommand) -> RemotingCommand:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        command.opaque = next(self._opaque)
        self._writer.write(encode_frame(command))
        await self._writer.drain()
        decoder = FrameDecoder()
        while True:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            for frame in decoder.feed(data):
                if frame.is_response and frame.opaque == command.opaque:
                    return frame

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
