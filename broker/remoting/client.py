"""A small outbound connection for the broker's own requests (registration with name servers).

The SDK has its own, fuller client; the broker may not import it (layering), and it needs only
request/response with a timeout and a reconnect on the next call. Both keep their
request/response state in the same sans-I/O ``RemotingSession`` (``broker.protocol.session``);
this is its smallest adapter, over asyncio streams.
"""

from __future__ import annotations

import asyncio
import contextlib

from pocketmq.broker.protocol import RemotingCommand
from pocketmq.broker.protocol.session import RemotingSession

__all__ = ["OutboundConnection"]


class OutboundConnection:
    def __init__(self, address: str, *, timeout_s: float = 3.0) -> None:
        host, _, port = address.rpartition(":")
        self.host = host or "127.0.0.1"
        self.port = int(port)
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._session: RemotingSession[object] = RemotingSession()
        self._lock = asyncio.Lock()

    async def request(self, command: RemotingCommand) -> RemotingCommand:
        """One request at a time on this connection; reconnects if the last one broke.

        Raises ``TimeoutError`` after ``timeout_s``, ``OSError`` / ``ConnectionError`` when the
        name server cannot be reached or closes, ``RemoteProtocolError`` for bytes that are
        not the protocol; the connection is closed after any of them.
        """
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
            self._session = RemotingSession()  # a new connection starts a new session
        assert self._reader is not None
        session = self._session
        token = object()
        # the deadline is driven by request()'s asyncio.timeout; the session only records it
        deadline = asyncio.get_running_loop().time() + self.timeout_s
        self._writer.writelines(
            session.send_request(command, token, deadline, self.timeout_s * 1000)
        )
        await self._writer.drain()
        while True:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection")
            _, answers, error = session.receive_data(data)  # a name server starts no requests
            for answered, response in answers:
                if answered is token:
                    return response
            if error is not None:
                raise error

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
