"""A small in-memory remoting server for the SDK tests, plus tests of the fake itself.

``FakeCluster`` holds topics, consumer groups and offsets; each ``FakeBroker`` listens on
127.0.0.1 (port 0), stores messages as commitlog records, and also answers name-server
requests (route, cluster info, topic list) for the whole cluster. Just enough RocketMQ:
send / batch / pull with long polling / offsets / heartbeat / consumer list / locks /
send back / view / query, answered with ``broker.protocol`` codecs. Tests reach in to
inject failures (``fail_codes``), inspect ``requests``, or ``notify_ids_changed``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import pytest

from pocketmq.broker.protocol import (
    RPC_ONEWAY,
    FrameDecoder,
    RemoteProtocolError,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
)
from pocketmq.broker.protocol.codes import PullSysFlag
from pocketmq.broker.protocol.headers import (
    BrokerData,
    ClusterInfo,
    ConsumerListBody,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryMessageRequestHeader,
    QueueData,
    SearchOffsetRequestHeader,
    TopicRouteData,
    UnlockBatchRequestBody,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
    decode_json_body,
    encode_json_body,
    parse_send_message_header,
)
from pocketmq.broker.protocol.message_codec import (
    MessageExt,
    decode_batch,
    decode_properties,
    encode_message_record,
    offset_msg_id,
)
from pocketmq.client.filter import java_string_hash

Handler = Callable[["FakeConn", RemotingCommand], Awaitable[RemotingCommand | None]]


@dataclass
class GroupState:
    clients: dict[str, FakeConn] = field(default_factory=dict)
    subscriptions: dict[str, list[int]] = field(default_factory=dict)  # topic -> codeSet
    model: str = "CLUSTERING"


class FakeCluster:
    """State shared by the brokers: topics -> queue count per broker name."""

    def __init__(self) -> None:
        self.brokers: list[FakeBroker] = []
        self.topics: dict[str, dict[str, int]] = {}
        self.groups: dict[str, GroupState] = {}
        self.offsets: dict[tuple[str, str, str, int], int] = {}  # group, topic, broker, qid
        self.locks: dict[tuple[str, str, str, int], str] = {}  # group + mq -> client id
        self.log: list[tuple[str, RemotingCommand]] = []  # (broker name, request), in order

    def add_topic(self, topic: str, queues: int = 4, brokers: list[str] | None = None) -> None:
        names = brokers or [b.name for b in self.brokers]
        self.topics[topic] = {n: queues for n in names}

    def route(self, topic: str) -> TopicRouteData | None:
        table = self.topics.get(topic)
        if table is None:
            return None
        return TopicRouteData(
            queue_datas=[
                QueueData(broker_name=n, read_queue_nums=q, write_queue_nums=q, perm=6)
                for n, q in sorted(table.items())
            ],
            broker_datas=[b.broker_data() for b in self.brokers if b.name in table],
        )


class FakeConn(asyncio.Protocol):
    def __init__(self, broker: FakeBroker) -> None:
        self.broker = broker
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.closed = asyncio.get_running_loop().create_future()
        self.opaque = 1000

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop: not a subclass
        self.broker.conns.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
        except RemoteProtocolError:
            assert self.transport is not None
            self.transport.abort()
            return
        for cmd in frames:
            if cmd.is_response:
                self.broker.responses.append(cmd)
                continue
            self.broker.requests.append(cmd)
            self.broker.cluster.log.append((self.broker.name, cmd))
            task = asyncio.get_running_loop().create_task(self.handle(cmd))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def handle(self, cmd: RemotingCommand) -> None:
        response = await self.broker.dispatch(self, cmd)
        if response is not None and not cmd.is_oneway:
            self.send(response)

    def send(self, cmd: RemotingCommand) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(cmd))

    def send_request(self, cmd: RemotingCommand) -> None:
        self.opaque += 1
        cmd.opaque = self.opaque
        self.send(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self.broker.conns.discard(self)
        for task in self.tasks:
            task.cancel()
        self.broker.on_disconnect(self)
        if not self.closed.done():
            self.closed.set_result(None)


class FakeBroker:
    """One broker (and name server) of a ``FakeCluster``."""

    def __init__(
        self,
        cluster: FakeCluster,
        name: str = "broker-a",
        *,
        auto_create: bool = True,
        broker_filters: bool = True,
        stats_supported: bool = False,
    ) -> None:
        self.cluster = cluster
        self.name = name
        self.auto_create = auto_create
        self.broker_filters = broker_filters
        self.stats_supported = stats_supported
        self.requests: list[RemotingCommand] = []
        self.responses: list[RemotingCommand] = []
        self.conns: set[FakeConn] = set()
        self.queues: dict[tuple[str, int], list[MessageExt]] = {}
        self.by_commitlog: dict[int, MessageExt] = {}
        self.next_commitlog = 0
        self.arrived = asyncio.Condition()
        self.fail_codes: dict[int, list[int]] = {}  # request code -> response codes to return first
        self.drop_connection_on: set[int] = set()  # request codes that abort the connection
        self.refuse_send_back = False
        self.overrides: dict[int, Handler] = {}
        self.server: asyncio.Server | None = None
        self.port = 0
        cluster.brokers.append(self)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def broker_data(self) -> BrokerData:
        return BrokerData(
            cluster="DefaultCluster", broker_name=self.name, broker_addrs={0: self.addr}
        )

    async def start(self) -> FakeBroker:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: FakeConn(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        conns = list(self.conns)
        for conn in conns:
            assert conn.transport is not None
            conn.transport.abort()
        await asyncio.gather(*(c.closed for c in conns))
        if self.server is not None:
            await self.server.wait_closed()

    # -- helpers for tests -------------------------------------------------------------------

    def codes(self) -> list[int]:
        return [r.code for r in self.requests]

    def requests_of(self, code: int) -> list[RemotingCommand]:
        return [r for r in self.requests if r.code == code]

    def messages(self, topic: str, queue_id: int | None = None) -> list[MessageExt]:
        out = []
        for (t, q), msgs in sorted(self.queues.items()):
            if t == topic and (queue_id is None or q == queue_id):
                out.extend(msgs)
        return out

    async def put(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str] | None = None,
        *,
        reconsume_times: int = 0,
        store_timestamp: int | None = None,
    ) -> MessageExt:
        props = dict(properties or {})
        queue = self.queues.setdefault((topic, queue_id), [])
        msg = MessageExt(
            topic=topic,
            body=body,
            properties=props,
            queue_id=queue_id,
            queue_offset=len(queue),
            commitlog_offset=self.next_commitlog,
            born_timestamp=1_700_000_000_000,
            born_host="127.0.0.1",
            born_port=40000,
            store_timestamp=store_timestamp or 1_700_000_000_000 + len(self.by_commitlog),
            store_host="127.0.0.1",
            store_port=self.port,
            reconsume_times=reconsume_times,
        )
        record = encode_message_record(msg)
        self.next_commitlog += len(record)
        queue.append(msg)
        self.by_commitlog[msg.commitlog_offset] = msg
        async with self.arrived:
            self.arrived.notify_all()
        return msg

    def notify_ids_changed(self, group: str, *, skip: FakeConn | None = None) -> None:
        state = self.cluster.groups.get(group)
        if state is None:
            return
        for conn in set(state.clients.values()):
            if conn is not skip and conn.broker is self:
                conn.send_request(
                    RemotingCommand(
                        code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        flag=RPC_ONEWAY,
                        ext_fields={"consumerGroup": group},
                    )
                )

    def on_disconnect(self, conn: FakeConn) -> None:
        for group, state in self.cluster.groups.items():
            gone = [c for c, v in state.clients.items() if v is conn]
            for client_id in gone:
                del state.clients[client_id]
            if gone:
                self.notify_ids_changed(group)

    # -- dispatch ----------------------------------------------------------------------------

    async def dispatch(self, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand | None:
        if cmd.code in self.drop_connection_on:
            assert conn.transport is not None
            conn.transport.abort()
            return None
        queued = self.fail_codes.get(cmd.code)
        if queued:
            return cmd.make_response(queued.pop(0), "injected failure")
        handler = self.overrides.get(cmd.code) or _HANDLERS.get(cmd.code)
        if handler is None:
            return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not supported")
        return await handler(self, conn, cmd)


# -- handlers -----------------------------------------------------------------------------------


async def _route(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    topic = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields).topic
    if topic == "TBW102" and b.auto_create:
        route = TopicRouteData(
            queue_datas=[
                QueueData(broker_name=x.name, read_queue_nums=8, write_queue_nums=8, perm=7)
                for x in b.cluster.brokers
            ],
            broker_datas=[x.broker_data() for x in b.cluster.brokers],
        )
    else:
        route = b.cluster.route(topic)
    if route is None:
        return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info for {topic}")
    return cmd.make_response(ResponseCode.SUCCESS, body=encode_json_body(route))


async def _heartbeat(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    data = decode_json_body(cmd.body or b"{}", HeartbeatData)
    for consumer in data.consumer_data_set:
        state = b.cluster.groups.setdefault(consumer.group_name, GroupState())
        state.model = consumer.message_model
        for sub in consumer.subscription_data_set:
            state.subscriptions[sub.topic] = list(sub.code_set)
        retry = "%RETRY%" + consumer.group_name
        if consumer.message_model == "CLUSTERING" and retry not in b.cluster.topics:
            b.cluster.topics[retry] = {b.name: 1}
        is_new = state.clients.get(data.client_id) is not conn
        state.clients[data.client_id] = conn
        if is_new:
            b.notify_ids_changed(consumer.group_name, skip=conn)
    return cmd.make_response(ResponseCode.SUCCESS)


async def _unregister(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
    if h.consumer_group:
        state = b.cluster.groups.get(h.consumer_group)
        if state is not None and state.clients.pop(h.client_id, None) is not None:
            b.notify_ids_changed(h.consumer_group)
    return cmd.make_response(ResponseCode.SUCCESS)


async def _send(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = parse_send_message_header(cmd.code, cmd.ext_fields)
    if h.topic not in b.cluster.topics:
        if not b.auto_create:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, "topic not exist")
        b.cluster.add_topic(h.topic, h.default_topic_queue_nums)
    if cmd.code == RequestCode.SEND_BATCH_MESSAGE:
        items = [(m.body, m.properties, m.flag) for m in decode_batch(cmd.body or b"")]
    else:
        items = [(cmd.body or b"", decode_properties(h.properties or ""), h.flag)]
    stored = []
    for body, props, _flag in items:
        stored.append(
            await b.put(h.topic, h.queue_id, body, props, reconsume_times=h.reconsume_times or 0)
        )
    ext = {
        "msgId": ",".join(offset_msg_id("127.0.0.1", b.port, m.commitlog_offset) for m in stored),
        "queueId": str(h.queue_id),
        "queueOffset": str(stored[0].queue_offset),
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    if cmd.code != RequestCode.SEND_BATCH_MESSAGE:
        ext["transactionId"] = stored[0].properties.get("UNIQ_KEY", "")
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields=ext)


def _matches(codes: list[int], msg: MessageExt) -> bool:
    if not codes:
        return True
    tag = msg.properties.get("TAGS")
    return tag is not None and java_string_hash(tag) in codes


async def _pull(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    key = (h.consumer_group, h.topic, b.name, h.queue_id)
    if h.sys_flag & PullSysFlag.COMMIT_OFFSET:
        b.cluster.offsets[key] = h.commit_offset
    if h.sys_flag & PullSysFlag.SUBSCRIPTION:
        expr = h.subscription or "*"
        tags = [t.strip() for t in expr.split("||") if t.strip() and t.strip() != "*"]
        codes = [java_string_hash(t) for t in tags]
    else:
        state = b.cluster.groups.get(h.consumer_group)
        if state is None or h.topic not in state.subscriptions:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST, "no subscription")
        codes = state.subscriptions[h.topic]
    if not b.broker_filters:
        codes = []
    queue = b.queues.setdefault((h.topic, h.queue_id), [])

    def reply(code: int, next_offset: int, body: bytes | None = None) -> RemotingCommand:
        ext = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(next_offset),
            "minOffset": "0",
            "maxOffset": str(len(queue)),
        }
        return cmd.make_response(code, ext_fields=ext, body=body)

    offset = h.queue_offset
    if offset > len(queue):
        return reply(ResponseCode.PULL_OFFSET_MOVED, len(queue))
    if offset == len(queue) and h.sys_flag & PullSysFlag.SUSPEND:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(h.suspend_timeout_millis / 1000), b.arrived:
                await b.arrived.wait_for(lambda: len(queue) > offset)
    if offset >= len(queue):
        return reply(ResponseCode.PULL_NOT_FOUND, offset)
    window = queue[offset : offset + h.max_msg_nums]
    found = [m for m in window if _matches(codes, m)]
    next_offset = offset + len(window)
    if not found:
        return reply(ResponseCode.PULL_RETRY_IMMEDIATELY, next_offset)
    return reply(
        ResponseCode.SUCCESS, next_offset, b"".join(encode_message_record(m) for m in found)
    )


def _offset_key(b: FakeBroker, group: str, topic: str, qid: int) -> tuple[str, str, str, int]:
    return (group, topic, b.name, qid)


async def _query_offset(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = QueryConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    offset = b.cluster.offsets.get(_offset_key(b, h.consumer_group, h.topic, h.queue_id))
    if offset is None:
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "Not found")
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})


async def _update_offset(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = UpdateConsumerOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    b.cluster.offsets[_offset_key(b, h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
    return cmd.make_response(ResponseCode.SUCCESS)


async def _max_offset(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = GetMaxOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    n = len(b.queues.get((h.topic, h.queue_id), []))
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(n)})


async def _min_offset(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    GetMinOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": "0"})


async def _search(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = SearchOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    queue = b.queues.get((h.topic, h.queue_id), [])
    offset = next((m.queue_offset for m in queue if m.store_timestamp >= h.timestamp), len(queue))
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})


async def _consumer_list(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = GetConsumerListByGroupRequestHeader.from_ext_fields(cmd.ext_fields)
    state = b.cluster.groups.get(h.consumer_group)
    if state is None or not state.clients:
        return cmd.make_response(
            ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {h.consumer_group}"
        )
    body = ConsumerListBody(consumer_id_list=sorted(state.clients))
    return cmd.make_response(ResponseCode.SUCCESS, body=encode_json_body(body))


async def _lock(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    req = decode_json_body(cmd.body or b"{}", LockBatchRequestBody)
    ok: list[MessageQueue] = []
    for mq in req.mq_set:
        key = (req.consumer_group, mq.topic, mq.broker_name, mq.queue_id)
        holder = b.cluster.locks.get(key)
        if holder in (None, req.client_id):
            b.cluster.locks[key] = req.client_id
            ok.append(mq)
    body = encode_json_body(LockBatchResponseBody(lock_ok_mq_set=ok))
    return cmd.make_response(ResponseCode.SUCCESS, body=body)


async def _unlock(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    req = decode_json_body(cmd.body or b"{}", UnlockBatchRequestBody)
    for mq in req.mq_set:
        key = (req.consumer_group, mq.topic, mq.broker_name, mq.queue_id)
        if b.cluster.locks.get(key) == req.client_id:
            del b.cluster.locks[key]
    return cmd.make_response(ResponseCode.SUCCESS)


async def _send_back(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    if b.refuse_send_back:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "send back refused")
    h = ConsumerSendMsgBackRequestHeader.from_ext_fields(cmd.ext_fields)
    original = b.by_commitlog.get(h.offset)
    if original is None:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "no message at offset")
    props = dict(original.properties)
    props.setdefault("RETRY_TOPIC", original.topic)
    props.setdefault("ORIGIN_MESSAGE_ID", h.origin_msg_id or "")
    times = original.reconsume_times + 1
    max_times = h.max_reconsume_times if h.max_reconsume_times is not None else 16
    if h.delay_level < 0 or original.reconsume_times >= max_times:
        topic = "%DLQ%" + h.group
    else:
        topic = "%RETRY%" + h.group
    b.cluster.topics.setdefault(topic, {b.name: 1})
    await b.put(topic, 0, original.body, props, reconsume_times=times)
    return cmd.make_response(ResponseCode.SUCCESS)


async def _view(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = ViewMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    msg = b.by_commitlog.get(h.offset)
    if msg is None:
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, "no message")
    return cmd.make_response(ResponseCode.SUCCESS, body=encode_message_record(msg))


async def _query(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = QueryMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    unique = (cmd.ext_fields or {}).get("_UNIQUE_KEY_QUERY") == "true"
    found = []
    for m in b.messages(h.topic):
        keys = m.properties.get("KEYS", "").split()
        if (unique and m.properties.get("UNIQ_KEY") == h.key) or (not unique and h.key in keys):
            found.append(m)
    if not found:
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, "not found")
    ext = {"indexLastUpdateTimestamp": "0", "indexLastUpdatePhyoffset": "0"}
    body = b"".join(encode_message_record(m) for m in found[: h.max_num])
    return cmd.make_response(ResponseCode.SUCCESS, ext_fields=ext, body=body)


async def _cluster_info(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    info = ClusterInfo(
        broker_addr_table={x.name: x.broker_data() for x in b.cluster.brokers},
        cluster_addr_table={"DefaultCluster": [x.name for x in b.cluster.brokers]},
    )
    # fastjson writes integer map keys unquoted; the SDK must read that
    body = encode_json_body(info).replace(b'{"0":', b"{0:")
    return cmd.make_response(ResponseCode.SUCCESS, body=body)


async def _topic_list(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    body = b'{"topicList":[' + b",".join(f'"{t}"'.encode() for t in b.cluster.topics) + b"]}"
    return cmd.make_response(ResponseCode.SUCCESS, body=body)


async def _create_topic(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)
    b.cluster.topics.setdefault(h.topic, {})[b.name] = h.write_queue_nums
    return cmd.make_response(ResponseCode.SUCCESS)


async def _stats(b: FakeBroker, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    if not b.stats_supported:
        return cmd.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "no stats")
    topic = (cmd.ext_fields or {})["topic"]
    entries = []
    for qid in range(b.cluster.topics.get(topic, {}).get(b.name, 0)):
        queue = b.queues.get((topic, qid), [])
        last = queue[-1].store_timestamp if queue else 0
        mq = f'{{"brokerName":"{b.name}","queueId":{qid},"topic":"{topic}"}}'
        entries.append(
            f'{mq}:{{"lastUpdateTimestamp":{last},"maxOffset":{len(queue)},"minOffset":0}}'
        )
    body = ('{"offsetTable":{' + ",".join(entries) + "}}").encode()  # fastjson object keys
    return cmd.make_response(ResponseCode.SUCCESS, body=body)


_HANDLERS: dict[
    int, Callable[[FakeBroker, FakeConn, RemotingCommand], Awaitable[RemotingCommand]]
] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: _route,
    RequestCode.HEART_BEAT: _heartbeat,
    RequestCode.UNREGISTER_CLIENT: _unregister,
    RequestCode.SEND_MESSAGE: _send,
    RequestCode.SEND_MESSAGE_V2: _send,
    RequestCode.SEND_BATCH_MESSAGE: _send,
    RequestCode.PULL_MESSAGE: _pull,
    RequestCode.QUERY_CONSUMER_OFFSET: _query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: _update_offset,
    RequestCode.GET_MAX_OFFSET: _max_offset,
    RequestCode.GET_MIN_OFFSET: _min_offset,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _search,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: _consumer_list,
    RequestCode.LOCK_BATCH_MQ: _lock,
    RequestCode.UNLOCK_BATCH_MQ: _unlock,
    RequestCode.CONSUMER_SEND_MSG_BACK: _send_back,
    RequestCode.VIEW_MESSAGE_BY_ID: _view,
    RequestCode.QUERY_MESSAGE: _query,
    RequestCode.GET_BROKER_CLUSTER_INFO: _cluster_info,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: _topic_list,
    RequestCode.UPDATE_AND_CREATE_TOPIC: _create_topic,
    RequestCode.GET_TOPIC_STATS_INFO: _stats,
}


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` until true; fail the test after ``timeout_s`` (a guard, not a
    timing assertion)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def fake_cluster(*names: str, **kwargs: bool):  # type: ignore[no-untyped-def]
    cluster = FakeCluster()
    brokers = [FakeBroker(cluster, n, **kwargs) for n in (names or ("broker-a",))]
    for b in brokers:
        await b.start()
    try:
        yield cluster
    finally:
        for b in brokers:
            await b.close()


# -- tests of the fake itself ------------------------------------------------------------------


async def test_fake_broker_answers_a_route_and_stores_records() -> None:
    from pocketmq.client.connection import Connection, make_request

    async with fake_cluster("broker-a") as cluster:
        broker = cluster.brokers[0]
        cluster.add_topic("T", 2)
        conn = await Connection.open(broker.addr)
        try:
            cmd = make_request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic="T")
            )
            response = await conn.invoke(cmd, 2000)
            route = decode_json_body(response.body or b"", TopicRouteData)
            assert route.queue_datas[0].write_queue_nums == 2
            assert route.broker_datas[0].broker_addrs == {0: broker.addr}
            missing = make_request(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic="Nope")
            )
            broker.auto_create = False
            assert (await conn.invoke(missing, 2000)).code == ResponseCode.TOPIC_NOT_EXIST
        finally:
            await conn.aclose()
        first = await broker.put("T", 1, b"x")
        second = await broker.put("T", 1, b"y")
        assert (first.queue_offset, second.queue_offset) == (0, 1)
        assert second.commitlog_offset > first.commitlog_offset


@pytest.mark.parametrize("tag", ["A", None])
def test_fake_tag_filter_uses_hash_codes(tag: str | None) -> None:
    msg = MessageExt(topic="T", body=b"x", properties={"TAGS": tag} if tag else {})
    assert _matches([], msg)
    assert _matches([java_string_hash("A")], msg) is (tag == "A")
