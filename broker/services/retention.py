"""Retention (RocketMQ's CleanCommitLogService): expired segments are marked, then deleted.

A segment whose newest message is older than ``fileReservedTime`` (72 h) has its messages
marked for deletion (state 30, one span record) at once, so consumers stop getting them. Whole
segments are deleted, with their consume-queue, index and state entries, during the deletion
hours (``deleteWhen``, "04" = 4 a.m. local time) or when disk usage passes
``diskMaxUsedSpaceRatio`` (75 %); past ``diskSpaceCleanForciblyRatio`` (85 %) the oldest segments
go even if not expired; past ``diskSpaceWarningLevelRatio`` (90 %) writes are refused until space
is freed. At most ``deleteFileBatchMax`` (10) segments go per pass. The newest segment is never
deleted.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pocketmq.store.message_store import MessageStore

__all__ = ["RetentionPolicy", "RetentionService"]

log = logging.getLogger("pocketmq.broker")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    file_reserved_time_ms: int = 72 * 3_600_000
    delete_when: str = "04"  # hours, ';'-separated, local time
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85  # RocketMQ clamps it to 30..85
    disk_space_warning_level_ratio: int = 90  # RocketMQ clamps it to 35..90
    delete_file_batch_max: int = 10

    def deletion_hours(self) -> set[int]:
        return {int(h) for h in self.delete_when.split(";") if h.strip().isdigit()}


@dataclass(slots=True)
class RetentionService:
    store: MessageStore
    policy: RetentionPolicy
    clock_ms: Callable[[], int]
    disk_usage: Callable[[], float | None] = field(default=lambda: None)
    deleted_total: int = 0

    @staticmethod
    def disk_usage_of(path: object) -> Callable[[], float | None]:
        def usage() -> float | None:
            try:
                total, used, _free = shutil.disk_usage(str(path))
            except OSError:
                return None
            return 100.0 * used / total if total else None

        return usage

    def run(self) -> dict[str, object]:
        """One pass; returns what it did (for logs and tests)."""
        policy = self.policy
        now = self.clock_ms()
        marked = self.store.mark_expired(now, policy.file_reserved_time_ms)
        usage = self.disk_usage()
        warning = min(max(policy.disk_space_warning_level_ratio, 35), 90)
        forcibly = min(max(policy.disk_space_clean_forcibly_ratio, 30), 85)
        self.store.disk_full = usage is not None and usage > warning
        hour = time.localtime(now / 1000).tm_hour
        deleting = hour in policy.deletion_hours() or (
            usage is not None and usage > policy.disk_max_used_space_ratio
        )
        force = usage is not None and usage > forcibly
        deleted: list[int] = []
        if deleting or force:
            deleted = self.store.delete_segments(
                policy.delete_file_batch_max,
                now_ms=now,
                reserve_ms=policy.file_reserved_time_ms,
                force=force,
            )
            self.deleted_total += len(deleted)
        if marked or deleted or self.store.disk_full:
            log.info(
                "retention: marked %d segment(s), deleted %d, disk usage %s%%%s",
                len(marked),
                len(deleted),
                "?" if usage is None else f"{usage:.0f}",
                ", writes refused (disk full)" if self.store.disk_full else "",
            )
        return {
            "marked": marked,
            "deleted": deleted,
            "disk_usage": usage,
            "disk_full": self.store.disk_full,
        }
