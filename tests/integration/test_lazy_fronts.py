"""The HTTP and gRPC fronts load at their first connection (``broker/http/lazy.py``,
``broker/grpc/lazy.py``): their ports listen from the start, a connection that sends nothing
loads nothing, the first requests (several at once) are answered as usual, and a real
``pocketmq standalone`` maps neither aiohttp's nor grpc's library until a client comes."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")

import grpc  # noqa: E402

from pocketmq.broker.app import Broker  # noqa: E402
from pocketmq.broker.config import BrokerConfig  # noqa: E402
from pocketmq.broker.grpc.lazy import GrpcFrontend, GrpcTls, LazyGrpcFront  # noqa: E402
from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc  # noqa: E402
from pocketmq.broker.http.lazy import LazyHttpFront  # noqa: E402
from pocketmq.broker.http.server import HttpFront  # noqa: E402
from tests.integration.cluster import Cluster  # noqa: E402

TIMEOUT = aiohttp.ClientTimeout(total=30)
GRPC_LIBRARY = "/grpc/_cython/cygrpc"
AIOHTTP_LIBRARY = "/aiohttp/_http_parser"


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(BrokerConfig(port=0, grpc_port=0, http_port=0)) as broker:
        yield broker


async def connect_and_leave(port: int) -> None:
    """What a port check (``/health``, a load balancer) does: connect, send nothing, close."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()


async def query_route(address: str, topic: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        response = await stub.QueryRoute(request, timeout=30)
        return int(response.status.code)


async def test_http_front_answers_its_first_requests_after_loading(broker: Broker) -> None:
    front = broker.http
    assert front is not None and not front.loaded
    # A connection gone before aiohttp accepts it (it starts the load) breaks nothing.
    await connect_and_leave(broker.config.http_port or 0)
    async with aiohttp.ClientSession(f"http://{broker.http_address}", timeout=TIMEOUT) as http:

        async def get(path: str) -> tuple[int, dict[str, object]]:
            async with http.get(path) as response:
                return response.status, await response.json()

        answers = await asyncio.gather(get("/health"), get("/api/broker"), get("/health"))
    assert front.loaded
    assert [status for status, _ in answers] == [200, 200, 200]
    assert answers[0][1]["status"] == "up"
    assert answers[1][1]["broker_name"] == broker.config.broker_name


async def test_an_http_front_that_cannot_load_closes_its_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def build() -> HttpFront:
        raise RuntimeError("no front today")

    front = LazyHttpFront("127.0.0.1", 0, "127.0.0.1", build)
    port = await front.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        # Not left hanging: the connection is reset or closed, and the port refuses after.
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)
        assert "HTTP front off: it could not be loaded" in caplog.text
    finally:
        await front.close()


async def test_grpc_front_starts_at_the_first_byte_and_serves_every_first_call(
    broker: Broker,
) -> None:
    front = broker.grpc
    assert front is not None and not front.loaded
    # A connection that sends nothing (as /health's port check) leaves grpc unloaded.
    await connect_and_leave(broker.config.grpc_port or 0)
    await asyncio.sleep(0.1)
    assert not front.loaded
    broker.topics.create("LazyTopic")
    codes = await asyncio.gather(
        *(query_route(broker.grpc_address or "", "LazyTopic") for _ in range(3)),
        query_route(broker.grpc_address or "", "NoSuchTopic"),
    )
    assert front.loaded
    assert codes == [definition_pb2.Code.OK] * 3 + [definition_pb2.Code.TOPIC_NOT_FOUND]


async def test_both_fronts_loading_at_once_answer(broker: Broker) -> None:
    """The two loads run one import at a time (``services/loading.py``); both are answered."""

    async def health() -> int:
        async with (
            aiohttp.ClientSession(f"http://{broker.http_address}", timeout=TIMEOUT) as http,
            http.get("/health") as response,
        ):
            return response.status

    status, code = await asyncio.gather(
        health(), query_route(broker.grpc_address or "", "NoSuchTopic")
    )
    assert (status, code) == (200, definition_pb2.Code.TOPIC_NOT_FOUND)
    assert broker.http is not None and broker.http.loaded
    assert broker.grpc is not None and broker.grpc.loaded


async def test_a_broker_stopped_while_grpc_loads_stops_grpc_too() -> None:
    async with Broker(BrokerConfig(port=0, grpc_port=0)) as broker:
        front = broker.grpc
        assert front is not None and front.front is not None
        sniffing = front.front
        _, writer = await asyncio.open_connection("127.0.0.1", broker.config.grpc_port or 0)
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        async with asyncio.timeout(10):
            while not sniffing.counts["plaintext"]:  # the first byte is in
                await asyncio.sleep(0.001)
        await asyncio.sleep(0)  # the load starts; the broker stops before it is done
    writer.close()
    assert sniffing.plain_port and sniffing.tls_port  # grpc did start
    for port in (sniffing.plain_port, sniffing.tls_port):
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("127.0.0.1", port)


async def test_a_taken_grpc_port_is_found_at_start(tmp_path: Path) -> None:
    def build() -> GrpcFrontend:
        raise AssertionError("grpc is not loaded to find the port taken")

    tls = GrpcTls("permissive", tmp_path / "cert.pem", tmp_path / "key.pem")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        front = LazyGrpcFront("127.0.0.1", port, "127.0.0.1", tls, build)
        with pytest.raises(OSError, match=f"gRPC port 127.0.0.1:{port} is not available"):
            await front.start()
        await front.close()


def mapped(pid: int, library: str) -> bool:
    return library in Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
async def test_standalone_maps_grpc_and_aiohttp_only_once_used(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        process = cluster.start_standalone(extra_args=["--grpc-port", "0", "--http-port", "0"])
        assert process.popen is not None
        pid = process.popen.pid
        assert not mapped(pid, GRPC_LIBRARY) and not mapped(pid, AIOHTTP_LIBRARY)
        async with (
            aiohttp.ClientSession(f"http://{process.http_address}", timeout=TIMEOUT) as http,
            http.get("/health") as response,
        ):
            assert response.status == 200
            health = await response.json()
        assert health["checks"]["grpc"] == "ok"  # its port listens, grpc not loaded
        assert mapped(pid, AIOHTTP_LIBRARY) and not mapped(pid, GRPC_LIBRARY)
        grpc_address = process.ready_line.split("grpc ")[1].split(",")[0]
        assert await query_route(grpc_address, "NoSuchTopic") == definition_pb2.Code.TOPIC_NOT_FOUND
        assert mapped(pid, GRPC_LIBRARY)


def test_grpc_available_imports_nothing_of_grpc() -> None:
    probe = (
        "import sys\n"
        "from pocketmq.broker.grpc import grpc_available\n"
        "print(grpc_available(), 'grpc' in sys.modules, 'google.protobuf' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert out.split() == ["True", "False", "False"]
