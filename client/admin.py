"""``Admin``: topic and consumer group administration through the name server and the brokers.

async with Admin("127.0.0.1:9876") as admin:
    await admin.create_topic("Orders", queues=8)
    await admin.create_topic("Ledger", queues=4, message_type="FIFO")  # RocketMQ 5.x topic type
    await admin.create_group("LedgerReaders", orderly=True, retry_max_times=3)
    print(await admin.list_topics())
    for q in await admin.topic_status("Orders"):
        print(q.queue, q.min_offset, q.max_offset, q.last_update_ms)

Brokers started with ``--clock manual`` (pocketmq only) move their clock when told::

    await admin.advance_clock("2h")     # everything due fires, in order, before this returns
    await admin.set_clock(1_700_000_000_000)
    states = await admin.clock()        # {broker name: ClockState(now_ms, manual, ...)}

pocketmq's own views of messages, dead-letter queues and transactions (request codes 9002-9004)
go to every master broker the name server knows, or to one named by ``broker=`` (a broker name
or "host:port")::

    await admin.show_message("7F00000100002A9F0000000000000000")   # an offset message ID
    await admin.show_message("order-1", topic="Orders")              # a unique key or a key
    await admin.dead_letters("billing")                              # %DLQ%billing
    await admin.resend_dead_letters("billing")                       # all of them, or ids=[...]
    await admin.transactions()                                       # pending half messages
    await admin.check_transaction("TX-0001")

Groups, offsets and running consumers (``client/_admin_control.py``): ``delete_group``,
``reset_offset_by_time``, ``consumer_status``, ``consumer_running_info``, ``delete_topic``,
``consume_message_directly``, ``delete_expired_commitlog``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from pocketmq.broker.protocol import RequestCode
from pocketmq.broker.protocol.codes import Perm
from pocketmq.broker.protocol.errors import RemoteProtocolError
from pocketmq.broker.protocol.headers import (
    ClusterInfo,
    CreateTopicRequestHeader,
    SubscriptionGroupConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    decode_json_body,
)
from pocketmq.ids import InvalidMessageIdError, decode_message_id

from . import _queries
from ._admin_config import AdminConfigMixin
from ._admin_control import AdminControl, ResetOffsetResult, RollbackStats
from ._admin_stats import AdminStatsMixin
from ._core import CoreClient
from ._duration import Duration, duration_ms
from .connection import Credentials, check_response, make_request
from .errors import (
    BrokerError,
    ClientError,
    ClientUsageError,
    QueryNotFoundError,
    RouteNotFoundError,
    TopicNotExistError,
    UnknownBrokerError,
)
from .message import MessageQueue, validate_topic
from .pull import TOOLS_GROUP, pull_queue
from .route import AUTO_CREATE_TOPIC, MASTER_ID

__all__ = [
    "MESSAGE_TYPES",
    "Admin",
    "ClockState",
    "QueueStatus",
    "parse_group_attributes",
    "ResetOffsetResult",
    "RollbackStats",
]

log = logging.getLogger("pocketmq.client.admin")

_CLOCK_TIMEOUT_MS = 60_000
# A DLQ list or resend reads and writes every message of the queue before answering.
_ADMIN_TIMEOUT_MS = 60_000
_NOT_IN_DLQ = "not found in the dead-letter queue"

# RocketMQ 5.x topic attribute message.type (TopicMessageType); the broker checks it too.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "PRIORITY", "LITE")
_GROUP_CHARS = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_GROUP_LENGTH_MAX = 255


def parse_group_attributes(text: str) -> dict[str, str]:
    """mqadmin's ``-a`` text as RocketMQ's AttributeParser.parseToMap reads it and a group
    update carries it: ``"+k=v,-k2"`` -> {"+k": "v", "-k2": ""}; ClientUsageError when an
    entry is neither ``+key=value`` nor ``-key``, or a key comes twice."""
    changes: dict[str, str] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        key, equals, value = entry.partition("=")
        if (equals and (not key.startswith("+") or not value or "=" in value)) or (
            not equals and not key.startswith("-")
        ):
            raise ClientUsageError(f"group attribute {entry!r} is neither +key=value nor -key")
        if len(key) < 2:
            raise ClientUsageError(f"group attribute {entry!r} has no key")
        if key[1:] in {name[1:] for name in changes}:
            raise ClientUsageError(f"group attribute {key[1:]!r} is given twice in {text!r}")
        changes[key] = value
    return changes


@dataclass(frozen=True)
class QueueStatus:
    """``last_update_ms``: store time of the queue's last message (None when empty/unknown).
    ``message_type``: the topic's 5.x ``message.type`` on the queue's broker ("NORMAL" when it
    has none; None when the broker would not say)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    last_update_ms: int | None
    message_type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.queue.topic,
            "broker_name": self.queue.broker_name,
            "queue_id": self.queue.queue_id,
            "min_offset": self.min_offset,
            "max_offset": self.max_offset,
            "last_update_ms": self.last_update_ms,
            "message_type": self.message_type,
        }


@dataclass(frozen=True)
class ClockState:
    """A broker's answer to POCKETMQ_CLOCK: its time, whether it is manual, how many due items
    the request fired, and how many are still waiting."""

    broker: str
    addr: str
    now_ms: int
    manual: bool
    fired: int
    pending: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker": self.broker,
            "addr": self.addr,
            "now_ms": self.now_ms,
            "manual": self.manual,
            "fired": self.fired,
            "pending": self.pending,
        }


class _TopicList(msgspec.Struct, rename="camel"):
    topic_list: list[str] = []


class _WireQueue(msgspec.Struct, rename="camel"):
    topic: str
    broker_name: str
    queue_id: int


class _TopicOffset(msgspec.Struct, rename="camel"):
    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0


class _TopicStatsTable(msgspec.Struct, rename="camel"):
    # fastjson keys this map by MessageQueue objects; the lenient reader gives their JSON text
    offset_table: dict[str, _TopicOffset] = {}


class Admin(AdminConfigMixin, AdminControl, AdminStatsMixin, CoreClient):
    """Administration client; an async context manager. Brokers' settings:
    ``broker_config()`` and ``update_broker_config()`` (``client/_admin_config.py``). Group
    deletion, offset resets and questions to running consumers: ``client/_admin_control.py``.
    Consume progress and lag, topic and broker stats, connected clients:
    ``consumer_progress()``, ``topic_stats()``, ``broker_runtime_info()``,
    ``consumer_connections()``, ... (``client/_admin_stats.py``)."""

    _kind = "admin"

    def __init__(
        self,
        namesrv: str | Sequence[str] | None = None,
        *,
        request_timeout_ms: float = 3000,
        instance_name: str | None = None,
        client_ip: str | None = None,
        credentials: Credentials | tuple[str, str] | None = None,
        tls: bool | None = None,
        tls_ca: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(
            namesrv,
            request_timeout_ms=request_timeout_ms,
            instance_name=instance_name,
            client_ip=client_ip,
            credentials=credentials,
            tls=tls,
            tls_ca=tls_ca,
        )

    async def cluster_info(self) -> ClusterInfo:
        """GET_BROKER_CLUSTER_INFO (106) from the name server."""
        self._check_open()
        return await self._core.cluster_info()

    async def create_topic(
        self,
        topic: str,
        queues: int = 8,
        *,
        perm: int = int(Perm.READ | Perm.WRITE),
        order: bool = False,
        cluster: str | None = None,
        message_type: str | None = None,
    ) -> list[str]:
        """UPDATE_AND_CREATE_TOPIC (17) on every master broker (of ``cluster``, if given).

        ``message_type`` (RocketMQ 5.x, one of ``MESSAGE_TYPES``) sets the topic's
        ``message.type`` attribute; None leaves it alone (a topic without it is NORMAL).
        Returns the names of the brokers that now have the topic.
        """
        self._check_open()
        validate_topic(topic, for_send=True)
        if queues < 1:
            raise ClientUsageError("a topic needs at least one queue")
        if message_type is not None and message_type not in MESSAGE_TYPES:
            raise ClientUsageError(
                f"message_type must be one of {', '.join(MESSAGE_TYPES)}: {message_type!r}"
            )
        masters = await self._masters(cluster, topic)
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=perm,
            topic_filter_type="SINGLE_TAG",
            topic_sys_flag=0,
            order=order,
            attributes=None if message_type is None else f"+message.type={message_type}",
        )
        for addr in masters.values():
            cmd = make_request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            check_response(await self._core.invoke(addr, cmd))
        self._core.routes.forget(topic)
        return list(masters)

    async def update_topic(
        self,
        topic: str,
        *,
        read_queues: int = 8,
        write_queues: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        order: bool = False,
        attributes: str | None = None,
        topic_sys_flag: int = 0,
        cluster: str | None = None,
        broker: str | None = None,
    ) -> dict[str, str]:
        """UPDATE_AND_CREATE_TOPIC (17) as mqadmin ``updateTopic`` sends it, to the broker at
        ``broker`` (a name or "host:port"), else to every master broker (of ``cluster``).

        ``perm``: 2 (write), 4 (read) or 6 (both); ``attributes``: changes in mqadmin's ``-a``
        syntax (``"+message.type=FIFO,-key"``), attributes not named are kept;
        ``topic_sys_flag``: RocketMQ's unit bits (1 unit topic, 2 has unit subscribers).
        Returns broker name -> address of the brokers that now have the topic.
        """
        self._check_open()
        validate_topic(topic, for_send=True)
        for name, value in (("read_queues", read_queues), ("write_queues", write_queues)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ClientUsageError(f"{name} must be a whole number of at least 1: {value!r}")
        if perm not in (int(Perm.WRITE), int(Perm.READ), int(Perm.READ | Perm.WRITE)):
            raise ClientUsageError(f"perm must be 2 (write), 4 (read) or 6 (both): {perm!r}")
        try:  # the same +key=value,-key syntax as a group's
            parse_group_attributes(attributes or "")
        except ClientUsageError as error:
            raise ClientUsageError(str(error).replace("group", "topic", 1)) from None
        if broker is not None:
            targets = await self._targets(broker)
        else:
            targets = await self._masters(cluster, topic)
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic=AUTO_CREATE_TOPIC,
            read_queue_nums=read_queues,
            write_queue_nums=write_queues,
            perm=perm,
            topic_filter_type="SINGLE_TAG",
            topic_sys_flag=topic_sys_flag,
            order=order,
            attributes=attributes or None,
        )
        for addr in targets.values():
            cmd = make_request(RequestCode.UPDATE_AND_CREATE_TOPIC, header)
            check_response(await self._core.invoke(addr, cmd))
        self._core.routes.forget(topic)
        return targets

    async def create_group(
        self,
        group: str,
        *,
        orderly: bool = False,
        retry_max_times: int = 16,
        broadcast: bool = True,
        cluster: str | None = None,
        attributes: str | None = None,
    ) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) on every master broker (of ``cluster``, if
        given): creates the consumer group, or replaces its config but for its attributes.

        ``orderly``: consumeMessageOrderly (5.x FIFO delivery for the group); ``retry_max_times``:
        redeliveries before the dead-letter queue; ``broadcast``: consumeBroadcastEnable;
        ``attributes``: changes to the group's attributes in mqadmin's ``-a`` syntax,
        ``"+key=value,-key"`` (e.g. ``"+lite.bind.topic=parent"`` binds a lite consumer group
        to its LITE parent topic); attributes not named are kept, as RocketMQ keeps them.
        Returns the names of the brokers that now have the group.
        """
        self._check_open()
        if not isinstance(group, str) or not group:
            raise ClientUsageError("group must be a non-empty string")
        if len(group) > _GROUP_LENGTH_MAX:
            raise ClientUsageError(f"group longer than {_GROUP_LENGTH_MAX} characters: {group!r}")
        if not _GROUP_CHARS.match(group):
            raise ClientUsageError(f"group may only hold %|a-zA-Z0-9_- characters: {group!r}")
        if isinstance(retry_max_times, bool) or not isinstance(retry_max_times, int):
            raise ClientUsageError(f"retry_max_times must be an int: {retry_max_times!r}")
        if retry_max_times < 0:
            raise ClientUsageError(f"retry_max_times must not be negative: {retry_max_times}")
        changes = parse_group_attributes(attributes or "")
        masters = await self._masters(cluster, f"%RETRY%{group}")
        body = msgspec.json.encode(
            SubscriptionGroupConfig(
                group_name=group,
                consume_message_orderly=orderly,
                retry_max_times=retry_max_times,
                consume_broadcast_enable=broadcast,
                attributes=changes,
            )
        )
        for addr in masters.values():
            cmd = make_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            check_response(await self._core.invoke(addr, cmd))
        return list(masters)

    async def update_group(
        self,
        config: SubscriptionGroupConfig,
        *,
        cluster: str | None = None,
        broker: str | None = None,
    ) -> dict[str, str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) with a whole ``config``, as mqadmin
        ``updateSubGroup`` sends it, to the broker at ``broker`` (a name or "host:port"), else
        to every master broker (of ``cluster``). ``config.attributes`` holds changes
        (``parse_group_attributes``). Returns broker name -> address of the brokers asked."""
        self._check_open()
        group = config.group_name
        if not group or len(group) > _GROUP_LENGTH_MAX or not _GROUP_CHARS.match(group):
            raise ClientUsageError(
                f"group must be 1-{_GROUP_LENGTH_MAX} characters of %|a-zA-Z0-9_-: {group!r}"
            )
        if config.retry_max_times < 0 or config.retry_queue_nums < 0:
            raise ClientUsageError("retry_max_times and retry_queue_nums must not be negative")
        if broker is not None:
            targets = await self._targets(broker)
        else:
            targets = await self._masters(cluster, f"%RETRY%{group}")
        body = msgspec.json.encode(config)
        for addr in targets.values():
            cmd = make_request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body)
            check_response(await self._core.invoke(addr, cmd))
        return targets

    async def _masters(self, cluster: str | None, topic: str) -> dict[str, str]:
        """Master broker name -> address, of ``cluster`` if given; ``RouteNotFoundError``
        (naming ``topic``) when there is none."""
        info = await self.cluster_info()
        names = set(info.broker_addr_table)
        if cluster is not None:
            names &= set(info.cluster_addr_table.get(cluster, []))
        masters = {
            name: info.broker_addr_table[name].broker_addrs[MASTER_ID]
            for name in sorted(names)
            if MASTER_ID in info.broker_addr_table[name].broker_addrs
        }
        if not masters:
            raise RouteNotFoundError(topic, "no master broker registered with the name server")
        return masters

    async def topic_route(self, topic: str) -> TopicRouteData:
        """GET_ROUTEINFO_BY_TOPIC (105) from the name servers, fresh (not cached);
        ``TopicNotExistError`` when they know no route for ``topic``."""
        self._check_open()
        return await self._core.routes.fetch(topic)

    async def list_topics(self) -> list[str]:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), sorted."""
        self._check_open()
        response = check_response(
            await self._core.routes.invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        )
        return sorted(decode_json_body(response.body or b"{}", _TopicList).topic_list)

    async def topic_status(self, topic: str) -> list[QueueStatus]:
        """Per queue: min and max offset and the last message's store time.

        Uses GET_TOPIC_STATS_INFO (202) where a broker supports it, else GET_MIN_OFFSET /
        GET_MAX_OFFSET and a one-message pull of the last message.
        """
        self._check_open()
        self._core.routes.forget(topic)
        route = await self._core.routes.get(topic)
        out: list[QueueStatus] = []
        for broker_name, addr in sorted(route.master_addrs().items()):
            queues = [mq for mq in route.subscribe_queues if mq.broker_name == broker_name]
            message_type = await self._message_type(addr, topic)
            try:
                rows = await self._stats_table(addr, topic, broker_name)
            except (BrokerError, RemoteProtocolError) as e:
                log.debug("GET_TOPIC_STATS_INFO on %s unavailable: %s", broker_name, e)
                rows = await asyncio.gather(*(self._queue_status(mq) for mq in queues))
            out.extend(dataclasses.replace(row, message_type=message_type) for row in rows)
        return sorted(out, key=lambda s: s.queue)

    async def _message_type(self, addr: str, topic: str) -> str | None:
        """The topic's ``message.type`` on one broker, from GET_ALL_TOPIC_CONFIG (21)."""
        try:
            response = check_response(
                await self._core.invoke(addr, make_request(RequestCode.GET_ALL_TOPIC_CONFIG))
            )
            table = decode_json_body(response.body or b"{}", TopicConfigSerializeWrapper)
        except (BrokerError, RemoteProtocolError) as e:
            log.debug("GET_ALL_TOPIC_CONFIG on %s unavailable: %s", addr, e)
            return None
        config = table.topic_config_table.get(topic)
        return None if config is None else config.attributes.get("message.type") or "NORMAL"

    async def _stats_table(self, addr: str, topic: str, broker_name: str) -> list[QueueStatus]:
        cmd = make_request(RequestCode.GET_TOPIC_STATS_INFO, ext_fields={"topic": topic})
        response = check_response(await self._core.invoke(addr, cmd))
        table = decode_json_body(response.body or b"{}", _TopicStatsTable)
        out = []
        for key, value in table.offset_table.items():
            try:
                wq = msgspec.json.decode(key, type=_WireQueue)
            except msgspec.DecodeError:
                continue
            out.append(
                QueueStatus(
                    queue=MessageQueue(wq.topic, wq.broker_name or broker_name, wq.queue_id),
                    min_offset=value.min_offset,
                    max_offset=value.max_offset,
                    last_update_ms=value.last_update_timestamp or None,
                )
            )
        return out

    async def _queue_status(self, mq: MessageQueue) -> QueueStatus:
        low = await _queries.min_offset(self._core, mq)
        high = await _queries.max_offset(self._core, mq)
        last: int | None = None
        if high > low:
            try:
                result = await pull_queue(self._core, TOOLS_GROUP, mq, high - 1, 1)
                if result.messages:
                    last = result.messages[-1].store_timestamp
            except ClientError as e:
                log.debug("last message of %s unreadable: %s", mq, e)
        return QueueStatus(mq, low, high, last)

    # -- the manual clock (pocketmq's POCKETMQ_CLOCK, request code 9001) ----------------------

    async def clock(self, *, broker: str | None = None) -> dict[str, ClockState]:
        """The time of every master broker (or of ``broker``: a name or "host:port")."""
        return await self._clock({"action": "get"}, broker)

    async def advance_clock(
        self, duration: Duration, *, broker: str | None = None
    ) -> dict[str, ClockState]:
        """Move manual clocks forward by ``duration`` ("2h", "90s", "1h30m", "250ms", an int of
        milliseconds, or a timedelta). Each broker fires everything that falls due, in due
        order, before it answers; brokers are advanced one after another.

        ``IllegalOperationError`` if a broker runs on the system clock.
        """
        ms = duration_ms(duration)
        return await self._clock({"action": "advance", "duration": str(ms)}, broker)

    async def set_clock(self, epoch_ms: int, *, broker: str | None = None) -> dict[str, ClockState]:
        """Set manual clocks to ``epoch_ms``; a clock never goes backwards
        (``InvalidParameterError``)."""
        if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int) or epoch_ms < 0:
            raise ClientUsageError(f"epoch_ms must be a non-negative int: {epoch_ms!r}")
        return await self._clock({"action": "set", "time": str(epoch_ms)}, broker)

    async def _targets(self, broker: str | None) -> dict[str, str]:
        """Broker name -> address: ``broker`` itself when it is "host:port", the master of the
        broker so named, or every master broker the name server knows."""
        if broker is not None and ":" in broker:
            return {broker: broker}
        masters = await self._core.master_brokers()
        if broker is not None:
            if broker not in masters:
                raise ClientUsageError(
                    f"broker {broker!r} is not registered with the name server "
                    f"(known: {', '.join(masters) or 'none'})"
                )
            return {broker: masters[broker]}
        if not masters:
            raise RouteNotFoundError("*", "no master broker registered with the name server")
        return masters

    async def _clock(self, fields: dict[str, str], broker: str | None) -> dict[str, ClockState]:
        self._check_open()
        out: dict[str, ClockState] = {}
        for name, addr in (await self._targets(broker)).items():
            cmd = make_request(RequestCode.POCKETMQ_CLOCK, ext_fields=dict(fields))
            # advancing runs everything due before the broker answers: allow it time
            response = check_response(await self._core.invoke(addr, cmd, _CLOCK_TIMEOUT_MS))
            ext = response.ext_fields or {}
            try:
                out[name] = ClockState(
                    broker=name,
                    addr=addr,
                    now_ms=int(ext["now"]),
                    manual=ext.get("manual") == "true",
                    fired=int(ext.get("fired", "0")),
                    pending=int(ext.get("pending", "0")),
                )
            except (KeyError, ValueError):
                raise UnknownBrokerError(
                    response.code, f"malformed clock answer from {addr}: {ext}"
                ) from None
        return out

    # -- messages, dead-letter queues, transactions (pocketmq's requests 9002-9004) ------------

    async def show_message(
        self,
        message_id: str,
        *,
        topic: str | None = None,
        delete: bool = False,
        broker: str | None = None,
    ) -> list[dict[str, Any]]:
        """A message with its state, reconsume times and place (POCKETMQ_MESSAGE_INFO, 9002).

        Without ``topic``, ``message_id`` is an offset message ID, which names its broker (asked
        unless ``broker`` says otherwise); with ``topic``, it is a unique key or a ``KEYS``
        value looked up in that topic's index on every broker (up to 32 matches each, newest
        first). ``delete`` marks every message found for deletion. ``QueryNotFoundError`` when
        no broker has it.
        """
        self._check_open()
        fields = {"action": "delete"} if delete else {}
        if topic is not None:
            fields |= {"topic": topic, "key": message_id.strip()}
            return await self._json_from_each(RequestCode.POCKETMQ_MESSAGE_INFO, fields, broker)
        try:
            decoded = decode_message_id(message_id)
        except InvalidMessageIdError as error:
            raise ClientUsageError(f"{message_id}: {error}") from None
        if decoded["scheme"] != "offset":
            raise ClientUsageError(
                f"{message_id} is a {decoded['scheme']} unique key, not an offset message ID: "
                "give its topic too (the index is per topic)"
            )
        fields["offset"] = str(decoded["physical_offset"])
        return await self._json_from_each(
            RequestCode.POCKETMQ_MESSAGE_INFO, fields, broker or str(decoded["broker_addr"])
        )

    async def dead_letters(self, group: str, *, broker: str | None = None) -> list[dict[str, Any]]:
        """Every message of ``%DLQ%<group>`` (POCKETMQ_DLQ, 9003) in ``show_message``'s shape;
        ``TopicNotExistError`` when no broker has a dead-letter queue for the group."""
        self._check_open()
        fields = {"action": "list", "group": group}
        return await self._json_from_each(RequestCode.POCKETMQ_DLQ, fields, broker)

    async def resend_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, broker: str | None = None
    ) -> list[dict[str, Any]]:
        """Write dead letters back to their original topic (all, or those whose unique key or
        ``ORIGIN_MESSAGE_ID`` is in ``ids``); one outcome per message: ``resent``, ``already
        resent``, ``original topic ... does not exist``, ``failed: ...`` or ``not found in the
        dead-letter queue`` (said only when no broker found it)."""
        self._check_open()
        if ids is not None and not ids:
            raise ClientUsageError("ids: name at least one message, or pass None for all")
        fields = {"action": "resend", "group": group, "ids": ",".join(ids or [])}
        outcomes = await self._json_from_each(RequestCode.POCKETMQ_DLQ, fields, broker)
        # Each broker says "not found" of the ids it lacks: keep that only where none had it.
        done = [o for o in outcomes if o["outcome"] != _NOT_IN_DLQ]
        found = {o["msg_id"] for o in done} | {o.get("origin_message_id") for o in done}
        missing = {o["msg_id"]: o for o in outcomes if o["outcome"] == _NOT_IN_DLQ}
        return done + [o for key, o in missing.items() if key not in found]

    async def transactions(self, *, broker: str | None = None) -> list[dict[str, Any]]:
        """Pending transactions (POCKETMQ_TX, 9004): ``transaction_id``, ``producer_group``,
        ``topic``, ``check_times``, ``next_check_ms``, ``born_timestamp``, ``offset_msg_id``."""
        self._check_open()
        return await self._json_from_each(RequestCode.POCKETMQ_TX, {"action": "list"}, broker)

    async def check_transaction(
        self, transaction_id: str, *, broker: str | None = None
    ) -> list[dict[str, Any]]:
        """Check a pending transaction now (by transaction id or its latest half copy's offset
        message ID); counts like a scheduled check. ``QueryNotFoundError`` when no broker has
        it pending."""
        self._check_open()
        fields = {"action": "check-now", "id": transaction_id}
        return await self._json_from_each(RequestCode.POCKETMQ_TX, fields, broker)

    async def _json_from_each(
        self, code: int, fields: dict[str, str], broker: str | None
    ) -> list[dict[str, Any]]:
        """Send one request to each target broker and join their JSON answers (a list, or the
        header fields as one dict). A broker that has nothing (QUERY_NOT_FOUND,
        TOPIC_NOT_EXIST) is left out; when none had anything, the first such error is raised."""
        rows: list[dict[str, Any]] = []
        misses: list[BrokerError] = []
        for addr in (await self._targets(broker)).values():
            cmd = make_request(code, ext_fields=dict(fields))
            try:
                response = check_response(await self._core.invoke(addr, cmd, _ADMIN_TIMEOUT_MS))
            except (QueryNotFoundError, TopicNotExistError) as error:
                misses.append(error)
                continue
            if response.body:
                try:
                    answer = msgspec.json.decode(response.body)
                except msgspec.DecodeError as error:
                    raise UnknownBrokerError(
                        response.code, f"malformed answer from {addr}: {error}"
                    ) from None
                rows.extend(answer if isinstance(answer, list) else [answer])
            else:
                rows.append(dict(response.ext_fields or {}))
        if misses and not rows:
            raise misses[0]
        return rows
