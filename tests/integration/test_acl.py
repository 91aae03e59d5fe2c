"""ACL against a real ``pocketmq standalone`` process started with ``--acl-file``: the broker's
and the name server's remoting ports, the gRPC front, our SDK and CLI.

``pytest tests/integration/test_acl.py -s`` prints, at the end, how many requests of each code
these tests saw allowed and refused (the answers' codes, counted by the tests)."""

from __future__ import annotations

import asyncio
import datetime
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import (
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicConfigSerializeWrapper,
    encode_json_body,
)
from pocketmq.broker.protocol.signing import sign_fields
from pocketmq.client import Admin, Message, Producer, SimpleConsumer
from pocketmq.client.errors import BrokerError, RouteNotFoundError
from tests.integration.cluster import Cluster, Process, free_port
from tests.integration.raw import RawClient

ACL = """\
accounts:
  - accessKey: app
    secretKey: app-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB|SUB, Audit=SUB]
    groupPerms: [billing=SUB]
  - accessKey: ops
    secretKey: ops-secret
    admin: true
"""
APP = ("app", "app-secret")
OPS = ("ops", "ops-secret")

# What the tests saw, per request code: "allowed" / "refused" (NO_PERMISSION).
SEEN: Counter[tuple[int, str]] = Counter()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    root = tmp_path_factory.mktemp("acl")
    (root / "plain_acl.yml").write_text(ACL)
    grpc = pytest.importorskip("grpc") and free_port()
    with Cluster(root) as cluster:
        process = cluster.start_standalone(
            extra_args=["--acl-file", str(root / "plain_acl.yml"), "--grpc-port", str(grpc)]
        )
        process.extra["namesrv"] = f"127.0.0.1:{process.extra['namesrv_port']}"
        process.extra["grpc"] = f"127.0.0.1:{grpc}"
        yield process
    print("\nrequests seen by tests/integration/test_acl.py (code: allowed / refused)")
    for code in sorted({code for code, _ in SEEN}):
        print(f"  {code:>6}: {SEEN[code, 'allowed']:>3} / {SEEN[code, 'refused']:>3}")


def call(
    address: str,
    code: int,
    fields: dict[str, str] | None = None,
    body: bytes | None = None,
    keys: tuple[str, str] | None = None,
) -> RemotingCommand:
    ext = dict(fields or {})
    if keys is not None:
        ext = sign_fields(ext, body, *keys)
    with RawClient(address) as raw:
        response = raw.call(RemotingCommand(code=code, ext_fields=ext, body=body))
    SEEN[code, "refused" if response.code == ResponseCode.NO_PERMISSION else "allowed"] += 1
    return response


BROKER_ADMIN = [
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "Scratch", "readQueueNums": "1"}),
    (RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "Scratch"}),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}),
    (RequestCode.POCKETMQ_CLOCK, {}),
    (RequestCode.POCKETMQ_MESSAGE_INFO, {}),
    (RequestCode.POCKETMQ_DLQ, {}),
    (RequestCode.POCKETMQ_TX, {}),
]
NAMESRV_ADMIN = [
    (RequestCode.REGISTER_BROKER, {}),
    (RequestCode.UNREGISTER_BROKER, {"brokerName": "nobody", "brokerAddr": "1.2.3.4:1"}),
    (RequestCode.QUERY_DATA_VERSION, {}),
    (RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "Scratch"}),
    (RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}),
    (RequestCode.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "nobody"}),
    (RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"}),
    (RequestCode.DELETE_KV_CONFIG, {"namespace": "n", "key": "k"}),
]


@pytest.mark.parametrize(
    ("where", "code", "fields"),
    [("broker", code, fields) for code, fields in BROKER_ADMIN]
    + [("namesrv", code, fields) for code, fields in NAMESRV_ADMIN],
)
def test_admin_requests_need_the_admin_account(
    server: Process, where: str, code: int, fields: dict[str, str]
) -> None:
    address = server.address if where == "broker" else server.extra["namesrv"]
    for keys in (None, APP, ("ops", "not-the-secret")):
        refused = call(address, code, fields, keys=keys)
        assert refused.code == ResponseCode.NO_PERMISSION
        assert refused.remark and "secret" not in refused.remark
    assert call(address, code, fields, keys=OPS).code != ResponseCode.NO_PERMISSION


def test_a_rogue_broker_cannot_register(server: Process) -> None:
    namesrv = server.extra["namesrv"]
    header = RegisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="6.6.6.6:10911",
        cluster_name="DefaultCluster",
        ha_server_addr="6.6.6.6:10912",
        broker_id=0,
        compressed=False,
    )
    body = encode_json_body(
        RegisterBrokerBody(topic_config_serialize_wrapper=TopicConfigSerializeWrapper())
    )
    for keys in (None, APP):
        response = call(namesrv, RequestCode.REGISTER_BROKER, header.to_ext_fields(), body, keys)
        assert response.code == ResponseCode.NO_PERMISSION
    route = call(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO, keys=APP)  # the real broker-a only
    assert route.code == ResponseCode.SUCCESS
    assert b"6.6.6.6" not in (route.body or b"") and server.address.encode() in (route.body or b"")


@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_x"])
def test_system_topics_are_never_deleted(server: Process, topic: str) -> None:
    for address, code in (
        (server.address, RequestCode.DELETE_TOPIC_IN_BROKER),
        (server.extra["namesrv"], RequestCode.DELETE_TOPIC_IN_NAMESRV),
    ):
        response = call(address, code, {"topic": topic}, keys=OPS)
        assert response.code == ResponseCode.INVALID_PARAMETER
        assert "system topic" in (response.remark or "")


def test_the_sdk_signs_and_permissions_hold(server: Process) -> None:
    namesrv = server.extra["namesrv"]

    async def run() -> None:
        async with Admin(namesrv, credentials=OPS) as admin:
            for topic in ("Orders", "Audit", "Secret"):
                await admin.create_topic(topic, 2)
        async with Producer("p", namesrv=namesrv, credentials=APP, retries=0) as producer:
            sent = await producer.send(Message(topic="Orders", body=b"signed"))
            assert sent.msg_id
            SEEN[RequestCode.SEND_MESSAGE_V2, "allowed"] += 1
            for topic in ("Audit", "Secret"):  # SUB only; no permission at all
                with pytest.raises(BrokerError) as refused:
                    await producer.send(Message(topic=topic, body=b"x"))
                assert refused.value.code == ResponseCode.NO_PERMISSION
                SEEN[RequestCode.SEND_MESSAGE_V2, "refused"] += 1
        async with Producer("p2", namesrv=namesrv, retries=0) as anonymous:
            with pytest.raises(RouteNotFoundError, match="NO_PERMISSION"):  # the route query
                await anonymous.send(Message(topic="Orders", body=b"unsigned"))
        async with SimpleConsumer(
            "billing", namesrv=namesrv, subscriptions={"Orders": "*"}, credentials=APP
        ) as consumer:
            got: list[bytes] = []
            for _ in range(20):
                got += [m.body for m in await consumer.receive(16, 30)]
                if got:
                    break
            assert got == [b"signed"]
            SEEN[RequestCode.POP_MESSAGE, "allowed"] += 1

    asyncio.run(run())


def pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cli_signs_with_keys(server: Process) -> None:
    namesrv = ("--namesrv", server.extra["namesrv"])
    create = ("topic", "create", "--topic", "CliTopic", *namesrv)
    refused = pocketmq(*create)
    assert refused.returncode == 1 and "access denied" in refused.stderr
    assert pocketmq(*create, "--access-key", "ops", "--secret-key", "ops-secret").returncode == 0
    send = ("send", "--topic", "Orders", "--body", "from-cli", *namesrv)
    assert pocketmq(*send, "--access-key", "app", "--secret-key", "app-secret").returncode == 0
    half = pocketmq(*send, "--access-key", "app")
    assert half.returncode == 2 and "go together" in half.stderr


def test_a_bad_acl_file_stops_the_start_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "acl.yml"
    path.write_text("accounts:\n  - accessKey: a\n    secretKey: b\n    topicPerms: [t=ALL]\n")
    done = pocketmq(
        "standalone", "--memory", "--no-grpc", "--port", "0", "--namesrv-port", "0",
        "--acl-file", str(path),
    )  # fmt: skip
    assert done.returncode == 1
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("pocketmq: cannot start: ACL file ") and str(path) in line
    assert "'ALL'" in line


# -- gRPC -----------------------------------------------------------------------------------


def grpc_call(server: Process, date: str, request_id: str) -> int:
    grpc = pytest.importorskip("grpc")
    from pocketmq.broker.grpc.auth import sign
    from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc

    metadata = [
        ("x-mq-client-id", "acl-test@1"),
        ("x-mq-date-time", date),
        ("x-mq-request-id", request_id),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential=app, SignedHeaders=x-mq-date-time, "
            f"Signature={sign('app-secret', date)}",
        ),
    ]
    with grpc.insecure_channel(server.extra["grpc"]) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="Orders"))
        return int(stub.QueryRoute(request, metadata=metadata, timeout=10).status.code)


def test_grpc_refuses_old_bad_and_replayed_dates(server: Process) -> None:
    from pocketmq.broker.grpc.stubs import definition_pb2

    code = definition_pb2.Code
    now = datetime.datetime.now(datetime.UTC)
    fresh = now.strftime("%Y%m%dT%H%M%SZ")
    local = datetime.datetime.now().strftime("%Y%m%dT%H%M%SZ")  # the Python client's way
    first = str(uuid.uuid4())
    assert grpc_call(server, fresh, first) == code.OK
    assert grpc_call(server, local, str(uuid.uuid4())) == code.OK
    assert grpc_call(server, fresh, first) == code.UNAUTHORIZED  # the same call again
    old = (now - datetime.timedelta(days=3)).strftime("%Y%m%dT%H%M%SZ")
    for date in (old, "20200101T000000Z", "not-a-date"):
        assert grpc_call(server, date, str(uuid.uuid4())) == code.UNAUTHORIZED


def test_the_official_python_client_with_a_plain_acl_account(
    server: Process, tmp_path: Path
) -> None:
    """The official 5.x Python client signs with an account of the file: it may publish to a
    topic it has PUB on (signing its local time as "Z", inside the window), not to one it
    only has SUB on."""
    pytest.importorskip("rocketmq")
    from tests.integration.test_grpc_official_client import APP as CLIENT_APP
    from tests.integration.test_grpc_official_client import RUN_TIMEOUT_S, run_app

    async def topics() -> None:
        async with Admin(server.extra["namesrv"], credentials=OPS) as admin:
            for topic in ("Orders", "Audit"):
                await admin.create_topic(topic, 2)

    asyncio.run(topics())
    keys = ("--access-key", "app", "--secret-key", "app-secret")
    sent = run_app(server, tmp_path, "normal", "--topic", "Orders", "--count", "2", *keys)
    assert len(sent["sent"]) == 2
    refused = subprocess.run(
        [sys.executable, str(CLIENT_APP), server.extra["grpc"], "normal", "--topic", "Audit",
         "--count", "1", *keys],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "HOME": str(tmp_path)},
        check=False,
    )  # fmt: skip

    assert refused.returncode != 0
    assert "ForbiddenException" in refused.stderr and "topic:Audit" in refused.stderr
