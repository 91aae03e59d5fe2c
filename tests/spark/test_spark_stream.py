"""``spark.readStream.format("pocketmq")`` tails a live commitlog."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pocketmq.store.message_store import MessageStore, PutMessage
from tests.spark.stores import SMALL, Clock, segment_paths

pytestmark = pytest.mark.spark


def test_streaming_picks_up_messages_appended_after_the_query_started(
    spark: Any, tmp_path: Path
) -> None:
    root = tmp_path / "live"
    with MessageStore.open(root, config=SMALL, clock_ms=Clock()) as store:
        first = store.put_many(PutMessage(topic="Live", body=f"m{i}".encode()) for i in range(30))
        query = (
            spark.readStream.format("pocketmq")
            .load(str(root))
            .writeStream.format("memory")
            .queryName("live_tail")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )
        try:
            query.processAllAvailable()
            assert spark.table("live_tail").count() == 30
            # Enough to roll over into new segments while the query runs.
            later = store.put_many(
                PutMessage(topic="Live", body=bytes([i % 256]) * 4000) for i in range(40)
            )
            query.processAllAvailable()
            rows = spark.table("live_tail").select("physical_offset", "crc_ok").collect()
            progress = query.lastProgress
        finally:
            query.stop()
    assert len(segment_paths(root)) >= 3
    assert sorted(r.physical_offset for r in rows) == [r.physical_offset for r in first + later]
    assert all(r.crc_ok for r in rows)
    assert json.loads(progress["sources"][0]["endOffset"]) == {"offset": later[-1].end_offset}
