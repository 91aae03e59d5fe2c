"""Retry and dead-letter queues: a message given back for a later retry, or to ``%DLQ%``.

RocketMQ's rules (AbstractSendMessageProcessor.consumerSendMsgBack): the copy goes to
``%RETRY%<group>`` with delay level ``3 + reconsumeTimes`` (or the level the consumer asked for)
and reconsume times + 1; once reconsume times reach the maximum (16 by default, the group's
``retryMaxTimes`` unless the request says otherwise) or the level asked for is negative, it goes
to ``%DLQ%<group>`` instead, and the message becomes poisoned (state 20) for that group.

The state's reason says which of the two happened: ``dead-lettered to %DLQ%<group> by the
consumer: <remark>`` when the consumer asked (a negative level; ``PushConsumer.poison`` and
``SimpleConsumer.poison`` put their reason in the request's remark, cut to
``MAX_REMARK_CHARS``), ``dead-lettered to %DLQ%<group>: consumption failed N times (retry limit
M)`` when the retries ran out. POP and the gRPC front dead-letter through ``dead_letter`` too.
"""

from __future__ import annotations

from collections.abc import Callable

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.topics import TopicManager
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import MessageRecord
from pocketmq.store.state import MessageState

__all__ = ["MAX_REMARK_CHARS", "RetryService", "dlq_topic", "retry_topic"]

# A consumer's reason for poisoning a message is stored in the state record: a client may not
# make that record (kept for as long as the message) arbitrarily large.
MAX_REMARK_CHARS = 512


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


def dlq_topic(group: str) -> str:
    return f"%DLQ%{group}"


def _capped(remark: str | None) -> str:
    if not remark:
        return ""
    if len(remark) > MAX_REMARK_CHARS:
        return remark[:MAX_REMARK_CHARS] + " [cut]"
    return remark


def _times(count: int) -> str:
    return "1 time" if count == 1 else f"{count} times"


class RetryService:
    def __init__(
        self,
        store: MessageStore,
        *,
        topics: TopicManager,
        groups: GroupManager,
        put: Callable[[PutMessage], PutResult],
        put_logged: Callable[[PutMessage], PutResult | None],
    ) -> None:
        self.store = store
        self.topics = topics
        self.groups = groups
        self.put = put  # the writer's put_internal
        self.put_logged = put_logged

    def send_back(
        self,
        offset: int,
        group_name: str,
        *,
        delay_level: int,
        origin_msg_id: str | None = None,
        max_reconsume_times: int | None = None,
        remark: str | None = None,
    ) -> None:
        """A consumer gives the message at ``offset`` back: a retry copy, or the DLQ."""
        group = self.groups.find_or_create(group_name)
        if group is None:
            raise BrokerError(Kind.GROUP_NOT_FOUND, f"subscription group not exist, {group_name}")
        try:
            record = self.store.read(offset)
        except (OffsetOutOfRangeError, CorruptRecordError) as error:
            raise BrokerError(
                Kind.STORE_FAILED, f"look message by offset failed, {offset}: {error}"
            ) from None
        properties = dict(record.properties)
        properties.setdefault("RETRY_TOPIC", record.topic)
        properties["ORIGIN_MESSAGE_ID"] = (
            origin_msg_id or properties.get("ORIGIN_MESSAGE_ID") or properties.get("UNIQ_KEY") or ""
        )
        max_times = (
            max_reconsume_times if max_reconsume_times is not None else group.retry_max_times
        )
        if max_times < 0:
            max_times = group.retry_max_times
        reconsume = record.reconsume_times
        if delay_level < 0:  # the consumer asks for the DLQ (PushConsumer.poison ...)
            reason = _capped(remark)
            if reason:
                self.dead_letter(record, properties, group_name, by="the consumer", reason=reason)
            else:
                by = f"the consumer (delay level {delay_level})"
                self.dead_letter(record, properties, group_name, by=by)
            return
        if reconsume >= max_times:
            failed = reconsume + 1  # the first delivery and every retry
            reason = f"consumption failed {_times(failed)} (retry limit {max_times})"
            self.dead_letter(record, properties, group_name, reason=reason)
            return
        level = delay_level or 3 + reconsume
        properties["DELAY"] = str(level)
        properties["RECONSUME_TIME"] = str(reconsume + 1)
        properties.pop("WAIT", None)
        topic = retry_topic(group_name)
        self.topics.create_on_send(topic, 1)
        copy = copy_of(
            record, topic=topic, queue_id=0, properties=properties, reconsume_times=reconsume + 1
        )
        if self.put_logged(copy) is None:
            raise BrokerError(Kind.STORE_FAILED, "the retry message could not be stored")

    def retry_or_dlq(
        self,
        topic: str,
        properties: dict[str, str],
        queue_id: int,
        *,
        reconsume_times: int,
        max_reconsume_times: int | None,
    ) -> tuple[str, int]:
        """Where a consumer's own send to ``%RETRY%<group>`` goes (its fallback when
        CONSUMER_SEND_MSG_BACK failed): past the maximum reconsume times, to the group's DLQ
        (SendMessageProcessor)."""
        group_name = topic[len("%RETRY%") :]
        group = self.groups.find_or_create(group_name)
        max_times = max_reconsume_times
        if max_times is None and group is not None:
            max_times = group.retry_max_times
        if max_times is not None and reconsume_times > max_times:
            properties.pop("DELAY", None)
            dead = dlq_topic(group_name)
            self.topics.create_on_send(dead, 1)
            return dead, 0
        return topic, queue_id

    def dead_letter(
        self,
        record: MessageRecord,
        properties: dict[str, str],
        group: str,
        *,
        by: str = "",
        reason: str = "",
    ) -> None:
        """Write ``record`` to the group's DLQ and mark it (and its first delivery) poisoned.

        The state's reason is ``dead-lettered to %DLQ%<group>[ by <by>][: <reason>]``: ``by``
        names who asked when it was not the broker's own rule, ``reason`` says why.
        """
        topic = dlq_topic(group)
        text = f"dead-lettered to {topic}"
        if by:
            text += f" by {by}"
        if reason:
            text += f": {reason}"
        self.topics.create_on_send(topic, 1)
        properties = dict(properties)
        for name in ("DELAY", "WAIT"):
            properties.pop(name, None)
        properties["RECONSUME_TIME"] = str(record.reconsume_times + 1)
        properties.setdefault("ORIGIN_MESSAGE_ID", properties.get("UNIQ_KEY", ""))
        self.put(
            copy_of(
                record,
                topic=topic,
                queue_id=0,
                properties=properties,
                reconsume_times=record.reconsume_times + 1,
            )
        )
        # Poisoned for this group only: other groups that consume the topic still get it.
        self.store.set_state(record.physical_offset, MessageState.POISONED, text, group=group)
        original = self.first_delivery(properties)
        if original is not None and original != record.physical_offset:
            self.store.set_state(original, MessageState.POISONED, text, group=group)

    def first_delivery(self, properties: dict[str, str]) -> int | None:
        """The commitlog offset of the message as first sent, found by its unique key."""
        topic, key = properties.get("RETRY_TOPIC"), properties.get("ORIGIN_MESSAGE_ID")
        if not topic or not key:
            return None
        for record in self.store.query_by_key(topic, key, max_results=4):
            if record.unique_key == key and not record.topic.startswith("%"):
                return record.physical_offset
        return None
