"""Custom headers (extFields) and JSON bodies."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.broker.protocol import (
    REQUEST_HEADERS,
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    RequestCode,
    SerializeType,
    decode_frame,
    encode_frame,
)
from pocketmq.broker.protocol import headers as H
from pocketmq.broker.protocol.codes import MessageSysFlag, PullSysFlag

HEADER_CLASSES = sorted(
    (
        obj
        for name in H.__all__
        if isinstance(obj := getattr(H, name), type)
        and issubclass(obj, H.RemotingHeader)
        and obj is not H.RemotingHeader
    ),
    key=lambda c: c.__name__,
)


def _scalar_strategy(t: mi.Type) -> st.SearchStrategy[Any]:
    if isinstance(t, mi.UnionType):
        (inner,) = [u for u in t.types if not isinstance(u, mi.NoneType)]
        return st.none() | _scalar_strategy(inner)
    if isinstance(t, mi.StrType):
        return st.text(max_size=20)
    if isinstance(t, mi.BoolType):
        return st.booleans()
    if isinstance(t, mi.IntType):
        return st.integers(t.ge, t.le)
    if isinstance(t, mi.FloatType):
        return st.floats(allow_nan=False)
    raise AssertionError(t)


def header_strategy(cls: type[H.RemotingHeader]) -> st.SearchStrategy[H.RemotingHeader]:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    return st.builds(cls, **{f.name: _scalar_strategy(f.type) for f in info.fields})


def test_every_request_header_is_registered_and_exported() -> None:
    assert set(REQUEST_HEADERS.values()) <= set(HEADER_CLASSES)
    assert len(HEADER_CLASSES) >= 35
    # every class compiles its spec (unsupported field types would raise here)
    for cls in HEADER_CLASSES:
        assert cls._fields_spec()


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=20)
@given(data=st.data())
def test_ext_fields_round_trip(cls: type[H.RemotingHeader], data: st.DataObject) -> None:
    header = data.draw(header_strategy(cls))
    ext = header.to_ext_fields()
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in ext.items())
    assert cls.from_ext_fields(ext) == header
    # and through a ROCKETMQ frame (strings survive, "" included)
    cmd = RemotingCommand(code=1, ext_fields=ext)
    result = decode_frame(encode_frame(cmd, SerializeType.ROCKETMQ))
    assert result is not None
    assert cls.from_ext_fields(result[0].ext_fields) == header


def test_value_rules_of_to_ext_fields() -> None:
    header = H.PullMessageRequestHeader(
        consumer_group="cg",
        topic="t",
        queue_id=3,
        queue_offset=2**40,
        max_msg_nums=32,
        sys_flag=PullSysFlag.SUSPEND | PullSysFlag.COMMIT_OFFSET,
        commit_offset=-1,
        suspend_timeout_millis=15000,
        sub_version=1700000000000,
        expression_type="TAG",
    )
    assert header.to_ext_fields() == {
        "consumerGroup": "cg",
        "topic": "t",
        "queueId": "3",
        "queueOffset": "1099511627776",
        "maxMsgNums": "32",
        "sysFlag": "3",  # an IntFlag still goes out as digits
        "commitOffset": "-1",
        "suspendTimeoutMillis": "15000",
        "subVersion": "1700000000000",
        "expressionType": "TAG",
    }
    resp = H.SendMessageResponseHeader(msg_id="0A", queue_id=1, queue_offset=5, trace_on=False)
    assert resp.to_ext_fields() == {
        "msgId": "0A",
        "queueId": "1",
        "queueOffset": "5",
        "TRACE_ON": "false",
    }


def test_java_double_formatting() -> None:
    cases = {
        0.618: "0.618",
        5.0: "5.0",
        1e7: "1.0E7",
        1.5e-7: "1.5E-7",
        -12345678.9: "-1.23456789E7",
        0.001: "0.001",
    }
    for value, text in cases.items():
        assert H._java_double(value) == text
        assert float(text) == value


SEND_V1 = H.SendMessageRequestHeader(
    producer_group="pg",
    topic="TopicTest",
    default_topic="TBW102",
    default_topic_queue_nums=4,
    queue_id=2,
    sys_flag=MessageSysFlag.COMPRESSED,
    born_timestamp=1700000000123,
    flag=7,
    properties="WAIT\x01true\x02",
    reconsume_times=0,
    max_reconsume_times=16,
    batch=True,
    broker_name="broker-a",
)


def test_send_message_v2_short_names() -> None:
    v2 = H.SendMessageRequestHeaderV2.from_v1(SEND_V1)
    assert v2.to_ext_fields() == {
        "a": "pg",
        "b": "TopicTest",
        "c": "TBW102",
        "d": "4",
        "e": "2",
        "f": "1",
        "g": "1700000000123",
        "h": "7",
        "i": "WAIT\x01true\x02",
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "true",
        "n": "broker-a",
    }
    assert v2.to_v1() == SEND_V1
    v1_ext = SEND_V1.to_ext_fields()
    assert v1_ext["producerGroup"] == "pg" and v1_ext["bname"] == "broker-a"
    assert v1_ext["unitMode"] == "false" and v1_ext["batch"] == "true"
    assert set(v1_ext) == {
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "maxReconsumeTimes",
        "batch",
        "bname",
    }


def test_parse_send_message_header_by_code() -> None:
    v2_ext = H.SendMessageRequestHeaderV2.from_v1(SEND_V1).to_ext_fields()
    assert H.parse_send_message_header(RequestCode.SEND_MESSAGE_V2, v2_ext) == SEND_V1
    assert H.parse_send_message_header(RequestCode.SEND_BATCH_MESSAGE, v2_ext) == SEND_V1
    assert H.parse_send_message_header(RequestCode.SEND_MESSAGE, SEND_V1.to_ext_fields()) == SEND_V1
    with pytest.raises(MalformedHeaderError) as info:
        H.parse_send_message_header(RequestCode.SEND_MESSAGE, v2_ext)  # short keys under code 10
    assert info.value.field == "producerGroup"


def test_go_client_send_header() -> None:
    # rocketmq-client-go SendMessageRequest.Encode: long names, empty strings for unset values
    ext = {
        "producerGroup": "g",
        "topic": "t",
        "queueId": "1",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "maxReconsumeTimes": "0",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "batch": "false",
        "properties": "",
    }
    header = H.SendMessageRequestHeader.from_ext_fields(ext)
    assert header.properties == "" and header.max_reconsume_times == 0 and not header.unit_mode


def test_lenient_from_ext_fields() -> None:
    base = {"consumerGroup": "g", "topic": "t", "queueId": "1", "commitOffset": "10"}
    h = H.UpdateConsumerOffsetRequestHeader.from_ext_fields(base | {"unknown": "x", "bname": "b"})
    assert h == H.UpdateConsumerOffsetRequestHeader(
        consumer_group="g", topic="t", queue_id=1, commit_offset=10
    )
    assert (
        H.UpdateConsumerOffsetRequestHeader.from_ext_fields(
            base | {"commitOffset": "+10"}
        ).commit_offset
        == 10
    )

    q = {"consumerGroup": "g", "topic": "t", "queueId": "0"}
    assert H.QueryConsumerOffsetRequestHeader.from_ext_fields(q).set_zero_if_not_found is None
    for text, value in [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("false", False),
        ("1", False),
        ("yes", False),
    ]:
        header = H.QueryConsumerOffsetRequestHeader.from_ext_fields(q | {"setZeroIfNotFound": text})
        assert header.set_zero_if_not_found is value
    # "" is "unset" for non-string fields
    assert (
        H.QueryConsumerOffsetRequestHeader.from_ext_fields(
            q | {"setZeroIfNotFound": ""}
        ).set_zero_if_not_found
        is None
    )
    assert (
        H.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "t", "queueId": "0"}).committed
        is True
    )


@pytest.mark.parametrize(
    ("ext", "field", "value"),
    [
        ({"topic": "t", "queueId": "x"}, "queueId", "x"),
        ({"topic": "t", "queueId": " 1"}, "queueId", " 1"),
        ({"topic": "t", "queueId": "1_000"}, "queueId", "1_000"),
        ({"topic": "t", "queueId": "1.0"}, "queueId", "1.0"),
        ({"topic": "t", "queueId": "\u0663"}, "queueId", "\u0663"),  # Arabic-Indic digit
        ({"topic": "t", "queueId": "2147483648"}, "queueId", "2147483648"),  # > Integer.MAX_VALUE
        ({"topic": "t", "queueId": ""}, "queueId", ""),  # required and empty
        ({"topic": "t"}, "queueId", None),  # required and missing
        ({"queueId": "1"}, "topic", None),
    ],
)
def test_malformed_header_values(ext: dict[str, str], field: str, value: str | None) -> None:
    with pytest.raises(MalformedHeaderError) as info:
        H.GetMinOffsetRequestHeader.from_ext_fields(ext)
    assert (info.value.field, info.value.value) == (field, value)


def test_long_range() -> None:
    ext = {"offset": str(2**63 - 1)}
    assert H.QueryConsumerOffsetResponseHeader.from_ext_fields(ext).offset == 2**63 - 1
    with pytest.raises(MalformedHeaderError):
        H.QueryConsumerOffsetResponseHeader.from_ext_fields({"offset": str(2**63)})


def test_none_ext_fields_means_empty() -> None:
    assert H.RegisterBrokerResponseHeader.from_ext_fields(None) == H.RegisterBrokerResponseHeader()
    with pytest.raises(MalformedHeaderError):
        H.NotifyConsumerIdsChangedRequestHeader.from_ext_fields(None)


def test_special_wire_keys() -> None:
    assert "clientID" in H.UnregisterClientRequestHeader(client_id="c").to_ext_fields()
    reg = H.RegisterBrokerRequestHeader(
        broker_name="b",
        broker_addr="1.2.3.4:10911",
        cluster_name="c",
        ha_server_addr="1.2.3.4:10912",
        broker_id=0,
        zone_name="z",
    )
    assert reg.to_ext_fields()["__ZONE_NAME"] == "z"
    assert reg.to_ext_fields()["bodyCrc32"] == "0"
    end = H.EndTransactionRequestHeader(
        producer_group="pg",
        tran_state_table_offset=1,
        commit_log_offset=2,
        commit_or_rollback=8,
        msg_id="m",
        broker_name="b",
    )
    assert end.to_ext_fields() == {
        "producerGroup": "pg",
        "tranStateTableOffset": "1",
        "commitLogOffset": "2",
        "commitOrRollback": "8",
        "fromTransactionCheck": "false",
        "msgId": "m",
        "bname": "b",
    }
    assert set(H.ChangeInvisibleTimeRequestHeader.__struct_encode_fields__) == {
        "consumerGroup",
        "topic",
        "queueId",
        "extraInfo",
        "offset",
        "invisibleTime",
    }
    assert "indexLastUpdatePhyoffset" in H.QueryMessageResponseHeader.__struct_encode_fields__


# -- JSON bodies ----------------------------------------------------------------------------

ROUTE_FASTJSON = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"172.168.0.104:10911",1:"172.168.0.105:10911"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSynFlag":0,"writeQueueNums":4}]}'
)


def test_route_data_with_unquoted_broker_ids() -> None:
    route = H.decode_json_body(ROUTE_FASTJSON, H.TopicRouteData)
    assert route.broker_datas[0].broker_addrs == {
        0: "172.168.0.104:10911",
        1: "172.168.0.105:10911",
    }
    assert route.queue_datas[0] == H.QueueData(
        broker_name="broker-a", read_queue_nums=4, write_queue_nums=4, perm=6
    )
    # we write standard JSON: quoted keys, the 4.9.0+ name topicSysFlag
    text = H.encode_json_body(route)
    parsed = json.loads(text)
    assert parsed["brokerDatas"][0]["brokerAddrs"] == {
        "0": "172.168.0.104:10911",
        "1": "172.168.0.105:10911",
    }
    assert "topicSynFlag" not in text.decode()
    assert H.decode_json_body(text, H.TopicRouteData) == route


def test_queue_data_old_and_new_flag_names() -> None:
    old = H.decode_json_body(
        b'{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":1,"topicSynFlag":3}',
        H.QueueData,
    )
    new = H.decode_json_body(
        b'{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":1,"topicSysFlag":3}',
        H.QueueData,
    )
    assert old == new and new.topic_sys_flag == 3 and new.topic_syn_flag is None
    assert json.loads(H.encode_json_body(new))["topicSysFlag"] == 3


def test_cluster_info_fastjson_output() -> None:
    body = (
        b'{"brokerAddrTable":{"broker-a":{"brokerAddrs":{0:"10.0.0.1:10911"},"brokerName":"broker-a",'
        b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    )
    info = H.decode_json_body(body, H.ClusterInfo)
    assert info.broker_addr_table["broker-a"].broker_addrs == {0: "10.0.0.1:10911"}
    assert info.cluster_addr_table == {"DefaultCluster": ["broker-a"]}


def test_object_keys_become_their_json_text() -> None:
    # TopicStatsTable.offsetTable is keyed by MessageQueue objects in fastjson output
    body = b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{"maxOffset":5}}}'
    table = H.decode_json_body(body, dict[str, dict[str, dict[str, int]]])
    (key,) = table["offsetTable"]
    assert msgspec.json.decode(key, type=H.MessageQueue) == H.MessageQueue(
        topic="t", broker_name="b", queue_id=0
    )


def test_heartbeat_data_from_java() -> None:
    body = (
        b'{"clientID":"10.0.0.9@12345#1700000000","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET",'
        b'"consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":'
        b'[{"classFilterMode":false,"codeSet":[2598969],"expressionType":"TAG","subString":"TagA","subVersion":1700000000001,'
        b'"tagsSet":["TagA"],"topic":"TopicTest"},{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
        b'"subString":"*","subVersion":1700000000002,"tagsSet":[],"topic":"%RETRY%cg"}],"unitMode":false}],'
        b'"producerDataSet":[{"groupName":"CLIENT_INNER_PRODUCER"}]}'
    )
    hb = H.decode_json_body(body, H.HeartbeatData)
    assert hb.client_id == "10.0.0.9@12345#1700000000"
    (consumer,) = hb.consumer_data_set
    assert consumer.consume_type == "CONSUME_PASSIVELY" and consumer.message_model == "CLUSTERING"
    assert [s.topic for s in consumer.subscription_data_set] == ["TopicTest", "%RETRY%cg"]
    assert consumer.subscription_data_set[0].code_set == [2598969]
    assert hb.producer_data_set == [H.ProducerData(group_name="CLIENT_INNER_PRODUCER")]
    assert H.decode_json_body(H.encode_json_body(hb), H.HeartbeatData) == hb
    assert b'"clientID"' in H.encode_json_body(hb)


def test_lock_bodies() -> None:
    body = (
        b'{"clientId":"c1","consumerGroup":"cg","mqSet":[{"brokerName":"b","queueId":1,"topic":"t"},'
        b'{"brokerName":"b","queueId":2,"topic":"t"}],"onlyThisBroker":true}'
    )
    req = H.decode_json_body(body, H.LockBatchRequestBody)
    assert req.only_this_broker and {mq.queue_id for mq in req.mq_set} == {1, 2}
    unlock = H.decode_json_body(body, H.UnlockBatchRequestBody)
    assert unlock.mq_set == req.mq_set
    resp = H.LockBatchResponseBody(lock_ok_mq_set=req.mq_set[:1])
    assert json.loads(H.encode_json_body(resp)) == {
        "lockOKMQSet": [{"topic": "t", "brokerName": "b", "queueId": 1}]
    }
    assert len(set(req.mq_set) | set(req.mq_set)) == 2  # hashable


def test_consumer_list_and_register_broker_bodies() -> None:
    assert H.decode_json_body(
        b'{"consumerIdList":["a@1","b@2"]}', H.ConsumerListBody
    ).consumer_id_list == ["a@1", "b@2"]
    body = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,"timestamp":1700000000000},'
        b'"topicConfigTable":{"TopicTest":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
        b'"topicName":"TopicTest","topicSysFlag":0,"writeQueueNums":4}}}}'
    )
    reg = H.decode_json_body(body, H.RegisterBrokerBody)
    wrapper = reg.topic_config_serialize_wrapper
    assert wrapper.data_version == H.DataVersion(timestamp=1700000000000, counter=3)
    assert wrapper.topic_config_table["TopicTest"].read_queue_nums == 4
    assert H.decode_json_body(H.encode_json_body(reg), H.RegisterBrokerBody) == reg


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"consumerIdList":',
        b'{"consumerIdList":[[1],2]}',  # numbers are read as text (fastjson), lists are not
        b'{"consumerIdList":"x"}',
        b"[]",
        b"\xff\xfe",
    ],
)
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(MalformedBodyError):
        H.decode_json_body(body, H.ConsumerListBody)


@given(st.binary(max_size=120))
def test_garbage_bodies_raise_only_malformed_body(data: bytes) -> None:
    for type_ in (H.TopicRouteData, H.HeartbeatData):
        with contextlib.suppress(MalformedBodyError):
            H.decode_json_body(data, type_)


@given(
    st.builds(
        H.TopicRouteData,
        order_topic_conf=st.none() | st.text(max_size=10),
        queue_datas=st.lists(
            st.builds(
                H.QueueData,
                broker_name=st.text(max_size=8),
                read_queue_nums=st.integers(0, 64),
                write_queue_nums=st.integers(0, 64),
                perm=st.integers(0, 15),
                topic_sys_flag=st.integers(0, 3),
            ),
            max_size=3,
        ),
        broker_datas=st.lists(
            st.builds(
                H.BrokerData,
                cluster=st.text(max_size=8),
                broker_name=st.text(max_size=8),
                broker_addrs=st.dictionaries(
                    st.integers(0, 2**40), st.text(max_size=12), max_size=3
                ),
            ),
            max_size=3,
        ),
    )
)
def test_route_data_round_trip_and_fastjson_form(route: H.TopicRouteData) -> None:
    text = H.encode_json_body(route)
    assert H.decode_json_body(text, H.TopicRouteData) == route
    # the same data with fastjson's unquoted integer keys decodes the same
    unquoted = text.decode()
    for bd in route.broker_datas:
        for broker_id in bd.broker_addrs:
            unquoted = unquoted.replace(f'"{broker_id}":', f"{broker_id}:")
    assert H.decode_json_body(unquoted.encode(), H.TopicRouteData) == route
