"""``Admin``'s calls that change consumer groups or ask running consumers, as RocketMQ's
``DefaultMQAdminExt`` makes them (mixed into ``Admin``)::

    await admin.reset_offset_by_time("billing", "Orders", timestamp_ms)   # mqadmin resetOffsetByTime
    info = await admin.consumer_running_info("billing", client_id)       # consumerStatus -i
    await admin.consume_message_directly("billing", client_id, msg_id)   # consumeMessage
    await admin.consumer_status("billing", "Orders")                     # offsets each client holds
    await admin.delete_group("billing", clean_offset=True)               # mqadmin deleteSubGroup
    await admin.delete_expired_commitlog()                               # deleteExpiredCommitLog

Each raises the broker's refusal as the SDK's typed error (``ConsumerNotOnlineError``,
``TopicNotExistError``, ``BrokerSystemError`` with RocketMQ's remark, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pocketmq.broker.protocol import RequestCode, ResponseCode
from pocketmq.broker.protocol.admin_bodies import (
    ConsumeMessageDirectlyResult,
    ConsumeMessageDirectlyResultRequestHeader,
    ConsumerRunningInfo,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetConsumerStatusBody,
    GetConsumerStatusRequestHeader,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    decode_mq_table,
)
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    UpdateConsumerOffsetRequestHeader,
    decode_json_body,
)
from pocketmq.ids import InvalidMessageIdError, decode_message_id

from . import _queries
from .connection import check_response, make_request
from .errors import (
    BrokerError,
    ClientUsageError,
    ConsumerNotOnlineError,
    RouteNotFoundError,
    TopicNotExistError,
    UnknownBrokerError,
)
from .message import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, MessageQueue, validate_topic

if TYPE_CHECKING:
    from ._core import ClientCore

__all__ = ["AdminControl", "ResetOffsetResult", "RollbackStats"]

# A consumer asked by the broker may take the broker's 10 s to answer.
_CALL_CLIENT_TIMEOUT_MS = 15_000


@dataclass(frozen=True, slots=True)
class RollbackStats:
    """One queue reset by the fallback path (RocketMQ's ``RollbackStats``): the queue's end,
    the group's offset before, the offset found for the time, and the offset now."""

    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    timestamp_offset: int
    rollback_offset: int


@dataclass(frozen=True, slots=True)
class ResetOffsetResult:
    """Where a reset by time moved each queue. ``rollback`` is set when no consumer of the
    group was online and the offsets were written directly (mqadmin's old path)."""

    offsets: dict[MessageQueue, int]
    rollback: list[RollbackStats] | None = field(default=None)


def _mq(wire: Any) -> MessageQueue:
    return MessageQueue(wire.topic, wire.broker_name, wire.queue_id)


class AdminControl:
    """Mixed into ``Admin`` (which provides ``_core``, ``_check_open`` and ``_masters``)."""

    _core: ClientCore

    if TYPE_CHECKING:  # what Admin provides; declared for the type checker only

        def _check_open(self) -> None: ...

        async def _masters(self, cluster: str | None, topic: str) -> dict[str, str]: ...

        async def show_message(
            self,
            message_id: str,
            *,
            topic: str | None = None,
            delete: bool = False,
            broker: str | None = None,
        ) -> list[dict[str, Any]]: ...

    async def _route_brokers(self, topic: str) -> dict[str, str]:
        """Broker name -> address (master, else any) of each broker in ``topic``'s route."""
        route = await self._core.routes.fetch(topic)
        out: dict[str, str] = {}
        for broker in route.broker_datas:
            addrs = broker.broker_addrs
            addr = addrs.get(0) or next(iter(addrs.values()), None)
            if addr:
                out[broker.broker_name] = addr
        return out

    # -- groups ------------------------------------------------------------------------------

    async def delete_group(
        self,
        group: str,
        *,
        clean_offset: bool = False,
        cluster: str | None = None,
        broker: str | None = None,
    ) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP (207) on every master broker (of ``cluster``), or on the one
        at ``broker`` ("host:port"); ``clean_offset`` also drops the group's offsets. As
        mqadmin ``deleteSubGroup -c`` does, the group's ``%RETRY%`` and ``%DLQ%`` topics are
        then deleted from those brokers and the name servers (not with ``broker``, as mqadmin
        ``-b``). A group a broker does not have is no error. Returns the brokers asked."""
        self._check_open()
        if not isinstance(group, str) or not group:
            raise ClientUsageError("group must be a non-empty string")
        if broker is not None:
            targets = {broker: broker}
        else:
            targets = await self._masters(cluster, RETRY_TOPIC_PREFIX + group)
        header = DeleteSubscriptionGroupRequestHeader(group_name=group, clean_offset=clean_offset)
        for addr in targets.values():
            cmd = make_request(RequestCode.DELETE_SUBSCRIPTIONGROUP, header)
            check_response(await self._core.invoke(addr, cmd))
        if broker is None:
            for topic in (RETRY_TOPIC_PREFIX + group, DLQ_TOPIC_PREFIX + group):
                await self._delete_topic(topic, targets, cluster)
        return list(targets)

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """mqadmin ``deleteTopic``: DELETE_TOPIC_IN_BROKER (215) on every master broker (of
        ``cluster``), then DELETE_TOPIC_IN_NAMESRV (216) on each name server. Returns the
        brokers asked; a broker without the topic is no error."""
        self._check_open()
        validate_topic(topic)
        targets = await self._masters(cluster, topic)
        await self._delete_topic(topic, targets, cluster)
        return list(targets)

    async def _delete_topic(self, topic: str, brokers: dict[str, str], cluster: str | None) -> None:
        """DefaultMQAdminExt.deleteTopic: DELETE_TOPIC_IN_BROKER (215) on each broker, then
        DELETE_TOPIC_IN_NAMESRV (216) on each name server."""
        for addr in brokers.values():
            cmd = make_request(RequestCode.DELETE_TOPIC_IN_BROKER, ext_fields={"topic": topic})
            check_response(await self._core.invoke(addr, cmd))
        fields = {"topic": topic} | ({"clusterName": cluster} if cluster else {})
        for namesrv in self._core.routes.namesrv:
            cmd = make_request(RequestCode.DELETE_TOPIC_IN_NAMESRV, ext_fields=dict(fields))
            check_response(await self._core.invoke(namesrv, cmd))
        self._core.routes.forget(topic)

    # -- offsets -----------------------------------------------------------------------------

    async def reset_offset_by_time(
        self,
        group: str,
        topic: str,
        timestamp_ms: int,
        *,
        force: bool = True,
        fallback: bool = True,
    ) -> ResetOffsetResult:
        """mqadmin ``resetOffsetByTime``: INVOKE_BROKER_TO_RESET_OFFSET (222) on each broker of
        ``topic``'s route. Each finds, per queue, the first message stored at or after
        ``timestamp_ms`` (-1: the end of the queue) and tells the group's online consumers to
        move there (without ``force``, a queue only moves back). When no consumer is online
        (CONSUMER_NOT_ONLINE), ``fallback`` writes the offsets directly as mqadmin's old path
        does (``reset_offset_by_time_old``); without it, ``ConsumerNotOnlineError``."""
        self._check_open()
        validate_topic(topic)
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
            raise ClientUsageError(f"timestamp_ms must be an int: {timestamp_ms!r}")
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms, is_force=force
        )
        offsets: dict[MessageQueue, int] = {}
        try:
            for addr in (await self._route_brokers(topic)).values():
                cmd = make_request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
                response = check_response(await self._core.invoke(addr, cmd))
                body = _decode(response.body, ResetOffsetBody)
                for mq, offset in decode_mq_table(body.offset_table).items():
                    offsets[_mq(mq)] = int(offset)
        except ConsumerNotOnlineError:
            if not fallback:
                raise
            rollback = await self.reset_offset_by_time_old(group, topic, timestamp_ms, force=force)
            return ResetOffsetResult(
                offsets={
                    MessageQueue(topic, r.broker_name, r.queue_id): r.rollback_offset
                    for r in rollback
                },
                rollback=rollback,
            )
        return ResetOffsetResult(offsets=offsets)

    async def reset_offset_by_time_old(
        self, group: str, topic: str, timestamp_ms: int, *, force: bool = True
    ) -> list[RollbackStats]:
        """mqadmin's old path (``resetOffsetByTimestampOld``), for a group with no consumer
        online: per queue, the offset for the time (GET_MAX_OFFSET for -1, else
        SEARCH_OFFSET_BY_TIMESTAMP) is written with UPDATE_CONSUMER_OFFSET when ``force`` or
        when it is not past the group's offset. The queues are those the group has an offset
        of, else all of the topic's read queues from their first offset, as RocketMQ's
        consume stats give them."""
        self._check_open()
        validate_topic(topic)
        route = await self._core.routes.get(topic)
        core = self._core
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in route.subscribe_queues:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        out: list[RollbackStats] = []
        for queues in by_broker.values():
            committed = {mq: await self._group_offset(group, mq) for mq in queues}
            consumed = [mq for mq in queues if committed[mq] is not None]
            for mq in consumed or queues:
                broker_offset = await _queries.max_offset(core, mq)
                consumer_offset = committed[mq]
                if consumer_offset is None:
                    consumer_offset = await _queries.min_offset(core, mq)
                if timestamp_ms == -1:
                    found = broker_offset
                else:
                    found = await _queries.search_offset(core, mq, timestamp_ms)
                rollback = consumer_offset
                if force or found <= consumer_offset:
                    rollback = found
                    update = UpdateConsumerOffsetRequestHeader(
                        consumer_group=group,
                        topic=mq.topic,
                        queue_id=mq.queue_id,
                        commit_offset=found,
                    )
                    cmd = make_request(RequestCode.UPDATE_CONSUMER_OFFSET, update)
                    check_response(await core.invoke_broker(mq.broker_name, cmd))
                out.append(
                    RollbackStats(
                        broker_name=mq.broker_name,
                        queue_id=mq.queue_id,
                        broker_offset=broker_offset,
                        consumer_offset=consumer_offset,
                        timestamp_offset=found,
                        rollback_offset=rollback,
                    )
                )
        return out

    async def _group_offset(self, group: str, mq: MessageQueue) -> int | None:
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id
        )
        cmd = make_request(RequestCode.QUERY_CONSUMER_OFFSET, header)
        response = await self._core.invoke_broker(mq.broker_name, cmd)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        check_response(response)
        try:
            return QueryConsumerOffsetResponseHeader.from_ext_fields(response.ext_fields).offset
        except RemoteProtocolError as error:
            raise UnknownBrokerError(response.code, f"unreadable offset: {error}") from None

    # -- asking consumers --------------------------------------------------------------------

    async def consumer_status(
        self, group: str, topic: str, *, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223) on each broker of ``topic``'s route: the
        offsets of ``topic`` each online consumer (or only ``client_id``) holds, by client
        id. ``BrokerSystemError`` when no consumer of the group is online."""
        self._check_open()
        header = GetConsumerStatusRequestHeader(topic=topic, group=group, client_addr=client_id)
        out: dict[str, dict[MessageQueue, int]] = {}
        for addr in (await self._route_brokers(topic)).values():
            cmd = make_request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, header)
            response = check_response(await self._core.invoke(addr, cmd, _CALL_CLIENT_TIMEOUT_MS))
            body = _decode(response.body, GetConsumerStatusBody)
            for cid, table in body.consumer_table.items():
                mine = out.setdefault(cid, {})
                for mq, offset in decode_mq_table(table).items():
                    mine[_mq(mq)] = int(offset)
        return out

    async def _group_brokers(self, group: str) -> dict[str, str]:
        """The brokers of ``%RETRY%<group>`` (where DefaultMQAdminExt asks about a group's
        consumers), else every master broker."""
        try:
            brokers = await self._route_brokers(RETRY_TOPIC_PREFIX + group)
        except (RouteNotFoundError, TopicNotExistError):
            brokers = {}
        return brokers or await self._masters(None, RETRY_TOPIC_PREFIX + group)

    async def consumer_running_info(
        self, group: str, client_id: str, *, jstack: bool = False
    ) -> ConsumerRunningInfo:
        """GET_CONSUMER_RUNNING_INFO (307) relayed by a broker to the consumer ``client_id``:
        its settings (``properties``), subscriptions, owned queues (``mq_table``, keyed by
        ``admin_bodies.mq_key``; ``decode_mq_table`` turns the keys into queues) and per-topic
        figures (``status_table``). ``BrokerSystemError`` "The Consumer <g> <id> not online"
        when no broker has that consumer."""
        self._check_open()
        header = GetConsumerRunningInfoRequestHeader(
            consumer_group=group, client_id=client_id, jstack_enable=jstack
        )
        response = await self._ask_consumer(group, RequestCode.GET_CONSUMER_RUNNING_INFO, header)
        return _decode(response.body, ConsumerRunningInfo)

    async def consume_message_directly(
        self, group: str, client_id: str, message_id: str, *, topic: str | None = None
    ) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY (309): the broker holding the message gives it to the
        consumer ``client_id``, whose listener consumes it (nothing is acknowledged or
        committed); the answer says how it went (``consume_result``: CR_SUCCESS, CR_LATER,
        CR_THROW_EXCEPTION with the error as ``remark``). ``message_id`` is an offset message
        ID, or with ``topic`` a unique key or key looked up in the topic's index."""
        self._check_open()
        if topic is None:
            offset_id = message_id.strip()
        else:
            found = await self.show_message(message_id, topic=topic)
            offset_id = str(found[0]["offset_msg_id"])
        try:
            decoded = decode_message_id(offset_id)
        except InvalidMessageIdError as error:
            raise ClientUsageError(f"{message_id}: {error}") from None
        if decoded["scheme"] != "offset":
            raise ClientUsageError(
                f"{message_id} is a {decoded['scheme']} unique key, not an offset message ID: "
                "give its topic too"
            )
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=client_id, msg_id=offset_id, topic=topic
        )
        cmd = make_request(RequestCode.CONSUME_MESSAGE_DIRECTLY, header)
        addr = str(decoded["broker_addr"])
        response = check_response(await self._core.invoke(addr, cmd, _CALL_CLIENT_TIMEOUT_MS))
        return _decode(response.body, ConsumeMessageDirectlyResult)

    async def _ask_consumer(self, group: str, code: int, header: Any) -> Any:
        """Ask each broker of the group in turn; the first that has the consumer answers."""
        last: Exception | None = None
        for addr in (await self._group_brokers(group)).values():
            cmd = make_request(code, header)
            response = await self._core.invoke(addr, cmd, _CALL_CLIENT_TIMEOUT_MS)
            try:
                return check_response(response)
            except BrokerError as error:  # not on this broker: try the next
                last = error
        assert last is not None
        raise last

    # -- maintenance -------------------------------------------------------------------------

    async def delete_expired_commitlog(self, *, cluster: str | None = None) -> list[str]:
        """DELETE_EXPIRED_COMMITLOG (329) on every master broker (of ``cluster``): commit-log
        files older than ``fileReservedTime`` are deleted now, whatever ``deleteWhen`` says.
        Returns the brokers asked."""
        self._check_open()
        masters = await self._masters(cluster, "*")
        for addr in masters.values():
            cmd = make_request(RequestCode.DELETE_EXPIRED_COMMITLOG)
            check_response(await self._core.invoke(addr, cmd))
        return list(masters)


def _decode(body: bytes | None, type_: Any) -> Any:
    try:
        return decode_json_body(body or b"{}", type_)
    except RemoteProtocolError as error:
        raise UnknownBrokerError(ResponseCode.SUCCESS, f"unreadable answer: {error}") from None
