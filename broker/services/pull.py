"""Pulling: which queue a consumer may read, what its subscription lets through, and the read.

A front (remoting PULL_MESSAGE, POP, gRPC ReceiveMessage) asks these questions; how it answers
an empty read (a response code, a long-poll hold, a status) is its own business.
"""

from __future__ import annotations

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.topics import PERM_READ, TopicConfig, TopicManager
from pocketmq.store.javahash import java_string_hash

__all__ = ["PullService", "parse_tag_expression"]


def parse_tag_expression(expression: str | None) -> set[int] | None:
    """``"*"`` or empty -> None (everything); ``"A || B"`` -> the tags' hash codes."""
    if expression is None or expression.strip() in ("", "*"):
        return None
    return {java_string_hash(tag.strip()) for tag in expression.split("||") if tag.strip()}


class PullService:
    def __init__(
        self, *, topics: TopicManager, groups: GroupManager, clients: ClientRegistry
    ) -> None:
        self.topics = topics
        self.groups = groups
        self.clients = clients

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

    @staticmethod
    def tags_of_expression(expression: str | None, expression_type: str | None) -> set[int] | None:
        """The tag codes an expression a pull carries lets through (None: everything)."""
        if (expression_type or "TAG") != "TAG":
            raise BrokerError(
                Kind.BAD_SUBSCRIPTION, f"expression type {expression_type} is not supported"
            )
        return parse_tag_expression(expression)

    def tags_of_subscription(self, group: str, topic: str) -> set[int] | None:
        """The tag codes of the group's registered subscription of ``topic``."""
        registered = self.clients.group(group)
        subscription = registered.subscriptions.get(topic) if registered is not None else None
        if subscription is None:
            raise BrokerError(
                Kind.NO_SUBSCRIPTION,
                f"the consumer's subscription of {topic} does not exist; send a heartbeat first",
            )
        return parse_tag_expression(subscription.sub_string)
