"""Connection and pool against a scripted server: opaque matching, timeouts, in-flight cap,
lost connections, broker-initiated requests, protocol errors, reconnects."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import cast

import pytest

from pocketmq.broker.protocol import (
    RPC_ONEWAY,
    FrameDecoder,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    encode_frame,
)
from pocketmq.broker.protocol.headers import GetRouteInfoRequestHeader
from pocketmq.client.connection import (
    CLIENT_VERSION,
    Connection,
    ConnectionPool,
    check_response,
    make_request,
    split_addr,
)
from pocketmq.client.errors import (
    ConnectionLostError,
    RequestTimeoutError,
    TopicNotExistError,
)

from .test_client_fake_server import wait_until

OnRequest = Callable[["Peer", RemotingCommand], Awaitable[None]]


class Peer(asyncio.Protocol):
    """Server side of one connection: hands each decoded command to the test's script."""

    def __init__(self, script: OnRequest, seen: list[RemotingCommand]) -> None:
        self.script = script
        self.seen = seen
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for cmd in self.decoder.feed(data):
            self.seen.append(cmd)
            task = asyncio.get_running_loop().create_task(self.script(self, cmd))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks:
            task.cancel()

    def send(
        self, cmd: RemotingCommand, serialize_type: SerializeType = SerializeType.JSON
    ) -> None:
        assert self.transport is not None
        self.transport.write(encode_frame(cmd, serialize_type))


class Server:
    def __init__(self, script: OnRequest) -> None:
        self.script = script
        self.seen: list[RemotingCommand] = []
        self.peers: list[Peer] = []
        self.server: asyncio.Server | None = None

    @property
    def addr(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    def _make(self) -> Peer:
        peer = Peer(self.script, self.seen)
        self.peers.append(peer)
        return peer

    async def start(self) -> None:
        self.server = await asyncio.get_running_loop().create_server(self._make, "127.0.0.1", 0)

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for peer in self.peers:
            if peer.transport is not None:
                peer.transport.abort()
        await asyncio.sleep(0)
        await self.server.wait_closed()


@contextlib.asynccontextmanager
async def serving(script: OnRequest) -> AsyncIterator[Server]:
    server = Server(script)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def echo(peer: Peer, cmd: RemotingCommand) -> None:
    if not cmd.is_response and not cmd.is_oneway:
        peer.send(cmd.make_response(ResponseCode.SUCCESS, remark=str(cmd.code), body=cmd.body))


async def silent(peer: Peer, cmd: RemotingCommand) -> None:
    pass


def route_request() -> RemotingCommand:
    return make_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic="T"))


async def test_request_shape_and_round_trip() -> None:
    async with serving(echo) as server:
        conn = await Connection.open(server.addr)
        try:
            response = await conn.invoke(make_request(34, body=b"payload"), 2000)
        finally:
            await conn.aclose()
    request = server.seen[0]
    assert request.language == LanguageCode.PYTHON
    assert request.version == CLIENT_VERSION == 479
    assert request.serialize_type == SerializeType.JSON
    assert request.flag == 0 and not request.is_response
    assert response.is_response and response.remark == "34" and response.body == b"payload"


async def test_responses_are_matched_by_opaque_out_of_order() -> None:
    held: list[tuple[Peer, RemotingCommand]] = []

    async def reverse(peer: Peer, cmd: RemotingCommand) -> None:
        held.append((peer, cmd))
        if len(held) == 5:  # answer the last request first
            for p, c in reversed(held):
                p.send(c.make_response(ResponseCode.SUCCESS, remark=c.body.decode()))

    async with serving(reverse) as server:
        conn = await Connection.open(server.addr)
        try:
            results = await asyncio.gather(
                *(conn.invoke(make_request(34, body=str(i).encode()), 5000) for i in range(5))
            )
        finally:
            await conn.aclose()
    assert [r.remark for r in results] == ["0", "1", "2", "3", "4"]
    assert len({c.opaque for c in server.seen}) == 5


async def test_a_rocketmq_binary_response_is_decoded() -> None:
    async def binary(peer: Peer, cmd: RemotingCommand) -> None:
        peer.send(
            cmd.make_response(ResponseCode.SUCCESS, ext_fields={"k": "v"}),
            SerializeType.ROCKETMQ,
        )

    async with serving(binary) as server:
        conn = await Connection.open(server.addr)
        try:
            response = await conn.invoke(route_request(), 2000)
        finally:
            await conn.aclose()
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert response.ext_fields == {"k": "v"}


async def test_timeout_raises_and_forgets_the_request() -> None:
    async with serving(silent) as server:
        conn = await Connection.open(server.addr)
        try:
            with pytest.raises(RequestTimeoutError) as info:
                await conn.invoke(route_request(), 20)
            assert info.value.code == RequestCode.GET_ROUTEINFO_BY_TOPIC
            assert conn.requests_pending == 0
            assert not conn.is_closed  # a timeout does not end the connection
        finally:
            await conn.aclose()


async def test_inflight_cap_holds_back_further_requests() -> None:
    release = asyncio.Event()

    async def hold(peer: Peer, cmd: RemotingCommand) -> None:
        await release.wait()
        peer.send(cmd.make_response(ResponseCode.SUCCESS))

    async with serving(hold) as server:
        conn = await Connection.open(server.addr, requests_inflight_max=2)
        try:
            tasks = [asyncio.create_task(conn.invoke(route_request(), 5000)) for _ in range(5)]
            await wait_until(lambda: len(server.seen) == 2)
            for _ in range(20):
                await asyncio.sleep(0)
            assert len(server.seen) == 2 and conn.requests_pending == 2
            release.set()
            results = await asyncio.gather(*tasks)
            assert [r.code for r in results] == [0] * 5
            assert len(server.seen) == 5
        finally:
            await conn.aclose()


async def test_lost_connection_fails_every_pending_request() -> None:
    got = asyncio.Event()

    async def drop_after_three(peer: Peer, cmd: RemotingCommand) -> None:
        if len(peer.seen) == 3:
            got.set()

    async with serving(drop_after_three) as server:
        conn = await Connection.open(server.addr)
        try:
            tasks = [asyncio.create_task(conn.invoke(route_request(), 5000)) for _ in range(3)]
            await got.wait()
            server.peers[0].transport.abort()  # type: ignore[union-attr]
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(r, ConnectionLostError) for r in results)
            assert conn.is_closed and conn.requests_pending == 0
            with pytest.raises(ConnectionLostError):
                await conn.invoke(route_request(), 1000)
        finally:
            await conn.aclose()


async def test_protocol_error_closes_the_connection() -> None:
    async def garbage(peer: Peer, cmd: RemotingCommand) -> None:
        assert peer.transport is not None
        peer.transport.write(b"\x00\x00\x00\x02\x00\x00")  # length 2 < 4: malformed

    async with serving(garbage) as server:
        conn = await Connection.open(server.addr)
        try:
            with pytest.raises(ConnectionLostError) as info:
                await conn.invoke(route_request(), 5000)
            assert "protocol error" in info.value.reason
        finally:
            await conn.aclose()


async def test_broker_initiated_requests_go_to_handlers() -> None:
    notified: list[RemotingCommand] = []

    async def on_notify(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        notified.append(cmd)
        return None

    async def on_check(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        return cmd.make_response(ResponseCode.SUCCESS, remark="checked")

    async def failing(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        raise RuntimeError("handler bug")

    handlers = {
        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: on_notify,
        RequestCode.CHECK_TRANSACTION_STATE: on_check,
        RequestCode.GET_CONSUMER_RUNNING_INFO: failing,
    }
    async with serving(silent) as server:
        conn = await Connection.open(server.addr, handlers=handlers)
        try:
            await conn.invoke_oneway(make_request(34))  # opens the server side
            await wait_until(lambda: bool(server.peers) and server.seen != [])
            peer = server.peers[0]
            assert server.seen[0].is_oneway
            peer.send(
                RemotingCommand(
                    code=40, flag=RPC_ONEWAY, opaque=7, ext_fields={"consumerGroup": "G"}
                )
            )
            peer.send(RemotingCommand(code=39, opaque=8))
            peer.send(RemotingCommand(code=999, opaque=9))
            peer.send(RemotingCommand(code=307, opaque=10))
            await wait_until(lambda: len(server.seen) == 4)
        finally:
            await conn.aclose()
    assert notified[0].ext_fields == {"consumerGroup": "G"}
    answers = {c.opaque: c for c in server.seen[1:]}
    assert all(c.is_response for c in answers.values())
    assert answers[8].code == ResponseCode.SUCCESS and answers[8].remark == "checked"
    assert answers[9].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert answers[10].code == ResponseCode.SYSTEM_ERROR
    assert 7 not in answers  # oneway: no answer


async def test_pool_reconnects_after_a_drop() -> None:
    async with serving(echo) as server:
        pool = ConnectionPool()
        try:
            first = await pool.get(server.addr)
            assert await pool.get(server.addr) is first
            server.peers[0].transport.abort()  # type: ignore[union-attr]
            await first.wait_closed()
            response = await pool.invoke(server.addr, route_request(), 2000)
            assert response.code == 0
            assert await pool.get(server.addr) is not first
            assert len(server.peers) == 2
        finally:
            await pool.close()


async def test_connect_failure_is_connection_lost() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens here
    pool = ConnectionPool(connect_timeout_ms=2000)
    try:
        with pytest.raises(ConnectionLostError) as info:
            await pool.invoke(f"127.0.0.1:{port}", route_request(), 2000)
        assert info.value.retriable
    finally:
        await pool.close()


def test_helpers() -> None:
    assert split_addr("h:1") == ("h", 1)
    assert split_addr("[::1]:10911") == ("::1", 10911)
    with pytest.raises(ValueError):
        split_addr("nohost")
    cmd = route_request()
    assert cmd.ext_fields == {"topic": "T"} and cmd.language == LanguageCode.PYTHON
    ok = cmd.make_response(ResponseCode.SUCCESS)
    assert check_response(ok) is ok
    assert check_response(cmd.make_response(22), 22).code == 22
    with pytest.raises(TopicNotExistError):
        check_response(cmd.make_response(17, "no route"))
