"""Store settings: every size and limit is a named setting with its reason."""

from __future__ import annotations

from typing import Literal

import msgspec

from pocketmq.store.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from pocketmq.store.record import LOCALHOST, Host, RecordLimits

__all__ = ["StoreConfig", "parse_delay_levels"]


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True):
    # RocketMQ preallocates 1 GiB commitlog segments; 64 MiB suits a laptop (little disk held by
    # an idle store, fast to scan on recovery) while still being 16x the largest message.
    commitlog_segment_size: int = 64 * 1024 * 1024
    # RocketMQ: 300,000 entries (6 MB) per consume-queue file. Each queue of each topic owns at
    # least one file, so a laptop with many topics x 8 queues is better served by 600 KB files.
    consume_queue_entries_per_file: int = 30_000
    # RocketMQ: 5,000,000 slots / 20,000,000 entries (420 MB per index file); we use 42 MB.
    index_slot_count: int = 500_000
    index_entry_count: int = 2_000_000
    message_index_enable: bool = True
    limits: RecordLimits = RecordLimits()
    # RocketMQ's enabledAppendPropCRC (off there): end every record's properties with a CRC of
    # the whole record, so recovery also catches damage to the header, topic and properties,
    # which the body CRC does not cover. Costs 20 bytes per record.
    append_record_crc: bool = True
    # RocketMQ's checkCRCOnRecover.
    check_crc_on_recover: bool = True
    # "tail": scan from the segment holding the checkpoint's confirmed offset (RocketMQ's normal
    # recovery); "full": scan and check every record of every segment.
    recovery_scan: Literal["tail", "full"] = "tail"
    # RocketMQ's messageDelayLevel; the schedule topic's tags code is store time + the delay.
    delay_levels: str = DEFAULT_DELAY_LEVELS
    # The address written as STOREHOSTADDRESS and used in offset message IDs.
    store_host: Host = LOCALHOST

    def __post_init__(self) -> None:
        # A record (body + properties + topic + fixed part) must fit one segment with room for
        # the END-OF-FILE filler, and a 4 MiB batch must fit too.
        biggest = self.limits.body_size_max + self.limits.properties_size_max + 512
        if self.commitlog_segment_size < biggest:
            raise ValueError(
                f"commitlog_segment_size {self.commitlog_segment_size} is smaller than the largest "
                f"record the limits allow ({biggest} bytes)"
            )
        parse_delay_levels(self.delay_levels)
        if self.consume_queue_entries_per_file <= 0:
            raise ValueError("consume_queue_entries_per_file must be positive")
        if self.index_slot_count <= 0 or self.index_entry_count <= 1:
            raise ValueError("index_slot_count and index_entry_count must be positive")

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.delay_levels)
