"""pocketmq's own admin requests about messages (JSON bodies; RocketMQ has no equivalent):

* POCKETMQ_MESSAGE_INFO (9002): one message by commitlog offset, or by topic and unique key or
  key, with its state, reconsume times and where it is; ``action=delete`` marks it for deletion.
* POCKETMQ_DLQ (9003): ``list`` a group's dead-letter queue, or ``resend`` chosen messages (by
  unique key, or all) to their original topic keeping their properties; each outcome reported.
"""

from __future__ import annotations

import random
from typing import Any

import msgspec

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.protocol import RemotingCommand, ResponseCode
from pocketmq.broker.remoting.server import Connection
from pocketmq.broker.services.retry import dlq_topic
from pocketmq.ids import offset_msg_id_from_packed
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError, StoreError
from pocketmq.store.message_store import copy_of
from pocketmq.store.record import MessageRecord
from pocketmq.store.state import MessageState

__all__ = ["handle_dlq", "handle_message_info", "message_json"]


def message_json(broker: BrokerCore, record: MessageRecord) -> dict[str, Any]:
    change = broker.store.state_change_of(record.physical_offset)
    state = change.state if change else MessageState.AVAILABLE
    return {
        "msg_id": record.unique_key,
        "offset_msg_id": offset_msg_id_from_packed(
            record.store_host.address, record.store_host.port, record.physical_offset
        ),
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "commitlog_offset": record.physical_offset,
        "size": record.total_size,
        "state": state.label,
        "state_code": int(state),
        "state_reason": change.reason if change else "",
        "state_group": change.group if change else "",  # "": for every consumer group
        "reconsume_times": record.reconsume_times,
        "tags": record.tags,
        "keys": record.keys,
        "properties": record.properties,
        "born_timestamp": record.born_timestamp,
        "store_timestamp": record.store_timestamp,
        "born_host": str(record.born_host),
        "store_host": str(record.store_host),
        "body_size": len(record.body),
        "body": record.body.decode("utf-8", "replace"),
    }


def _json_response(request: RemotingCommand, value: object) -> RemotingCommand:
    return request.make_response(ResponseCode.SUCCESS, body=msgspec.json.encode(value))


def handle_message_info(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    ext = request.ext_fields or {}
    records: list[MessageRecord] = []
    try:
        if "offset" in ext:
            records = [broker.store.read(int(ext["offset"]))]
        elif "topic" in ext and "key" in ext:
            records = broker.store.query_by_key(ext["topic"], ext["key"], max_results=32)
        else:
            return request.make_response(
                ResponseCode.INVALID_PARAMETER, "give offset, or topic and key"
            )
    except (ValueError, OffsetOutOfRangeError, CorruptRecordError) as error:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND, f"no message there: {error}")
    if not records:
        return request.make_response(ResponseCode.QUERY_NOT_FOUND, "no message with that key")
    if ext.get("action") == "delete":
        # An admin's delete: the message stays stored (append-only) but is never served again.
        for record in records:
            broker.store.set_state(
                record.physical_offset, MessageState.MARKED_FOR_DELETION, "deleted by an admin"
            )
    return _json_response(request, [message_json(broker, r) for r in records])


def _dlq_records(broker: BrokerCore, group: str) -> list[MessageRecord]:
    topic = dlq_topic(group)
    result: list[MessageRecord] = []
    offset = broker.store.min_offset(topic, 0)
    while True:
        got = broker.store.get_messages(topic, 0, offset, 64, only_available=False)
        for _, physical, _ in got.messages:
            result.append(broker.store.read(physical))
        if not got.messages:
            return result
        offset = got.next_offset


def _why_dead(broker: BrokerCore, record: MessageRecord) -> str:
    """Why a dead letter is one: the state reason of the message as first sent (a DLQ copy
    itself is available, so that the group's DLQ consumers get it)."""
    original = broker.retry.first_delivery(record.properties)
    change = broker.store.state_change_of(original) if original is not None else None
    return change.reason if change is not None else ""


def handle_dlq(
    broker: BrokerCore, request: RemotingCommand, connection: Connection
) -> RemotingCommand:
    ext = request.ext_fields or {}
    group = ext.get("group", "")
    if not group:
        return request.make_response(ResponseCode.INVALID_PARAMETER, "a consumer group is needed")
    if broker.topics.get(dlq_topic(group)) is None:
        return request.make_response(
            ResponseCode.TOPIC_NOT_EXIST, f"group {group} has no dead-letter queue"
        )
    records = _dlq_records(broker, group)
    if ext.get("action", "list") == "list":
        rows = [
            {**message_json(broker, r), "dead_letter_reason": _why_dead(broker, r)} for r in records
        ]
        return _json_response(request, rows)
    if ext.get("action") != "resend":
        return request.make_response(
            ResponseCode.INVALID_PARAMETER, f"unknown action {ext.get('action')!r}"
        )
    wanted = set(filter(None, ext.get("ids", "").split(",")))
    outcomes = []
    for record in records:
        if (
            wanted
            and record.unique_key not in wanted
            and record.properties.get("ORIGIN_MESSAGE_ID") not in wanted
        ):
            continue
        outcomes.append(_resend(broker, record))
    for missing in (
        wanted - {o["msg_id"] for o in outcomes} - {o.get("origin_message_id") for o in outcomes}
    ):
        outcomes.append({"msg_id": missing, "outcome": "not found in the dead-letter queue"})
    return _json_response(request, outcomes)


def _resend(broker: BrokerCore, record: MessageRecord) -> dict[str, Any]:
    outcome: dict[str, Any] = {
        "msg_id": record.unique_key,
        "origin_message_id": record.properties.get("ORIGIN_MESSAGE_ID"),
    }
    if broker.store.state_of(record.physical_offset) is MessageState.MARKED_FOR_DELETION:
        return {**outcome, "outcome": "already resent"}
    topic = record.properties.get("RETRY_TOPIC")
    config = broker.topics.get(topic) if topic else None
    if topic is None or config is None:
        return {**outcome, "outcome": f"original topic {topic!r} does not exist"}
    properties = dict(record.properties)
    properties.pop("WAIT", None)
    try:
        result = broker.writer.put_internal(
            copy_of(
                record,
                topic=topic,
                queue_id=random.randrange(config.write_queue_nums),
                properties=properties,
                reconsume_times=0,
            )
        )
    except (StoreError, ValueError) as error:
        return {**outcome, "outcome": f"failed: {error}"}
    broker.store.set_state(
        record.physical_offset, MessageState.MARKED_FOR_DELETION, f"resent to {topic}"
    )
    return {
        **outcome,
        "outcome": "resent",
        "topic": topic,
        "offset_msg_id": broker.offset_msg_id(result.physical_offset),
    }
