"""What an administrator changes in a broker's consumer groups and store (RocketMQ's
``AdminBrokerProcessor`` and ``Broker2Client``): deleting a group, working out the offsets a
reset by time moves a group's queues to, finding a consumer's connection to ask it something,
and deleting expired commit-log files now.

Resets follow RocketMQ's ``Broker2Client.resetOffset`` (the broker setting
``useServerSideResetOffset=false``): the broker computes each queue's target offset and tells the
group's online consumers (RESET_CONSUMER_CLIENT_OFFSET), which move their queues and commit the
new offsets; the broker does not write them itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.admin_bodies import (
    MessageQueueForC,
    ResetOffsetBody,
    ResetOffsetBodyForC,
    ResetOffsetRequestHeader,
    encode_fastjson_body,
    mq_key,
)
from pocketmq.broker.protocol.headers import MessageQueue, encode_json_body
from pocketmq.broker.services.clients import Channel, ClientRegistry
from pocketmq.broker.services.groups import GroupManager
from pocketmq.broker.services.offsets import OffsetManager
from pocketmq.broker.services.topics import TopicManager
from pocketmq.store.message_store import MessageStore

__all__ = ["GroupAdmin", "ResetRefusal", "ResetTold"]

log = logging.getLogger("pocketmq.broker")


@dataclass(frozen=True, slots=True)
class ResetRefusal:
    """Why a reset cannot be worked out: ``topic`` (not on this broker) or ``group`` (a queue
    the group has no offset of, RocketMQ's test for a group that does not exist)."""

    what: str
    name: str


class _OnewaySender(Protocol):
    """A remoting connection: what a broker-initiated request is written to."""

    def send_oneway(self, command: RemotingCommand) -> None: ...


@dataclass(frozen=True, slots=True)
class ResetTold:
    """A reset sent to a group's consumers: the Java body (the answer to the tool), the
    client ids told, and the online ones that could not be told (gRPC sessions)."""

    body: bytes
    told: list[str]
    skipped: list[str]


class GroupAdmin:
    def __init__(
        self,
        *,
        store: MessageStore,
        topics: TopicManager,
        groups: GroupManager,
        offsets: OffsetManager,
        clients: ClientRegistry,
        clock_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._clients = clients
        self._clock_ms = clock_ms

    def delete_group(self, group: str, *, clean_offset: bool) -> bool:
        """Remove ``group``'s config and, with ``clean_offset``, its offsets; True when it
        existed. A group not there is no error (RocketMQ answers SUCCESS and logs it). Its
        retry and dead-letter topics stay: mqadmin deletes them itself, as topics."""
        existed = self._groups.delete(group)  # which logs the deletion
        if not existed:
            log.warning("delete subscription group failed: %s does not exist", group)
        if clean_offset:
            topics = self._offsets.remove_group(group)
            if topics:
                log.info("offsets of %s dropped for %s", group, ", ".join(topics))
        return existed

    def reset_table(
        self, topic: str, group: str, timestamp_ms: int, *, force: bool
    ) -> dict[int, int] | ResetRefusal:
        """The offset each write queue of ``topic`` is reset to for ``group``: the first
        message stored at or after ``timestamp_ms`` (-1: the end of the queue), 0 when the
        search finds none; without ``force`` a queue only ever moves back."""
        config = self._topics.get(topic)
        if config is None:
            return ResetRefusal("topic", topic)
        table: dict[int, int] = {}
        for queue_id in range(config.write_queue_nums):
            committed = self._offsets.query(group, topic, queue_id)
            if committed is None or committed < 0:
                return ResetRefusal("group", group)
            if timestamp_ms == -1:
                target = self._store.max_offset(topic, queue_id)
            else:
                target = self._store.offset_by_time(topic, queue_id, timestamp_ms)
            if target < 0:
                log.warning("reset offset of %s:%d is %d: 0 instead", topic, queue_id, target)
                target = 0
            table[queue_id] = target if force or target < committed else committed
        return table

    def tell_reset(
        self,
        topic: str,
        group: str,
        timestamp_ms: int,
        table: dict[int, int],
        *,
        broker_name: str,
        cpp: bool = False,
    ) -> ResetTold:
        """Send RESET_CONSUMER_CLIENT_OFFSET (oneway) with ``table`` to every online remoting
        consumer of ``group``, as Broker2Client.resetOffset; they move their queues and commit.
        ``cpp``: the list form rocketmq-client-cpp reads (RocketMQ picks it by the language of
        the tool's request, and every consumer gets the same one)."""
        queues = {
            MessageQueue(topic=topic, broker_name=broker_name, queue_id=q): offset
            for q, offset in table.items()
        }
        body = encode_fastjson_body(
            ResetOffsetBody(offset_table={mq_key(mq): offset for mq, offset in queues.items()})
        )
        sent = body
        if cpp:
            sent = encode_json_body(
                ResetOffsetBodyForC(
                    offset_table=[
                        MessageQueueForC(
                            topic=mq.topic,
                            broker_name=mq.broker_name,
                            queue_id=mq.queue_id,
                            offset=offset,
                        )
                        for mq, offset in queues.items()
                    ]
                )
            )
        ext = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms
        ).to_ext_fields()
        told: list[str] = []
        skipped: list[str] = []
        for client_id, channel in self.consumers(group):
            send = getattr(channel, "send_oneway", None)
            if send is None:  # a gRPC session: no remoting channel to write to
                log.info(
                    "[reset-offset] %s of %s is not a remoting client: skipped", client_id, group
                )
                skipped.append(client_id)
                continue
            send(
                RemotingCommand(
                    code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext_fields=dict(ext), body=sent
                )
            )
            told.append(client_id)
            log.info(
                "[reset-offset] reset offset sent. topic=%s group=%s client=%s",
                topic,
                group,
                client_id,
            )
        return ResetTold(body=body, told=told, skipped=skipped)

    def consumers(self, group: str) -> list[tuple[str, Channel]]:
        """The online consumers of ``group``: (client id, connection), by client id."""
        info = self._clients.group(group)
        if info is None:
            return []
        return [
            (client_id, consumer.connection)
            for client_id, consumer in sorted(info.consumers.items())
            if not consumer.connection.closed
        ]

    def consumer(self, group: str, client_id: str) -> Channel | None:
        """The connection of consumer ``client_id`` of ``group`` (ConsumerManager.findChannel)."""
        for found_id, channel in self.consumers(group):
            if found_id == client_id:
                return channel
        return None

    def delete_expired_commitlog(self, reserve_ms: int, batch_max: int) -> list[int]:
        """Delete the commit-log segments older than ``reserve_ms`` now, whatever the deletion
        hour (RocketMQ's executeDeleteFilesManually); returns the deleted segments' starts."""
        now = self._clock_ms()
        self._store.mark_expired(now, reserve_ms)
        deleted = self._store.delete_segments(batch_max, now_ms=now, reserve_ms=reserve_ms)
        log.warning("deleteExpiredCommitLog: %d expired segment(s) deleted", len(deleted))
        return deleted
