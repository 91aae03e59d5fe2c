"""The broker's one error tree: what went wrong, in the services' own words.

    BrokerError(kind, message)          a refusal by a service; ``kind`` says what kind
     +-- DelayError                       a DELAY property that is no delay level
     +-- TimerError                       a timer property that is no time, or too far
     +-- TopicError                       a topic name, attribute or operation refused
     +-- TransactionError                 an END_TRANSACTION that ends nothing
     +-- PopError                         a POP, ack or invisible-time change refused

Services raise these and know nothing of wire codes. Each front translates a ``Kind`` in one
table of its own: the remoting front to RocketMQ's response codes
(``broker/handlers/common.py``), the gRPC front to the v2 ``Code`` (``broker/grpc/errors.py``).
``retriable`` says whether the same request may succeed later, as RocketMQ's clients retry
SYSTEM_ERROR, SYSTEM_BUSY, SERVICE_NOT_AVAILABLE, NO_PERMISSION and TOPIC_NOT_EXIST.
"""

from __future__ import annotations

from enum import Enum

from pocketmq.store.errors import (
    CorruptRecordError,
    LimitExceededError,
    StoreError,
    StoreFullError,
)

__all__ = [
    "BrokerError",
    "DelayError",
    "Kind",
    "PopError",
    "TimerError",
    "TopicError",
    "TransactionError",
    "from_store_error",
]


class Kind(Enum):
    """What kind of refusal; the value is whether a later retry may succeed."""

    BAD_REQUEST = ("bad_request", False)  # a request that does not parse or fits no rule
    INVALID_PARAMETER = ("invalid_parameter", False)  # a value outside its allowed range
    ILLEGAL_TOPIC = ("illegal_topic", False)  # a topic name TopicValidator refuses
    TOPIC_NOT_FOUND = ("topic_not_found", True)
    ILLEGAL_QUEUE = ("illegal_queue", False)  # a queue id the topic does not have
    GROUP_NOT_FOUND = ("group_not_found", False)
    BAD_SUBSCRIPTION = ("bad_subscription", False)  # an expression that cannot be used
    NO_SUBSCRIPTION = ("no_subscription", False)  # the consumer never said what it reads
    FORBIDDEN = ("forbidden", True)  # a permission: topic or broker not writable/readable
    MESSAGE_ILLEGAL = ("message_illegal", False)  # size, properties, delay, timer, batch
    NOT_FOUND = ("not_found", False)  # a query found nothing
    BAD_HANDLE = ("bad_handle", False)  # a POP receipt handle that does not parse
    STALE_HANDLE = ("stale_handle", False)  # a receipt handle that no longer lends anything
    ILLEGAL_STATE = ("illegal_state", False)  # not allowed in the broker's current state
    ILLEGAL_LITE_TOPIC = ("illegal_lite_topic", False)  # a lite topic name refused (lite.py)
    LITE_TOPIC_QUOTA_EXCEEDED = ("lite_topic_quota_exceeded", False)  # too many LMQs
    BUSY = ("busy", True)  # back-pressure: too many in flight, polling full
    SERVICE_UNAVAILABLE = ("service_unavailable", True)  # disk full, shutting down
    STORE_FAILED = ("store_failed", True)  # the store could not do it (I/O, corruption)

    @property
    def retriable(self) -> bool:
        return self.value[1]


class BrokerError(Exception):
    """A refusal by a broker service; the front that received the request answers it."""

    default_kind = Kind.BAD_REQUEST

    def __init__(self, kind: Kind | str, message: str = "") -> None:
        if isinstance(kind, str):  # BrokerError("message"): the class's own kind
            self.kind = self.default_kind
            message = kind
        else:
            self.kind = kind
        super().__init__(message)

    @property
    def retriable(self) -> bool:
        return self.kind.retriable


class DelayError(BrokerError):
    """A DELAY property that is not a number."""

    default_kind = Kind.MESSAGE_ILLEGAL


class TimerError(BrokerError):
    """A timer property that is not a number, or a delivery time beyond the maximum."""

    default_kind = Kind.MESSAGE_ILLEGAL


class TopicError(BrokerError):
    """A topic name, attribute or operation was refused."""


class TransactionError(BrokerError):
    """An END_TRANSACTION (or its gRPC twin) that names no half message it may end."""


class PopError(BrokerError):
    """A POP, ack or change of invisible time that the POP service refuses."""


def from_store_error(error: StoreError, what: str = "the message") -> BrokerError:
    """The one translation of a store's refusal: too big or malformed is the message's fault,
    a full disk makes the broker unavailable for a while, anything else is the store's."""
    if isinstance(error, LimitExceededError):
        text = str(error) if what == "the message" else f"a message of {what}: {error}"
        return BrokerError(Kind.MESSAGE_ILLEGAL, text)
    if isinstance(error, StoreFullError):
        # No path: clients see that the disk is full, the broker's log says where.
        return BrokerError(
            Kind.SERVICE_UNAVAILABLE, "service not available now: the broker's disk is full"
        )
    return BrokerError(Kind.STORE_FAILED, f"store refused {what}: {_without_paths(error)}")


def _without_paths(error: StoreError) -> str:
    """The store's error as a client may read it: no server file path."""
    if isinstance(error, CorruptRecordError):
        return f"corrupt record at physical offset {error.offset}: {error.reason}"
    if isinstance(error, OSError) and error.filename is not None:
        return error.strerror or type(error).__name__
    return str(error)
