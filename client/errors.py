"""Errors raised by the SDK; each says whose fault it is.

    ClientError                            base; ``retriable`` says whether a retry may help
     +-- ClientUsageError                  the caller misused the SDK (also a ValueError)
     |    +-- ClientClosedError            the producer/consumer is not started or already closed
     |    +-- MessageTooLargeError         body or batch over ``max_message_size``
     +-- RouteNotFoundError                the name server knows no route for a topic
     +-- ConnectionLostError               could not connect, or the connection dropped
     +-- RequestTimeoutError               no response within the timeout (also a TimeoutError)
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

from typing import ClassVar

__all__ = [
    "BrokerError",
    "BrokerSystemError",
    "ClientClosedError",
    "ClientError",
    "ClientUsageError",
    "ConnectionLostError",
    "ConsumerNotOnlineError",
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


class BrokerError(ClientError):
    """A response code other than success. ``code`` is RocketMQ's ``ResponseCode``."""

    code: int = -1

    def __init__(self, code: int, remark: str | None = None) -> None:
        self.code = code
        self.remark = remark
        super().__init__(f"code {code}: {remark}" if remark else f"code {code}")


class BrokerSystemError(BrokerError):
    retriable = True


class SystemBusyError(BrokerError):
    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    pass


class FlushDiskTimeoutError(BrokerError):
    pass


class SlaveNotAvailableError(BrokerError):
    pass


class FlushSlaveTimeoutError(BrokerError):
    pass


class MessageIllegalError(BrokerError):
    pass


class ServiceNotAvailableError(BrokerError):
    retriable = True


class VersionNotSupportedError(BrokerError):
    pass


class NoPermissionError(BrokerError):
    retriable = True


class TopicNotExistError(BrokerError):
    retriable = True


class TopicExistAlreadyError(BrokerError):
    pass


class QueryNotFoundError(BrokerError):
    pass


class SubscriptionError(BrokerError):
    """23 parse failed, 24 not exist, 25 not latest, 26 group not exist, 27/28 filter data."""


class InvalidParameterError(BrokerError):
    pass


class NoBuyerIdError(BrokerError):
    retriable = True


class NotInCurrentUnitError(BrokerError):
    retriable = True


class ConsumerNotOnlineError(BrokerError):
    pass


class FlowControlError(BrokerError):
    pass


class IllegalOperationError(BrokerError):
    """604: the broker refuses the request in its current state (pocketmq: a stale POP
    receipt handle, or moving a clock that is not manual)."""


class StaleReceiptHandleError(IllegalOperationError):
    """An ack or invisibility change with a receipt handle that no longer lends the message:
    it was acknowledged already, its invisible time ran out (the message is redelivered
    with a new handle), or ``change_invisible_duration`` replaced it."""


class GoAwayError(BrokerError):
    retriable = True


class UnknownBrokerError(BrokerError):
    pass


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
