"""Stores for the exporter's tests: written through MessageStore, or crafted byte by byte as
Apache RocketMQ lays them out, and the rows the exporter must make of them."""

from __future__ import annotations

import datetime as dt
import mmap
from pathlib import Path
from typing import Any

from pocketmq.ids import offset_msg_id_from_packed
from pocketmq.sparkexport.scan import TRANSACTION_LABELS
from pocketmq.store import paths
from pocketmq.store.config import StoreConfig
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.reader import StoreReader
from pocketmq.store.record import (
    MAGIC_V2,
    Host,
    MessageRecord,
    RecordLimits,
    SysFlag,
    decode_record,
    encode_blank,
    encode_record,
)
from pocketmq.store.state import MessageState
from pocketmq.store.topics import is_system_topic, reply_topic

# Small segments (the limits allow records of up to 16 KiB), so a test store has several.
SMALL = StoreConfig(
    commitlog_segment_size=64 * 1024,
    limits=RecordLimits(body_size_max=16 * 1024, properties_size_max=8 * 1024),
    consume_queue_entries_per_file=1000,
    index_slot_count=101,
    index_entry_count=4000,
)
T0 = 1_700_000_000_000
REPLY_TOPIC = reply_topic("DefaultCluster")


class Clock:
    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 10
        return self.now


def varied_messages(count: int) -> list[PutMessage]:
    """Messages that exercise every field: topics, tags, keys, user properties, flags,
    transaction types, IPv6 born hosts, reconsume times, a long retry topic (V2 record)."""
    messages = []
    for i in range(count):
        properties = {"TAGS": f"tag{i % 3}", "KEYS": f"order-{i}  customer-{i % 4} "}
        if i % 5 != 4:  # a few without a unique key: their msg_id is the offset message ID
            properties["UNIQ_KEY"] = f"C0A8010A30391B6D3586174C{i:08X}"
        if i % 7 == 0:
            properties["color"] = "blue\u00e9"
        topic = ["Orders", "Payments", "%DLQ%group-a"][i % 3]
        sysflag = 0
        prepared = 0
        if i % 11 == 3:
            sysflag = SysFlag.TRANSACTION_COMMIT_TYPE
            prepared = 1234 + i
        born = (
            Host.parse("[2001:db8::7]:40000")
            if i % 6 == 5
            else Host.parse(f"10.1.2.{i % 250}:5{i % 9}000")
        )
        messages.append(
            PutMessage(
                topic=topic,
                body=bytes(
                    (i * 7 + k) % 256 for k in range((i % 50) * 25 + (1500 if i % 13 == 0 else 1))
                ),
                queue_id=i % 4,
                flag=i % 3,
                properties=properties,
                sysflag=sysflag,
                born_timestamp=T0 - 1000 + i,
                born_host=born,
                reconsume_times=i % 4,
                prepared_transaction_offset=prepared,
            )
        )
    messages.append(PutMessage(topic="%RETRY%" + "g" * 140, body=b"long retry topic"))
    # A cluster's reply topic is a system topic (store.topics.is_system_topic): read only with
    # includeSystemTopics.
    messages.append(PutMessage(topic=REPLY_TOPIC, body=b"a reply", properties={"TAGS": "r"}))
    return messages


def write_store(root: Path, messages: list[PutMessage], *, config: StoreConfig = SMALL) -> list:
    """Write ``messages``, then mark a few states; returns the PutResults of the messages."""
    with MessageStore.open(root, config=config, clock_ms=Clock()) as store:
        results = store.put_many(messages)
        store.set_state(results[1].physical_offset, MessageState.POISONED, "16 retries")
        store.set_state(results[2].physical_offset, MessageState.UNAVAILABLE, "held")
        store.set_state(results[2].physical_offset, MessageState.AVAILABLE, "released")
        store.set_state(results[4].physical_offset, MessageState.MARKED_FOR_DELETION, "gone")
    return results


def expected_rows(root: Path, *, system: bool = False) -> list[dict[str, Any]]:
    """What the exporter must give, from the store's own reader (one record at a time)."""
    reader = StoreReader(root)
    states = reader.states()
    rows = []
    for item in reader.iter_records():
        record: MessageRecord = item.record
        if not system and is_system_topic(record.topic):
            continue
        rows.append(row_of(record, item.physical_offset, item.crc_ok, item.segment.path, states))
    return rows


def row_of(
    record: MessageRecord, physical: int, crc_ok: bool, segment: Any, states: Any = None
) -> dict[str, Any]:
    properties = record.properties
    offset_id = offset_msg_id_from_packed(
        record.store_host.address, record.store_host.port, physical
    )
    change = states.change_of(physical) if states is not None else None
    return {
        "physical_offset": physical,
        "size": record.total_size,
        "magic": record.magic,
        "version": 2 if record.magic == MAGIC_V2 else 1,
        "body_crc": record.body_crc,
        "crc_ok": crc_ok,
        "queue_id": record.queue_id,
        "queue_offset": record.queue_offset,
        "flag": record.flag,
        "sysflag": record.sysflag,
        "transaction_type": TRANSACTION_LABELS[record.sysflag & SysFlag.TRANSACTION_MASK],
        "born_timestamp_ms": record.born_timestamp,
        "born_host": str(record.born_host),
        "store_timestamp_ms": record.store_timestamp,
        "store_host": str(record.store_host),
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "topic": record.topic,
        "tags": properties.get("TAGS"),
        "keys": record.keys,
        "properties": dict(properties),
        "body": bytes(record.body),
        "msg_id": properties.get("UNIQ_KEY") or offset_id,
        "offset_msg_id": offset_id,
        "state": change.state.label if change else "available",
        "state_reason": change.reason if change else None,
        "segment": str(segment),
    }


def normalise(row: dict[str, Any]) -> dict[str, Any]:
    """An Arrow or Spark row in the form of :func:`row_of` (maps as dicts, bytes, no datetimes)."""
    out = dict(row)
    for name in ("born_timestamp", "store_timestamp"):
        value = out.pop(name, None)
        if isinstance(value, dt.datetime):
            assert value.tzinfo is not None
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
            assert (value - epoch) // dt.timedelta(milliseconds=1) == out[f"{name}_ms"]
    props = out["properties"]
    out["properties"] = dict(props) if not isinstance(props, dict) else props
    out["body"] = bytes(out["body"])
    out["keys"] = list(out["keys"])
    return out


# -- a store as Apache RocketMQ writes it --------------------------------------------------


def rocketmq_store(root: Path, segment_size: int = 4096) -> list[dict[str, Any]]:
    """A RocketMQ-style store: commitlog/ only (no config, no consume queues, no index), no
    ``__CRC32#`` property, an END-OF-FILE filler closing the first segment, an IPv6 store host
    and a V2 (long topic) record. Returns the expected rows."""
    commitlog = root / paths.COMMITLOG
    commitlog.mkdir(parents=True)
    broker = Host.parse("192.168.0.10:10911")
    records = []
    for i in range(30):
        records.append(
            MessageRecord(
                topic="TopicTest" if i != 7 else "%RETRY%" + "c" * 130,
                body=f"Hello RocketMQ {i}".encode(),
                queue_id=i % 4,
                properties={
                    "UNIQ_KEY": f"7F00000117A418B4AAC2{i:012X}",
                    "WAIT": "true",
                    "TAGS": "TagA",
                    "CLUSTER": "DefaultCluster",
                    "MIN_OFFSET": "0",
                    "MAX_OFFSET": str(i),
                },
                born_timestamp=T0 + i,
                born_host=Host.parse("192.168.0.20:53001"),
                store_timestamp=T0 + 5 + i,
                store_host=broker if i != 20 else Host.parse("[fe80::1]:10911"),
                queue_offset=i // 4,
            )
        )
    segments: list[bytearray] = [bytearray()]
    starts = [0]
    expected = []
    for record in records:
        probe = encode_record(record)
        current = segments[-1]
        if len(current) + len(probe) + 8 > segment_size:
            current += encode_blank(segment_size - len(current))
            current += bytes(segment_size - len(current))
            starts.append(starts[-1] + segment_size)
            segments.append(bytearray())
            current = segments[-1]
        physical = starts[-1] + len(current)
        record.physical_offset = physical
        data = encode_record(record)
        current += data
        decoded_path = commitlog / paths.file_name_for_offset(starts[-1])
        record.total_size = len(data)
        expected.append(row_of(decode_record(data), physical, True, decoded_path))
    segments[-1] += bytes(segment_size - len(segments[-1]))  # preallocated, zero-filled
    for start, data in zip(starts, segments, strict=True):
        (commitlog / paths.file_name_for_offset(start)).write_bytes(bytes(data))
    return expected


def flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as handle:
        mapped = mmap.mmap(handle.fileno(), 0)
        mapped[position] ^= 0xFF
        mapped.flush()
        mapped.close()


def segment_paths(root: Path) -> list[Path]:
    return sorted(p for p in (root / paths.COMMITLOG).iterdir() if p.name.isdigit())


def data_end(path: Path) -> int:
    """Where written data ends in a zero-filled segment."""
    data = path.read_bytes()
    return len(data.rstrip(b"\0"))
