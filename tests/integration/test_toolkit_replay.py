"""Replay: a store's traffic sent again with its relative timing, from a user's suite (the
Python API against the fixture's broker) and from the command line; pocketmq's store and one
laid out as Apache RocketMQ writes it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.services.clock import ManualClock
from pocketmq.client import Message, Producer
from pocketmq.testing import EmbeddedBroker
from pocketmq.testing.embedded import test_store_config as small_store
from tests.integration.toolkit_suite import run_user_suite
from tests.spark.stores import rocketmq_store

# (clock step before the send, topic, body)
TRAFFIC = [
    ("0s", "Orders", b"o-1"),
    ("10s", "Orders", b"o-2"),
    ("0s", "Audit", b"a-1"),
    ("1m", "Orders", b"o-3"),
]


async def _incident(data: Path) -> list[str]:
    """A store with TRAFFIC, sent on a manual clock; returns the Orders messages' IDs."""
    config = BrokerConfig(port=0, data_dir=data, vip_channel=False, store=small_store())
    ids = []
    async with Broker(config, clock=ManualClock(), namesrv=True) as broker:
        assert broker.namesrv_address is not None
        async with Producer("app", namesrv=broker.namesrv_address) as producer:
            for step, topic, body in TRAFFIC:
                await broker.advance(step)
                result = await producer.send(Message(topic=topic, body=body, keys=[body.decode()]))
                if topic == "Orders":
                    ids.append(result.msg_id)
    return ids


SUITE = """
import json
import math
from pathlib import Path

import pytest

from pocketmq.testing import replay


@pytest.mark.asyncio
async def test_replay_keeps_the_timing(pocketmq_broker):
    store = Path("incident")
    report = await replay(
        store, namesrv=pocketmq_broker.namesrv_address, speed=math.inf, topics=["Orders"]
    )
    assert report.sent == {"Orders": 3} and report.manual_clock
    assert report.clock_advanced_ms == 70_000  # 10 s, then 1 min: the original gaps
    found = await pocketmq_broker.expect_delivered("Orders", 3)
    found.sort(key=lambda m: m.store_timestamp)
    assert [m.body for m in found] == [b"o-1", b"o-2", b"o-3"]
    gaps = [b.store_timestamp - a.store_timestamp for a, b in zip(found, found[1:])]
    assert gaps == [10_000, 60_000]
    # the same message IDs and keys: deduplication behaves as it did
    assert [m.msg_id for m in found] == json.loads(Path("ids.json").read_text())
    assert found[0].keys == ["o-1"]


@pytest.mark.asyncio
async def test_replay_paced_on_the_wall_clock(pocketmq_broker):
    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    report = await replay(
        "incident", namesrv=pocketmq_broker.namesrv_address, speed=10, sleep=sleep, limit=2
    )
    assert report.total == 2 and report.sent == {"Orders": 2}
    assert len(waits) == 1 and 0 <= waits[0] <= 1.0  # 10 s at x10, less the time taken


@pytest.mark.asyncio
async def test_bad_arguments(pocketmq_broker):
    with pytest.raises(ValueError, match="speed 0"):
        await replay("incident", namesrv=pocketmq_broker.namesrv_address, speed=0)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        await replay("missing", namesrv=pocketmq_broker.namesrv_address)
"""


async def test_replay_from_a_user_suite(tmp_path: Path) -> None:
    ids = await _incident(tmp_path / "incident")
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    run = run_user_suite(tmp_path, {"test_replay.py": SUITE})
    assert run.returncode == 0, run.output
    assert "3 passed" in run.outcome(), run.output


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", "replay", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def target() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


def test_the_command_line_replays_a_rocketmq_store(tmp_path: Path, target: EmbeddedBroker) -> None:
    rows = rocketmq_store(tmp_path / "rmq")
    wanted = [r for r in rows if r["topic"] == "TopicTest"]
    before = target.now_ms()
    run = _cli(str(tmp_path / "rmq"), "--speed", "max", "--namesrv", target.namesrv_address)
    assert run.returncode == 0, run.stderr
    # the %RETRY% record is a consumer's, not the application's traffic
    assert f"replayed {len(wanted)} message(s)" in run.stdout
    assert "skipped 1 of system/retry/DLQ topics" in run.stdout
    found = target.sync.expect_delivered("TopicTest", len(wanted), tags="TagA")
    assert sorted(m.body for m in found) == sorted(r["body"] for r in wanted)
    # queue ids kept; the clock moved by the store times' span
    assert {(m.queue_id, m.body) for m in found} == {(r["queue_id"], r["body"]) for r in wanted}
    span = max(r["store_timestamp_ms"] for r in wanted) - min(
        r["store_timestamp_ms"] for r in wanted
    )
    assert target.now_ms() - before == span


def test_the_command_line_says_what_is_wrong(tmp_path: Path, target: EmbeddedBroker) -> None:
    missing = _cli(str(tmp_path / "nothing"), "--namesrv", target.namesrv_address)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    speed = _cli(str(tmp_path), "--speed", "-1")
    assert speed.returncode == 2 and "a speed is above 0" in speed.stderr
