"""Queue offsets, message lookup and topic administration: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_EARLIEST_MSG_STORETIME (32), VIEW_MESSAGE_BY_ID (33),
QUERY_MESSAGE (12), UPDATE_AND_CREATE_TOPIC (17), GET_ALL_TOPIC_CONFIG (21), DELETE_TOPIC_IN_BROKER (215),
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)."""

from __future__ import annotations

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError
from pocketmq.broker.handlers.common import bad_request, error_response
from pocketmq.broker.protocol import (
    MalformedBodyError,
    MalformedHeaderError,
    RemotingCommand,
    ResponseCode,
)
from pocketmq.broker.protocol.headers import (
    CreateTopicRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMaxOffsetResponseHeader,
    GetMinOffsetRequestHeader,
    GetMinOffsetResponseHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    SearchOffsetRequestHeader,
    SearchOffsetResponseHeader,
    ViewMessageRequestHeader,
    decode_json_body,
    encode_json_body,
)
from pocketmq.broker.protocol.topics import system_topic_refusal
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.clock import move_clock
from pocketmq.broker.services.groups import GroupConfig, validate_group_name
from pocketmq.broker.services.topics import TopicError, apply_attribute_changes
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError

__all__ = [
    "handle_create_group",
    "handle_create_topic",
    "handle_delete_topic",
    "handle_get_all_group_config",
    "handle_get_all_topic_config",
    "handle_get_earliest_store_time",
    "handle_get_max_offset",
    "handle_get_min_offset",
    "handle_query_message",
    "handle_search_offset",
    "handle_view_message",
]


def handle_get_max_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetMaxOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    offset = broker.store.max_offset(header.topic, header.queue_id)
    return request.make_response(
        ResponseCode.SUCCESS, ext_fields=GetMaxOffsetResponseHeader(offset=offset).to_ext_fields()
    )


def handle_get_min_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetMinOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    offset = broker.store.min_offset(header.topic, header.queue_id)
    return request.make_response(
        ResponseCode.SUCCESS, ext_fields=GetMinOffsetResponseHeader(offset=offset).to_ext_fields()
    )


def handle_search_offset(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    offset = broker.store.offset_by_time(header.topic, header.queue_id, header.timestamp)
    return request.make_response(
        ResponseCode.SUCCESS, ext_fields=SearchOffsetResponseHeader(offset=offset).to_ext_fields()
    )


def handle_get_earliest_store_time(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = GetEarliestMsgStoretimeRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    result = broker.store.get_messages(
        header.topic,
        header.queue_id,
        broker.store.min_offset(header.topic, header.queue_id),
        1,
        only_available=False,
    )
    timestamp = -1
    if result.messages:
        timestamp = broker.store.store_time_of(result.messages[0][1]) or -1
    ext = GetEarliestMsgStoretimeResponseHeader(timestamp=timestamp).to_ext_fields()
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext)


def handle_view_message(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        record = broker.store.read(header.offset)
        raw = bytes(broker.store.commitlog.view_at(header.offset, record.total_size))
    except (OffsetOutOfRangeError, CorruptRecordError) as error:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR,
            f"can not find message by the offset, {header.offset}: {error}",
        )
    return request.make_response(ResponseCode.SUCCESS, body=raw)


def handle_query_message(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    records = broker.store.query_by_key(
        header.topic,
        header.key,
        begin_ms=header.begin_timestamp,
        end_ms=header.end_timestamp,
        max_results=max(1, min(header.max_num, 64)),
    )
    ext = QueryMessageResponseHeader(
        index_last_update_timestamp=broker.now_ms(),
        index_last_update_phyoffset=broker.store.max_physical_offset,
    ).to_ext_fields()
    if not records:
        return request.make_response(
            ResponseCode.QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
            ext_fields=ext,
        )
    body = b"".join(
        bytes(broker.store.commitlog.view_at(r.physical_offset, r.total_size)) for r in records
    )
    return request.make_response(ResponseCode.SUCCESS, ext_fields=ext, body=body)


def handle_create_topic(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    try:
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
    except MalformedHeaderError as error:
        return bad_request(request, error, connection)
    try:
        attributes = None  # none named: an update keeps the topic's attributes
        if header.attributes:
            existing = broker.topics.get(header.topic)
            attributes = apply_attribute_changes(
                existing.attributes if existing is not None else None, header.attributes
            )
        broker.topics.create(
            header.topic,
            read_queue_nums=header.read_queue_nums,
            write_queue_nums=header.write_queue_nums,
            perm=header.perm,
            order=header.order,
            topic_sys_flag=header.topic_sys_flag or 0,
            attributes=attributes,
        )
    except TopicError as error:
        return error_response(request, error)
    broker.schedule_registration()
    return request.make_response(ResponseCode.SUCCESS)


def handle_delete_topic(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    topic = (request.ext_fields or {}).get("topic", "")
    refusal = system_topic_refusal(topic)
    if refusal is not None:
        return request.make_response(ResponseCode.INVALID_PARAMETER, refusal)
    broker.topics.delete(topic)
    broker.schedule_registration()
    return request.make_response(ResponseCode.SUCCESS)


def handle_get_all_topic_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    return request.make_response(
        ResponseCode.SUCCESS, body=encode_json_body(broker.topics.wrapper())
    )


def handle_create_group(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """The body is RocketMQ's SubscriptionGroupConfig JSON; the group is created or replaced."""
    if not request.body:
        return request.make_response(
            ResponseCode.SYSTEM_ERROR, "bad request: no SubscriptionGroupConfig body"
        )
    try:
        config = decode_json_body(request.body, GroupConfig)
    except MalformedBodyError as error:
        return bad_request(request, error, connection)
    problem = validate_group_name(config.group_name)
    if problem:
        return request.make_response(ResponseCode.SYSTEM_ERROR, problem)
    existing = broker.groups.groups.get(config.group_name)
    try:
        config.attributes = alter_group_attributes(
            existing.attributes if existing is not None else None, config.attributes
        )
    except ValueError as error:
        return request.make_response(ResponseCode.SYSTEM_ERROR, str(error))
    try:
        broker.groups.put(config)
    except BrokerError as error:  # the disk refused the save: SERVICE_NOT_AVAILABLE, no path
        return error_response(request, error)
    return request.make_response(ResponseCode.SUCCESS)


def alter_group_attributes(
    current: dict[str, str] | None, changes: dict[str, str]
) -> dict[str, str]:
    """A group's attributes after the changes an update sends, as RocketMQ's
    SubscriptionGroupManager applies them (AttributeUtil.alterCurrentAttributes): mqadmin's
    ``-a +key=value,-key`` arrives as {"+key": "value", "-key": ""}. A new group (``current``
    None) takes only additions; an update adds, replaces and deletes, and keeps what it does not
    name, so re-sending a group without attributes keeps them. ValueError when a change cannot
    apply. Keys stored before this (with their "+") are read as RocketMQ's own."""
    result = {} if current is None else {key.removeprefix("+"): v for key, v in current.items()}
    seen: set[str] = set()
    for key, value in changes.items():
        name = key[1:]
        if key[:1] not in ("+", "-") or not name:
            raise ValueError(f"group attribute {key!r} is neither +key (with a value) nor -key")
        if name in seen:
            raise ValueError(f"group attribute {name!r} is given twice")
        seen.add(name)
        if key[0] == "+":
            result[name] = value
        elif current is None:
            raise ValueError(
                f"only +key=value attributes are allowed creating a group, not -{name}"
            )
        elif result.pop(name, None) is None:
            raise ValueError(
                f"group attribute {name!r} cannot be deleted: the group does not have it"
            )
    return result


def handle_get_all_group_config(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    return request.make_response(
        ResponseCode.SUCCESS, body=encode_json_body(broker.groups.wrapper())
    )


async def handle_clock(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    """pocketmq's POCKETMQ_CLOCK: ``action`` get, advance (``duration``: 2h, 90s, ms) or set
    (``time``: epoch ms). Advancing runs everything that falls due, in order, before answering."""
    ext = request.ext_fields or {}
    action = ext.get("action", "get")
    clock = broker.clock
    fired = 0
    if action in ("advance", "set"):
        try:
            fired = await move_clock(
                clock,
                broker.scheduler,
                advance=ext.get("duration", "") if action == "advance" else None,
                to=ext.get("time", "") if action == "set" else None,
            )
        except BrokerError as error:
            return error_response(request, error)
    elif action != "get":
        return request.make_response(
            ResponseCode.INVALID_PARAMETER, f"unknown clock action {action!r}"
        )
    result = {
        "now": str(clock.now_ms()),
        "manual": "true" if clock.manual else "false",
        "fired": str(fired),
        "pending": str(broker.scheduler.pending()),
    }
    return request.make_response(ResponseCode.SUCCESS, ext_fields=result)
