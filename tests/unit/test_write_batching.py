"""Frames sent in one turn of the event loop share system calls, a bounded number per call: the
broker answers one read of many requests in writes of RESPONSES_PER_WRITE, the SDK sends the
requests of one turn in writes of FRAMES_PER_WRITE (so neither side waits for the other's last
frame of a long burst)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from pocketmq.broker.protocol import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
)
from pocketmq.broker.remoting.server import RESPONSES_PER_WRITE, RemotingServer
from pocketmq.broker.remoting.server import Connection as ServerConnection
from pocketmq.client.connection import FRAMES_PER_WRITE, make_request
from pocketmq.client.connection import Connection as ClientConnection


class RecordingTransport:
    """Keeps each ``writelines``/``write`` call as the frames it held."""

    def __init__(self) -> None:
        self.writes: list[list[RemotingCommand]] = []

    def writelines(self, parts: Any) -> None:
        self.writes.append(FrameDecoder().feed(b"".join(parts)))

    def write(self, data: bytes) -> None:
        self.writelines([data])

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def request(opaque: int) -> RemotingCommand:
    cmd = make_request(RequestCode.HEART_BEAT)
    cmd.opaque = opaque
    return cmd


async def test_one_read_of_many_requests_is_answered_in_bounded_writes() -> None:
    def answer(req: RemotingCommand, conn: ServerConnection) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS)

    server = RemotingServer({RequestCode.HEART_BEAT: answer})
    connection = ServerConnection(server)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    count = 3 * RESPONSES_PER_WRITE + 5
    connection.data_received(b"".join(encode_frame(request(i)) for i in range(1, count + 1)))
    assert [len(w) for w in transport.writes] == [RESPONSES_PER_WRITE] * 3 + [5]
    answered = [cmd.opaque for write in transport.writes for cmd in write]
    assert answered == list(range(1, count + 1))  # in order, each once


async def test_requests_of_one_turn_go_out_in_bounded_writes() -> None:
    connection = ClientConnection("127.0.0.1:1")
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    count = 2 * FRAMES_PER_WRITE + 7
    calls = [
        asyncio.ensure_future(connection.invoke(make_request(RequestCode.HEART_BEAT), 5000))
        for _ in range(count)
    ]
    await asyncio.sleep(0)  # one turn: every call sends its request
    await asyncio.sleep(0)  # the next: the rest goes out at the end of the first
    # the first request of the turn at once, then full writes, then the rest
    assert [len(w) for w in transport.writes] == [1, FRAMES_PER_WRITE, FRAMES_PER_WRITE, 6]
    sent = [cmd.opaque for write in transport.writes for cmd in write]
    assert sent == sorted(sent) and len(set(sent)) == count
    for call in calls:
        call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*calls)
