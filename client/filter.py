"""Subscription expressions: tags (``"*"``, ``"A || B"``) or SQL92 over message properties
(RocketMQ's ``MessageSelector.byTag`` / ``bySql``); Java's ``String.hashCode`` is
``store.javahash``'s.

Tags: the broker filters a queue by the hash codes of the subscribed tags (``codeSet``), which
can collide, so the client filters again on the ``TAGS`` string (``tagsSet``), as RocketMQ's
``PullAPIWrapper.processPullResult`` does: with a non-empty tag set, a message is kept only if
its tag is in the set (a message without a tag is dropped).

SQL92: only the broker evaluates the expression (its answer is exact, no hash collisions), so
the client keeps every message it is given. The SDK does not parse SQL itself: a consumer asks
each broker with CHECK_CLIENT_CONFIG at start, as RocketMQ's ``checkClientInBroker`` does, so
the grammar and its error messages live in one place, the broker's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias, TypeVar

import msgspec

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import SubscriptionData, encode_json_body
from pocketmq.store.javahash import java_string_hash

from .connection import make_request
from .errors import ClientUsageError, error_for_code

__all__ = [
    "SQL92",
    "SUB_ALL",
    "TAG",
    "FilterExpression",
    "MessageSelector",
    "SqlExpression",
    "CheckClientRequestBody",
    "TagExpression",
    "check_client_config_request",
    "check_client_config_response",
    "filter_expression",
    "java_string_hash",
    "queue_index_for_key",
]

T = TypeVar("T")

SUB_ALL: Final = "*"
TAG: Final = "TAG"  # RocketMQ's ExpressionType names, as they go on the wire
SQL92: Final = "SQL92"
_TAG_SEPARATOR: Final = "||"


def queue_index_for_key(key: str, queue_count: int) -> int:
    """``SelectMessageQueueByHash``: ``abs(key.hashCode() % n)`` with Java's remainder."""
    if queue_count <= 0:
        raise ClientUsageError("no queue to select from")
    return abs(java_string_hash(key)) % queue_count


@dataclass(frozen=True)
class TagExpression:
    """A parsed TAG subscription. ``tags`` empty means every message."""

    expression: str
    tags: tuple[str, ...]
    expression_type: ClassVar[str] = TAG

    @classmethod
    def parse(cls, expression: str | None) -> TagExpression:
        """``FilterAPI.buildSubscriptionData``: empty or ``*`` = all; else tags split on
        ``||`` and trimmed. An expression without a single tag is an error."""
        if expression is None or not expression.strip() or expression.strip() == SUB_ALL:
            return cls(SUB_ALL, ())
        tags: list[str] = []
        for part in expression.split(_TAG_SEPARATOR):
            tag = part.strip()
            if tag and tag not in tags:
                tags.append(tag)
        if not tags:
            raise ClientUsageError(f"tag expression holds no tag: {expression!r}")
        return cls(expression, tuple(tags))

    @property
    def matches_all(self) -> bool:
        return not self.tags

    @property
    def codes(self) -> tuple[int, ...]:
        return tuple(java_string_hash(t) for t in self.tags)

    def matches(self, tag: str | None) -> bool:
        """Client-side re-check of one message's ``TAGS``."""
        if not self.tags:
            return True
        return tag is not None and tag in self.tags

    def filter(self, messages: Iterable[T], tag_of: Callable[[T], str | None]) -> list[T]:
        if not self.tags:
            return list(messages)
        return [m for m in messages if self.matches(tag_of(m))]

    def subscription_data(self, topic: str, *, sub_version: int | None = None) -> SubscriptionData:
        """The ``SubscriptionData`` a heartbeat carries for this expression."""
        return SubscriptionData(
            topic=topic,
            sub_string=self.expression if self.tags else SUB_ALL,
            tags_set=list(self.tags),
            code_set=list(self.codes),
            sub_version=int(time.time() * 1000) if sub_version is None else sub_version,
            expression_type=TAG,
        )


@dataclass(frozen=True)
class SqlExpression:
    """A SQL92 subscription (``"a > 5 AND region = 'eu'"``), evaluated by the broker alone."""

    expression: str
    expression_type: ClassVar[str] = SQL92

    @classmethod
    def parse(cls, expression: str | None) -> SqlExpression:
        """``FilterAPI.build``: a SQL expression must not be empty (RocketMQ throws
        "Expression can't be null!"); its syntax is the broker's to judge."""
        if expression is None or not expression.strip():
            raise ClientUsageError("SQL92 expression must not be empty")
        return cls(expression.strip())

    @property
    def matches_all(self) -> bool:
        return False

    def filter(self, messages: Iterable[T], tag_of: Callable[[T], str | None]) -> list[T]:
        """Everything: the broker already let only matching messages through."""
        return list(messages)

    def subscription_data(self, topic: str, *, sub_version: int | None = None) -> SubscriptionData:
        """The ``SubscriptionData`` a heartbeat (and CHECK_CLIENT_CONFIG) carries: no tags,
        no codes, the expression as ``subString``."""
        return SubscriptionData(
            topic=topic,
            sub_string=self.expression,
            sub_version=int(time.time() * 1000) if sub_version is None else sub_version,
            expression_type=SQL92,
        )


class CheckClientRequestBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """RocketMQ's ``CheckClientRequestBody``: CHECK_CLIENT_CONFIG (46)'s JSON body."""

    client_id: str
    group: str
    subscription_data: SubscriptionData


def check_client_config_request(
    client_id: str, group: str, subscription: SubscriptionData
) -> RemotingCommand:
    """CHECK_CLIENT_CONFIG for one subscription: SUCCESS when the broker can filter by it."""
    body = CheckClientRequestBody(client_id=client_id, group=group, subscription_data=subscription)
    return make_request(RequestCode.CHECK_CLIENT_CONFIG, body=encode_json_body(body))


def check_client_config_response(
    response: RemotingCommand, addr: str, topic: str, expression: FilterExpression
) -> None:
    """Raise the broker's refusal (``SubscriptionError`` for SUBSCRIPTION_PARSE_FAILED, with
    the parser's message), naming the broker, the topic and the expression."""
    if response.code != ResponseCode.SUCCESS:
        raise error_for_code(
            response.code,
            f"broker {addr} refused the {expression.expression_type} subscription of {topic} "
            f"({expression.expression!r}): {response.remark}",
        )


FilterExpression: TypeAlias = TagExpression | SqlExpression


class MessageSelector:
    """RocketMQ's ``MessageSelector``: ``subscribe(topic, MessageSelector.by_sql("a > 5"))``."""

    @staticmethod
    def by_tag(expression: str | None = SUB_ALL) -> TagExpression:
        return TagExpression.parse(expression)

    @staticmethod
    def by_sql(expression: str) -> SqlExpression:
        return SqlExpression.parse(expression)


def filter_expression(
    expression: str | FilterExpression | None = SUB_ALL,
    expression_type: str | None = TAG,
    *,
    sql: str | None = None,
) -> FilterExpression:
    """What a ``subscribe``/``pull`` argument means: a parsed expression as is, ``sql=`` (a
    SQL92 expression), or ``expression`` read as ``expression_type`` (TAG or SQL92, any case,
    as the broker reads it; empty means TAG, as ``ExpressionType.isTagType``)."""
    if sql is not None:
        if isinstance(expression, TagExpression | SqlExpression) or (
            expression is not None and expression.strip() not in ("", SUB_ALL)
        ):
            raise ClientUsageError("give either a tag expression or sql=, not both")
        return SqlExpression.parse(sql)
    if isinstance(expression, TagExpression | SqlExpression):
        return expression
    kind = (expression_type or TAG).strip().upper() or TAG
    if kind == TAG:
        return TagExpression.parse(expression)
    if kind == SQL92:
        return SqlExpression.parse(expression)
    raise ClientUsageError(f"expression type must be TAG or SQL92, not {expression_type!r}")
