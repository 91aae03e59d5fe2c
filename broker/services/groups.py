"""Subscription groups (RocketMQ's SubscriptionGroupManager), ``config/subscriptionGroup.json``."""

from __future__ import annotations

import re
import time
from pathlib import Path

import msgspec

from pocketmq.broker.protocol.headers import DataVersion, SubscriptionGroupConfig
from pocketmq.broker.services.persist import load_json, save_json

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


class GroupManager:
    def __init__(self, path: Path | None, *, auto_create: bool) -> None:
        self.path = path
        self.auto_create = auto_create
        loaded = load_json(path, _GroupFile, _GroupFile())
        self.groups: dict[str, GroupConfig] = loaded.subscription_group_table
        self.data_version = loaded.data_version

    def find_or_create(self, group: str) -> GroupConfig | None:
        config = self.groups.get(group)
        if config is None and self.auto_create:
            config = self.groups[group] = GroupConfig(group_name=group)
            self._changed()
        return config

    def put(self, config: GroupConfig) -> None:
        """Create or replace a group (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP), persisted at once."""
        self.groups[config.group_name] = config
        self._changed()

    def _changed(self) -> None:
        self.data_version = DataVersion(
            timestamp=int(time.time() * 1000), counter=self.data_version.counter + 1
        )
        self.persist()

    def wrapper(self) -> _GroupFile:
        return _GroupFile(
            subscription_group_table=dict(self.groups), data_version=self.data_version
        )

    def persist(self) -> None:
        save_json(self.path, self.wrapper())
