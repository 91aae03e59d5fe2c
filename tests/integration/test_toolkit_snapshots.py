"""Snapshots: from a user's suite (fixture helpers, across tests) and from the command line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.services.clock import ManualClock
from pocketmq.client import Message, Producer
from pocketmq.store.message_store import MessageStore
from pocketmq.testing.embedded import test_store_config as small_store
from tests.integration.toolkit_suite import run_user_suite

SUITE = """
import pytest

from pocketmq.client import Message, Producer, TransactionProducer, TransactionResolution

answers = []


async def checker(view):
    answers.append(view.msg_id)
    return TransactionResolution.COMMIT


@pytest.mark.asyncio
async def test_1_build_and_save(pocketmq_broker):
    namesrv = pocketmq_broker.namesrv_address
    async with Producer("shop", namesrv=namesrv) as producer:
        await producer.send(Message(topic="Orders", body=b"order-1"))
        await producer.send(Message(topic="Orders", body=b"in-10s", delay_level=3))
    async with TransactionProducer("pay", namesrv=namesrv, checker=checker) as tx:
        await tx.send_half(Message(topic="Payments", body=b"p-1"))
    await pocketmq_broker.advance("1s")
    saved_at = pocketmq_broker.now_ms()
    info = await pocketmq_broker.snapshot("after-setup")
    assert info.clock_ms == saved_at
    # the broker goes on after a snapshot, on the same addresses
    async with Producer("shop", namesrv=namesrv) as producer:
        await producer.send(Message(topic="Orders", body=b"order-2"))
    await pocketmq_broker.expect_delivered("Orders", 2)
    await pocketmq_broker.advance("1h")  # the delayed message lands
    await pocketmq_broker.expect_delivered("Orders", 3)

    await pocketmq_broker.restore("after-setup")
    assert pocketmq_broker.now_ms() == saved_at  # the clock went back
    await pocketmq_broker.expect_delivered("Orders", 1, body=b"order-1")
    with pytest.raises(AssertionError, match="found 1"):
        await pocketmq_broker.no_pending_transactions()


@pytest.mark.asyncio
async def test_2_a_later_test_starts_from_the_snapshot(pocketmq_broker):
    info = await pocketmq_broker.restore("after-setup")
    assert [s.name for s in pocketmq_broker.list_snapshots()] == ["after-setup"]
    assert pocketmq_broker.now_ms() == info.clock_ms
    await pocketmq_broker.expect_delivered("Orders", 1)
    namesrv = pocketmq_broker.namesrv_address
    # the pending delay level and the pending transaction came back with the store
    async with TransactionProducer("pay", namesrv=namesrv, checker=checker) as tx:
        await pocketmq_broker.advance("10s")
        await pocketmq_broker.expect_delivered("Orders", 1, body=b"in-10s")
        await pocketmq_broker.advance_until_idle()
        await pocketmq_broker.no_pending_transactions(timeout=10)
    await pocketmq_broker.expect_delivered("Payments", 1, body=b"p-1")
    assert answers


@pytest.mark.pocketmq(store="memory")
def test_3_memory_store_refuses(pocketmq_broker):
    from pocketmq.testing import SnapshotError

    with pytest.raises(SnapshotError, match="store='memory'"):
        pocketmq_broker.sync.snapshot("x")


def test_4_unknown_and_bad_names(pocketmq_broker):
    from pocketmq.testing import SnapshotError

    with pytest.raises(SnapshotError, match="no snapshot 'nope'.*there: after-setup"):
        pocketmq_broker.sync.restore("nope")
    with pytest.raises(SnapshotError, match="snapshot name '../x'"):
        pocketmq_broker.sync.snapshot("../x")
"""


def test_snapshots_in_a_user_suite(tmp_path: Path) -> None:
    run = run_user_suite(tmp_path, {"test_snap.py": SUITE})
    assert run.returncode == 0, run.output
    assert "4 passed" in run.outcome(), run.output


def _pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _send(data: Path, *bodies: bytes) -> int:
    """Send ``bodies`` to a broker on ``data``, stop it; how many messages Orders holds."""
    config = BrokerConfig(port=0, data_dir=data, vip_channel=False, store=small_store())
    async with Broker(config, clock=ManualClock(), namesrv=True) as broker:
        assert broker.namesrv_address is not None
        async with Producer("shop", namesrv=broker.namesrv_address) as producer:
            for body in bodies:
                await producer.send(Message(topic="Orders", body=body))
        return sum(broker.store.max_offset("Orders", q) for q in broker.store.queue_ids("Orders"))


async def test_the_command_line_saves_lists_and_restores(tmp_path: Path) -> None:
    data, snaps = tmp_path / "data", tmp_path / "snaps"
    assert await _send(data, b"one", b"two") == 2
    saved = _pocketmq("snapshot", "save", "two", "--data", str(data), "--snapshots", str(snaps))
    assert saved.returncode == 0, saved.stderr
    assert "saved snapshot two" in saved.stdout
    listed = _pocketmq("snapshot", "list", "--data", str(data), "--snapshots", str(snaps), "--json")
    assert '"name": "two"' in listed.stdout and '"clock_ms": ' in listed.stdout
    again = _pocketmq("snapshot", "save", "two", "--data", str(data), "--snapshots", str(snaps))
    assert again.returncode == 1 and "exists already" in again.stderr
    assert await _send(data, b"three") == 3
    restored = _pocketmq(
        "snapshot", "restore", "two", "--data", str(data), "--snapshots", str(snaps)
    )
    assert restored.returncode == 0, restored.stderr
    assert await _send(data) == 2  # back to two messages


async def test_the_command_line_refuses_an_open_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await _send(data, b"one")
    with MessageStore.open(data, config=small_store()):
        busy = await asyncio.to_thread(_pocketmq, "snapshot", "save", "x", "--data", str(data))
    assert busy.returncode == 1
    assert "is open in a running broker: stop it first" in busy.stderr
    missing = _pocketmq("snapshot", "restore", "none", "--data", str(data))
    assert missing.returncode == 1 and "no snapshot 'none'" in missing.stderr
    default_root = data.with_name("data.snapshots")
    assert not default_root.exists()


async def test_a_store_not_stopped_cleanly_is_not_saved(tmp_path: Path) -> None:
    data = tmp_path / "data"
    await _send(data, b"one")
    (data / "abort").write_text("4242")  # as a killed broker leaves it
    refused = _pocketmq("snapshot", "save", "x", "--data", str(data))
    assert refused.returncode == 1 and "was not stopped cleanly" in refused.stderr
    bad = _pocketmq("snapshot", "save", "no/slash", "--data", str(data))
    assert bad.returncode == 1 and "snapshot name 'no/slash'" in bad.stderr
