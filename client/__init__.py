"""pocketmq's asyncio SDK, speaking RocketMQ's 4.x remoting protocol.

    from pocketmq.client import Message, Producer, PushConsumer

    async with Producer("my-producers", namesrv="127.0.0.1:9876") as producer:
        result = await producer.send(Message(topic="Orders", body=b"...", tags="created"))

    consumer = PushConsumer("my-consumers", namesrv="127.0.0.1:9876")
    consumer.subscribe("Orders", "created || paid")
    async with consumer:
        async for message in consumer:
            ...
            await consumer.ack(message)

Also: ``TransactionProducer`` (half message, local transaction, check-back;
``client.transaction``), ``SimpleConsumer`` (POP: receive / ack / change_invisible_duration;
``client.simple``), ``PushConsumer.poison`` (straight to the DLQ), and ``Admin.clock`` /
``advance_clock`` / ``set_clock`` for brokers on pocketmq's manual clock.

Errors are in ``client.errors`` (tree in its docstring); ``ClientError`` is their base.
"""

from __future__ import annotations

from .admin import Admin, ClockState, QueueStatus, ResetOffsetResult, RollbackStats
from .connection import Credentials
from .consumer import ConsumeResult, PushConsumer
from .errors import (
    BrokerError,
    ClientClosedError,
    ClientError,
    ClientUsageError,
    ConnectionLostError,
    CorruptMessageError,
    IllegalOperationError,
    MessageTooLargeError,
    RequestTimeoutError,
    RouteNotFoundError,
    StaleReceiptHandleError,
)
from .filter import MessageSelector
from .message import Message, MessageQueue, MessageView, ReceivedMessage, SendResult, SendStatus
from .producer import Producer
from .pull import PullConsumer, PullResult, PullStatus
from .simple import ReceiptHandle, SimpleConsumer
from .transaction import (
    Transaction,
    TransactionProducer,
    TransactionResolution,
    TransactionSendResult,
)

__all__ = [
    "Admin",
    "BrokerError",
    "ClientClosedError",
    "ClientError",
    "ClientUsageError",
    "ClockState",
    "ConnectionLostError",
    "ConsumeResult",
    "CorruptMessageError",
    "Credentials",
    "IllegalOperationError",
    "Message",
    "MessageQueue",
    "MessageSelector",
    "MessageTooLargeError",
    "MessageView",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "QueueStatus",
    "ReceiptHandle",
    "ReceivedMessage",
    "RequestTimeoutError",
    "ResetOffsetResult",
    "RollbackStats",
    "RouteNotFoundError",
    "SendResult",
    "SendStatus",
    "SimpleConsumer",
    "StaleReceiptHandleError",
    "Transaction",
    "TransactionProducer",
    "TransactionResolution",
    "TransactionSendResult",
]
