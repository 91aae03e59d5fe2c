"""The gRPC front's table from the broker's error kinds to ``apache.rocketmq.v2.Code``."""

from __future__ import annotations

from typing import Any

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.grpc.stubs import definition_pb2

__all__ = ["STATUS_CODES", "status_of"]

Code = definition_pb2.Code

# What RocketMQ's proxy answers for each kind of refusal.
STATUS_CODES: dict[Kind, int] = {
    Kind.BAD_REQUEST: Code.BAD_REQUEST,
    Kind.INVALID_PARAMETER: Code.BAD_REQUEST,
    Kind.ILLEGAL_TOPIC: Code.ILLEGAL_TOPIC,
    Kind.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    Kind.ILLEGAL_QUEUE: Code.BAD_REQUEST,
    Kind.GROUP_NOT_FOUND: Code.CONSUMER_GROUP_NOT_FOUND,
    Kind.BAD_SUBSCRIPTION: Code.ILLEGAL_FILTER_EXPRESSION,
    Kind.NO_SUBSCRIPTION: Code.BAD_REQUEST,
    Kind.FORBIDDEN: Code.FORBIDDEN,
    Kind.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    Kind.NOT_FOUND: Code.NOT_FOUND,
    Kind.BAD_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    Kind.STALE_HANDLE: Code.INVALID_RECEIPT_HANDLE,
    Kind.ILLEGAL_STATE: Code.BAD_REQUEST,
    Kind.ILLEGAL_LITE_TOPIC: Code.ILLEGAL_LITE_TOPIC,
    Kind.LITE_TOPIC_QUOTA_EXCEEDED: Code.LITE_TOPIC_QUOTA_EXCEEDED,  # the proxy's mapping
    Kind.BUSY: Code.TOO_MANY_REQUESTS,
    Kind.SERVICE_UNAVAILABLE: Code.INTERNAL_SERVER_ERROR,
    Kind.STORE_FAILED: Code.INTERNAL_SERVER_ERROR,
}


def status_of(error: BrokerError) -> Any:
    """The response ``status`` for a service's refusal."""
    return definition_pb2.Status(code=STATUS_CODES[error.kind], message=str(error))
