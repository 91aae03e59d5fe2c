"""TLS on the broker's ports: the gRPC port serving TLS and plaintext at once (RocketMQ's
proxy in its permissive tls.server.mode), only TLS when enforcing, a given certificate, and
the remoting port with TLS beside plaintext (4.x clients' tls.enable)."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RequestCode, ResponseCode
from pocketmq.client import Admin, Message, Producer, PullConsumer
from pocketmq.client._core import ClientCore
from pocketmq.client.connection import Connection, make_request, tls_context
from pocketmq.client.errors import ConnectionLostError
from tests.integration.cluster import Cluster, Process, free_port

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")
pytest.importorskip(
    "rocketmq", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
)
pytest.importorskip("cryptography", reason="python3 -m pip install -e '.[grpc]'")

from pocketmq.broker.remoting.tls import make_certificate  # noqa: E402

# The official Python client sends one message; tls_enable is its TLS switch (default False).
# It verifies against grpc's roots: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names our certificate.
SEND_ONE = """
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, tls = sys.argv[1], sys.argv[2], sys.argv[3] == "tls"
producer = Producer(ClientConfiguration(endpoint, Credentials(), request_timeout=10),
                    (topic,), tls_enable=tls)
producer.startup()
try:
    message = Message()
    message.topic = topic
    message.body = sys.argv[3].encode()
    receipt = producer.send(message)
    print(json.dumps({"message_id": receipt.message_id}))
finally:
    producer.shutdown()
"""


def send_one(endpoint: str, topic: str, tls: bool, roots: Path, home: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SEND_ONE, endpoint, topic, "tls" if tls else "plain"],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "HOME": str(home), "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(roots)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def create_topic(namesrv: str, topic: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", "topic", "create", "--topic", topic]
        + ["--namesrv", namesrv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def served_certificate(port: int) -> bytes:
    """The certificate the server presents on 127.0.0.1:``port`` (DER), unverified."""
    pem = ssl.get_server_certificate(("127.0.0.1", port))
    return ssl.PEM_cert_to_DER_cert(pem)


def query_route(port: int, credentials: object, topic: str) -> object:
    import grpc

    from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc

    target = f"127.0.0.1:{port}"
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        return stub.QueryRoute(request, timeout=5)


@pytest.fixture(scope="module")
def permissive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """A standalone broker with the defaults: gRPC permissive, a self-signed certificate in
    the data folder; the remoting port with TLS too."""
    with Cluster(tmp_path_factory.mktemp("tls")) as cluster:
        grpc_port = free_port()
        broker = cluster.start_standalone(
            extra_args=["--grpc-port", str(grpc_port), "--remoting-tls"]
        )
        broker.extra["grpc_port"] = grpc_port
        broker.extra["namesrv"] = f"127.0.0.1:{broker.extra['namesrv_port']}"
        create_topic(broker.extra["namesrv"], "tls-topic")
        yield broker


def test_official_client_over_tls_and_plaintext_on_one_port(
    permissive: Process, tmp_path: Path
) -> None:
    cert = permissive.extra["data"] / "tls" / "pocketmq-cert.pem"
    assert cert.exists()  # made at first start
    endpoint = f"127.0.0.1:{permissive.extra['grpc_port']}"
    sent = [send_one(endpoint, "tls-topic", tls, cert, tmp_path) for tls in (True, False)]
    assert len({s["message_id"] for s in sent}) == 2
    # What the port presents is the certificate of the data folder.
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    assert served_certificate(permissive.extra["grpc_port"]) == der


def test_a_client_trusting_another_certificate_is_refused(permissive: Process) -> None:
    import grpc

    other, _ = make_certificate(["127.0.0.1"])
    with pytest.raises(grpc.RpcError) as refused:
        query_route(
            permissive.extra["grpc_port"],
            grpc.ssl_channel_credentials(root_certificates=other),
            "tls-topic",
        )
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_sdk_connection_over_remoting_tls(permissive: Process) -> None:
    cert = permissive.extra["data"] / "tls" / "pocketmq-cert.pem"
    for context in (tls_context(cert), tls_context(), None):  # verified, unverified, plain
        connection = await Connection.open(permissive.address, ssl=context)
        try:
            answer = await connection.invoke(make_request(RequestCode.GET_ALL_TOPIC_CONFIG), 5000)
            assert answer.code == ResponseCode.SUCCESS
            assert b"tls-topic" in (answer.body or b"")
            tls = connection._transport.get_extra_info("ssl_object")  # type: ignore[union-attr]
            assert (tls is not None) == (context is not None)
        finally:
            await connection.aclose()
    # Verifying against a certificate the broker does not have fails the handshake.
    other = permissive.extra["data"] / "other.pem"
    other.write_bytes(make_certificate(["127.0.0.1"])[0])
    with pytest.raises(ConnectionLostError):
        await Connection.open(permissive.address, ssl=tls_context(other))


def test_enforcing_refuses_plaintext_and_serves_the_given_certificate(tmp_path: Path) -> None:
    import grpc

    cert_pem, key_pem = make_certificate(["127.0.0.1"])
    cert, key = tmp_path / "given.pem", tmp_path / "given.key"
    cert.write_bytes(cert_pem)
    key.write_bytes(key_pem)
    (tmp_path / "cluster").mkdir()
    with Cluster(tmp_path / "cluster") as cluster:
        grpc_port = free_port()
        args = ["--grpc-port", str(grpc_port), "--grpc-tls", "enforcing"]
        cluster.start_standalone(extra_args=[*args, "--tls-cert", str(cert), "--tls-key", str(key)])
        with pytest.raises(grpc.RpcError) as refused:
            query_route(grpc_port, None, "no-such-topic")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        answer = query_route(
            grpc_port, grpc.ssl_channel_credentials(root_certificates=cert_pem), "no-such-topic"
        )
        assert answer.status.code == 40402  # TOPIC_NOT_FOUND: the call got through
        assert served_certificate(grpc_port) == ssl.PEM_cert_to_DER_cert(cert_pem.decode())


async def test_sdk_core_over_tls_to_name_server_and_broker(permissive: Process) -> None:
    """``tls=True``: the name server's port and the broker's, both over TLS; the connections
    the pool holds are TLS ones; ``tls_ca`` verifies against the standalone's certificate."""
    cert = permissive.extra["data"] / "tls" / "pocketmq-cert.pem"
    for options in ({"tls": True}, {"tls_ca": cert}):
        core = ClientCore(namesrv=permissive.extra["namesrv"], **options)  # type: ignore[arg-type]
        try:
            route = await core.routes.fetch("tls-topic")
            assert route.queue_datas
            masters = await core.master_brokers()
            answer = await core.invoke(
                next(iter(masters.values())), make_request(RequestCode.GET_ALL_TOPIC_CONFIG), 5000
            )
            assert b"tls-topic" in (answer.body or b"")
            for addr in (permissive.extra["namesrv"], *masters.values()):
                connection = core.pool.cached(addr)
                assert connection is not None
                assert connection._transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]
        finally:
            await core.close()


async def test_sdk_clients_over_tls_from_the_environment(
    permissive: Process, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POCKETMQ_TLS_CA (as -Dtls.enable for every RocketMQ client of a JVM): a producer and a
    pull consumer, unchanged, talk TLS to the name server and the broker, verifying them."""
    cert = permissive.extra["data"] / "tls" / "pocketmq-cert.pem"
    monkeypatch.setenv("POCKETMQ_TLS_CA", str(cert))
    namesrv = permissive.extra["namesrv"]
    async with Producer("tls-producer", namesrv=namesrv) as producer:
        sent = await producer.send(Message(topic="tls-topic", body=b"over TLS"))
        assert producer._core.pool.addresses
        for addr in producer._core.pool.addresses:
            connection = producer._core.pool.cached(addr)
            assert connection is not None
            assert connection._transport.get_extra_info("ssl_object") is not None  # type: ignore[union-attr]
    async with PullConsumer(namesrv=namesrv) as puller:
        pulled = await puller.pull(sent.queue, sent.queue_offset, 1)
        assert pulled.messages[0].body == b"over TLS"
        assert puller._core.pool.ssl is not None
    monkeypatch.setenv("POCKETMQ_TLS_CA", str(permissive.extra["data"] / "other.pem"))
    (permissive.extra["data"] / "other.pem").write_bytes(make_certificate(["127.0.0.1"])[0])
    with pytest.raises(ConnectionLostError):
        async with Producer("tls-producer-2", namesrv=namesrv) as producer:
            await producer.send(Message(topic="tls-topic", body=b"refused"))


async def test_sniffing_front_routes_by_first_byte_and_knows_the_peer() -> None:
    """The front sends a connection opening with 0x16 to the TLS listener and any other to the
    plaintext one, both ways, and maps the loopback connection back to the client's address."""
    import asyncio

    from pocketmq.broker.grpc.tls import SniffingFront

    seen: dict[str, tuple[bytes, int]] = {}

    def backend(name: str) -> object:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                data = await reader.readexactly(4)
                seen[name] = (data, writer.get_extra_info("peername")[1])
                writer.write(name.encode() + data)
                await writer.drain()
                await reader.read()  # open until the client closes
            finally:
                writer.close()

        return serve

    tls_server = await asyncio.start_server(backend("tls"), "127.0.0.1", 0)  # type: ignore[arg-type]
    plain_server = await asyncio.start_server(backend("plain"), "127.0.0.1", 0)  # type: ignore[arg-type]
    front = SniffingFront(
        tls_server.sockets[0].getsockname()[1], plain_server.sockets[0].getsockname()[1]
    )
    port = await front.start("127.0.0.1", 0)
    try:
        for first, name in ((b"\x16\x03\x01\x00", "tls"), (b"PRI ", "plain")):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(first[:1])
            await writer.drain()
            await asyncio.sleep(0.05)  # the rest after the side is picked
            writer.write(first[1:])
            answer = await reader.readexactly(len(name) + 4)
            assert answer == name.encode() + first
            data, loopback_port = seen[name]
            assert data == first
            own = writer.get_extra_info("sockname")[1]
            assert front.peer_of(f"ipv4:127.0.0.1:{loopback_port}") == f"ipv4:127.0.0.1:{own}"
            writer.close()
            await writer.wait_closed()
        assert front.counts == {"tls": 1, "plaintext": 1}
    finally:
        await front.close()
        for backend_server in (tls_server, plain_server):
            backend_server.close()
            await backend_server.wait_closed()


async def test_remoting_listener_serves_both_and_drops_the_silent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sniffing_server``: plaintext and TLS clients on one port; a connection that sends
    nothing is closed at the first-byte deadline; a broken handshake leaves the port serving."""
    import asyncio

    from pocketmq.broker.remoting import tls as remoting_tls

    monkeypatch.setattr(remoting_tls, "FIRST_BYTE_TIMEOUT_S", 0.2)
    cert, key = remoting_tls.ensure_certificate(tmp_path, ["127.0.0.1"])

    served: list[asyncio.BaseTransport] = []

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            served.append(transport)
            self.transport = transport
            self.tls = transport.get_extra_info("ssl_object") is not None

        def data_received(self, data: bytes) -> None:
            self.transport.write((b"tls:" if self.tls else b"plain:") + data)  # type: ignore[attr-defined]

    server = await remoting_tls.sniffing_server(
        Echo, "127.0.0.1", 0, remoting_tls.server_context(cert, key)
    )
    port = server.sockets[0].getsockname()[1]
    try:
        # a broken handshake first: 0x16, then garbage
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x16\x03\x01\x00\x05hello")
        assert await reader.read() == b""  # closed by the server
        await closed(writer)
        for context, expected in ((None, b"plain:ping"), (tls_context(cert), b"tls:ping")):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1" if context else None
            )
            writer.write(b"ping")
            assert await reader.readexactly(len(expected)) == expected
            await closed(writer)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await reader.read() == b""  # silent: closed at the deadline
        await closed(writer)
    finally:
        server.close()
        for transport in served:
            transport.close()
        await asyncio.sleep(0)  # the transports' close callbacks


async def closed(writer: object) -> None:
    import asyncio

    assert isinstance(writer, asyncio.StreamWriter)
    writer.close()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        await writer.wait_closed()


async def test_sdk_clients_take_tls_options(permissive: Process) -> None:
    """``tls_ca=`` (or ``tls=True``) on the client itself, without the environment."""
    cert = permissive.extra["data"] / "tls" / "pocketmq-cert.pem"
    namesrv = permissive.extra["namesrv"]
    async with Producer("tls-option-producer", namesrv=namesrv, tls_ca=cert) as producer:
        sent = await producer.send(Message(topic="tls-topic", body=b"option"))
        assert producer._core.pool.ssl is not None
    async with PullConsumer(namesrv=namesrv, tls=True) as puller:  # unverified, as RocketMQ's
        pulled = await puller.pull(sent.queue, sent.queue_offset, 1)
        assert pulled.messages[0].body == b"option"
        assert puller._core.pool.ssl is not None
    async with Admin(namesrv, tls=True) as admin:
        assert "tls-topic" in await admin.list_topics()
    async with PullConsumer(namesrv=namesrv) as plain:  # the port serves plaintext alike
        assert plain._core.pool.ssl is None
        assert (await plain.pull(sent.queue, sent.queue_offset, 1)).messages
