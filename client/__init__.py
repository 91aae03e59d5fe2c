"""pocketmq's asyncio SDK, speaking RocketMQ's 4.x remoting protocol.

    from client import Message, Producer, PushConsumer

    async with Producer("my-producers", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message(topic="Orders", body=b"...", tags="created"))

    consumer = PushConsumer("my-consumers", namesrv="127.0.0.1:9876")
    consumer.subscribe("Orders", "created || paid")
    async with consumer:
        async for message in consumer:
            ...
            await consumer.ack(message)

Errors are in ``client.errors`` (tree in its docstring); ``ClientError`` is their base.
"""

from __future__ import annotations

from .admin import Admin, QueueStatus
from .consumer import ConsumeResult, PushConsumer
from .errors import (
    BrokerError,
    ClientClosedError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    MessageTooLargeError,
    RequestTimeoutError,
    RouteNotFoundError,
)
from .message import Message, MessageQueue, MessageView, ReceivedMessage, SendResult, SendStatus
from .producer import Producer
from .pull import PullConsumer, PullResult, PullStatus

__all__ = [
    "Admin",
    "BrokerError",
    "ClientClosedError",
    "ClientError",
    "ClientUsageError",
    "ConnectionLostError",
    "ConsumeResult",
    "Message",
    "MessageQueue",
    "MessageTooLargeError",
    "MessageView",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueStatus",
    "ReceivedMessage",
    "RequestTimeoutError",
    "RouteNotFoundError",
    "SendResult",
    "SendStatus",
]
