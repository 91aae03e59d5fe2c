"""Subscription groups (RocketMQ's SubscriptionGroupManager), ``config/subscriptionGroup.json``.

Saved as the topic table is (``persist.JournaledTable``): whole on each change while the table
holds at most 256 groups, as RocketMQ does; beyond, a change is one synced line in
``subscriptionGroup.json.journal``, and the table is saved whole when the journal holds half as
many entries as the table, and at a clean stop. Creating 10,000 groups one by one no longer
costs time that grows with the table. A reader of ``subscriptionGroup.json`` alone (RocketMQ's
tools) may miss the newest groups of a large table until the next whole save.

On a disk that refuses the save (full, read-only): a group created by an administrator is
refused with SERVICE_NOT_AVAILABLE and not kept; a group created on the fly for a consumer
(``autoCreateSubscriptionGroup``) is kept in memory, so the consumer goes on reading, and saved
with the next save that works (``save_unsaved``, the broker's housekeeping). One WARNING per
episode, one INFO when saves work again.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import msgspec

from pocketmq.broker.errors import BrokerError, Kind
from pocketmq.broker.protocol.headers import DataVersion, SubscriptionGroupConfig
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.persist import JournaledTable, load_json

log = logging.getLogger("pocketmq.broker")

__all__ = ["GroupConfig", "GroupManager", "validate_group_name"]

_GROUP_PATTERN = re.compile(r"^[%|a-zA-Z0-9_-]+$")
GROUP_LENGTH_MAX = 255


def validate_group_name(group: str) -> str | None:
    """Why ``group`` is not a valid consumer group name (RocketMQ's Validators.checkGroup), or
    None if it is."""
    if not group:
        return "the group name is blank"
    if not _GROUP_PATTERN.match(group):
        return f"the group {group!r} contains a character outside ^[%|a-zA-Z0-9_-]+$"
    if len(group) > GROUP_LENGTH_MAX:
        return f"the group name is {len(group)} characters long, more than {GROUP_LENGTH_MAX}"
    return None


# The group settings the broker keeps are RocketMQ's SubscriptionGroupConfig, as on the wire.
GroupConfig = SubscriptionGroupConfig


class _GroupFile(msgspec.Struct, rename="camel"):
    # also the body of GET_ALL_SUBSCRIPTIONGROUP_CONFIG (RocketMQ's SubscriptionGroupWrapper)
    subscription_group_table: dict[str, GroupConfig] = {}
    data_version: DataVersion = DataVersion()


class _GroupChange(msgspec.Struct, kw_only=True, rename="camel"):
    """One journal entry: a group's whole new config (idempotent on replay)."""

    group: str
    config: GroupConfig
    data_version: DataVersion


class GroupManager:
    def __init__(self, path: Path | None, *, auto_create: bool) -> None:
        self.path = path
        self.auto_create = auto_create
        loaded = load_json(path, _GroupFile, _GroupFile())
        self.groups: dict[str, GroupConfig] = dict(loaded.subscription_group_table)
        self.data_version = loaded.data_version
        self.file = JournaledTable(path)
        self._replay()
        self._unsaved = False  # groups created on the fly that the disk refused to save
        self.outage = Outage(
            "saving the subscription group table",
            "new groups are refused to administrators; groups consumers create are kept in "
            "memory and saved once the disk has room",
        )
        self._compaction = Outage(
            "saving the subscription group table whole", "its journal keeps every change"
        )

    def _replay(self) -> None:
        """Apply the changes made since the table was last saved whole."""
        decode = msgspec.json.Decoder(_GroupChange).decode
        for entry in self.file.journal.read():
            change = decode(entry)
            self.groups[change.group] = change.config
            self.data_version = change.data_version

    def find_or_create(self, group: str) -> GroupConfig | None:
        config = self.groups.get(group)
        if config is None and self.auto_create:
            config = GroupConfig(group_name=group)
            log.info("subscription group %s auto-created", group)
            try:
                self._changed(config)
            except OSError:
                # Reads go on on a full disk, and a consumer of a new group is a reader: keep
                # the group (its default config) in memory, save it with the next save.
                self.groups[group] = config
                self._bump_version()
                self._unsaved = True
        return config

    def put(self, config: GroupConfig) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), persisted at once;
        SERVICE_NOT_AVAILABLE (no path in it) when the disk refuses, the table unchanged."""
        existed = config.group_name in self.groups
        try:
            self._changed(config)
        except OSError as error:
            raise BrokerError(
                Kind.SERVICE_UNAVAILABLE,
                "service not available now: the subscription group table could not be saved "
                f"({error.strerror or 'I/O error'})",
            ) from None
        log.info("subscription group %s %s", config.group_name, "updated" if existed else "created")

    def delete(self, group: str) -> bool:
        """Remove a group (DELETE_SUBSCRIPTIONGROUP); False when there was none. The table is
        saved whole, as RocketMQ's deleteSubscriptionGroupConfig does (the journal holds only
        whole configs); SERVICE_NOT_AVAILABLE when the disk refuses, the group kept."""
        previous = self.groups.pop(group, None)
        if previous is None:
            return False
        previous_version = self.data_version
        self._bump_version()
        try:
            self.persist()
        except OSError as error:
            self.groups[group] = previous
            self.data_version = previous_version
            self.outage.failed(error)
            raise BrokerError(
                Kind.SERVICE_UNAVAILABLE,
                "service not available now: the subscription group table could not be saved "
                f"({error.strerror or 'I/O error'})",
            ) from None
        self.outage.worked()
        log.info("subscription group %s deleted", group)
        return True

    def _bump_version(self) -> None:
        self.data_version = DataVersion(
            timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
        )

    def _changed(self, config: GroupConfig) -> None:
        """Apply the change and make it durable; on a disk error it is undone and re-raised."""
        name = config.group_name
        previous, previous_version = self.groups.get(name), self.data_version
        self.groups[name] = config
        self._bump_version()
        try:
            if self._unsaved:  # groups the disk refused before: the whole table, with them
                self.persist()
                compact = False
            else:
                compact = self.file.save_change(
                    len(self.groups),
                    self.wrapper,
                    lambda: msgspec.json.encode(
                        _GroupChange(group=name, config=config, data_version=self.data_version)
                    ),
                )
        except OSError as error:
            if previous is None:
                del self.groups[name]
            else:
                self.groups[name] = previous
            self.data_version = previous_version
            self.outage.failed(error)
            raise
        self.outage.worked()
        if compact:
            # A refusal loses nothing: the journal still holds every change.
            self._compaction.run(self.persist)

    def save_unsaved(self) -> None:
        """Save the groups created while the disk refused (the broker's housekeeping)."""
        if not self._unsaved:
            return
        try:
            self.persist()
        except OSError as error:
            self.outage.failed(error)
            return
        self.outage.worked()

    def wrapper(self) -> _GroupFile:
        return _GroupFile(
            subscription_group_table=dict(self.groups), data_version=self.data_version
        )

    def persist(self) -> None:
        """Save the table whole and empty the journal (at a clean stop, and now and then)."""
        self.file.save_whole(self.wrapper())
        self._unsaved = False

    def close(self) -> None:
        self.file.journal.close()
