"""RocketMQ's reserved topic names (``TopicValidator``), in one place for the broker, the SDK and
the Spark reader. Pure: no imports, so every layer may use it (``tests/test_layering.py``)."""

from __future__ import annotations

from typing import Final

__all__ = [
    "AUTO_CREATE_TOPIC",
    "DLQ_TOPIC_PREFIX",
    "NOT_ALLOWED_SEND_TOPICS",
    "REPLY_TOPIC_POSTFIX",
    "RETRY_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "is_system_topic",
    "reply_topic",
]

AUTO_CREATE_TOPIC: Final = "TBW102"  # AUTO_CREATE_TOPIC_KEY_TOPIC: the template of new topics
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"  # delay levels wait here, one queue per level
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
RETRY_TOPIC_PREFIX: Final = "%RETRY%"  # + consumer group: the group's redeliveries
DLQ_TOPIC_PREFIX: Final = "%DLQ%"  # + consumer group: its dead letters
# RocketMQ 5.x system topics start with this; so do pocketmq's own (message states, the timer
# wheel, POP revive logs).
SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"

# TopicValidator.SYSTEM_TOPIC_SET.
SYSTEM_TOPICS: Final = frozenset(
    {
        AUTO_CREATE_TOPIC,
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        TRANS_HALF_TOPIC,
        "RMQ_SYS_TRACE_TOPIC",
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: clients may not send to these (the SDK refuses
# them before sending; the broker refuses them too, and pocketmq's state topic besides).
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)


# MixAll.REPLY_TOPIC_POSTFIX: a cluster's replies to requests go to <cluster>_REPLY_TOPIC.
REPLY_TOPIC_POSTFIX: Final = "REPLY_TOPIC"
_REPLY_TOPIC_END: Final = "_" + REPLY_TOPIC_POSTFIX


def reply_topic(cluster: str) -> str:
    """``MixAll.getReplyTopic``: where the replies of a cluster's requests go."""
    return f"{cluster}{_REPLY_TOPIC_END}"


def is_system_topic(topic: str) -> bool:
    """One of RocketMQ's system topics, a name with the ``rmq_sys_`` prefix, or a cluster's
    reply topic (RocketMQ adds its own cluster's at start, ``TopicValidator.addSystemTopic``;
    the name alone says it here, as every layer must tell without knowing the cluster)."""
    return (
        topic in SYSTEM_TOPICS
        or topic.startswith(SYSTEM_TOPIC_PREFIX)
        or topic.endswith(_REPLY_TOPIC_END)
    )
