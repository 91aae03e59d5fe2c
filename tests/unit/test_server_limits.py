"""The remoting server's limits against hostile clients, on loopback sockets in-process: partial
frames capped across connections (the oldest go first), a deadline per frame that trickling
bytes do not extend, a first frame due soon after connecting, idle counted in whole frames, room
made at the connection cap, and one log line per limit and interval.

Every wait is bounded and asserts an outcome (closed or not, a reason counted), never a time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pocketmq.broker.protocol import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
)
from pocketmq.broker.protocol.errors import MalformedHeaderError
from pocketmq.broker.remoting.server import Connection, Handler, RemotingServer, ServerLimits

WAIT_S = 5.0  # the most any outcome is waited for


def heartbeat(opaque: int = 1) -> bytes:
    return encode_frame(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=opaque))


def partial_frame(size: int, declared: int = 4 * 1024 * 1024) -> bytes:
    """The first ``size`` bytes of a frame announcing ``declared`` bytes."""
    header = b'{"code":34,"flag":0,"opaque":1}'
    head = struct.pack(">ii", declared, len(header)) + header
    return (head + b"x" * size)[:size]


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def call(self, opaque: int = 1) -> RemotingCommand:
        await self.send(heartbeat(opaque))
        async with asyncio.timeout(WAIT_S):
            while True:
                data = await self.reader.read(65536)
                if not data:
                    raise ConnectionError("closed by the server")
                for frame in self.decoder.feed(data):
                    if frame.opaque == opaque:
                        return frame

    async def closed_by_server(self, wait_s: float = WAIT_S) -> bool:
        try:
            async with asyncio.timeout(wait_s):
                while await self.reader.read(65536):
                    pass
            return True
        except TimeoutError:
            return False
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


Connect = Callable[[], Awaitable[Client]]


@contextlib.asynccontextmanager
async def serving(
    limits: ServerLimits, handlers: dict[int, Handler] | None = None
) -> AsyncIterator[tuple[RemotingServer, Connect]]:
    def answer(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS)

    table: dict[int, Handler] = {RequestCode.HEART_BEAT: answer, **(handlers or {})}
    server = RemotingServer(table, name="test", limits=limits)
    port = await server.start()
    clients: list[Client] = []

    async def connect() -> Client:
        client = Client(*await asyncio.open_connection("127.0.0.1", port))
        clients.append(client)
        return client

    try:
        yield server, connect
    finally:
        for client in clients:
            client.close()
        await server.close()


async def until(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` up to WAIT_S; whether it became true."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(WAIT_S):
            while not condition():
                await asyncio.sleep(0.01)
    return condition()


def test_limits_are_set_by_name() -> None:
    limits = ServerLimits.with_settings(["frame_timeout_s=2.5", "connections-max=10"])
    assert (limits.frame_timeout_s, limits.connections_max) == (2.5, 10)
    assert limits.idle_timeout_s == ServerLimits().idle_timeout_s
    with pytest.raises(ValueError, match="connections_max"):
        ServerLimits.with_settings(["no_such_limit=1"])
    with pytest.raises(ValueError, match="not a whole number"):
        ServerLimits.with_settings(["connections_max=many"])
    with pytest.raises(ValueError, match="more than 0"):
        ServerLimits.with_settings(["frame_timeout_s=0"])


async def test_partial_frames_stay_under_the_cap_and_the_oldest_go_first() -> None:
    chunk = 256 * 1024
    limits = ServerLimits(buffered_bytes_max=1024 * 1024, frame_timeout_s=60)
    async with serving(limits) as (server, connect):
        holders = []
        for i in range(8):  # 2 MiB offered in all, one connection at a time
            client = await connect()
            await client.send(partial_frame(chunk))
            holders.append(client)
            # every byte sent is either held or was let go with a closed connection
            arrived = (i + 1) * chunk
            assert await until(
                lambda arrived=arrived: (
                    server.buffered_bytes + chunk * server.closed_by["buffered_bytes"] == arrived
                )
            )
        assert await until(lambda: server.closed_by["buffered_bytes"] == 4)
        assert server.buffered_bytes_peak <= limits.buffered_bytes_max
        assert server.buffered_bytes == 4 * chunk
        closed = [await c.closed_by_server(0.5) for c in holders]
        assert closed == [True] * 4 + [False] * 4  # the frames that began first went
        assert (await (await connect()).call()).code == ResponseCode.SUCCESS


async def test_a_frame_trickling_in_is_closed_at_its_deadline() -> None:
    frame = heartbeat()
    async with serving(ServerLimits(frame_timeout_s=0.3, idle_timeout_s=60)) as (server, connect):
        slow, steady = await connect(), await connect()
        # one byte at a time: every byte arrives well within the deadline, the frame never does
        closed = False
        for i in range(len(frame) - 1):
            try:
                await slow.send(frame[i : i + 1])
            except ConnectionError:
                closed = True
            await steady.call(i + 1)  # whole frames, as often, keep their connection
            if closed or slow.reader.at_eof():
                closed = True
                break
            await asyncio.sleep(0.05)
        assert closed, "the frame was sent to its last byte but one, the connection still open"
        assert server.closed_by["frame_timeout"] == 1
        assert (await steady.call(999)).code == ResponseCode.SUCCESS


async def test_a_connection_that_sends_no_frame_is_closed_and_a_served_one_stays() -> None:
    limits = ServerLimits(first_request_timeout_s=0.2, idle_timeout_s=60)
    async with serving(limits) as (server, connect):
        silent, served = await connect(), await connect()
        assert (await served.call()).code == ResponseCode.SUCCESS
        assert await silent.closed_by_server()
        assert not await served.closed_by_server(0.5)
        assert server.closed_by == {"first_request_timeout": 1}


async def test_idle_counts_whole_frames_not_bytes() -> None:
    limits = ServerLimits(idle_timeout_s=0.3, frame_timeout_s=60, first_request_timeout_s=60)
    async with serving(limits) as (server, connect):
        quiet = await connect()
        assert (await quiet.call()).code == ResponseCode.SUCCESS
        assert await quiet.closed_by_server()
        assert server.closed_by["idle"] == 1


async def test_a_partial_frame_waiting_on_paused_reading_keeps_its_time() -> None:
    release: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()

    def held(request: RemotingCommand, connection: Connection) -> asyncio.Future[RemotingCommand]:
        return release

    limits = ServerLimits(requests_in_flight_max=1, frame_timeout_s=0.2, idle_timeout_s=60)
    async with serving(limits, {RequestCode.PULL_MESSAGE: held}) as (server, connect):
        client = await connect()
        pull = encode_frame(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=7))
        second = heartbeat(8)
        # the held request and half of the next frame in one read: reading pauses with it
        await client.send(pull + second[:10])
        assert not await client.closed_by_server(1.0)
        release.set_result(RemotingCommand(code=ResponseCode.SUCCESS, flag=1, opaque=7))
        await client.send(second[10:])
        assert (await client.call(9)).code == ResponseCode.SUCCESS
        assert not server.closed_by


async def test_at_the_cap_the_oldest_connection_without_a_frame_makes_room(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limits = ServerLimits(connections_max=4, first_request_timeout_s=60)
    async with serving(limits) as (server, connect):
        served = await connect()
        assert (await served.call()).code == ResponseCode.SUCCESS
        silent = [await connect() for _ in range(3)]
        assert await until(lambda: len(server.connections) == 4)
        with caplog.at_level(logging.WARNING, logger="pocketmq.remoting"):
            newcomers = [await connect() for _ in range(3)]
            for i, newcomer in enumerate(newcomers):
                assert (await newcomer.call(i + 1)).code == ResponseCode.SUCCESS
        assert [await c.closed_by_server(1.0) for c in silent] == [True] * 3
        assert (await served.call(2)).code == ResponseCode.SUCCESS
        assert server.closed_by == {"evicted": 3}
        # three closes, one line (the next may come only after warning_interval_s)
        lines = [r for r in caplog.records if "to admit new ones" in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING


async def test_at_the_cap_with_every_connection_served_the_idlest_makes_room() -> None:
    async with serving(ServerLimits(connections_max=2)) as (server, connect):
        first, second = await connect(), await connect()
        assert (await first.call()).code == ResponseCode.SUCCESS
        assert (await second.call()).code == ResponseCode.SUCCESS
        assert (await first.call(2)).code == ResponseCode.SUCCESS  # second is now the idlest
        third = await connect()
        assert (await third.call()).code == ResponseCode.SUCCESS
        assert await second.closed_by_server()
        assert (await first.call(3)).code == ResponseCode.SUCCESS


async def test_a_malformed_header_field_is_one_line_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def strict(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        raise MalformedHeaderError("topic", None, "missing")

    async with serving(ServerLimits(), {RequestCode.PULL_MESSAGE: strict}) as (server, connect):
        client = await connect()
        with caplog.at_level(logging.WARNING, logger="pocketmq.remoting"):
            await client.send(
                encode_frame(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=5))
            )
            async with asyncio.timeout(WAIT_S):
                frames: list[RemotingCommand] = []
                while not frames:
                    frames = client.decoder.feed(await client.reader.read(65536))
        assert frames[0].code == ResponseCode.SYSTEM_ERROR and "topic" in (frames[0].remark or "")
        records = [r for r in caplog.records if r.name == "pocketmq.remoting"]
        assert len(records) == 1 and records[0].exc_info is None
        assert "refused" in records[0].getMessage()


async def test_a_client_that_does_not_read_its_answers_goes_idle_even_mid_frame() -> None:
    big = b"x" * (4 * 1024 * 1024)

    def large(request: RemotingCommand, connection: Connection) -> RemotingCommand:
        return request.make_response(ResponseCode.SUCCESS, body=big)

    limits = ServerLimits(idle_timeout_s=0.3, frame_timeout_s=0.3, write_buffer_high=64 * 1024)
    async with serving(limits, {RequestCode.PULL_MESSAGE: large}) as (server, connect):
        client = await connect()
        pulls = b"".join(
            encode_frame(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i))
            for i in range(1, 17)
        )
        # 64 MiB of answers it never reads: the server stops reading it, a frame half-sent
        await client.send(pulls + heartbeat(99)[:10])
        assert await until(lambda: bool(server.closed_by))
        assert server.closed_by == {"idle": 1}
