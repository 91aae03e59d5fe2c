"""The admin operations as JSON: broker, topics, groups, lag, offset resets, dead letters,
transactions and the manual clock. Each route translates onto a service; none decides
anything the remoting admin codes would decide differently."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.http.errors import ApiError
from pocketmq.broker.http.params import body_field, json_body, opt_str
from pocketmq.broker.protocol.headers import TopicConfig
from pocketmq.broker.services.clock import move_clock
from pocketmq.broker.services.group_admin import ResetRefusal
from pocketmq.broker.services.topics import MESSAGE_TYPE_ATTRIBUTE, topic_message_type
from pocketmq.store.topics import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, is_system_topic

__all__ = ["routes"]

IDS_MAX = 1000  # message ids one DLQ resend may name


def _broker(request: web.Request) -> BrokerCore:
    broker: BrokerCore = request.app["broker"]
    return broker


def topic_view(broker: BrokerCore, config: TopicConfig) -> dict[str, Any]:
    store = broker.store
    queues = max(config.read_queue_nums, config.write_queue_nums)
    return {
        "topic": config.topic_name,
        "read_queue_nums": config.read_queue_nums,
        "write_queue_nums": config.write_queue_nums,
        "perm": config.perm,
        "order": config.order,
        "message_type": topic_message_type(config),
        "system": _listed_as_system(config.topic_name),
        "attributes": dict(config.attributes),
        "queues": [
            {
                "queue_id": q,
                "min_offset": store.min_offset(config.topic_name, q),
                "max_offset": store.max_offset(config.topic_name, q),
            }
            for q in range(queues)
        ],
    }


def _topic(broker: BrokerCore, topic: str) -> TopicConfig:
    config = broker.topics.get(topic)
    if config is None:
        raise BrokerError(Kind.TOPIC_NOT_FOUND, f"topic {topic} does not exist")
    return config


async def get_broker(request: web.Request) -> web.Response:
    broker = _broker(request)
    info: dict[str, Any] = request.app["describe"]()
    info["clock"] = _clock_view(broker)
    info["store"] = {
        "min_commitlog_offset": broker.store.min_physical_offset,
        "max_commitlog_offset": broker.store.max_physical_offset,
        "in_memory": broker.config.data_dir is None,
    }
    info["topic_number"] = len(broker.topics.user_topics())
    info["consumer_group_number"] = len(broker.groups.groups)
    return web.json_response(info)


def _listed_as_system(topic: str) -> bool:
    """System topics, and the groups' retry and dead-letter topics: shown with ``system=true``."""
    return is_system_topic(topic) or topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))


async def list_topics(request: web.Request) -> web.Response:
    broker = _broker(request)
    system = request.query.get("system", "false").lower()
    if system not in ("true", "false"):
        raise ApiError(400, f"query parameter system={system!r} is neither true nor false")
    if system == "true":
        names = sorted(broker.topics.topics)
    else:  # lite topics' LMQs are left out too: they belong to their parent
        names = [n for n in broker.topics.user_topics() if not _listed_as_system(n)]
    return web.json_response(
        [topic_view(broker, c) for n in names if (c := broker.topics.get(n)) is not None]
    )


async def get_topic(request: web.Request) -> web.Response:
    broker = _broker(request)
    return web.json_response(topic_view(broker, _topic(broker, request.match_info["topic"])))


async def create_topic(request: web.Request) -> web.Response:
    broker = _broker(request)
    body = await json_body(request)
    topic = body_field(body, "topic", str)
    read = body_field(body, "read_queue_nums", int, None)
    write = body_field(body, "write_queue_nums", int, None)
    for name, value in (("read_queue_nums", read), ("write_queue_nums", write)):
        if value is not None and not 1 <= value <= 1024:
            raise ApiError(400, f"body field {name!r}={value} is out of range [1, 1024]")
    perm = body_field(body, "perm", int, 6)
    if perm not in (2, 4, 6):
        raise ApiError(400, f"body field 'perm'={perm}: 2 (write), 4 (read) or 6 (both)")
    attributes = None  # an update that names no type keeps the topic's attributes
    message_type = body_field(body, "message_type", str, None)
    if message_type is not None:
        existing = broker.topics.get(topic)
        attributes = dict(existing.attributes) if existing is not None else {}
        attributes[MESSAGE_TYPE_ATTRIBUTE] = message_type.upper()
    config = broker.topics.create(
        topic,
        read_queue_nums=read,
        write_queue_nums=write,
        perm=perm,
        order=body_field(body, "order", bool, False),
        attributes=attributes,
    )
    broker.schedule_registration()
    return web.json_response(topic_view(broker, config), status=201)


async def delete_topic(request: web.Request) -> web.Response:
    broker = _broker(request)
    topic = request.match_info["topic"]
    _topic(broker, topic)
    if is_system_topic(topic):
        raise ApiError(400, f"{topic} is a system topic: it cannot be deleted", "illegal_topic")
    broker.topics.delete(topic)
    broker.schedule_registration()
    return web.json_response({"deleted": topic})


def group_view(broker: BrokerCore, name: str) -> dict[str, Any]:
    config = broker.groups.groups.get(name)
    online = broker.clients.group(name)
    return {
        "group": name,
        "exists": config is not None,
        "consume_enable": config.consume_enable if config else None,
        "consume_broadcast_enable": config.consume_broadcast_enable if config else None,
        "consume_message_orderly": config.consume_message_orderly if config else None,
        "retry_max_times": config.retry_max_times if config else None,
        "online_clients": online.client_ids() if online else [],
        "message_model": online.message_model if online else None,
        "topics": broker.progress.topics_of(name),
    }


async def list_groups(request: web.Request) -> web.Response:
    broker = _broker(request)
    return web.json_response([group_view(broker, g) for g in broker.progress.groups()])


def _known_group(broker: BrokerCore, group: str) -> None:
    if group not in broker.progress.groups():
        raise BrokerError(Kind.GROUP_NOT_FOUND, f"consumer group {group} does not exist")


async def get_group(request: web.Request) -> web.Response:
    broker = _broker(request)
    group = request.match_info["group"]
    _known_group(broker, group)
    return web.json_response(group_view(broker, group))


async def get_lag(request: web.Request) -> web.Response:
    broker = _broker(request)
    group = request.match_info["group"]
    _known_group(broker, group)
    topic = opt_str(request, "topic")
    if topic is not None:
        _topic(broker, topic)
    progress = broker.progress.group(group, [topic] if topic else None)
    return web.json_response(
        {
            "group": group,
            "lag": progress.lag,
            "inflight": progress.inflight,
            "consume_tps": progress.consume_tps,
            "queues": [
                {
                    "topic": q.topic,
                    "queue_id": q.queue_id,
                    "broker_offset": q.broker_offset,
                    "consumer_offset": q.consumer_offset,
                    "lag": q.lag,
                    "inflight": q.inflight,
                    "last_timestamp": q.last_timestamp,
                }
                for q in progress.queues
            ],
        }
    )


async def reset_offsets(request: web.Request) -> web.Response:
    """Reset by time, as mqadmin's resetOffsetByTime with force: each queue of the topic moves
    to the first message stored at or after ``timestamp`` (0: the first, -1: the end). Online
    consumers are told (RESET_CONSUMER_CLIENT_OFFSET, as INVOKE_BROKER_TO_RESET_OFFSET does)
    and commit the offsets themselves; with none online the broker writes them, as mqadmin's
    fallback (resetOffsetByTimeOld) does."""
    broker = _broker(request)
    group = request.match_info["group"]
    body = await json_body(request)
    topic = body_field(body, "topic", str)
    timestamp = body_field(body, "timestamp", int)
    if timestamp < -1:
        raise ApiError(400, f"body field 'timestamp'={timestamp}: epoch ms, 0 or -1 (the end)")
    _topic(broker, topic)
    admin = broker.group_admin
    table = admin.reset_table(topic, group, timestamp, force=True)
    if isinstance(table, ResetRefusal):
        raise BrokerError(
            Kind.GROUP_NOT_FOUND, f"consumer group {group} has no offsets of topic {topic}"
        )
    offsets = broker.offsets
    rows = [
        {"queue_id": q, "old_offset": offsets.query(group, topic, q), "new_offset": target}
        for q, target in table.items()
    ]
    told = admin.tell_reset(topic, group, timestamp, table, broker_name=broker.config.broker_name)
    if not told.told:
        for queue_id, target in table.items():
            offsets.commit(group, topic, queue_id, target)
    return web.json_response(
        {"queues": rows, "told": told.told, "written": not told.told, "skipped": told.skipped}
    )


async def get_dlq(request: web.Request) -> web.Response:
    broker = _broker(request)
    return web.json_response(broker.queries.dead_letters(request.match_info["group"]))


async def resend_dlq(request: web.Request) -> web.Response:
    broker = _broker(request)
    body = await json_body(request, required=False)
    ids = body_field(body, "ids", list, [])
    if len(ids) > IDS_MAX or not all(isinstance(i, str) for i in ids):
        raise ApiError(400, f"body field 'ids' must be at most {IDS_MAX} strings")
    outcomes = broker.queries.resend_dead_letters(request.match_info["group"], set(ids))
    return web.json_response(outcomes)


async def list_transactions(request: web.Request) -> web.Response:
    broker = _broker(request)
    pending = sorted(broker.transactions.pending.values(), key=lambda h: h.born_timestamp)
    return web.json_response(
        [
            {
                "transaction_id": half.transaction_id,
                "producer_group": half.producer_group,
                "topic": half.real_topic,
                "check_times": half.check_times,
                "next_check_ms": half.next_check_ms,
                "born_timestamp": half.born_timestamp,
                "offset_msg_id": broker.offset_msg_id(half.physical_offset),
            }
            for half in pending
        ]
    )


def _clock_view(broker: BrokerCore) -> dict[str, Any]:
    return {
        "now_ms": broker.clock.now_ms(),
        "manual": broker.clock.manual,
        "pending": broker.scheduler.pending(),
    }


async def get_clock(request: web.Request) -> web.Response:
    return web.json_response(_clock_view(_broker(request)))


async def advance_clock(request: web.Request) -> web.Response:
    broker = _broker(request)
    body = await json_body(request)
    duration = body.get("duration")
    if isinstance(duration, bool) or not isinstance(duration, str | int):
        raise ApiError(400, "body field 'duration' must be a duration (2h, 90s) or milliseconds")
    fired = await move_clock(broker.clock, broker.scheduler, advance=str(duration))
    return web.json_response({**_clock_view(broker), "fired": fired})


def routes() -> list[web.RouteDef]:
    return [
        web.get("/api/broker", get_broker),
        web.get("/api/topics", list_topics),
        web.post("/api/topics", create_topic),
        web.get("/api/topics/{topic}", get_topic),
        web.delete("/api/topics/{topic}", delete_topic),
        web.get("/api/groups", list_groups),
        web.get("/api/groups/{group}", get_group),
        web.get("/api/groups/{group}/lag", get_lag),
        web.post("/api/groups/{group}/offsets/reset", reset_offsets),
        web.get("/api/groups/{group}/dlq", get_dlq),
        web.post("/api/groups/{group}/dlq/resend", resend_dlq),
        web.get("/api/transactions", list_transactions),
        web.get("/api/clock", get_clock),
        web.post("/api/clock/advance", advance_clock),
    ]
