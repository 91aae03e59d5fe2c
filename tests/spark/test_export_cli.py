"""``pocketmq export`` run as a user runs it: a folder per topic and day, progress in bytes and
records, no Spark start-up noise, the difference between rows and records explained, and a
``--topic`` that names nothing said in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pocketmq.sparkexport.cli import export_main
from tests.spark.cli_process import CliRun

pytestmark = pytest.mark.spark

# The store of tests/spark/broker_stores.py: 58 records, of which 14 in user, retry and DLQ
# topics (Orders 8, %RETRY%billing 3, Payments 2, %DLQ%billing 1); the other 44 are system
# records (28 state records, 5 delay-level copies, 8 half messages, 3 op records).
RECORDS, ROWS = 58, 14
NOISE = ("WARN", "log4j", "NativeCodeLoader", "incubator", "loopback", "setLogLevel")


def test_the_export_command(cli_run: CliRun) -> None:
    """`pocketmq export` in a process of its own (tests/spark/cli_process.py)."""
    store, out = cli_run.store, cli_run.work / "export"
    assert cli_run.status["export"] == 0, cli_run.stderr
    assert not [line for line in cli_run.stderr.splitlines() if any(w in line for w in NOISE)], (
        cli_run.stderr
    )
    lines = cli_run.said("export")
    # javac is there (the fixture built the jar): the JVM source reads, and says so.
    assert lines[0] == "reading with the JVM data source (--source python for the Python one)"
    assert lines[1] == f"exporting {store} to {out} (parquet, by topic and day)"
    progress = [line for line in lines if line.startswith("exporting: ")]
    assert progress and "(1/1 ranges)" in progress[-1], lines
    # The bytes read are those of the data, not of the preallocated segment (64 MiB).
    assert f"{ROWS} records written" in progress[-1] and " KiB of " in progress[-1]
    summary = next(line for line in lines if line.startswith("exported "))
    assert f"exported {ROWS} rows to {out} (parquet)" in summary
    assert summary.endswith(
        f"the store holds {RECORDS} records: the other {RECORDS - ROWS} are in system topics "
        "(SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_*, pocketmq's rmq_sys_ state records ...), "
        "which an export leaves out"
    )
    # One folder per topic and day (the broker's manual clock stood at 2027-01-15).
    folders = sorted(str(p.relative_to(out)) for p in out.glob("topic=*/day=*") if p.is_dir())
    assert folders == [
        "topic=%25DLQ%25billing/day=2027-01-15",
        "topic=%25RETRY%25billing/day=2027-01-15",
        "topic=Orders/day=2027-01-15",
        "topic=Payments/day=2027-01-15",
    ]


def test_a_topic_that_names_nothing_says_so(
    spark: Any, lifecycle_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = export_main(
        lifecycle_store, tmp_path / "out", "parquet", ["Orderz", "Payments"], False
    )
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"pocketmq export: no records of topic 'Orderz' in {lifecycle_store}; "
        "exported Payments (2 rows)"
    ]
    lines: list[str] = []
    assert export_main(lifecycle_store, tmp_path / "pay", "parquet", "Payments", lines.append) == 0
    assert lines[-1].endswith(
        f"the store holds {RECORDS} records: the other {RECORDS - 2} are in topics not named by "
        "--topic or in system topics (SCHEDULE_TOPIC_XXXX, RMQ_SYS_TRANS_*, pocketmq's rmq_sys_ "
        "state records ...), which an export leaves out"
    )
    progress = [line for line in lines if line.startswith("exporting: ")]
    assert progress[-1].startswith("exporting: ") and "2 records written" in progress[-1]
