"""The analyses (sparkexport.analyses) on a store a real broker wrote on a manual clock: every
number is known (tests/spark/broker_stores.py tells the story)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.spark.broker_stores import T0, TX_GROUP

pytestmark = pytest.mark.spark

S = 1000  # ms


def test_lifecycle_joins_every_copy_of_a_message(lifecycle_frame: Any) -> None:
    from pocketmq.sparkexport import analyses

    rows = {
        row.key: row.asDict(recursive=True) for row in analyses.lifecycle(lifecycle_frame).collect()
    }
    assert sorted(rows) == ["D1", "D2", "P1", "P2", "P3", "R1", "R2", "TX1", "TX2", "TX3", "TX4"]
    assert all(rows[k]["topic"] == "Orders" for k in ("D1", "D2", "P1", "R1", "R2"))
    assert rows["P1"]["sent_ms"] == T0 and rows["P1"]["sent_copies"] == 1
    assert rows["P1"]["retries"] == [] and rows["P1"]["tx_outcome"] is None
    d1 = rows["D1"]
    assert (d1["delay_level"], d1["scheduled_ms"], d1["delivered_ms"]) == (2, T0, T0 + 5 * S)
    assert d1["sent_ms"] == T0 and d1["sent_copies"] == 1
    assert (rows["D2"]["delay_level"], rows["D2"]["delivered_ms"]) == (3, T0 + 10 * S)
    r1 = rows["R1"]
    assert r1["retries"] == [
        {
            "reconsume_times": 1,
            "group": "billing",
            "delay_level": 3,
            "requested_ms": T0,
            "delivered_ms": T0 + 10 * S,
        },
        {
            "reconsume_times": 2,
            "group": "billing",
            "delay_level": 4,
            "requested_ms": T0 + 10 * S,
            "delivered_ms": T0 + 40 * S,
        },
    ]
    assert (r1["retry_count"], r1["dlq_group"], r1["dlq_ms"], r1["resent_ms"]) == (
        2,
        "billing",
        T0 + 40 * S,
        T0 + 40 * S,
    )
    assert (r1["first_ms"], r1["last_ms"]) == (T0, T0 + 40 * S)
    assert rows["R2"]["retry_count"] == 1 and rows["R2"]["dlq_ms"] is None
    tx = {k: rows[k] for k in ("TX1", "TX2", "TX3", "TX4")}
    assert {k: r["tx_outcome"] for k, r in tx.items()} == {
        "TX1": "committed",
        "TX2": "rolled back",
        "TX3": "committed",
        "TX4": "unknown",
    }
    assert {k: r["check_times"] for k, r in tx.items()} == {"TX1": 0, "TX2": 0, "TX3": 2, "TX4": 2}
    assert all(r["half_ms"] == T0 + 60 * S and r["topic"] == "Payments" for r in tx.values())
    assert (tx["TX3"]["committed_ms"], tx["TX3"]["op_ms"]) == (T0 + 96 * S, T0 + 96 * S)
    assert (tx["TX2"]["op_ms"], tx["TX2"]["committed_ms"]) == (T0 + 60 * S, None)
    assert tx["TX4"]["op_ms"] is None and tx["TX4"]["sent_copies"] == 1


def test_copies_name_each_stage(lifecycle_frame: Any) -> None:
    from pocketmq.sparkexport import analyses

    stages: dict[str, int] = {}
    for row in analyses.copies(lifecycle_frame).groupBy("stage").count().collect():
        stages[row.stage] = row["count"]
    assert stages == {
        "sent": 5,
        "scheduled": 5,  # D1, D2 and three retries
        "delivered": 2,
        "retry": 3,
        "dlq": 1,
        "resent": 1,
        "half": 8,  # 4 half messages and 2 checks each of TX3, TX4
        "op": 3,
        "committed": 2,
    }


def test_delay_accuracy_retry_funnel_transactions_and_rates(lifecycle_frame: Any) -> None:
    from pocketmq.sparkexport import analyses

    delays = [r.asDict() for r in analyses.delay_accuracy(lifecycle_frame).collect()]
    # The manual clock delivers each copy at its due time exactly: lateness 0.
    assert [
        (r["delay_level"], r["delay_ms"], r["scheduled"], r["delivered"], r["pending"])
        for r in delays
    ] == [(2, 5000, 1, 1, 0), (3, 10000, 3, 3, 0), (4, 30000, 1, 1, 0)]
    assert {(r["late_ms_min"], r["late_ms_max"], r["late_ms_p95"]) for r in delays} == {(0, 0, 0)}

    funnel = [
        (r.group, r.stage, r.messages) for r in analyses.retry_funnel(lifecycle_frame).collect()
    ]
    assert funnel == [
        ("billing", "retry 1", 2),
        ("billing", "retry 2", 1),
        ("billing", "dead-lettered", 1),
        ("billing", "resent", 1),
    ]

    outcomes = [
        (r.producer_group, r.outcome, r.transactions, r.checks, r.max_checks)
        for r in analyses.transaction_outcomes(lifecycle_frame).collect()
    ]
    assert outcomes == [
        (TX_GROUP, "committed", 2, 2, 2),
        (TX_GROUP, "rolled back", 1, 0, 0),
        (TX_GROUP, "unknown", 1, 2, 2),
    ]
    [tx4] = [r for r in analyses.transactions(lifecycle_frame).collect() if r.key == "TX4"]
    assert (tx4.half_copies, tx4.ended_ms, tx4.outcome) == (3, None, "unknown")

    per_topic: dict[tuple[str, int], int] = {}
    queues: dict[str, set[int]] = {}
    for r in analyses.rates(lifecycle_frame).collect():
        window = int(r.window_start.timestamp() * 1000) - T0
        per_topic[(r.topic, window)] = per_topic.get((r.topic, window), 0) + r.records
        queues.setdefault(r.topic, set()).add(r.queue_id)
    assert per_topic == {
        ("%DLQ%billing", 0): 1,
        ("%RETRY%billing", 0): 3,
        ("Orders", 0): 8,  # P1-P3, R1, R2, D1 and D2 delivered, R1 resent (to a random queue)
        ("Payments", 60 * S): 2,  # the two committed copies, in the second minute
    }
    assert queues["Orders"] == {0, 1, 2, 3} and queues["Payments"] == {0}


@pytest.fixture(scope="module")
def lifecycle_frame(spark: Any, lifecycle_store: Path) -> Any:
    from pocketmq.sparkexport import analyses

    frame = analyses.read_for_analyses(spark, lifecycle_store).cache()
    yield frame
    frame.unpersist()
