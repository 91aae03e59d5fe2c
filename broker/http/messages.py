"""A queue's messages in the message-state transports (``transport.py``), and a message's
state changed by an operator: ``GET .../messages`` and ``PUT .../messages/{offset}/state``."""

from __future__ import annotations

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError, Kind, from_store_error
from pocketmq.broker.http.errors import ApiError
from pocketmq.broker.http.params import body_field, int_param, json_body, opt_str, path_int
from pocketmq.broker.http.transport import (
    TransportMessage,
    encode_binary,
    to_json,
    transport_message,
)
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError, StoreError
from pocketmq.store.state import IllegalStateChangeError, MessageState

__all__ = ["POLL_BYTES_MAX", "POLL_COUNT_MAX", "routes"]

POLL_COUNT_MAX = 1000
POLL_BYTES_MAX = 4 * 1024 * 1024  # of stored records in one poll
SCAN_MAX = 10_000  # queue entries one poll looks at, filtered out or not
REASON_MAX = 256
SETTABLE = {MessageState.POISONED, MessageState.MARKED_FOR_DELETION}
BINARY = "application/octet-stream"


def _states(text: str | None) -> set[MessageState] | None:
    if text is None:
        return None
    wanted = set()
    for name in filter(None, (part.strip() for part in text.split(","))):
        try:
            wanted.add(MessageState[name.upper()])
        except KeyError:
            names = ", ".join(s.label for s in MessageState)
            raise ApiError(400, f"state {name!r} is none of {names}") from None
    return wanted


def queue_of(broker: BrokerCore, topic: str, queue_id: int) -> None:
    """404 for a topic the broker does not have, 400 for a queue it does not have."""
    config = broker.topics.get(topic)
    if config is None:
        raise BrokerError(Kind.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
    queues = max(config.read_queue_nums, config.write_queue_nums)
    if queue_id >= queues:
        raise BrokerError(
            Kind.ILLEGAL_QUEUE, f"topic {topic} has queues 0 to {queues - 1}, not {queue_id}"
        )


def poll(
    broker: BrokerCore,
    topic: str,
    queue_id: int,
    offset: int | None,
    count: int,
    states: set[MessageState] | None,
    group: str | None,
) -> tuple[list[TransportMessage], int]:
    """Up to ``count`` messages from ``offset`` whose state is in ``states`` (all when None);
    also the offset to poll next."""
    store = broker.store
    position = store.min_offset(topic, queue_id) if offset is None else offset
    found: list[TransportMessage] = []
    scanned = total = 0
    while len(found) < count and scanned < SCAN_MAX and total < POLL_BYTES_MAX:
        got = store.get_messages(
            topic,
            queue_id,
            position,
            min(count - len(found), 64),
            only_available=False,
            max_bytes=POLL_BYTES_MAX - total,
        )
        if got.next_offset <= position and not got.messages:
            break  # the end of the queue
        scanned += max(got.next_offset - position, 1)
        position = got.next_offset
        for _queue_offset, physical, view in got.messages:
            state = store.state_of(physical, group)
            if states is not None and state not in states:
                continue
            total += len(view)
            record = store.read(physical)
            found.append(transport_message(record, state, broker.offset_msg_id(physical)))
    return found, position


async def get_messages(request: web.Request) -> web.StreamResponse:
    broker: BrokerCore = request.app["broker"]
    topic = request.match_info["topic"]
    queue_id = path_int(request, "queue_id", 0, 65535)
    queue_of(broker, topic, queue_id)
    offset = int_param(request, "offset", None, 0, (1 << 63) - 1)
    count = int_param(request, "count", 10, 1, POLL_COUNT_MAX)
    assert count is not None
    states = _states(opt_str(request, "state"))
    messages, next_offset = poll(
        broker, topic, queue_id, offset, count, states, opt_str(request, "group")
    )
    low, high = broker.store.min_offset(topic, queue_id), broker.store.max_offset(topic, queue_id)
    if BINARY in request.headers.get("Accept", ""):
        return web.Response(
            body=b"".join(encode_binary(m) for m in messages),
            content_type=BINARY,
            headers={
                "X-Pocketmq-Count": str(len(messages)),
                "X-Pocketmq-Next-Offset": str(next_offset),
                "X-Pocketmq-Min-Offset": str(low),
                "X-Pocketmq-Max-Offset": str(high),
            },
        )
    return web.json_response(
        {
            "topic": topic,
            "queue_id": queue_id,
            "min_offset": low,
            "max_offset": high,
            "next_offset": next_offset,
            "messages": [to_json(m) for m in messages],
        }
    )


async def put_state(request: web.Request) -> web.Response:
    broker: BrokerCore = request.app["broker"]
    topic = request.match_info["topic"]
    queue_id = path_int(request, "queue_id", 0, 65535)
    offset = path_int(request, "offset")
    queue_of(broker, topic, queue_id)
    body = await json_body(request)
    name = body_field(body, "state", str)
    try:
        state = MessageState[name.upper()]
    except KeyError:
        state = MessageState.AVAILABLE  # not settable: refused below with the names
    if state not in SETTABLE or name.upper() != state.name:
        raise ApiError(400, f"state {name!r}: only poisoned or marked_for_deletion can be set")
    reason = body_field(body, "reason", str, "")
    if len(reason) > REASON_MAX:
        raise ApiError(400, f"reason of {len(reason)} characters: at most {REASON_MAX}")
    group = body_field(body, "group", str, "")
    store = broker.store
    got = store.get_messages(topic, queue_id, offset, 1, only_available=False)
    if not got.messages or got.messages[0][0] != offset:
        raise BrokerError(
            Kind.NOT_FOUND,
            f"no message at offset {offset} of {topic}/{queue_id} "
            f"(the queue holds {got.min_offset} to {got.max_offset - 1})",
        )
    physical = got.messages[0][1]
    try:
        store.set_state(physical, state, reason or "set through the HTTP API", group=group)
    except IllegalStateChangeError as error:
        raise ApiError(400, str(error), "illegal_state_change") from None
    except ValueError as error:  # a group name too long for a state record
        raise ApiError(400, str(error)) from None
    except (CorruptRecordError, OffsetOutOfRangeError) as error:
        raise BrokerError(Kind.NOT_FOUND, f"no message there: {error}") from None
    except StoreError as error:  # a full disk: the change is an appended record
        raise from_store_error(error, "the state change") from None
    record = store.read(physical)
    now = store.state_of(physical, group or None)
    return web.json_response(
        to_json(transport_message(record, now, broker.offset_msg_id(physical)))
    )


def routes() -> list[web.RouteDef]:
    base = "/api/topics/{topic}/queues/{queue_id}/messages"
    return [web.get(base, get_messages), web.put(base + "/{offset}/state", put_state)]
