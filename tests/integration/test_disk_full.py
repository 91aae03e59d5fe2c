"""A broker on a small real file system (tmpfs) that another process fills: unread messages are
kept, sends are refused with SERVICE_NOT_AVAILABLE and a remark without a path, the broker logs
one WARNING, and sends are taken again once space returns.

Mounting a tmpfs needs root (or CAP_SYS_ADMIN); elsewhere the test is skipped, and
tests/unit/test_disk_pressure.py covers the same rules with a fake disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.client import Message, Producer
from pocketmq.client.errors import BrokerError
from pocketmq.store.config import StoreConfig
from pocketmq.store.record import RecordLimits
from tests.integration.tmpfs import small_tmpfs

DISK_MIB = 16


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, DISK_MIB) as mount:
        yield mount


def config(data_dir: Path) -> BrokerConfig:
    return BrokerConfig(
        port=0,
        data_dir=data_dir,
        store=StoreConfig(
            commitlog_segment_size=256 * 1024,
            consume_queue_entries_per_file=1000,
            index_slot_count=101,
            index_entry_count=4000,
            limits=RecordLimits(body_size_max=64 * 1024, properties_size_max=4096),
        ),
        clean_resource_interval_s=0.1,
        default_topic_queue_nums=2,
    )


async def test_a_full_disk_keeps_unread_messages_and_refuses_sends(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pocketmq")
    # Another process takes 80 % of the disk.
    filler = small_disk / "other-process.bin"
    filler.write_bytes(bytes(int(DISK_MIB * 1024 * 1024 * 0.80)))
    body = b"m" * 8192
    async with Broker(config(small_disk / "store"), namesrv=True) as broker:
        assert broker.namesrv_address is not None
        async with Producer("disk-app", namesrv=broker.namesrv_address, retries=0) as producer:
            acked = 0
            refused: BrokerError | None = None
            for _ in range(2000):  # 16 MiB of 8 KiB bodies: the disk is full long before
                try:
                    await producer.send(Message(topic="Orders", body=body))
                except BrokerError as error:
                    refused = error
                    break
                acked += 1
            assert refused is not None, "the disk never filled"
            assert refused.code == 14  # SERVICE_NOT_AVAILABLE
            assert "disk is full" in str(refused.remark)
            assert str(small_disk) not in str(refused) and "/" not in str(refused.remark)
            assert acked > 20
            await asyncio.sleep(0.5)  # several retention passes under pressure
            store = broker.store
            kept = sum(
                store.max_offset("Orders", q) - store.min_offset("Orders", q)
                for q in store.queue_ids("Orders")
            )
            assert kept == acked, "acknowledged, unread messages were deleted"
            assert store.min_physical_offset == 0
            # Reads go on while writes are refused.
            first = store.get_messages("Orders", store.queue_ids("Orders")[0], 0, 4).messages
            assert first and store.read(first[0][1]).body == body
            # Space comes back: sends are taken again, with nothing restarted.
            filler.unlink()
            for _ in range(100):
                with contextlib.suppress(BrokerError):
                    await producer.send(Message(topic="Orders", body=b"after"))
                    break
                await asyncio.sleep(0.1)
            else:
                pytest.fail("sends were not taken again after space returned")
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "disk full" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
