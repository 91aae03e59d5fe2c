"""Topic configurations (RocketMQ's TopicConfigManager), persisted as ``config/topics.json``.

RocketMQ saves the whole table on each change, and so does pocketmq while the table is small
(at most 256 topics). Beyond, a change is still durable before it is acknowledged, but as one
line appended to ``topics.json.journal`` (``persist.JournaledTable``, the rule the group table follows too); the table is saved whole when
the journal holds as many entries as half the table, and at a clean stop. Creating a topic then
costs about the same with 300 topics or 10,000 (saving the table whole each time made creating
10,000 topics one by one quadratic). A reader of ``topics.json`` alone (RocketMQ's tools) may
miss the newest topics of a large table until the next whole save.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from pocketmq.broker.errors import Kind, TopicError
from pocketmq.broker.protocol.headers import DataVersion, TopicConfig, TopicConfigSerializeWrapper
from pocketmq.broker.services.lite import is_lmq
from pocketmq.broker.services.persist import JournaledTable, load_json
from pocketmq.store.state import STATE_TOPIC
from pocketmq.store.topics import (
    AUTO_CREATE_TOPIC,
    SCHEDULE_TOPIC,
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    is_system_topic,
)
from pocketmq.store.topics import NOT_ALLOWED_SEND_TOPICS as _ROCKETMQ_NOT_ALLOWED_SEND_TOPICS

__all__ = [
    "AUTO_CREATE_TOPIC",
    "MESSAGE_TYPES",
    "MESSAGE_TYPE_ATTRIBUTE",
    "NOT_ALLOWED_SEND_TOPICS",
    "SCHEDULE_TOPIC",
    "SYSTEM_TOPICS",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TopicError",
    "TopicManager",
    "apply_attribute_changes",
    "is_system_topic",
    "parse_attribute_changes",
    "parse_attributes",
    "topic_message_type",
    "validate_topic_name",
]

log = logging.getLogger("pocketmq.broker")

PERM_READ = 4
PERM_WRITE = 2
PERM_RW = PERM_READ | PERM_WRITE

# RocketMQ's reserved topic names are store/topics.py's (shared with the SDK and the Spark
# reader). Clients may not send to TopicValidator's set, nor to pocketmq's state records: only
# the broker writes those.
NOT_ALLOWED_SEND_TOPICS = _ROCKETMQ_NOT_ALLOWED_SEND_TOPICS | {STATE_TOPIC}
_TOPIC_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_LENGTH_MAX = 127
RETRY_OR_DLQ_TOPIC_LENGTH_MAX = 255

# RocketMQ 5.x TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE: what a topic may carry, which the
# gRPC front-end checks sends against; no attribute means NORMAL (TopicConfig.getTopicMessageType).
MESSAGE_TYPE_ATTRIBUTE = "message.type"
# PRIORITY and LITE are the 5.x SDKs' newer types (MessageType 6 and 5): a PRIORITY topic's queue
# N holds the messages of priority N (the highest queue the higher ones) and POP serves it first;
# a LITE topic is refused at send (UNSUPPORTED), but may be created so clients get that answer.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "PRIORITY", "LITE")

# Up to this many topics the table is saved whole on each change; beyond, changes go to the
# journal, and the table is saved whole when it holds this many entries or half the table.
_JOURNAL_MIN = 256


class _TopicChange(msgspec.Struct, kw_only=True, rename="camel"):
    """One journal entry: a topic's whole new config, or None when it was deleted."""

    topic: str
    config: TopicConfig | None
    data_version: DataVersion


def validate_topic_name(topic: str) -> str | None:
    """Why ``topic`` is not a valid topic name (TopicValidator), or None if it is."""
    if not topic:
        return "the topic is blank"
    if not _TOPIC_PATTERN.match(topic):
        return f"the topic {topic!r} contains a character outside ^[%|a-zA-Z0-9_-]+$"
    limit = (
        RETRY_OR_DLQ_TOPIC_LENGTH_MAX
        if topic.startswith(("%RETRY%", "%DLQ%"))
        else TOPIC_LENGTH_MAX
    )
    if len(topic) > limit:
        return f"the topic is {len(topic)} characters long, more than {limit}"
    return None


def topic_message_type(config: TopicConfig) -> str:
    """The topic's ``message.type`` attribute, or "NORMAL" when it has none."""
    return config.attributes.get(MESSAGE_TYPE_ATTRIBUTE) or "NORMAL"


def parse_attribute_changes(text: str) -> tuple[dict[str, str], list[str]]:
    """RocketMQ's AttributeParser: ``"+k=v,+k2=v2,-k3"`` -> ({k: v, k2: v2}, [k3]).

    ``TopicError`` (SYSTEM_ERROR, as RocketMQ answers) for a malformed or repeated entry or a
    ``message.type`` outside ``MESSAGE_TYPES``. Other keys are kept as given: pocketmq does not
    interpret them, and refusing them would break tools that set e.g. ``queue.type``.
    """
    additions: dict[str, str] = {}
    deletions: list[str] = []
    if not text:
        return additions, deletions
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue  # "+a=b," as Java's String.split, which drops the trailing empty entry
        adding = "=" in entry
        key, _, value = entry.partition("=")
        if adding and (not key.startswith("+") or not value or "=" in value):
            raise TopicError(Kind.BAD_REQUEST, f"attribute {entry!r} is not of the form +key=value")
        if not adding and not key.startswith("-"):
            raise TopicError(
                Kind.BAD_REQUEST, f"attribute {entry!r} is neither +key=value nor -key"
            )
        name = key[1:]
        if not name:
            raise TopicError(Kind.BAD_REQUEST, f"attribute {entry!r} has no key")
        if name in additions or name in deletions:
            raise TopicError(Kind.BAD_REQUEST, f"attribute {name!r} is given twice in {text!r}")
        if not adding:
            deletions.append(name)
            continue
        if name == MESSAGE_TYPE_ATTRIBUTE and value not in MESSAGE_TYPES:
            raise TopicError(
                Kind.BAD_REQUEST,
                f"{MESSAGE_TYPE_ATTRIBUTE} {value!r} is not one of {', '.join(MESSAGE_TYPES)}",
            )
        additions[name] = value
    return additions, deletions


def parse_attributes(text: str) -> dict[str, str]:
    """The attributes ``"+k=v,+k2=v2"`` sets, keys without the "+". A ``-key`` entry (delete)
    is refused here: a new topic has nothing to delete (use ``parse_attribute_changes``)."""
    additions, deletions = parse_attribute_changes(text)
    if deletions:
        raise TopicError(
            Kind.BAD_REQUEST, f"only +key=value attributes are allowed here, not -{deletions[0]}"
        )
    return additions


def apply_attribute_changes(current: dict[str, str] | None, text: str) -> dict[str, str]:
    """``current`` (None: a topic being created) after the changes ``text`` describes, as
    RocketMQ's AttributeUtil.alterCurrentAttributes; ``TopicError`` when they cannot apply."""
    if current is None:
        return parse_attributes(text)  # creating: only additions
    additions, deletions = parse_attribute_changes(text)
    result = dict(current)
    for name in deletions:
        if result.pop(name, None) is None:
            raise TopicError(
                Kind.BAD_REQUEST,
                f"attribute {name!r} cannot be deleted: the topic does not have it",
            )
    result.update(additions)
    return result


class TopicManager:
    def __init__(
        self,
        path: Path | None,
        *,
        default_queue_nums: int,
        auto_create: bool,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.path = path
        self.on_change = on_change
        self.default_queue_nums = default_queue_nums
        self.auto_create = auto_create
        wrapper = load_json(path, TopicConfigSerializeWrapper, TopicConfigSerializeWrapper())
        self.topics: dict[str, TopicConfig] = dict(wrapper.topic_config_table)
        self.data_version = wrapper.data_version
        self.file = JournaledTable(path, journal_min=_JOURNAL_MIN)
        self._replay()
        self._add_system_topics()
        self._warned_at = float("-inf")
        # Changes the name servers have not been told of (None: a deletion).
        self._unregistered: dict[str, TopicConfig | None] = {}

    def _replay(self) -> None:
        """Apply the changes made since the table was last saved whole."""
        decode = msgspec.json.Decoder(_TopicChange).decode
        for entry in self.file.journal.read():
            change = decode(entry)
            if change.config is None:
                self.topics.pop(change.topic, None)
            else:
                self.topics[change.topic] = change.config
            self.data_version = change.data_version

    def _add_system_topics(self) -> None:
        if self.auto_create and AUTO_CREATE_TOPIC not in self.topics:
            # The template producers fall back to for a topic the name server does not know.
            self.topics[AUTO_CREATE_TOPIC] = TopicConfig(
                topic_name=AUTO_CREATE_TOPIC,
                read_queue_nums=self.default_queue_nums,
                write_queue_nums=self.default_queue_nums,
                perm=PERM_RW | 1,  # inherit: new topics are created from it
            )
        for name, queues in ((SCHEDULE_TOPIC, 18), (TRANS_CHECK_MAX_TIME_TOPIC, 1)):
            self.topics.setdefault(
                name,
                TopicConfig(
                    topic_name=name, read_queue_nums=queues, write_queue_nums=queues, perm=PERM_RW
                ),
            )

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def create(
        self,
        topic: str,
        *,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int = PERM_RW,
        order: bool = False,
        topic_sys_flag: int = 0,
        attributes: dict[str, str] | None = None,
    ) -> TopicConfig:
        """Create or update a topic (UPDATE_AND_CREATE_TOPIC), persisted at once.

        ``attributes`` replaces the topic's attributes; None keeps an existing topic's (an
        update that names no attributes leaves them alone, as in RocketMQ).
        """
        problem = validate_topic_name(topic)
        if problem:
            raise TopicError(
                Kind.BAD_REQUEST, problem
            )  # SYSTEM_ERROR, as RocketMQ answers a bad name
        if attributes is None:
            existing = self.topics.get(topic)
            attributes = existing.attributes if existing is not None else {}
        message_type = attributes.get(MESSAGE_TYPE_ATTRIBUTE)
        if message_type is not None and message_type not in MESSAGE_TYPES:
            raise TopicError(
                Kind.BAD_REQUEST,
                f"{MESSAGE_TYPE_ATTRIBUTE} {message_type!r} is not one of "
                f"{', '.join(MESSAGE_TYPES)}",
            )
        config = TopicConfig(
            topic_name=topic,
            read_queue_nums=read_queue_nums or self.default_queue_nums,
            write_queue_nums=write_queue_nums or self.default_queue_nums,
            perm=perm,
            order=order,
            topic_sys_flag=topic_sys_flag,
            attributes=dict(attributes),
        )
        self._changed(topic, config)
        return config

    def create_on_send(self, topic: str, queue_nums: int | None) -> TopicConfig | None:
        """Auto-create on first send (autoCreateTopicEnable); None when not allowed."""
        existing = self.topics.get(topic)
        if existing is not None:
            return existing
        if not self.auto_create and not topic.startswith(("%RETRY%", "%DLQ%")):
            return None
        nums = min(queue_nums or self.default_queue_nums, self.default_queue_nums)
        if topic.startswith(("%RETRY%", "%DLQ%")):
            nums = 1
        created = self.create(topic, read_queue_nums=nums, write_queue_nums=nums)
        log.info("topic %s auto-created with %d queues", topic, nums)  # once per topic
        return created

    def delete(self, topic: str) -> bool:
        if topic not in self.topics:
            return False
        self._changed(topic, None)
        return True

    def _changed(self, topic: str, config: TopicConfig | None) -> None:
        """Apply the change and make it durable; on a disk error it is undone and the caller
        gets SERVICE_NOT_AVAILABLE (no path in it; the log has the whole error)."""
        previous, previous_version = self.topics.get(topic), self.data_version
        if config is None:
            self.topics.pop(topic, None)
        else:
            self.topics[topic] = config
        self.data_version = DataVersion(
            timestamp=int(time.time() * 1000), counter=previous_version.counter + 1
        )
        try:
            compact = self.file.save_change(
                len(self.topics),
                self.wrapper,
                lambda: msgspec.json.encode(
                    _TopicChange(topic=topic, config=config, data_version=self.data_version)
                ),
            )
        except OSError as error:
            if previous is None:
                self.topics.pop(topic, None)
            else:
                self.topics[topic] = previous
            self.data_version = previous_version
            now = time.monotonic()
            if now - self._warned_at >= 60.0:  # one line a minute, not one per refused send
                self._warned_at = now
                log.warning("could not save the change of topic %s: %s", topic, error)
            raise TopicError(
                Kind.SERVICE_UNAVAILABLE,
                "service not available now: the topic table could not be saved "
                f"({error.strerror or 'I/O error'})",
            ) from None
        self._unregistered[topic] = config
        if compact:
            self._compact()
        if self.on_change is not None:
            self.on_change()  # name servers learn new topics at once, not 30 s later

    def _compact(self) -> None:
        try:
            self.persist()
        except OSError as error:  # the journal still holds every change: nothing is lost
            log.warning("could not save the topic table whole (the journal keeps it): %s", error)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(
            topic_config_table=dict(self.topics), data_version=self.data_version
        )

    def take_changes(self) -> dict[str, TopicConfig] | None:
        """The topics created or changed since the last call, for an incremental registration
        (RocketMQ's registerIncrementBrokerData); None when a topic was deleted, which only a
        registration of the whole table can say."""
        changes, self._unregistered = self._unregistered, {}
        if any(config is None for config in changes.values()):
            return None
        return {topic: config for topic, config in changes.items() if config is not None}

    def persist(self) -> None:
        """Save the table whole and empty the journal (at a clean stop, and now and then)."""
        self.file.save_whole(self.wrapper())

    def close(self) -> None:
        self.file.journal.close()

    def user_topics(self) -> list[str]:
        # A lite topic's LMQ (lite.py) belongs to its parent topic, not listed on its own.
        return sorted(t for t in self.topics if not is_system_topic(t) and not is_lmq(t))


def topic_config_with(config: TopicConfig, **changes: object) -> TopicConfig:
    return msgspec.structs.replace(config, **changes)
