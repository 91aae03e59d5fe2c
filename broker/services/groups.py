"""Subscription groups (RocketMQ's SubscriptionGroupManager), ``config/subscriptionGroup.json``."""

from __future__ import annotations

from pathlib import Path

import msgspec

from broker.services.persist import load_json, save_json

__all__ = ["GroupConfig", "GroupManager"]


class GroupConfig(msgspec.Struct, rename="camel", kw_only=True):
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16  # retryMaxTimes
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    attributes: dict[str, str] = {}


class _GroupFile(msgspec.Struct, rename="camel"):
    subscription_group_table: dict[str, GroupConfig] = {}


class GroupManager:
    def __init__(self, path: Path | None, *, auto_create: bool) -> None:
        self.path = path
        self.auto_create = auto_create
        self.groups: dict[str, GroupConfig] = load_json(
            path, _GroupFile, _GroupFile()
        ).subscription_group_table

    def find_or_create(self, group: str) -> GroupConfig | None:
        config = self.groups.get(group)
        if config is None and self.auto_create:
            config = self.groups[group] = GroupConfig(group_name=group)
            self.persist()
        return config

    def put(self, config: GroupConfig) -> None:
        self.groups[config.group_name] = config
        self.persist()

    def persist(self) -> None:
        save_json(self.path, _GroupFile(subscription_group_table=self.groups))
