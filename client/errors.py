"""Errors raised by the SDK; each says whose fault it is.

    ClientError                            base; ``retriable`` says whether a retry may help
     +-- ClientUsageError                  the caller misused the SDK (also a ValueError)
     |    +-- ClientClosedError            the producer/consumer is not started or already closed
     |    +-- MessageTooLargeError         body or batch over ``max_message_size``
     +-- RouteNotFoundError                the name server knows no route for a topic
     +-- ConnectionLostError               could not connect, or the connection dropped
     +-- RequestTimeoutError               no response within the timeout (also a TimeoutError)
     +-- CorruptMessageError               a pulled record fails its BODYCRC or does not decode
     +-- BrokerError(code, remark)         the broker / name server answered with an error code
          +-- BrokerSystemError              1  SYSTEM_ERROR                retriable
          +-- SystemBusyError                2  SYSTEM_BUSY                 retriable
          +-- RequestCodeNotSupportedError   3  REQUEST_CODE_NOT_SUPPORTED
          +-- FlushDiskTimeoutError         10  FLUSH_DISK_TIMEOUT
          +-- SlaveNotAvailableError        11  SLAVE_NOT_AVAILABLE
          +-- FlushSlaveTimeoutError        12  FLUSH_SLAVE_TIMEOUT
          +-- MessageIllegalError           13  MESSAGE_ILLEGAL
          +-- ServiceNotAvailableError      14  SERVICE_NOT_AVAILABLE       retriable
          +-- VersionNotSupportedError      15  VERSION_NOT_SUPPORTED
          +-- NoPermissionError             16  NO_PERMISSION               retriable
          +-- TopicNotExistError            17  TOPIC_NOT_EXIST             retriable
          +-- TopicExistAlreadyError        18  TOPIC_EXIST_ALREADY
          +-- QueryNotFoundError            22  QUERY_NOT_FOUND
          +-- SubscriptionError             23-28 subscription / filter data problems
          +-- InvalidParameterError         29  INVALID_PARAMETER
          +-- NoBuyerIdError               204  NO_BUYER_ID                 retriable
          +-- NotInCurrentUnitError        205  NOT_IN_CURRENT_UNIT         retriable
          +-- ConsumerNotOnlineError       206  CONSUMER_NOT_ONLINE
          +-- FlowControlError             215  FLOW_CONTROL
          +-- IllegalOperationError        604  ILLEGAL_OPERATION
          |    +-- StaleReceiptHandleError      a POP receipt handle no longer lends the message
          +-- GoAwayError                 1500  GO_AWAY                     retriable
          +-- UnknownBrokerError            any other code

The retriable broker codes are RocketMQ's ``DefaultMQProducer.retryResponseCodes``
(17, 14, 1, 2, 16, 204, 205, 1500). Retry loops read only ``retriable``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pocketmq.broker.protocol.codes import ResponseCode

__all__ = [
    "BrokerError",
    "BrokerSystemError",
    "ClientClosedError",
    "ClientError",
    "ClientUsageError",
    "ConnectionLostError",
    "ConsumerNotOnlineError",
    "CorruptMessageError",
    "FlowControlError",
    "FlushDiskTimeoutError",
    "FlushSlaveTimeoutError",
    "GoAwayError",
    "IllegalOperationError",
    "InvalidParameterError",
    "MessageIllegalError",
    "MessageTooLargeError",
    "NoBuyerIdError",
    "NoPermissionError",
    "NotInCurrentUnitError",
    "QueryNotFoundError",
    "RequestCodeNotSupportedError",
    "RequestTimeoutError",
    "RouteNotFoundError",
    "ServiceNotAvailableError",
    "SlaveNotAvailableError",
    "StaleReceiptHandleError",
    "SubscriptionError",
    "SystemBusyError",
    "TopicExistAlreadyError",
    "TopicNotExistError",
    "UnknownBrokerError",
    "VersionNotSupportedError",
    "code_name",
    "error_for_code",
]


class ClientError(Exception):
    """Base of every SDK error."""

    retriable: ClassVar[bool] = False


class ClientUsageError(ClientError, ValueError):
    """The caller did something the SDK does not allow (a bug in the calling code)."""


class ClientClosedError(ClientUsageError):
    """Used before ``start()`` or after ``close()``."""


class MessageTooLargeError(ClientUsageError):
    def __init__(self, size_bytes: int, size_bytes_max: int, what: str = "message body") -> None:
        self.size_bytes = size_bytes
        self.size_bytes_max = size_bytes_max
        super().__init__(f"{what} of {size_bytes} bytes exceeds the maximum of {size_bytes_max}")


class RouteNotFoundError(ClientError):
    """No route for ``topic`` (and, for a producer, no ``TBW102`` fallback either)."""

    def __init__(self, topic: str, reason: str = "") -> None:
        self.topic = topic
        super().__init__(f"no route for topic {topic!r}" + (f": {reason}" if reason else ""))


class ConnectionLostError(ClientError, ConnectionError):
    """Connecting to ``addr`` failed or the connection dropped while a request was pending.

    A request that fails this way may or may not have reached the peer.
    """

    retriable = True

    def __init__(self, addr: str, reason: str = "connection lost") -> None:
        self.addr = addr
        self.reason = reason
        super().__init__(f"{addr}: {reason}")


class RequestTimeoutError(ClientError, TimeoutError):
    """No response to request ``code`` from ``addr`` within ``timeout_ms``."""

    def __init__(self, addr: str, code: int, timeout_ms: float) -> None:
        self.addr = addr
        self.code = code
        self.timeout_ms = timeout_ms
        super().__init__(f"{addr}: no response to request {code} within {timeout_ms:g} ms")


def code_name(code: int) -> str:
    """RocketMQ's name of a response code with its number: ``ILLEGAL_OPERATION (604)``."""
    try:
        return f"{ResponseCode(code).name} ({int(code)})"
    except (TypeError, ValueError):
        return f"response code {code}"


class CorruptMessageError(ClientError):
    """A record in a broker's answer failed its check: its body does not match its BODYCRC
    (as Kafka's ``check.crcs``), or it does not decode. Nothing from the bad record on is
    handed over; ``messages`` holds the good ones before it, ``queue_offset`` is the bad
    record's queue offset where known (the one after the last good message, else the offset
    that was asked for), and ``reason`` says what was wrong. Re-reading may help (the damage
    may have been in transit), hence ``retriable``."""

    retriable = True

    def __init__(
        self,
        reason: str,
        *,
        messages: list[Any] | None = None,
        queue: object | None = None,
        queue_offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.messages = list(messages or ())
        self.queue = queue
        self.queue_offset = queue_offset
        where = f" in {queue}" if queue is not None else ""
        at = f" at queue offset {queue_offset}" if queue_offset is not None else ""
        super().__init__(f"corrupt message{where}{at}: {reason}")


class BrokerError(ClientError):
    """A response code other than success. ``code`` is RocketMQ's ``ResponseCode``; the
    message names it as RocketMQ does: ``ILLEGAL_OPERATION (604): <the broker's remark>``."""

    code: int = -1

    def __init__(self, code: int, remark: str | None = None) -> None:
        self.code = code
        self.remark = remark
        super().__init__(f"{code_name(code)}: {remark}" if remark else code_name(code))


class BrokerSystemError(BrokerError):
    """SYSTEM_ERROR (1): the broker failed; retried on another queue."""

    retriable = True


class SystemBusyError(BrokerError):
    """SYSTEM_BUSY (2): the broker sheds load; retried."""

    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    """REQUEST_CODE_NOT_SUPPORTED (3): the broker does not know the request."""


class FlushDiskTimeoutError(BrokerError):
    """FLUSH_DISK_TIMEOUT (10): stored, but not synced to disk within the broker's
    sync-flush timeout (``--flush sync``); the message may still be durable."""


class SlaveNotAvailableError(BrokerError):
    """SLAVE_NOT_AVAILABLE (11): stored on the master, no slave to replicate to."""


class FlushSlaveTimeoutError(BrokerError):
    """FLUSH_SLAVE_TIMEOUT (12): stored on the master, the slave did not confirm in time."""


class MessageIllegalError(BrokerError):
    """MESSAGE_ILLEGAL (13): refused as it is (size, properties, delay): do not resend it."""


class ServiceNotAvailableError(BrokerError):
    """SERVICE_NOT_AVAILABLE (14): the broker is not taking writes now (disk full,
    shutting down); retried."""

    retriable = True


class VersionNotSupportedError(BrokerError):
    """VERSION_NOT_SUPPORTED (15)."""


class NoPermissionError(BrokerError):
    """NO_PERMISSION (16): the topic or broker is not writable (or readable); retried
    on another broker."""

    retriable = True


class TopicNotExistError(BrokerError):
    """TOPIC_NOT_EXIST (17): unknown topic and auto-create is off; retried after a
    route refresh."""

    retriable = True


class TopicExistAlreadyError(BrokerError):
    """TOPIC_EXIST_ALREADY (18)."""


class QueryNotFoundError(BrokerError):
    """QUERY_NOT_FOUND (22): no message matched the query."""


class SubscriptionError(BrokerError):
    """23 parse failed, 24 not exist, 25 not latest, 26 group not exist, 27/28 filter data."""


class InvalidParameterError(BrokerError):
    """INVALID_PARAMETER (29)."""


class NoBuyerIdError(BrokerError):
    """NO_BUYER_ID (204); retried."""

    retriable = True


class NotInCurrentUnitError(BrokerError):
    """NOT_IN_CURRENT_UNIT (205); retried."""

    retriable = True


class ConsumerNotOnlineError(BrokerError):
    """CONSUMER_NOT_ONLINE (206): no live consumer of the group (e.g. a
    transaction check or consumer-status query found nobody)."""


class FlowControlError(BrokerError):
    """215: the broker throttles this client."""


class IllegalOperationError(BrokerError):
    """604: the broker refuses the request in its current state (pocketmq: a stale POP
    receipt handle, or moving a clock that is not manual)."""


class StaleReceiptHandleError(IllegalOperationError):
    """An ack or invisibility change with a receipt handle that no longer lends the message:
    it was acknowledged already, its invisible time ran out (the message is redelivered
    with a new handle), or ``change_invisible_duration`` replaced it."""


class GoAwayError(BrokerError):
    """GO_AWAY (1500): the broker is going away; retried on another one."""

    retriable = True


class UnknownBrokerError(BrokerError):
    """A response code this SDK has no class for; ``code`` and ``remark`` say what the
    broker answered."""


_BY_CODE: dict[int, type[BrokerError]] = {
    1: BrokerSystemError,
    2: SystemBusyError,
    3: RequestCodeNotSupportedError,
    10: FlushDiskTimeoutError,
    11: SlaveNotAvailableError,
    12: FlushSlaveTimeoutError,
    13: MessageIllegalError,
    14: ServiceNotAvailableError,
    15: VersionNotSupportedError,
    16: NoPermissionError,
    17: TopicNotExistError,
    18: TopicExistAlreadyError,
    22: QueryNotFoundError,
    23: SubscriptionError,
    24: SubscriptionError,
    25: SubscriptionError,
    26: SubscriptionError,
    27: SubscriptionError,
    28: SubscriptionError,
    29: InvalidParameterError,
    204: NoBuyerIdError,
    205: NotInCurrentUnitError,
    206: ConsumerNotOnlineError,
    215: FlowControlError,
    604: IllegalOperationError,
    1500: GoAwayError,
}


def error_for_code(code: int, remark: str | None = None) -> BrokerError:
    """The exception for a response code; never raises (unknown codes: ``UnknownBrokerError``)."""
    try:
        cls = _BY_CODE.get(int(code), UnknownBrokerError)
    except (TypeError, ValueError):
        cls = UnknownBrokerError
    return cls(code, remark)
