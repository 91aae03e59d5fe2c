"""Looking messages up for people and tools: one message with its state and place, a group's
dead letters and why they died, an admin's delete, and resending dead letters.

Every front that offers these (remoting's POCKETMQ_MESSAGE_INFO and POCKETMQ_DLQ, the HTTP API)
asks this service and translates its answers and ``BrokerError`` refusals.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.services.retry import RetryService, dlq_topic
from pocketmq.broker.services.topics import TopicManager
from pocketmq.ids import offset_msg_id_from_packed
from pocketmq.store.errors import CorruptRecordError, OffsetOutOfRangeError, StoreError
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult, copy_of
from pocketmq.store.record import MessageRecord
from pocketmq.store.state import MessageState

__all__ = ["NOT_IN_DLQ", "MessageQueries"]

NOT_IN_DLQ = "not found in the dead-letter queue"
MATCHES_MAX = 32  # messages one key may name


class MessageQueries:
    def __init__(
        self,
        store: MessageStore,
        *,
        topics: TopicManager,
        retry: RetryService,
        put: Callable[[PutMessage], PutResult],
        offset_msg_id: Callable[[int], str],
    ) -> None:
        self.store = store
        self.topics = topics
        self.retry = retry
        self.put = put  # the writer's put_internal
        self.offset_msg_id = offset_msg_id

    def view(self, record: MessageRecord) -> dict[str, Any]:
        """A message as tools show it: IDs, place, state (and for whom, and why), properties,
        times, hosts and the body as text."""
        change = self.store.state_change_of(record.physical_offset)
        state = change.state if change else MessageState.AVAILABLE
        return {
            "msg_id": record.unique_key,
            "offset_msg_id": offset_msg_id_from_packed(
                record.store_host.address, record.store_host.port, record.physical_offset
            ),
            "topic": record.topic,
            "queue_id": record.queue_id,
            "queue_offset": record.queue_offset,
            "commitlog_offset": record.physical_offset,
            "size": record.total_size,
            "state": state.label,
            "state_code": int(state),
            "state_reason": change.reason if change else "",
            "state_group": change.group if change else "",  # "": for every consumer group
            "reconsume_times": record.reconsume_times,
            "tags": record.tags,
            "keys": record.keys,
            "properties": record.properties,
            "born_timestamp": record.born_timestamp,
            "store_timestamp": record.store_timestamp,
            "born_host": str(record.born_host),
            "store_host": str(record.store_host),
            "body_size": len(record.body),
            "body": record.body.decode("utf-8", "replace"),
        }

    def find(
        self, *, offset: int | None = None, topic: str | None = None, key: str | None = None
    ) -> list[MessageRecord]:
        """The message at a commitlog offset, or up to 32 messages of ``topic`` whose unique
        key or a key is ``key``, newest first."""
        try:
            if offset is not None:
                records = [self.store.read(offset)]
            elif topic is not None and key is not None:
                records = self.store.query_by_key(topic, key, max_results=MATCHES_MAX)
            else:
                raise BrokerError(Kind.INVALID_PARAMETER, "give offset, or topic and key")
        except (ValueError, OffsetOutOfRangeError, CorruptRecordError) as error:
            raise BrokerError(Kind.NOT_FOUND, f"no message there: {error}") from None
        if not records:
            raise BrokerError(Kind.NOT_FOUND, "no message with that key")
        return records

    def delete(self, records: Iterable[MessageRecord]) -> None:
        """An admin's delete: each message stays stored (append-only) but is never served
        again."""
        for record in records:
            self.store.set_state(
                record.physical_offset, MessageState.MARKED_FOR_DELETION, "deleted by an admin"
            )

    # -- dead letters ------------------------------------------------------------------------

    def dead_letter_records(self, group: str) -> list[MessageRecord]:
        if not group:
            raise BrokerError(Kind.INVALID_PARAMETER, "a consumer group is needed")
        topic = dlq_topic(group)
        if self.topics.get(topic) is None:
            raise BrokerError(Kind.TOPIC_NOT_FOUND, f"group {group} has no dead-letter queue")
        result: list[MessageRecord] = []
        offset = self.store.min_offset(topic, 0)
        while True:
            got = self.store.get_messages(topic, 0, offset, 64, only_available=False)
            for _, physical, _ in got.messages:
                result.append(self.store.read(physical))
            if not got.messages:
                return result
            offset = got.next_offset

    def dead_letters(self, group: str) -> list[dict[str, Any]]:
        """The group's DLQ, each message with ``dead_letter_reason``: the state reason of the
        message as first sent (a DLQ copy itself is available, so that the group's DLQ
        consumers get it)."""
        return [
            {**self.view(record), "dead_letter_reason": self._why_dead(record)}
            for record in self.dead_letter_records(group)
        ]

    def _why_dead(self, record: MessageRecord) -> str:
        original = self.retry.first_delivery(record.properties)
        change = self.store.state_change_of(original) if original is not None else None
        return change.reason if change is not None else ""

    def resend_dead_letters(self, group: str, ids: set[str]) -> list[dict[str, Any]]:
        """Write dead letters back to their original topic (all, or those whose unique key or
        ``ORIGIN_MESSAGE_ID`` is in ``ids``); one outcome per message."""
        outcomes = []
        for record in self.dead_letter_records(group):
            if (
                ids
                and record.unique_key not in ids
                and record.properties.get("ORIGIN_MESSAGE_ID") not in ids
            ):
                continue
            outcomes.append(self._resend(record))
        found = {o["msg_id"] for o in outcomes} | {o.get("origin_message_id") for o in outcomes}
        outcomes.extend({"msg_id": missing, "outcome": NOT_IN_DLQ} for missing in ids - found)
        return outcomes

    def _resend(self, record: MessageRecord) -> dict[str, Any]:
        outcome: dict[str, Any] = {
            "msg_id": record.unique_key,
            "origin_message_id": record.properties.get("ORIGIN_MESSAGE_ID"),
        }
        if self.store.state_of(record.physical_offset) is MessageState.MARKED_FOR_DELETION:
            return {**outcome, "outcome": "already resent"}
        topic = record.properties.get("RETRY_TOPIC")
        config = self.topics.get(topic) if topic else None
        if topic is None or config is None:
            return {**outcome, "outcome": f"original topic {topic!r} does not exist"}
        properties = dict(record.properties)
        properties.pop("WAIT", None)
        try:
            result = self.put(
                copy_of(
                    record,
                    topic=topic,
                    queue_id=random.randrange(config.write_queue_nums),
                    properties=properties,
                    reconsume_times=0,
                )
            )
        except (StoreError, BrokerError) as error:
            return {**outcome, "outcome": f"failed: {error}"}
        self.store.set_state(
            record.physical_offset, MessageState.MARKED_FOR_DELETION, f"resent to {topic}"
        )
        return {
            **outcome,
            "outcome": "resent",
            "topic": topic,
            "offset_msg_id": self.offset_msg_id(result.physical_offset),
        }
