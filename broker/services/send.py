"""Sending: the checks every front makes before a message is stored, and the store itself.

A front (remoting SEND_MESSAGE/V2/BATCH, gRPC SendMessage) decodes its request into
``PutMessage``s and asks this service; every refusal is a ``BrokerError`` whose kind the front
translates. What differs between fronts stays in the front: remoting creates a missing topic
on send when the broker allows it (``autoCreateTopicEnable``), gRPC checks the topic's 5.x
message type and never creates one (RocketMQ's proxy), and each picks its queue its own way.
"""

from __future__ import annotations

import copy
import random
from time import perf_counter

from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.errors import BrokerError, Kind, from_store_error
from pocketmq.broker.services.faults import FaultKind, FaultPlan
from pocketmq.broker.services.lite import is_lmq, lmq_name, validate_lite_topic
from pocketmq.broker.services.retention import DiskGuard, disk_usage_of
from pocketmq.broker.services.retry import RetryService
from pocketmq.broker.services.stats import BrokerStats
from pocketmq.broker.services.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    PERM_WRITE,
    TopicConfig,
    TopicManager,
    topic_message_type,
    validate_topic_name,
)
from pocketmq.broker.services.writer import MessageWriter
from pocketmq.store.errors import StoreError, StoreFullError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult
from pocketmq.store.record import encode_properties

__all__ = ["PROPERTY_CLUSTER", "SendService"]

PROPERTY_CLUSTER = (
    "CLUSTER"  # MessageConst.PROPERTY_CLUSTER: the cluster of the broker that stored it
)

# Topic names already found valid and open to clients (pure functions of the name, so checked
# once per name instead of once per message).
_SENDABLE_NAMES_MAX = 10_000


class SendService:
    def __init__(
        self,
        store: MessageStore,
        *,
        topics: TopicManager,
        writer: MessageWriter,
        retry: RetryService,
        config: BrokerConfig,
        disk: DiskGuard | None = None,
        stats: BrokerStats | None = None,
        faults: FaultPlan | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.store = store
        # Planned send faults: the fronts test ``faults.sends`` (an empty list) before a put.
        self.faults = faults or FaultPlan(now_ms=lambda: 0)
        # The random queue of a send to queue -1 (seeded for a repeatable run).
        self._randrange = (rng or random.Random()).randrange
        # messages and bytes in per topic, the put latency: counted here for every front
        self.stats = stats or BrokerStats(now_ms=lambda: 0)
        self.topics = topics
        self.writer = writer
        self.retry = retry
        # read at each send: the broker's permission may change while it runs
        self.config = config
        self._sendable_names: set[str] = set()
        # Refuses writes while the disk is (nearly) full; retention measures it each pass.
        self.disk = disk or DiskGuard(
            store,
            disk_usage_of(config.data_dir) if config.data_dir is not None else (lambda: None),
            warning_ratio=min(max(config.disk_space_warning_level_ratio, 35), 90),
        )

    # -- checks -----------------------------------------------------------------------------

    def check_topic(self, topic: str) -> None:
        """A topic name a client may send to, on a broker that takes writes."""
        if topic not in self._sendable_names:
            problem = validate_topic_name(topic)
            if problem:
                raise BrokerError(Kind.ILLEGAL_TOPIC, problem)
            if topic in NOT_ALLOWED_SEND_TOPICS:
                raise BrokerError(Kind.FORBIDDEN, f"sending message to topic[{topic}] is forbidden")
            if len(self._sendable_names) >= _SENDABLE_NAMES_MAX:
                self._sendable_names.clear()
            self._sendable_names.add(topic)
        if not self.config.broker_permission & PERM_WRITE:
            raise BrokerError(
                Kind.FORBIDDEN, f"the broker[{self.config.address}] sending message is forbidden"
            )

    def check_writable(self, config: TopicConfig) -> None:
        if not config.perm & PERM_WRITE:
            raise BrokerError(
                Kind.FORBIDDEN, f"the topic[{config.topic_name}] sending is forbidden"
            )

    def topic_for_send(self, topic: str, default_queue_nums: int | None) -> TopicConfig:
        """The topic's config, created on this send when the broker auto-creates topics."""
        self.check_topic(topic)
        config = self.topics.create_on_send(topic, default_queue_nums)
        if config is None:
            raise BrokerError(
                Kind.TOPIC_NOT_FOUND,
                f"topic[{topic}] not exist, apply first please! (auto-create is off)",
            )
        self.check_writable(config)
        return config

    def queue_of(self, config: TopicConfig, queue_id: int) -> int:
        """The queue asked for, or a random one for -1."""
        if queue_id < 0:
            return self._randrange(config.write_queue_nums)
        if queue_id >= config.write_queue_nums:
            raise BrokerError(
                Kind.ILLEGAL_QUEUE,
                f"request queueId[{queue_id}] is illegal, topic {config.topic_name} has "
                f"{config.write_queue_nums} write queues",
            )
        return queue_id

    def lite_queue(self, parent: TopicConfig, lite: str) -> str:
        """The LMQ that a message for lite topic ``lite`` of the LITE topic ``parent`` goes
        to, made at its first message (SendMessageProcessor turns PROPERTY_LITE_TOPIC into the
        LMQ name for every front). A new LMQ past ``max_lmq_consume_queue_num`` is refused, as
        RocketMQ's HandleLmqQuota refuses it (LMQ_QUOTA_EXCEEDED): the count is the broker's,
        not the parent's; lite topics that already exist still take messages."""
        problem = validate_lite_topic(parent.topic_name, lite)
        if problem:
            raise BrokerError(Kind.ILLEGAL_LITE_TOPIC, problem)
        name = lmq_name(parent.topic_name, lite)
        if self.topics.get(name) is None:
            quota = self.config.max_lmq_consume_queue_num
            held = sum(1 for topic in self.topics.topics if is_lmq(topic))
            if held >= quota:
                raise BrokerError(
                    Kind.LITE_TOPIC_QUOTA_EXCEEDED,
                    f"lite topic {lite!r} of {parent.topic_name} would be LMQ {held + 1} of "
                    f"this broker, over max_lmq_consume_queue_num {quota}",
                )
            self.topics.create(name, read_queue_nums=1, write_queue_nums=1)
        return name

    @staticmethod
    def is_lite_parent(config: TopicConfig) -> bool:
        return topic_message_type(config) == "LITE"

    # -- storing ----------------------------------------------------------------------------

    def put(self, message: PutMessage, properties: dict[str, str]) -> PutResult:
        """Store one sent message with its delay, timer or transaction, marked with the
        broker's cluster (SendMessageProcessor puts PROPERTY_CLUSTER on every single message:
        a consumer answering a request reads it to address ``<cluster>_REPLY_TOPIC``)."""
        cluster = self.config.cluster_name
        if properties.get(PROPERTY_CLUSTER) != cluster:
            text = message.properties_text
            if PROPERTY_CLUSTER in properties or text is None:
                properties[PROPERTY_CLUSTER] = cluster
                text = encode_properties(properties)
            else:
                properties[PROPERTY_CLUSTER] = cluster
                # appended to the text as sent (5.x clients leave out the last separator)
                if text and text[-1] != "\x02":
                    text += "\x02"
                text = f"{text}{PROPERTY_CLUSTER}\x01{cluster}\x02"
            message.properties = properties
            message.properties_text = text
        return self.put_as_is(message, properties)

    def faulted_put(
        self, message: PutMessage, properties: dict[str, str]
    ) -> tuple[PutResult | None, FaultKind | None]:
        """``put`` while send faults are planned (the front tested ``faults.sends``): the
        result and the fault that applies, for the front to answer in its terms. SYSTEM_BUSY
        stores nothing (result None); REDELIVER stores a second copy (answered as usual);
        FLUSH_DISK_TIMEOUT and SLAVE_NOT_AVAILABLE store the message, answered with that code."""
        fault = self.faults.take_send(message.topic)
        if fault is FaultKind.SYSTEM_BUSY:
            return None, fault
        if fault is FaultKind.REDELIVER:
            twin = copy.copy(message)
            twin_properties = dict(properties)
            result = self.put(message, properties)
            self.put(twin, twin_properties)
            return result, None
        return self.put(message, properties), fault

    def faulted_put_batch(
        self, messages: list[PutMessage]
    ) -> tuple[list[PutResult] | None, FaultKind | None]:
        """``put_batch`` while send faults are planned: a batch is one send, as for RocketMQ's
        producers (``faulted_put``'s rules; REDELIVER stores the whole batch twice)."""
        fault = self.faults.take_send(messages[0].topic)
        if fault is FaultKind.SYSTEM_BUSY:
            return None, fault
        if fault is FaultKind.REDELIVER:
            twins = [copy.copy(message) for message in messages]
            results = self.put_batch(messages)
            self.put_batch(twins)
            return results, None
        return self.put_batch(messages), fault

    def put_as_is(self, message: PutMessage, properties: dict[str, str]) -> PutResult:
        """Store ``message`` with its properties untouched (a reply, which RocketMQ's
        ReplyMessageProcessor stores as sent), with its delay, timer or transaction."""
        topic, started = message.topic, perf_counter()
        try:
            result = self._put_one(message, properties)
        except BrokerError:
            self.stats.put_failed += 1
            raise
        self.stats.sent_one(topic, result.total_size, (perf_counter() - started) * 1000.0)
        return result

    def _put_one(self, message: PutMessage, properties: dict[str, str]) -> PutResult:
        try:
            return self.writer.put(message, properties)
        except StoreFullError as error:
            self._full(error)  # raises, or returns when the disk has room again
        except StoreError as error:
            raise from_store_error(error) from None
        except OSError as error:  # the disk's own error, not the store's: no path to clients
            raise self.disk.write_failed(error) from None
        try:
            return self.writer.put(message, properties)
        except StoreFullError as error:
            raise self.disk.write_failed(error) from None

    def put_batch(self, messages: list[PutMessage]) -> list[PutResult]:
        """Store a batch whole or not at all; no delay, timer or transaction applies to a
        batch's messages (RocketMQ's MessageBatch). Its messages share one topic and queue, but
        for lite messages, each in its lite topic's LMQ."""
        started = perf_counter()
        try:
            results = self._put_many(messages)
        except BrokerError:
            self.stats.put_failed += 1
            raise
        ms = (perf_counter() - started) * 1000.0
        topic = messages[0].topic
        if all(m.topic == topic for m in messages):
            self.stats.sent(topic, len(results), sum(r.total_size for r in results), ms)
        else:  # lite messages, each counted in its own lite topic
            for message, result in zip(messages, results, strict=True):
                self.stats.sent(message.topic, 1, result.total_size, ms)
        return results

    def _put_many(self, messages: list[PutMessage]) -> list[PutResult]:
        try:
            results = self.store.put_many(messages)
        except StoreFullError as error:
            self._full(error)
            try:
                results = self.store.put_many(messages)
            except StoreFullError as again:
                raise self.disk.write_failed(again) from None
        except StoreError as error:
            raise from_store_error(error, "the batch") from None
        except OSError as error:
            raise self.disk.write_failed(error) from None
        for topic, queue_id in dict.fromkeys((m.topic, m.queue_id) for m in messages):
            self.writer.arrived(topic, queue_id)  # wakes what waits on each queue written
        return results

    def _full(self, error: StoreFullError) -> None:
        """A write refused for a full disk: raise SERVICE_NOT_AVAILABLE, unless the guard, which
        measures again at most once a second, finds room now (then the caller tries again)."""
        if not self.disk.refusing:
            raise self.disk.write_failed(error) from None  # an append met ENOSPC
        if not self.disk.recheck():
            raise self.disk.refusal() from None

    def check_batch(self, topic: str, size: int) -> None:
        """A batch of ``size`` bytes may be sent to ``topic`` (before it is decoded)."""
        if topic.startswith("%RETRY%"):
            raise BrokerError(Kind.MESSAGE_ILLEGAL, "batch request does not support retry group")
        if size > self.config.batch_size_max:
            raise BrokerError(
                Kind.MESSAGE_ILLEGAL,
                f"batch of {size} bytes is over batch_size_max {self.config.batch_size_max}",
            )
