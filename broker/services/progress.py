"""Consume progress: how far each consumer group is behind, computed in one place.

GET_CONSUME_STATS (mqadmin consumerProgress), GET_BROKER_CONSUME_STATS, the Prometheus metrics
and the dashboard all read ``ProgressService``, so they show the same numbers. The rules are
RocketMQ's (AdminBrokerProcessor.getConsumeStats, ConsumeStats.computeTotalDiff):

- per queue: ``broker_offset`` the queue's max offset (the next offset to be written);
  ``consumer_offset`` the group's committed offset, 0 when it committed none; ``lag`` =
  ``broker_offset - consumer_offset`` (RocketMQ's "diff"); ``inflight`` the messages POP lent to
  the group and not yet acknowledged (a POP commits its position when it lends, so these are not
  in ``lag``); ``pull_offset`` = ``consumer_offset + inflight``; ``last_timestamp`` the store
  time of the last consumed message (offset ``consumer_offset - 1``), 0 when there is none.
- which topics: the ones given, else every topic the group committed an offset for (RocketMQ's
  whichTopicByConsumer), kept only if subscribed when the group has live subscriptions.

Public interface (``ProgressService``, ``broker.progress``):
    ``group(group, topics=None)``      -> ``GroupProgress`` (queues sorted by topic and queue;
                                         ``lag``, ``inflight`` totals; ``consume_tps``)
    ``topics_of(group)``               the topics ``group()`` reports without ``topics``:
                                         ``subscribed(group, topics_of_offsets(group))``
    ``topics_of_offsets(group)``       the topics the group committed offsets in
    ``subscribed(group, topics)``      those of ``topics`` its live subscriptions name (all of
                                         them when it has none)
    ``groups_of_topic(topic)``         the groups consuming a topic (QUERY_TOPIC_CONSUME_BY_WHO)
    ``groups()``                       every group with offsets, subscriptions or a config
    ``queue_time(topic, queue_id, offset)``   the store time of one queue entry, or 0
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from pocketmq.broker.services.clients import ClientRegistry
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.pop import PopService
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.topics import TopicManager
from pocketmq.store.message_store import MessageStore

__all__ = ["GroupProgress", "ProgressService", "QueueProgress"]


@dataclass(frozen=True, slots=True)
class QueueProgress:
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    inflight: int
    last_timestamp: int  # epoch ms, 0 = nothing consumed

    @property
    def lag(self) -> int:
        return self.broker_offset - self.consumer_offset

    @property
    def pull_offset(self) -> int:
        return self.consumer_offset + self.inflight


@dataclass(frozen=True, slots=True)
class GroupProgress:
    group: str
    queues: list[QueueProgress] = field(default_factory=list)
    consume_tps: float = 0.0

    @property
    def lag(self) -> int:
        return sum(q.lag for q in self.queues)

    @property
    def inflight(self) -> int:
        return sum(q.inflight for q in self.queues)

    def topics(self) -> list[str]:
        return sorted({q.topic for q in self.queues})


class ProgressService:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicManager,
        offsets: OffsetManager,
        groups: GroupManager,
        clients: ClientRegistry,
        pop: PopService,
        stats: BrokerStats,
    ) -> None:
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.group_configs = groups
        self.clients = clients
        self.pop = pop
        self.stats = stats

    def queue_time(self, topic: str, queue_id: int, offset: int) -> int:
        """The store time of the message at ``offset`` of a queue, 0 when it is not there."""
        if offset < 0 or offset < self.store.min_offset(topic, queue_id):
            return 0
        queue = self.store.consume_queues.get(topic, queue_id)
        if queue is None:
            return 0
        entries = queue.get(offset, 1)
        if not entries:
            return 0
        return self.store.store_time_of(entries[0][0]) or 0

    def topics_of(self, group: str) -> list[str]:
        return self.subscribed(group, self.topics_of_offsets(group))

    def topics_of_offsets(self, group: str) -> list[str]:
        """The topics ``group`` committed an offset in (ConsumerOffsetManager's
        whichTopicByConsumer; QUERY_TOPICS_BY_CONSUMER)."""
        suffix = f"@{group}"
        return sorted(key[: -len(suffix)] for key in self.offsets.table if key.endswith(suffix))

    def subscribed(self, group: str, topics: list[str]) -> list[str]:
        """``topics`` without those the group does not subscribe, when it has live
        subscriptions (AdminBrokerProcessor.getTopicsForCollectingConsumeStats)."""
        registered = self.clients.group(group)
        if registered is None or not registered.subscriptions:
            return sorted(set(topics))
        return sorted(t for t in set(topics) if t in registered.subscriptions)

    def _inflight(self, group: str) -> Counter[tuple[str, int]]:
        counts: Counter[tuple[str, int]] = Counter()
        for g, topic, queue_id, _ in self.pop.in_flight:
            if g == group:
                counts[(topic, queue_id)] += 1
        return counts

    def group(self, group: str, topics: list[str] | None = None) -> GroupProgress:
        wanted = self.topics_of(group) if topics is None else topics
        inflight = self._inflight(group)
        queues: list[QueueProgress] = []
        tps = 0.0
        for topic in sorted(set(wanted)):
            config = self.topics.get(topic)
            if config is None:
                continue  # as RocketMQ: a topic without a config is left out
            committed = self.offsets.table.get(self.offsets.key(topic, group), {})
            for queue_id in range(config.read_queue_nums):
                broker_offset = max(self.store.max_offset(topic, queue_id), 0)
                consumer_offset = max(committed.get(queue_id, 0), 0)
                queues.append(
                    QueueProgress(
                        topic=topic,
                        queue_id=queue_id,
                        broker_offset=broker_offset,
                        consumer_offset=consumer_offset,
                        inflight=inflight.get((topic, queue_id), 0),
                        last_timestamp=self.queue_time(topic, queue_id, consumer_offset - 1),
                    )
                )
            tps += self.stats.group_get_tps(group, topic)
        return GroupProgress(group=group, queues=queues, consume_tps=tps)

    def groups_of_topic(self, topic: str) -> list[str]:
        """Groups with a live subscription to ``topic`` or an offset in it (RocketMQ's
        ConsumerManager.queryTopicConsumeByWho plus ConsumerOffsetManager.whichGroupByTopic)."""
        groups = {
            name
            for name, info in self.clients.consumer_groups.items()
            if topic in info.subscriptions
        }
        groups.update(self.offsets.groups_of(topic))
        return sorted(groups)

    def groups(self) -> list[str]:
        names = {key.split("@", 1)[1] for key in self.offsets.table if "@" in key}
        names.update(self.clients.consumer_groups)
        names.update(self.group_configs.groups)
        return sorted(names)
