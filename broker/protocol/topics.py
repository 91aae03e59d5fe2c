"""RocketMQ's reserved topic names, for the fronts that may not import the store (the name
server): one definition, ``store/topics.py``'s (``TopicValidator``)."""

from __future__ import annotations

from pocketmq.store.topics import SYSTEM_TOPIC_PREFIX, SYSTEM_TOPICS, is_system_topic

__all__ = ["SYSTEM_TOPICS", "SYSTEM_TOPIC_PREFIX", "is_system_topic", "system_topic_refusal"]


def system_topic_refusal(topic: str) -> str | None:
    """The remark refusing to delete ``topic`` if it is a system topic (``deleteTopic``'s
    INVALID_PARAMETER), else None. System topics hold the broker's own state (delay levels,
    half messages, message states): deleting one breaks the broker, so no one may."""
    if is_system_topic(topic):
        return f"The topic[{topic}] is conflict with system topic."
    return None
