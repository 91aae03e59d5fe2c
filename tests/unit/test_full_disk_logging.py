"""A full disk is said once per episode, and nothing it refused is lost.

The disk's refusal is an injected ``OSError(ENOSPC)`` from the store's ``put`` (state records
still go through, as they do past the warning ratio) or from the JSON save of consumer offsets.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.services import offsets as offsets_module
from pocketmq.broker.services.clock import ManualClock
from pocketmq.broker.services.outage import Outage
from pocketmq.broker.services.timer import TIMER_TOPIC
from pocketmq.store.message_store import MessageStore, PutMessage, PutResult
from pocketmq.store.state import STATE_TOPIC, MessageState
from pocketmq.store.topics import SCHEDULE_TOPIC

START_MS = 1_700_000_000_000


class FullDisk:
    """The store's ``put``, refusing every record but state records while ``full``."""

    def __init__(self, store: MessageStore) -> None:
        self.full = False
        self.refused = 0
        self._put = store.put

    def __call__(self, message: PutMessage) -> PutResult:
        if self.full and message.topic != STATE_TOPIC:
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._put(message)


@pytest.fixture
def caplog_broker(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger="pocketmq.broker")
    yield caplog


def records(caplog: pytest.LogCaptureFixture, text: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage() and r.levelno == level]


def bodies(broker: Broker, topic: str) -> list[bytes]:
    store = broker.store
    return [
        store.read(physical).body
        for _, (physical, _s, _c) in store.consume_queues.get(topic, 0).entries(0)
    ]


def put(broker: Broker, body: bytes, **properties: str) -> None:
    broker.writer.put(
        PutMessage(topic="T", body=body, properties=dict(properties)), dict(properties)
    )


async def test_a_refused_delay_level_delivery_waits_and_is_retried(
    caplog_broker: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS)
    async with Broker(port=0, store=tmp_path, clock=clock, namesrv=False) as broker:
        disk = FullDisk(broker.store)
        monkeypatch.setattr(broker.store, "put", disk)
        put(broker, b"first", DELAY="2")  # 5 s
        put(broker, b"second", DELAY="2")
        disk.full = True
        await broker.advance("5s")
        assert broker.schedule.retry_refused() == 0  # the housekeeping's retry: still full
        assert disk.refused == 2
        assert broker.store.consume_queues.get("T", 0) is None  # nothing delivered
        assert broker.schedule.offsets.get(2, 0) == 0  # not advanced past the refused message
        assert broker.schedule.pending() == 2
        warnings = records(caplog_broker, "delivering delay-level messages failed", logging.WARNING)
        assert len(warnings) == 1
        assert "No space left on device" in warnings[0].getMessage()
        assert warnings[0].exc_info is None  # the disk's error says it all: no traceback
        assert not records(caplog_broker, "scheduled work failed", logging.ERROR)

        disk.full = False
        assert broker.schedule.retry_refused() == 2
        assert bodies(broker, "T") == [b"first", b"second"]  # in order
        assert broker.schedule.offsets[2] == 2 and broker.schedule.pending() == 0
        assert (
            len(records(caplog_broker, "delivering delay-level messages works again", logging.INFO))
            == 1
        )
        assert (
            len(records(caplog_broker, "delivering delay-level messages failed", logging.WARNING))
            == 1
        )


async def test_a_refused_delay_level_delivery_survives_a_restart(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS)
    async with Broker(port=0, store=tmp_path, clock=clock, namesrv=False) as broker:
        disk = FullDisk(broker.store)
        monkeypatch.setattr(broker.store, "put", disk)
        put(broker, b"later", DELAY="1")  # 1 s
        disk.full = True
        await broker.advance("2s")
        assert broker.schedule.refused == {1}
    # Stopped while refused: the saved progress is still before the message.
    clock = ManualClock(START_MS + 2_000)
    async with Broker(port=0, store=tmp_path, clock=clock, namesrv=False) as broker:
        await broker.advance("1s")
        assert bodies(broker, "T") == [b"later"]
        assert broker.store.consume_queues.get(SCHEDULE_TOPIC, 0).max_offset == 1


async def test_a_refused_timer_delivery_waits_and_is_retried_in_due_order(
    caplog_broker: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS)
    async with Broker(port=0, store=None, clock=clock, namesrv=False) as broker:
        disk = FullDisk(broker.store)
        monkeypatch.setattr(broker.store, "put", disk)
        put(broker, b"at 20 s", TIMER_DELAY_SEC="20")
        put(broker, b"at 10 s", TIMER_DELAY_SEC="10")
        put(broker, b"at 40 s", TIMER_DELAY_SEC="40")
        waiting = [
            physical
            for _, (physical, _s, _c) in broker.store.consume_queues.get(TIMER_TOPIC, 0).entries(0)
        ]
        disk.full = True
        await broker.advance("30s")
        assert broker.store.consume_queues.get("T", 0) is None
        assert sorted(broker.timer.refused) == sorted(waiting[:2])
        for physical in waiting:
            assert broker.store.state_of(physical) is MessageState.UNAVAILABLE  # not dropped
        assert len(records(caplog_broker, "delivering timer messages failed", logging.WARNING)) == 1

        disk.full = False
        await broker.advance("20s")  # the 40 s timer fires: those due before it go first
        assert bodies(broker, "T") == [b"at 10 s", b"at 20 s", b"at 40 s"]
        assert broker.timer.refused == {}
        for physical in waiting:
            assert broker.store.state_of(physical) is MessageState.MARKED_FOR_DELETION
        assert (
            len(records(caplog_broker, "delivering timer messages works again", logging.INFO)) == 1
        )
        broker.timer.persist()
        assert broker.timer.low_water == 3


async def test_retry_copies_refused_by_the_disk_are_one_warning(
    caplog_broker: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Broker(port=0, store=None, clock=ManualClock(START_MS), namesrv=False) as broker:
        disk = FullDisk(broker.store)
        monkeypatch.setattr(broker.store, "put", disk)
        disk.full = True
        for i in range(5):
            assert (
                broker.writer.put_logged(PutMessage(topic="T", body=b"%d" % i, properties={}))
                is None
            )
        disk.full = False
        assert (
            broker.writer.put_logged(PutMessage(topic="T", body=b"ok", properties={})) is not None
        )
        assert (
            broker.writer.put_logged(PutMessage(topic="T", body=b"ok", properties={})) is not None
        )
    text = "storing the retry copies of messages consumers sent back"
    assert len(records(caplog_broker, text + " failed", logging.WARNING)) == 1
    assert len(records(caplog_broker, text + " works again", logging.INFO)) == 1
    assert not [r for r in caplog_broker.records if r.levelno >= logging.ERROR]


async def test_offsets_the_disk_refused_stay_dirty_and_are_saved_later(
    caplog_broker: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    saved = offsets_module.write_json

    def full(path: Path | None, content: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    async with Broker(port=0, store=tmp_path, clock=ManualClock(START_MS), namesrv=False) as broker:
        chores = broker._chores()
        offsets_file = tmp_path / "config" / "consumerOffset.json"
        delay_file = tmp_path / "config" / "delayOffset.json"
        broker.offsets.commit("G", "T", 0, 7)
        monkeypatch.setattr(offsets_module, "write_json", full)
        await broker.keep_house(chores)
        broker.offsets.commit("G", "T", 0, 8)
        await broker.keep_house(chores)
        assert not offsets_file.exists()
        assert delay_file.exists()  # the other chores still ran
        warnings = records(caplog_broker, "saving consumer offsets failed", logging.WARNING)
        assert len(warnings) == 1 and warnings[0].exc_info is None
        assert "No space left on device" in warnings[0].getMessage()

        monkeypatch.setattr(offsets_module, "write_json", saved)
        await broker.keep_house(chores)
        assert json.loads(offsets_file.read_bytes())["offsetTable"] == {"T@G": {"0": 8}}
        assert len(records(caplog_broker, "saving consumer offsets works again", logging.INFO)) == 1


def test_an_outage_says_a_new_reason_and_keeps_a_bugs_traceback(
    caplog_broker: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("saving x", "kept")
    outage.failed(OSError(errno.ENOSPC, "No space left on device"))
    outage.failed(OSError(errno.ENOSPC, "No space left on device"))
    outage.failed(OSError(errno.EROFS, "Read-only file system"))
    outage.failed(ValueError("a bug"))
    warnings = records(caplog_broker, "saving x failed", logging.WARNING)
    assert [w.exc_info is None for w in warnings] == [True, True, False]
    assert "Read-only file system" in warnings[1].getMessage()
    assert outage.failures == 4
    outage.worked()
    outage.worked()
    assert [r.getMessage() for r in records(caplog_broker, "saving x", logging.INFO)] == [
        "saving x works again (4 attempts failed)"
    ]
