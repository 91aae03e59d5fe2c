"""The remoting lite consumer: LITE_SUBSCRIPTION_CTL (200071) and POP_LITE_MESSAGE (200070).

A lite consumer (RocketMQ's RIP-83) tells the broker which lite topics of its LITE parent it
wants (LiteSubscriptionCtlProcessor), then pops them (PopLiteMessageProcessor): one request
takes messages from every lite topic the client subscribed to, each lite topic in order (a
lite topic is handed out again only when what was taken from it is acknowledged). Acks go
through ACK_MESSAGE with the ``liteTopic`` field (``ack_lite_problem`` below), as RocketMQ's
AckMessageProcessor takes them.

The subscriptions are remoting clients' own (gRPC lite consumers' live in the gRPC front):
keyed by client id, forgotten when the connection that made them closes. Records come back as
stored: each in its lite topic's LMQ (topic ``%LMQ%<parent>|<lite>``, queue 0, the LMQ's
offset), with the ``__LITE_TOPIC`` property as sent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Literal

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import MalformedHeaderError, RemotingCommand, ResponseCode
from pocketmq.broker.protocol.errors import MalformedBodyError
from pocketmq.broker.protocol.headers import Int, Long, RemotingHeader, decode_json_body
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.lite import (
    LITE_SUBSCRIPTION_QUOTA,
    LiteSubscriptions,
    bind_problem,
    lmq_name,
    validate_lite_topic,
)
from pocketmq.broker.services.pop import PopError, PoppedMessage
from pocketmq.broker.services.topics import PERM_READ, topic_message_type
from pocketmq.store.record import decode_record

__all__ = [
    "POP_ORDER_REVIVE_QUEUE",
    "RemotingLite",
    "ack_lite_problem",
]

log = logging.getLogger("pocketmq.broker.lite")

POP_ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE: the revive id of in-order pops
_POP_MAX = 32  # messages one POP_LITE_MESSAGE may ask for (PopLiteMessageProcessor.preCheck)
_RECHECK_S = 1.0  # a held pop looks again this often: subscriptions change meanwhile
_ENTRIES_MAX = 1000  # subscription entries in one LITE_SUBSCRIPTION_CTL


class PopLiteMessageRequestHeader(RemotingHeader, frozen=True, kw_only=True):
    client_id: str
    consumer_group: str
    topic: str  # the LITE parent topic
    max_msg_num: Int
    invisible_time: Long
    poll_time: Long
    born_time: Long
    attempt_id: str | None = None


class PopLiteMessageResponseHeader(RemotingHeader, frozen=True, kw_only=True):
    pop_time: Long
    invisible_time: Long
    revive_qid: Int
    order_count_info: str | None = None  # one consume count per message, ';'-separated


class LiteSubscriptionEntry(msgspec.Struct, rename="camel"):
    """RocketMQ's LiteSubscriptionDTO (``offsetOption`` is read by the gRPC front only)."""

    action: Literal["PARTIAL_ADD", "PARTIAL_REMOVE", "COMPLETE_ADD", "COMPLETE_REMOVE"]
    client_id: str | None = None
    group: str | None = None
    topic: str | None = None
    lite_topic_set: list[str] | None = None
    version: int = 0


class LiteSubscriptionCtlRequestBody(msgspec.Struct, rename="camel"):
    subscription_set: list[LiteSubscriptionEntry] | None = None


class _Refused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code


class RemotingLite:
    """The lite subscriptions of remoting clients, and the two requests that use them."""

    def __init__(self) -> None:
        self.subscriptions = LiteSubscriptions()

    # -- LITE_SUBSCRIPTION_CTL -------------------------------------------------------------

    def handle_subscription_ctl(
        self, broker: BrokerCore, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand:
        if not request.body:
            return request.make_response(ResponseCode.ILLEGAL_OPERATION, "Request body is null.")
        try:
            body = decode_json_body(request.body, LiteSubscriptionCtlRequestBody)
        except MalformedBodyError as error:
            return bad_request(request, error, connection)
        entries = body.subscription_set or []
        if not entries:
            return request.make_response(
                ResponseCode.ILLEGAL_OPERATION, "LiteSubscriptionCtlRequestBody is empty."
            )
        if len(entries) > _ENTRIES_MAX:
            return request.make_response(
                ResponseCode.ILLEGAL_OPERATION,
                f"{len(entries)} subscription entries in one request, over {_ENTRIES_MAX}",
            )
        try:
            for entry in entries:
                self._apply(broker, entry, connection)
        except _Refused as refused:
            return request.make_response(refused.code, str(refused))
        return request.make_response(ResponseCode.SUCCESS)

    def _apply(
        self, broker: BrokerCore, entry: LiteSubscriptionEntry, connection: Connection
    ) -> None:
        client_id, group, parent = entry.client_id, entry.group, entry.topic
        if not (client_id and client_id.strip() and group and group.strip() and parent):
            log.warning("lite subscription without client id, group or topic skipped: %s", entry)
            return  # as RocketMQ: skipped, the others still apply
        lites = sorted(set(entry.lite_topic_set or ()))
        for lite in lites:
            problem = validate_lite_topic(parent, lite)
            if problem:
                raise _Refused(ResponseCode.ILLEGAL_OPERATION, problem)
        table = self.subscriptions
        if entry.action in ("PARTIAL_ADD", "COMPLETE_ADD"):
            config = broker.groups.find_or_create(group)
            if config is None or not config.consume_enable:
                raise _Refused(
                    ResponseCode.ILLEGAL_OPERATION, "Consumer group is not allowed to consume."
                )
            wanted = set(lites)
            if entry.action == "PARTIAL_ADD":
                wanted |= table.of(group, parent, client_id)
            if len(wanted) > LITE_SUBSCRIPTION_QUOTA:
                raise _Refused(
                    ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED,
                    f"client {client_id} would subscribe {len(wanted)} lite topics of {parent}, "
                    f"over its quota of {LITE_SUBSCRIPTION_QUOTA}",
                )
            table.replace(group, parent, client_id, sorted(wanted))
            clients: set[str] = connection.attributes.setdefault("lite_clients", set())
            clients.add(client_id)
        elif entry.action == "PARTIAL_REMOVE":
            table.remove(group, parent, client_id, lites)
        else:  # COMPLETE_REMOVE: every subscription of the client
            table.drop_client(client_id)

    def connection_lost(self, connection: Connection) -> None:
        for client_id in connection.attributes.get("lite_clients", ()):
            self.subscriptions.drop_client(client_id)

    # -- POP_LITE_MESSAGE ------------------------------------------------------------------

    def handle_pop_lite(
        self, broker: BrokerCore, request: RemotingCommand, connection: Connection
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        try:
            header = PopLiteMessageRequestHeader.from_ext_fields(request.ext_fields)
        except MalformedHeaderError as error:
            return bad_request(request, error, connection)
        try:
            _pre_check(broker, header)
        except _Refused as refused:
            return request.make_response(refused.code, str(refused))

        def attempt() -> list[PoppedMessage]:
            return self._pop(broker, header)

        try:
            popped = attempt()
        except PopError as error:
            return error_response(request, error)
        if popped or header.poll_time <= 0:
            return _response(broker, request, header, popped)
        if not broker.holds.can_hold():
            return request.make_response(
                ResponseCode.POLLING_FULL, "too many pop requests are waiting"
            )

        async def hold() -> RemotingCommand:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + header.poll_time / 1000
            while True:
                try:
                    found = attempt()  # again right before waiting: no arrival is missed
                except PopError as error:
                    return error_response(request, error)
                remaining = deadline - loop.time()
                if found or remaining <= 0:
                    return _response(broker, request, header, found)
                keys = [(source, 0) for source in self._sources(broker, header)]
                await broker.holds.wait_any(keys, min(remaining, _RECHECK_S))

        return hold()

    def _sources(self, broker: BrokerCore, header: PopLiteMessageRequestHeader) -> list[str]:
        """The LMQs of the lite topics this client subscribed to that exist (hold messages)."""
        lites = self.subscriptions.of(header.consumer_group, header.topic, header.client_id)
        names = (lmq_name(header.topic, lite) for lite in lites)
        return sorted(name for name in names if broker.topics.get(name) is not None)

    def _pop(self, broker: BrokerCore, header: PopLiteMessageRequestHeader) -> list[PoppedMessage]:
        # In order, as PopLiteMessageProcessor pops (isFifoBlocked): a lite topic with messages
        # still unacknowledged gives nothing until they are acknowledged or time out.
        count = max(1, header.max_msg_num)
        now = broker.now_ms()  # one pop time for all: the response carries one
        popped: list[PoppedMessage] = []
        for source in self._sources(broker, header):
            if len(popped) >= count:
                break
            popped.extend(
                broker.pop.pop(
                    header.consumer_group,
                    source,
                    0,
                    count - len(popped),
                    header.invisible_time,
                    True,
                    None,
                    now=now,
                )
            )
        return popped


def _pre_check(broker: BrokerCore, header: PopLiteMessageRequestHeader) -> None:
    """PopLiteMessageProcessor.preCheck, in its order and with its codes; _Refused."""
    address = broker.config.address
    if not broker.config.broker_permission & PERM_READ:
        raise _Refused(
            ResponseCode.NO_PERMISSION, f"the broker[{address}] pop message is forbidden"
        )
    if header.max_msg_num > _POP_MAX:
        raise _Refused(
            ResponseCode.INVALID_PARAMETER,
            f"the broker[{address}] pop message's num is greater than {_POP_MAX}",
        )
    parent = header.topic
    config = broker.topics.get(parent)
    if config is None:
        raise _Refused(
            ResponseCode.TOPIC_NOT_EXIST, f"topic [{parent}] not exist, apply first please!"
        )
    if not config.perm & PERM_READ:
        raise _Refused(
            ResponseCode.NO_PERMISSION, f"the topic [{parent}] peeking message is forbidden"
        )
    if topic_message_type(config) != "LITE":
        raise _Refused(
            ResponseCode.INVALID_PARAMETER,
            f"the topic [{parent}] message type not match: it is {topic_message_type(config)}, "
            "not LITE",
        )
    group = header.consumer_group
    group_config = broker.groups.find_or_create(group)
    if group_config is None:
        raise _Refused(
            ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] not exist"
        )
    if not group_config.consume_enable:
        raise _Refused(ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
    problem = bind_problem(group, group_config.attributes, parent)
    if problem:
        raise _Refused(ResponseCode.INVALID_PARAMETER, problem)


def _response(
    broker: BrokerCore,
    request: RemotingCommand,
    header: PopLiteMessageRequestHeader,
    popped: list[PoppedMessage],
) -> RemotingCommand:
    """FOUND with the records, else POLLING_TIMEOUT (NO_MESSAGE_IN_QUEUE), as RocketMQ
    answers; the revive id of an in-order pop, which its ACK_MESSAGE must carry back."""
    pop_time = popped[0].handle.pop_time if popped else broker.now_ms()
    counts = ";".join(str(decode_record(m.raw, check_crc=False).reconsume_times) for m in popped)
    ext = PopLiteMessageResponseHeader(
        pop_time=pop_time,
        invisible_time=header.invisible_time,
        revive_qid=POP_ORDER_REVIVE_QUEUE,
        order_count_info=counts,
    ).to_ext_fields()
    if not popped:
        return request.make_response(
            ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE", ext_fields=ext
        )
    return request.make_response(
        ResponseCode.SUCCESS, "FOUND", ext_fields=ext, body=b"".join(m.raw for m in popped)
    )


def ack_lite_problem(
    broker: BrokerCore,
    group: str,
    parent: str,
    lite: str,
    queue_id: int,
    offset: int,
    extra_info: str,
) -> tuple[int, str] | None:
    """Why an ACK_MESSAGE for ``lite`` of ``parent`` cannot apply, as (code, remark) in
    AckMessageProcessor.ackLite's order; None when the ack goes on, to ``lmq_name``."""
    config = broker.groups.find_or_create(group)
    if config is None or bind_problem(group, config.attributes, parent) is not None:
        return ResponseCode.INVALID_PARAMETER, "group type or bind topic not match."
    lmq = lmq_name(parent, lite)
    if broker.topics.get(lmq) is None or offset > broker.store.max_offset(lmq, 0):
        return ResponseCode.NO_MESSAGE, "ack offset illegal."
    fields = extra_info.split(" ")
    revive = fields[3] if len(fields) > 3 else ""
    if queue_id != 0 or revive != str(POP_ORDER_REVIVE_QUEUE):
        return ResponseCode.INVALID_PARAMETER, "ack queue illegal."
    return None
