"""The name server: the pure RouteInfoManager, then NameServer over real TCP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import zlib

import msgspec
import pytest

from pocketmq.broker.namesrv import NameServer, RouteInfoManager, serve
from pocketmq.broker.namesrv._wire import (
    KVTable,
    TopicList,
    decode_compressed_register_body,
    encode_compressed_register_body,
)
from pocketmq.broker.protocol import FrameDecoder, RemotingCommand, encode_frame
from pocketmq.broker.protocol.codes import RequestCode, ResponseCode
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import (
    ClusterInfo,
    DataVersion,
    GetRouteInfoRequestHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    UnregisterBrokerRequestHeader,
)

# -- helpers ----------------------------------------------------------------------------------


def topics(*names: str, queues: int = 4, perm: int = 6) -> dict[str, TopicConfig]:
    return {
        n: TopicConfig(topic_name=n, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
        for n in names
    }


def register(
    routes: RouteInfoManager,
    name: str,
    addr: str,
    topic_configs: dict[str, TopicConfig] | None,
    *,
    now: int,
    broker_id: int = 0,
    cluster: str = "DefaultCluster",
    version: DataVersion | None = None,
    timeout_ms: int | None = None,
    channel: object = None,
):
    return routes.register_broker(
        cluster=cluster,
        broker_name=name,
        broker_id=broker_id,
        broker_addr=addr,
        ha_server_addr=addr.rsplit(":", 1)[0] + ":10912",
        topic_configs=topic_configs,
        data_version=version or DataVersion(timestamp=1, counter=1),
        now_ms=now,
        timeout_ms=timeout_ms,
        channel=channel,
    )


def two_brokers() -> RouteInfoManager:
    routes = RouteInfoManager()
    # registered in reverse name order, to check the sorting
    b_topics = topics("shared", "only-b") | topics("TBW102", perm=7)
    register(routes, "broker-b", "10.0.0.2:10911", b_topics, now=0)
    register(routes, "broker-a", "10.0.0.1:10911", topics("shared", "only-a", queues=8), now=0)
    return routes


# -- RouteInfoManager -------------------------------------------------------------------------


def test_route_of_a_topic_on_two_brokers_is_sorted_by_broker_name() -> None:
    route = two_brokers().route_of("shared")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        (8, 8, 6),
        (4, 4, 6),
    ]
    assert [b.broker_name for b in route.broker_datas] == ["broker-a", "broker-b"]
    assert route.broker_datas[0].broker_addrs == {0: "10.0.0.1:10911"}
    assert route.broker_datas[0].cluster == "DefaultCluster"
    assert route.filter_server_table == {}


def test_route_of_a_topic_on_one_broker_lists_only_that_broker() -> None:
    route = two_brokers().route_of("only-b")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert [b.broker_name for b in route.broker_datas] == ["broker-b"]


def test_tbw102_is_routable_with_the_perm_the_broker_registered() -> None:
    route = two_brokers().route_of("TBW102")
    assert route is not None
    assert route.queue_datas[0].perm == 7  # RW | INHERIT, what an auto-create broker sends


def test_unknown_topic_has_no_route() -> None:
    assert two_brokers().route_of("nope") is None


def test_all_topics_and_cluster_info() -> None:
    routes = two_brokers()
    register(routes, "broker-c", "10.0.0.3:10911", topics("c-topic"), now=0, cluster="Other")
    assert routes.all_topics() == ["TBW102", "c-topic", "only-a", "only-b", "shared"]
    info = routes.cluster_info()
    assert info.cluster_addr_table == {
        "DefaultCluster": ["broker-a", "broker-b"],
        "Other": ["broker-c"],
    }
    assert sorted(info.broker_addr_table) == ["broker-a", "broker-b", "broker-c"]
    assert info.broker_addr_table["broker-c"].broker_addrs == {0: "10.0.0.3:10911"}
    assert routes.topics_by_cluster("Other") == ["c-topic"]
    assert routes.topics_by_cluster("DefaultCluster") == ["TBW102", "only-a", "only-b", "shared"]


def test_expiry_uses_the_injected_time_and_the_header_timeout() -> None:
    routes = RouteInfoManager()
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=1_000)
    register(routes, "b", "10.0.0.2:10911", topics("t"), now=1_000, timeout_ms=5_000)
    assert routes.expire(6_000) == []  # exactly at the deadline: still alive
    gone = routes.expire(6_001)
    assert [g.broker_name for g in gone] == ["b"]
    route = routes.route_of("t")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["a"]
    # a re-registration moves the deadline
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=100_000)
    assert routes.expire(1_000 + 120_001) == []
    assert [g.broker_name for g in routes.expire(100_000 + 120_001)] == ["a"]
    assert routes.route_of("t") is None
    assert routes.all_topics() == []
    assert routes.cluster_info() == ClusterInfo()


def test_unregister_removes_the_broker_and_topics_only_it_had() -> None:
    routes = two_brokers()
    assert routes.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.2:10911", broker_name="broker-b", broker_id=0
    )
    assert routes.route_of("only-b") is None
    assert routes.route_of("TBW102") is None
    shared = routes.route_of("shared")
    assert shared is not None and [b.broker_name for b in shared.broker_datas] == ["broker-a"]
    assert routes.cluster_info().cluster_addr_table == {"DefaultCluster": ["broker-a"]}
    assert not routes.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.2:10911", broker_name="broker-b", broker_id=0
    )


def test_topic_disappears_when_its_last_broker_goes() -> None:
    routes = two_brokers()
    for addr, name in (("10.0.0.1:10911", "broker-a"), ("10.0.0.2:10911", "broker-b")):
        assert routes.route_of("shared") is not None
        routes.unregister_broker(
            cluster="DefaultCluster", broker_addr=addr, broker_name=name, broker_id=0
        )
    assert routes.route_of("shared") is None
    assert routes.all_topics() == []


def test_slave_keeps_the_broker_name_and_learns_its_master() -> None:
    routes = RouteInfoManager()
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=0)
    result = register(routes, "a", "10.0.0.9:10911", topics("ignored"), now=0, broker_id=1)
    assert result.master_addr == "10.0.0.1:10911"
    assert result.ha_server_addr == "10.0.0.1:10912"
    assert routes.all_topics() == ["t"]  # a slave's topic table is not applied
    route = routes.route_of("t")
    assert route is not None and route.broker_datas[0].broker_addrs == {
        0: "10.0.0.1:10911",
        1: "10.0.0.9:10911",
    }
    routes.unregister_broker(
        cluster="DefaultCluster", broker_addr="10.0.0.1:10911", broker_name="a", broker_id=0
    )
    route = routes.route_of("t")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: "10.0.0.9:10911"}


def test_topics_change_only_with_a_new_data_version() -> None:
    routes = RouteInfoManager()
    v1 = DataVersion(timestamp=5, counter=1)
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=0, version=v1)
    routes.delete_topic("t")
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=1, version=v1)
    assert routes.route_of("t") is None  # same version: RocketMQ does not re-apply
    register(
        routes,
        "a",
        "10.0.0.1:10911",
        topics("t", "u"),
        now=2,
        version=DataVersion(timestamp=5, counter=2),
    )
    assert routes.all_topics() == ["t", "u"]
    # an all-zero version (a sender without versions) is applied every time
    zero = DataVersion(timestamp=0, counter=0)
    register(routes, "a", "10.0.0.1:10911", topics("t", "u", "v"), now=3, version=zero)
    register(routes, "a", "10.0.0.1:10911", topics("t", "u", "v", "w"), now=4, version=zero)
    assert routes.all_topics() == ["t", "u", "v", "w"]


def test_closed_channel_drops_only_the_brokers_registered_over_it() -> None:
    routes = RouteInfoManager()
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=0, channel="conn-1")
    register(routes, "b", "10.0.0.2:10911", topics("t"), now=0, channel="conn-2")
    assert [g.broker_name for g in routes.on_channel_destroy("conn-1")] == ["a"]
    route = routes.route_of("t")
    assert route is not None and [b.broker_name for b in route.broker_datas] == ["b"]
    assert routes.on_channel_destroy("conn-1") == []


def test_wipe_and_add_write_perm() -> None:
    routes = two_brokers()
    assert routes.wipe_write_perm("broker-b") == 3
    route = routes.route_of("shared")
    assert route is not None and [q.perm for q in route.queue_datas] == [6, 4]
    tbw = routes.route_of("TBW102")
    assert tbw is not None and tbw.queue_datas[0].perm == 5  # INHERIT and READ stay
    assert routes.add_write_perm("broker-b") == 3
    route = routes.route_of("shared")
    assert route is not None and [q.perm for q in route.queue_datas] == [6, 6]


def test_delete_topic_in_one_cluster_only() -> None:
    routes = RouteInfoManager()
    register(routes, "a", "10.0.0.1:10911", topics("t"), now=0, cluster="c1")
    register(routes, "b", "10.0.0.2:10911", topics("t"), now=0, cluster="c2")
    assert routes.delete_topic("t", "c1")
    route = routes.route_of("t")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["b"]
    assert routes.delete_topic("t")
    assert routes.route_of("t") is None
    assert not routes.delete_topic("t")


def test_compressed_register_body_round_trip() -> None:
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=topics("a", "b", perm=7),
            data_version=DataVersion(timestamp=9, counter=3),
        )
    )
    decoded = decode_compressed_register_body(
        encode_compressed_register_body(body), size_max=1 << 20
    )
    assert decoded == body
    with pytest.raises(MalformedBodyError):
        decode_compressed_register_body(b"not zlib", size_max=1 << 20)
    with pytest.raises(MalformedBodyError):  # inflates past the limit
        decode_compressed_register_body(zlib.compress(b"\0" * 10_000), size_max=1_000)


# -- NameServer over TCP ----------------------------------------------------------------------


class Client:
    """A minimal remoting client: one request at a time."""

    _opaque = itertools.count(1)

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder()
        self.frames: list[RemotingCommand] = []

    @classmethod
    async def connect(cls, port: int) -> Client:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def call(
        self, code: int, ext: dict[str, str] | None = None, body: bytes | None = None
    ) -> RemotingCommand:
        opaque = next(self._opaque)
        request = RemotingCommand(code=code, opaque=opaque, ext_fields=ext, body=body)
        self.writer.write(encode_frame(request))
        await self.writer.drain()
        while not self.frames:
            data = await asyncio.wait_for(self.reader.read(65536), 5)
            if not data:
                raise ConnectionError("closed by the name server")
            self.frames.extend(self.decoder.feed(data))
        response = self.frames.pop(0)
        assert response.is_response and response.opaque == opaque
        return response

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


class FakeClock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def register_request(
    name: str = "broker-a",
    addr: str = "127.0.0.1:10911",
    topic_names: tuple[str, ...] = ("TopicTest", "TBW102"),
    **header: object,
) -> tuple[dict[str, str], bytes]:
    ext = RegisterBrokerRequestHeader(
        broker_name=name,
        broker_addr=addr,
        cluster_name="DefaultCluster",
        ha_server_addr="127.0.0.1:10912",
        broker_id=0,
        **header,  # type: ignore[arg-type]
    ).to_ext_fields()
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=topics(*topic_names),
            data_version=DataVersion(timestamp=1, counter=1),
        )
    )
    return ext, msgspec.json.encode(body)


def route_request(topic: str) -> dict[str, str]:
    return GetRouteInfoRequestHeader(topic=topic).to_ext_fields()


@pytest.fixture
async def namesrv():
    clock = FakeClock()
    async with NameServer(port=0, clock=clock, scan_interval_s=None) as server:
        server.test_clock = clock  # type: ignore[attr-defined]
        yield server


@pytest.fixture
async def client(namesrv: NameServer):
    c = await Client.connect(namesrv.port)
    yield c
    await c.close()


async def test_register_then_route_round_trip(namesrv: NameServer, client: Client) -> None:
    ext, body = register_request()
    response = await client.call(RequestCode.REGISTER_BROKER, ext, body)
    assert response.code == ResponseCode.SUCCESS, response.remark

    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("TopicTest"))
    assert response.code == ResponseCode.SUCCESS
    assert response.body is not None
    # standard JSON: Python's strict parser reads it and the broker id key is quoted
    raw = json.loads(response.body)
    assert raw["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911"}
    route = msgspec.json.decode(response.body, type=TopicRouteData)
    assert route.queue_datas[0].broker_name == "broker-a"
    assert route.queue_datas[0].write_queue_nums == 4
    assert route.broker_datas[0].cluster == "DefaultCluster"
    assert route.filter_server_table == {}


async def test_unknown_topic_is_topic_not_exist(client: Client) -> None:
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("Missing"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark == "No topic route info in name server for the topic: Missing"
    assert response.body is None


async def test_unknown_code_is_not_supported(client: Client) -> None:
    response = await client.call(9999)
    assert response.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_missing_header_field_is_a_system_error(client: Client) -> None:
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "topic" in (response.remark or "")


async def test_garbage_closes_only_that_connection(namesrv: NameServer, client: Client) -> None:
    bad = await Client.connect(namesrv.port)
    try:
        # a length field of 2 leaves no room for the header length: the stream is lost
        bad.writer.write(b"\x00\x00\x00\x02garbage garbage")
        await bad.writer.drain()
        assert await asyncio.wait_for(bad.reader.read(), 5) == b""
    finally:
        await bad.close()
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("Missing"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST


async def test_fastjson_unquoted_integer_keys_are_accepted(client: Client) -> None:
    ext, _ = register_request()
    # what fastjson's plain encode writes: Map<Integer,...> keys without quotes
    body = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":'
        b'{"counter":7,"timestamp":1700000000000},"topicConfigTable":{"FastTopic":'
        b'{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"FastTopic","topicSysFlag":0,"writeQueueNums":2}},'
        b'"topicQueueMappingInfoMap":{"FastTopic":{"bname":"broker-a","currIdMap":{0:0,1:1},'
        b'"epoch":0,"scope":"__global__","totalQueues":2}},'
        b'"brokerAddrs":{0:"127.0.0.1:10911"}}}'
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(body)  # the test body really is non-standard
    response = await client.call(RequestCode.REGISTER_BROKER, ext, body)
    assert response.code == ResponseCode.SUCCESS, response.remark
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("FastTopic"))
    assert response.code == ResponseCode.SUCCESS
    route = msgspec.json.decode(response.body or b"", type=TopicRouteData)
    assert route.queue_datas[0].read_queue_nums == 2


async def test_compressed_register_body_is_accepted(client: Client) -> None:
    ext, _ = register_request(compressed=True)
    body = RegisterBrokerBody(
        topic_config_serialize_wrapper=TopicConfigSerializeWrapper(
            topic_config_table=topics("Zipped", queues=3), data_version=DataVersion(timestamp=2)
        )
    )
    response = await client.call(
        RequestCode.REGISTER_BROKER, ext, encode_compressed_register_body(body)
    )
    assert response.code == ResponseCode.SUCCESS, response.remark
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("Zipped"))
    route = msgspec.json.decode(response.body or b"", type=TopicRouteData)
    assert route.queue_datas[0].write_queue_nums == 3


async def test_bad_register_bodies_are_refused(client: Client) -> None:
    ext, body = register_request(body_crc32=12345)
    response = await client.call(RequestCode.REGISTER_BROKER, ext, body)
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

    ext, body = register_request(body_crc32=zlib.crc32(register_request()[1]) & 0x7FFFFFFF)
    response = await client.call(RequestCode.REGISTER_BROKER, ext, body)
    assert response.code == ResponseCode.SUCCESS, response.remark

    ext, _ = register_request(compressed=True)
    response = await client.call(RequestCode.REGISTER_BROKER, ext, b"{not compressed}")
    assert response.code == ResponseCode.SYSTEM_ERROR
    assert "compressed body" in (response.remark or "")


async def test_unregister_and_disconnect_drop_the_broker(
    namesrv: NameServer, client: Client
) -> None:
    ext, body = register_request()
    assert (await client.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0
    unregister = UnregisterBrokerRequestHeader(
        broker_name="broker-a",
        broker_addr="127.0.0.1:10911",
        cluster_name="DefaultCluster",
        broker_id=0,
    ).to_ext_fields()
    assert (await client.call(RequestCode.UNREGISTER_BROKER, unregister)).code == 0
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("TopicTest"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST

    broker = await Client.connect(namesrv.port)
    assert (await broker.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0
    assert namesrv.routes.route_of("TopicTest") is not None
    await broker.close()
    for _ in range(500):  # the server notices the close on a later loop iteration
        if namesrv.routes.route_of("TopicTest") is None:
            break
        await asyncio.sleep(0.01)
    assert namesrv.routes.route_of("TopicTest") is None


async def test_scan_expires_a_silent_broker_and_closes_its_connection(
    namesrv: NameServer,
) -> None:
    broker = await Client.connect(namesrv.port)
    try:
        ext, body = register_request(heartbeat_timeout_millis=30_000)
        assert (await broker.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0
        clock: FakeClock = namesrv.test_clock  # type: ignore[attr-defined]
        clock.ms += 30_000
        assert namesrv.scan() == 0
        clock.ms += 1
        assert namesrv.scan() == 1
        assert namesrv.routes.route_of("TopicTest") is None
        assert await asyncio.wait_for(broker.reader.read(), 5) == b""
    finally:
        await broker.close()


async def test_cluster_info_topic_lists_and_delete(client: Client) -> None:
    for name, addr, names in (
        ("broker-a", "127.0.0.1:10911", ("T1", "T2")),
        ("broker-b", "127.0.0.1:20911", ("T2", "T3")),
    ):
        ext, body = register_request(name, addr, names)
        assert (await client.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0

    response = await client.call(RequestCode.GET_BROKER_CLUSTER_INFO)
    raw = json.loads(response.body or b"")
    assert raw["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}
    assert raw["brokerAddrTable"]["broker-b"]["brokerAddrs"] == {"0": "127.0.0.1:20911"}

    response = await client.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    assert json.loads(response.body or b"") == {"topicList": ["T1", "T2", "T3"]}

    response = await client.call(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "DefaultCluster"})
    assert msgspec.json.decode(response.body or b"", type=TopicList).topic_list == [
        "T1",
        "T2",
        "T3",
    ]

    assert (await client.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T2"})).code == 0
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("T2"))
    assert response.code == ResponseCode.TOPIC_NOT_EXIST

    response = await client.call(RequestCode.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "broker-a"})
    assert response.ext_fields == {"wipeTopicCount": "1"}
    response = await client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, route_request("T1"))
    assert msgspec.json.decode(response.body or b"", type=TopicRouteData).queue_datas[0].perm == 4


async def test_kv_config(client: Client) -> None:
    key = {"namespace": "ns", "key": "k"}
    response = await client.call(RequestCode.GET_KV_CONFIG, key)
    assert response.code == ResponseCode.QUERY_NOT_FOUND
    assert response.remark == "No config item, Namespace: ns Key: k"
    assert (await client.call(RequestCode.PUT_KV_CONFIG, {**key, "value": "v"})).code == 0
    response = await client.call(RequestCode.GET_KV_CONFIG, key)
    assert (response.code, response.ext_fields) == (ResponseCode.SUCCESS, {"value": "v"})
    response = await client.call(219, {"namespace": "ns"})
    assert msgspec.json.decode(response.body or b"", type=KVTable).table == {"k": "v"}
    assert (await client.call(RequestCode.DELETE_KV_CONFIG, key)).code == 0
    response = await client.call(RequestCode.GET_KV_CONFIG, key)
    assert response.code == ResponseCode.QUERY_NOT_FOUND


async def test_query_data_version(client: Client) -> None:
    ext, body = register_request()
    assert (await client.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0
    header = {
        "brokerName": "broker-a",
        "brokerAddr": "127.0.0.1:10911",
        "clusterName": "DefaultCluster",
        "brokerId": "0",
    }
    same = msgspec.json.encode(DataVersion(timestamp=1, counter=1))
    response = await client.call(RequestCode.QUERY_DATA_VERSION, header, same)
    assert response.ext_fields == {"changed": "false"}
    newer = msgspec.json.encode(DataVersion(timestamp=1, counter=2))
    response = await client.call(RequestCode.QUERY_DATA_VERSION, header, newer)
    assert response.ext_fields == {"changed": "true"}
    assert msgspec.json.decode(response.body or b"", type=DataVersion).counter == 1


async def test_serve_runs_until_cancelled() -> None:
    ports: list[int] = []
    ready = asyncio.Event()

    def on_ready(port: int) -> None:
        ports.append(port)
        ready.set()

    task = asyncio.create_task(serve("127.0.0.1", 0, ready=on_ready))
    try:
        await asyncio.wait_for(ready.wait(), 5)
        c = await Client.connect(ports[0])
        try:
            response = await c.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
            assert json.loads(response.body or b"") == {"topicList": []}
        finally:
            await c.close()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert task.cancelled()


async def test_background_scan_drops_expired_brokers() -> None:
    clock = FakeClock()
    async with NameServer(port=0, clock=clock, scan_interval_s=0.01) as server:
        broker = await Client.connect(server.port)
        try:
            ext, body = register_request()
            assert (await broker.call(RequestCode.REGISTER_BROKER, ext, body)).code == 0
            clock.ms += 120_001
            for _ in range(500):
                if server.routes.route_of("TopicTest") is None:
                    break
                await asyncio.sleep(0.01)
            assert server.routes.route_of("TopicTest") is None
        finally:
            await broker.close()
