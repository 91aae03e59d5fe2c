"""Request-reply (RocketMQ 4.6+): the broker's half of ``producer.request()``.

A requester sends an ordinary message carrying ``CORRELATION_ID``, ``REPLY_TO_CLIENT`` (its
client id) and ``TTL``; the broker stores it with ``CLUSTER`` (``SendService.put``). The
consumer answers with a message to ``<cluster>_REPLY_TOPIC`` (``MSG_TYPE=reply``) sent as
SEND_REPLY_MESSAGE(_V2); the broker pushes it to the requester's connection (found among the
producers by client id) as PUSH_REPLY_MESSAGE_TO_CLIENT and also stores it (RocketMQ's
``storeReplyMessageEnable``, on by default). The push itself is the remoting front's work
(``broker/handlers/reply.py``): this service knows the names, the topic and who is connected.
"""

from __future__ import annotations

import logging
from typing import Final

from pocketmq.broker.services.clients import Channel, ClientRegistry
from pocketmq.broker.services.topics import PERM_RW, TopicConfig, TopicManager
from pocketmq.store.topics import REPLY_TOPIC_POSTFIX, reply_topic

__all__ = [
    "MESSAGE_TYPE_REPLY",
    "PROPERTY_CORRELATION_ID",
    "PROPERTY_MESSAGE_TYPE",
    "PROPERTY_MESSAGE_TTL",
    "PROPERTY_PUSH_REPLY_TIME",
    "PROPERTY_REPLY_TO_CLIENT",
    "REPLY_TOPIC_POSTFIX",
    "ReplyService",
    "reply_topic",
]

log = logging.getLogger("pocketmq.broker")

# MessageConst / MixAll names, as Java clients write and read them.
PROPERTY_CORRELATION_ID: Final = "CORRELATION_ID"
PROPERTY_REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
PROPERTY_MESSAGE_TTL: Final = "TTL"
PROPERTY_PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
PROPERTY_MESSAGE_TYPE: Final = "MSG_TYPE"
MESSAGE_TYPE_REPLY: Final = "reply"


class ReplyService:
    def __init__(
        self,
        *,
        cluster: str,
        topics: TopicManager,
        clients: ClientRegistry,
        store_replies: bool = True,
    ) -> None:
        self.topic = reply_topic(cluster)
        self.topics = topics
        self.clients = clients
        # storeReplyMessageEnable: a reply is also kept (queryable, consumable) after the push
        self.store_replies = store_replies

    def ensure_topic(self) -> TopicConfig:
        """The cluster's reply topic, created at start as TopicConfigManager does: one read and
        one write queue, read-write. Kept when it exists (an operator may have changed it)."""
        config = self.topics.get(self.topic)
        if config is None:
            config = self.topics.create(
                self.topic, read_queue_nums=1, write_queue_nums=1, perm=PERM_RW
            )
        return config

    def requester(self, client_id: str) -> Channel | None:
        """The open connection of the producer ``client_id`` (ProducerManager.findChannel):
        the requester registered it with its heartbeat."""
        for producers in self.clients.producer_groups.values():
            info = producers.get(client_id)
            if info is not None and not info.connection.closed:
                return info.connection
        return None
