"""Pulling: which queue a consumer may read, what its subscription lets through, and the read.

A front (remoting PULL_MESSAGE, POP, gRPC ReceiveMessage) asks these questions; how it answers
an empty read (a response code, a long-poll hold, a status) is its own business.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.sql_filter import SQL92, TAG, SqlExpression, compile_sql
from pocketmq.broker.services.topics import PERM_READ, TopicConfig, TopicManager
from pocketmq.store.javahash import java_string_hash
from pocketmq.store.message_store import GetResult, GetStatus

__all__ = ["EVERYTHING", "MessageFilter", "PullService", "parse_tag_expression"]


def parse_tag_expression(expression: str | None) -> set[int] | None:
    """``"*"`` or empty -> None (everything); ``"A || B"`` -> the tags' hash codes."""
    if expression is None or expression.strip() in ("", "*"):
        return None
    return {java_string_hash(tag.strip()) for tag in expression.split("||") if tag.strip()}


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """What a subscription lets through: tag codes, checked on the consume queue by the store,
    or a compiled SQL92 expression, checked on each read record's properties (RocketMQ's
    ``ExpressionMessageFilter``; the optional bit-map prefilter is not built)."""

    tags: set[int] | None = None
    sql: SqlExpression | None = None

    def apply(self, result: GetResult) -> GetResult:
        """``result`` without the records the SQL expression refuses; the next offset stays
        past them, and an all-refused read is NO_MATCHED_MESSAGE, as a tag miss is."""
        sql = self.sql
        if sql is None or not result.messages:
            return result
        kept = [entry for entry in result.messages if sql.matches_record(entry[2])]
        if len(kept) == len(result.messages):
            return result
        status = GetStatus.FOUND if kept else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, result.next_offset, result.min_offset, result.max_offset, kept)


EVERYTHING = MessageFilter()


def unsupported_type_message(expression_type: str) -> str:
    """RocketMQ's remark when ``enablePropertyFilter`` is off (PullMessageProcessor,
    ClientManageProcessor.checkClientConfig)."""
    return f"The broker does not support consumer to filter message by {expression_type}"


class PullService:
    def __init__(
        self,
        *,
        topics: TopicManager,
        groups: GroupManager,
        clients: ClientRegistry,
        property_filter: bool = True,
    ) -> None:
        self.topics = topics
        self.groups = groups
        self.clients = clients
        # RocketMQ's enablePropertyFilter (false there by default; on here, see BrokerConfig).
        self.property_filter = property_filter

    def filter_of(self, expression: str | None, expression_type: str | None) -> MessageFilter:
        """The filter of a subscription expression; SUBSCRIPTION_PARSE_FAILED for one that does
        not compile, SYSTEM_ERROR (RocketMQ's code) when property filters are off."""
        kind = (expression_type or TAG).upper()
        if kind == TAG:
            tags = parse_tag_expression(expression)
            return EVERYTHING if tags is None else MessageFilter(tags=tags)
        if kind != SQL92:
            raise BrokerError(
                Kind.BAD_SUBSCRIPTION, f"expression type {expression_type} is not supported"
            )
        if not self.property_filter:
            raise BrokerError(Kind.BAD_REQUEST, unsupported_type_message(SQL92))
        return MessageFilter(sql=compile_sql(expression))

    def filter_of_subscription(self, group: str, topic: str) -> MessageFilter:
        """The filter of the group's subscription of ``topic`` registered by HEART_BEAT."""
        registered = self.clients.group(group)
        subscription = registered.subscriptions.get(topic) if registered is not None else None
        if subscription is None:
            raise BrokerError(
                Kind.NO_SUBSCRIPTION,
                f"the consumer's subscription of {topic} does not exist; send a heartbeat first",
            )
        return self.filter_of(subscription.sub_string, subscription.expression_type)

    def readable_queue(self, group: str, topic: str, queue_id: int) -> TopicConfig:
        """The topic's config when ``group`` may read its queue ``queue_id``."""
        if self.groups.find_or_create(group) is None:
            raise BrokerError(Kind.GROUP_NOT_FOUND, f"subscription group [{group}] does not exist")
        config = self.topics.get(topic)
        if config is None:
            raise BrokerError(
                Kind.TOPIC_NOT_FOUND, f"topic[{topic}] not exist, apply first please!"
            )
        if not config.perm & PERM_READ:
            raise BrokerError(Kind.FORBIDDEN, f"the topic[{topic}] pulling message is forbidden")
        if not 0 <= queue_id < config.read_queue_nums:
            raise BrokerError(
                Kind.ILLEGAL_QUEUE,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]",
            )
        return config
