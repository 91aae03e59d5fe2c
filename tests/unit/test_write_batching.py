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


async def test_a_request_alone_in_flight_is_written_at_once_without_corking() -> None:
    """One send awaited at a time: each request is its own write, made in the call, and
    leaves nothing corked (no end-of-turn callback, so no extra turn of the loop per send)."""
    connection = ClientConnection("127.0.0.1:1")
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    for round_ in range(1, 4):
        call = asyncio.ensure_future(connection.invoke(make_request(RequestCode.HEART_BEAT), 5000))
        await asyncio.sleep(0)  # the call runs up to its wait for the answer
        assert len(transport.writes) == round_  # written in the call itself
        assert connection._out is None  # nothing corked, no flush pending
        sent = transport.writes[-1][0]
        connection.data_received(encode_frame(sent.make_response(ResponseCode.SUCCESS)))
        assert (await call).opaque == sent.opaque
    assert [len(w) for w in transport.writes] == [1, 1, 1]


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
    # the first request, alone in flight, at once; the second, the first of the turn with
    # others in flight, at once too; then full writes, then the rest
    assert [len(w) for w in transport.writes] == [1, 1, FRAMES_PER_WRITE, FRAMES_PER_WRITE, 5]
    sent = [cmd.opaque for write in transport.writes for cmd in write]
    assert sent == sorted(sent) and len(set(sent)) == count
    for call in calls:
        call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*calls)


def _future_server() -> tuple[ServerConnection, RecordingTransport, list[asyncio.Future[Any]]]:
    """A server connection whose HEART_BEAT handler answers through a future (as a sync-flush
    send does), with the futures it handed out."""
    futures: list[asyncio.Future[Any]] = []

    def later(req: RemotingCommand, conn: ServerConnection) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        futures.append(future)
        return future

    server = RemotingServer({RequestCode.HEART_BEAT: later})
    connection = ServerConnection(server)
    transport = RecordingTransport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport, futures


async def test_the_answer_to_the_only_request_in_hand_corks_nothing() -> None:
    connection, transport, futures = _future_server()
    for opaque in (1, 2):  # one at a time: each answered before the next is sent
        first = request(opaque)
        connection.data_received(encode_frame(first))
        assert len(transport.writes) == opaque - 1 and len(futures) == opaque  # not yet
        futures[-1].set_result(first.make_response(ResponseCode.SUCCESS))
        await asyncio.sleep(0)  # the future's callback
        assert [cmd.opaque for cmd in transport.writes[-1]] == [opaque]  # written at once
        assert connection._corked is None  # and nothing left corked for the end of the turn
    assert [len(w) for w in transport.writes] == [1, 1]


async def test_answers_finished_in_one_turn_share_a_write_after_the_first() -> None:
    connection, transport, futures = _future_server()
    requests = [request(opaque) for opaque in (1, 2, 3)]
    connection.data_received(b"".join(encode_frame(r) for r in requests))
    assert transport.writes == [] and len(futures) == 3
    for future, sent in zip(futures, requests, strict=True):
        future.set_result(sent.make_response(ResponseCode.SUCCESS))
    await asyncio.sleep(0)  # the three callbacks run in one turn
    await asyncio.sleep(0)  # and the corked ones go out at its end
    # the first at once, the other two together, in order
    assert [[cmd.opaque for cmd in write] for write in transport.writes] == [[1], [2, 3]]
