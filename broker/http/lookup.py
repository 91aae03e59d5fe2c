"""Finding messages (by ID, key or store time) and a message's lifecycle, from the records the
broker already writes: every copy carries the unique key (``UNIQ_KEY``) and is indexed under
it in its own topic, and each copy's state record says what became of it and why."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.http.errors import ApiError
from pocketmq.broker.http.params import int_param, opt_str
from pocketmq.broker.services.timer import TIMER_TOPIC
from pocketmq.ids import decode_offset_msg_id
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.record import MessageRecord, SysFlag
from pocketmq.store.topics import (
    DLQ_TOPIC_PREFIX,
    RETRY_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
)

__all__ = ["lifecycle_events", "routes"]

KEY_MATCHES_MAX = 32
TOPICS_SEARCHED_MAX = 2000  # topics an ID without a topic is looked for in
RANGE_COUNT_MAX = 1000
_COPY_TOPICS = (SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC)


def _by_offset_id(broker: BrokerCore, text: str) -> MessageRecord | None:
    """The record an offset message ID names, if it is one of this broker's."""
    try:
        decoded = decode_offset_msg_id(text)
        if broker.offset_msg_id(decoded.physical_offset) != text.upper():
            return None
        return broker.store.read(decoded.physical_offset)
    except (ValueError, CorruptRecordError, OffsetOutOfRangeError):
        return None


def _search_topics(broker: BrokerCore, topic: str | None) -> list[str]:
    if topic is not None:
        if broker.topics.get(topic) is None:
            raise BrokerError(Kind.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
        return [topic]
    return broker.topics.user_topics()[:TOPICS_SEARCHED_MAX]


def find_by_id(broker: BrokerCore, message_id: str, topic: str | None) -> list[MessageRecord]:
    if not message_id or len(message_id) > 64:
        raise ApiError(400, f"message id {message_id[:80]!r} is not a message id")
    record = _by_offset_id(broker, message_id)
    if record is not None:
        return [record]
    found: list[MessageRecord] = []
    for name in _search_topics(broker, topic):
        found += [
            r
            for r in broker.store.query_by_key(name, message_id, max_results=KEY_MATCHES_MAX)
            if r.unique_key == message_id
        ]
        if len(found) >= KEY_MATCHES_MAX:
            break
    if not found:
        raise BrokerError(Kind.NOT_FOUND, f"no message with id {message_id}")
    return found[:KEY_MATCHES_MAX]


async def get_message(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    records = find_by_id(broker, request.match_info["id"], opt_str(request, "topic"))
    return web.json_response([broker.queries.view(r) for r in records])


def _in_time_range(
    broker: BrokerCore, topic: str, begin: int, end: int, count: int
) -> list[MessageRecord]:
    config = broker.topics.get(topic)
    if config is None:
        raise BrokerError(Kind.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
    store = broker.store
    found: list[MessageRecord] = []
    for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
        offset = store.offset_by_time(topic, queue_id, begin)
        while len(found) < count:
            got = store.get_messages(
                topic, queue_id, offset, min(count - len(found), 64), only_available=False
            )
            if not got.messages:
                break
            records = [store.read(physical) for _, physical, _ in got.messages]
            inside = [r for r in records if begin <= r.store_timestamp < end]
            found += inside
            if len(inside) < len(records):
                break  # past the end of the range
            offset = got.next_offset
    return found


async def query_messages(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    topic = opt_str(request, "topic")
    if topic is None:
        raise ApiError(400, "query parameter topic is needed (with key, or begin and end)")
    key = opt_str(request, "key")
    if key is not None:
        records = broker.queries.find(topic=topic, key=key)
    else:
        begin = int_param(request, "begin", None, 0, 1 << 62)
        end = int_param(request, "end", None, 0, 1 << 62)
        if begin is None or end is None:
            raise ApiError(400, "give key, or begin and end (epoch ms)")
        if end <= begin:
            raise ApiError(400, f"end {end} is not after begin {begin}")
        count = int_param(request, "count", 100, 1, RANGE_COUNT_MAX)
        assert count is not None
        records = _in_time_range(broker, topic, begin, end, count)
    return web.json_response([broker.queries.view(r) for r in records])


# -- lifecycle ----------------------------------------------------------------------------


def _copy_event(record: MessageRecord) -> tuple[str, str]:
    """What a stored copy of a message says happened: (event, detail)."""
    topic, props = record.topic, record.properties
    if topic == SCHEDULE_TOPIC:
        return "scheduled", f"delay level {props.get('DELAY', '?')} for {props.get('REAL_TOPIC')}"
    if topic == TIMER_TOPIC:
        return "scheduled", f"timer: delivery at {props.get('TIMER_OUT_MS')} ms"
    if topic == TRANS_HALF_TOPIC:
        checks = int(props.get("TRANSACTION_CHECK_TIMES", "0") or 0)
        if checks:
            return "transaction_check", f"check {checks} of the half message"
        return "prepared", f"half message of {props.get('REAL_TOPIC')}"
    if topic == TRANS_CHECK_MAX_TIME_TOPIC:
        return "discarded", "transaction discarded after its last check"
    if topic.startswith(RETRY_TOPIC_PREFIX):
        group = topic[len(RETRY_TOPIC_PREFIX) :]
        return "retried", f"redelivery {record.reconsume_times} for group {group}"
    if topic.startswith(DLQ_TOPIC_PREFIX):
        return (
            "dead_lettered",
            f"to the dead-letter queue of group {topic[len(DLQ_TOPIC_PREFIX) :]}",
        )
    if "ORIGIN_MESSAGE_ID" in props and props.get("RETRY_TOPIC") == topic:
        return "resent", "written back from the dead-letter queue"
    if record.sysflag & SysFlag.TRANSACTION_MASK == SysFlag.TRANSACTION_COMMIT_TYPE:
        return "delivered", "the transaction committed"
    if "REAL_TOPIC" in props:
        if "TIMER_OUT_MS" in props:
            return "delivered", "by the timer"
        return "delivered", f"after delay level {props.get('DELAY', '?')}"
    return "sent", f"to {topic}"


def _where(broker: BrokerCore, record: MessageRecord) -> dict[str, Any]:
    return {
        "topic": record.topic,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "offset_msg_id": broker.offset_msg_id(record.physical_offset),
    }


def lifecycle_events(broker: BrokerCore, records: list[MessageRecord]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    store = broker.store
    for record in records:
        event, detail = _copy_event(record)
        where = _where(broker, record)
        events.append({"at_ms": record.store_timestamp, "event": event, "detail": detail, **where})
        change = store.state_change_of(record.physical_offset)
        if change is not None:
            for_group = f" (group {change.group})" if change.group else ""
            events.append(
                {
                    "at_ms": change.changed_at_ms,
                    "event": change.state.label,
                    "detail": (change.reason or change.state.label) + for_group,
                    **where,
                }
            )
        if record.topic in _COPY_TOPICS or record.topic.startswith(
            (RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX)
        ):
            continue  # consumed means consumed from the topic it was sent to
        for group in broker.offsets.groups_of(record.topic):
            committed = broker.offsets.query(group, record.topic, record.queue_id)
            if committed is not None and committed > record.queue_offset:
                events.append(
                    {"at_ms": None, "event": "consumed", "detail": f"by group {group}", **where}
                )
    # Time order; what has no time (a consumed offset) after what has.
    events.sort(key=lambda e: (e["at_ms"] is None, e["at_ms"] or 0))
    return events


async def get_lifecycle(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    message_id = request.match_info["id"]
    topic = opt_str(request, "topic")
    first = find_by_id(broker, message_id, topic)
    unique = first[0].unique_key or message_id
    seen = {r.physical_offset: r for r in first}
    names = [
        *_search_topics(broker, topic or first[0].topic),
        *_COPY_TOPICS,
        *sorted(
            t for t in broker.topics.topics if t.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))
        )[:TOPICS_SEARCHED_MAX],
    ]
    for name in dict.fromkeys(names):
        for record in broker.store.query_by_key(name, unique, max_results=KEY_MATCHES_MAX):
            if record.unique_key == unique:
                seen.setdefault(record.physical_offset, record)
    records = sorted(seen.values(), key=lambda r: (r.store_timestamp, r.physical_offset))
    return web.json_response(
        {
            "msg_id": unique,
            "topic": records[0].properties.get("REAL_TOPIC", records[0].topic),
            "events": lifecycle_events(broker, records),
        }
    )


def routes() -> list[web.RouteDef]:
    return [
        web.get("/api/messages", query_messages),
        web.get("/api/messages/{id}", get_message),
        web.get("/api/messages/{id}/lifecycle", get_lifecycle),
    ]
