"""Recalling a delayed message (RocketMQ 5.x RECALL_MESSAGE, 370; gRPC RecallMessage).

A send whose message waits for a delivery time gets a recall handle, RocketMQ's
``RecallMessageHandle.HandleV1``: base64url of ``"v1 <topic> <broker name> <delivery ms>
<message id>"``. Recalling with it cancels the message while it still waits. The checks and
their order are RecallMessageProcessor's: the topic exists, the handle decodes, it names this
topic and this broker, and its time lies ahead (and within the timer's maximum delay).

Where pocketmq differs: RocketMQ writes a delete marker whatever is waiting and answers
success; pocketmq cancels the waiting message and says so when nothing with that id waits
(delivered already, recalled before, or never sent), so a test that recalls too late knows.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from pocketmq.broker.services.timer import TimerService
from pocketmq.broker.services.topics import TopicManager

__all__ = ["RecallHandle", "RecallOutcome", "RecallService", "build_recall_handle"]


class RecallOutcome(Enum):
    RECALLED = "recalled"
    TOPIC_NOT_FOUND = "topic not found"
    BAD_HANDLE = "bad handle"  # does not decode, another topic or broker, or a time not ahead
    NOT_WAITING = "not waiting"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    deliver_ms: str  # as written: RocketMQ keeps the text and parses it when checking
    message_id: str

    def __str__(self) -> str:
        text = f"v1 {self.topic} {self.broker_name} {self.deliver_ms} {self.message_id}"
        return base64.urlsafe_b64encode(text.encode()).decode()

    @classmethod
    def parse(cls, handle: str) -> RecallHandle | None:
        """The handle, or None when it does not decode (RecallMessageHandle.decodeHandle)."""
        try:
            padded = handle + "=" * (-len(handle) % 4)
            parts = base64.urlsafe_b64decode(padded.encode()).decode().split(" ")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        if len(parts) < 5 or parts[0] != "v1":
            return None
        return cls(parts[1], parts[2], parts[3], parts[4])


def build_recall_handle(topic: str, broker_name: str, deliver_ms: int, message_id: str) -> str:
    return str(RecallHandle(topic, broker_name, str(deliver_ms), message_id))


@dataclass(slots=True, kw_only=True)
class RecallService:
    topics: TopicManager
    timer: TimerService
    broker_name: str
    now_ms: Callable[[], int]

    def recall(self, topic: str, handle_text: str) -> tuple[RecallOutcome, str, str]:
        """(outcome, message id or "", reason). Nothing changes unless RECALLED."""
        if self.topics.get(topic) is None:
            return RecallOutcome.TOPIC_NOT_FOUND, "", f"recall failed, the topic[{topic}] not exist"
        handle = RecallHandle.parse(handle_text)
        if handle is None:
            return RecallOutcome.BAD_HANDLE, "", "recall handle is invalid"
        if handle.topic != topic:
            return RecallOutcome.BAD_HANDLE, "", "recall failed, topic not match"
        if handle.broker_name != self.broker_name:
            return (
                RecallOutcome.BAD_HANDLE,
                "",
                f"recall failed, the handle is for broker {handle.broker_name}",
            )
        try:
            deliver_ms = int(handle.deliver_ms)
        except ValueError:
            deliver_ms = -1
        left = deliver_ms - self.now_ms()
        if left <= 0 or left >= self.timer.max_delay_ms:
            return RecallOutcome.BAD_HANDLE, "", "recall failed, timestamp invalid"
        if not self.timer.recall(topic, handle.message_id):
            return (
                RecallOutcome.NOT_WAITING,
                handle.message_id,
                f"message {handle.message_id} is not waiting for its delivery time "
                "(delivered already, recalled, or unknown)",
            )
        return RecallOutcome.RECALLED, handle.message_id, ""
