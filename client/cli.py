"""What the ``pocketmq`` command line calls (argparse lives in ``cli/``).

Each function is a thin wrapper over the SDK returning JSON-ready data; the streaming ones
are async generators (close them, e.g. with ``contextlib.aclosing``, if you stop early).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

from .admin import Admin
from .connection import Credentials
from .consumer import PushConsumer
from .errors import RouteNotFoundError, TopicNotExistError
from .message import Message
from .producer import Producer

__all__ = [
    "CLI_CONSUMER_GROUP",
    "CLI_PRODUCER_GROUP",
    "cmd_consume",
    "cmd_send",
    "cmd_topic_create",
    "cmd_topic_list",
    "cmd_topic_status",
    "wait_for_route",
]

CLI_PRODUCER_GROUP = "pocketmq-cli-producer"
CLI_CONSUMER_GROUP = "pocketmq-cli-consumer"


def _keys(keys: str | list[str] | None) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return [k for k in keys.replace(",", " ").split() if k]
    return list(keys)


async def cmd_send(
    namesrv: str | None,
    topic: str,
    tags: str | None,
    keys: str | list[str] | None,
    body: bytes,
    count: int = 1,
    *,
    credentials: Credentials | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Send ``body`` ``count`` times; one dict per send result."""
    async with Producer(CLI_PRODUCER_GROUP, namesrv=namesrv, credentials=credentials) as producer:
        for _ in range(count):
            message = Message(topic=topic, body=body, tags=tags or None, keys=_keys(keys))
            result = await producer.send(message)
            yield result.to_dict()


async def wait_for_route(
    namesrv: str | None,
    topic: str,
    timeout_s: float | None = 10.0,
    on_wait: Callable[[str], None] | None = None,
    *,
    poll_s: float = 0.5,
    credentials: Credentials | None = None,
) -> None:
    """Return once the name servers have a route for ``topic``.

    An unreachable name server raises at once (``ConnectionLostError``); a topic without a
    route calls ``on_wait(topic)`` once and asks again every ``poll_s`` until ``timeout_s``
    (None: forever), then raises ``RouteNotFoundError``. A consumer started on such a topic
    would otherwise wait silently for ever.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    told = False
    async with Admin(namesrv, credentials=credentials) as admin:
        while True:
            try:
                await admin.topic_route(topic)
                return
            except TopicNotExistError:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                raise RouteNotFoundError(
                    topic,
                    f"the name servers know no such topic (waited {timeout_s:g} s; create it "
                    f"with `pocketmq topic create --topic {topic}`, or send to it)",
                )
            if not told and on_wait is not None:
                on_wait(topic)
                told = True
            await asyncio.sleep(poll_s)


async def cmd_consume(
    namesrv: str | None,
    topic: str,
    group: str | None = None,
    count: int | None = None,
    start: Literal["first", "last"] = "last",
    expression: str = "*",
    *,
    credentials: Credentials | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """Consume ``topic`` (clustering, group default ``pocketmq-cli-consumer``); one dict per
    message, each acknowledged once yielded; stops after ``count`` messages (None: never).

    ``start`` applies only to queues the group has no committed offset for (and, as in
    RocketMQ, the broker answers offset 0 for a queue that still holds its first message).
    """
    consumer = PushConsumer(
        group or CLI_CONSUMER_GROUP, namesrv=namesrv, consume_from=start, credentials=credentials
    )
    consumer.subscribe(topic, expression or "*")
    seen = 0
    async with consumer:
        if count is not None and count <= 0:
            return
        async for message in consumer:
            yield message.to_dict()
            await consumer.ack(message)
            seen += 1
            if count is not None and seen >= count:
                return


async def cmd_topic_create(
    namesrv: str | None, topic: str, queues: int = 8, *, order: bool = False
) -> dict[str, Any]:
    async with Admin(namesrv) as admin:
        brokers = await admin.create_topic(topic, queues, order=order)
    return {"topic": topic, "queues": queues, "brokers": brokers}


async def cmd_topic_list(namesrv: str | None) -> list[str]:
    async with Admin(namesrv) as admin:
        return await admin.list_topics()


async def cmd_topic_status(namesrv: str | None, topic: str) -> list[dict[str, Any]]:
    async with Admin(namesrv) as admin:
        return [s.to_dict() for s in await admin.topic_status(topic)]
