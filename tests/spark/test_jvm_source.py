"""The JVM data source (sparkexport/jvm): its constants are generated from the record layout,
its jar registers the ``pocketmq`` short name, and it gives the Python data source's rows, byte
for byte, on the same stores (every column, damage and CRC flags, folded states, the report, a
RocketMQ store, options, byte ranges, Spark SQL).

The shared session has the Python source registered as ``pocketmq``; the JVM classes are added
to it as a jar *without* their service registration, so ``pocketmq`` stays the Python source for
the other tests and the JVM source is named by its class here."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest

from pocketmq.sparkexport.jvm import generate
from tests.spark.stores import (
    REPLY_TOPIC,
    data_end,
    flip_byte,
    rocketmq_store,
    segment_paths,
    varied_messages,
    write_store,
)

JVM_CLASS = "io.pocketmq.spark.PocketMQSource"
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def test_the_generated_layout_is_up_to_date() -> None:
    pytest.importorskip("pyarrow")
    assert generate.OUTPUT.read_text() == generate.render(), (
        "RecordLayout.java is stale: python -m pocketmq.sparkexport.jvm.generate"
    )
    text = generate.OUTPUT.read_text()
    assert "public static final int PHYSICAL_OFFSET_AT = 28;" in text
    assert "public static final int MAGIC_V1 = 0xDAA320A7;" in text


@pytest.fixture(scope="module")
def jvm(spark: Any, jvm_jar: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The shared session with the JVM classes on it (no service entry: see the docstring)."""
    with zipfile.ZipFile(jvm_jar) as jar:
        assert jar.read(SERVICE).decode().split() == [JVM_CLASS]
        classes = tmp_path_factory.mktemp("jvm") / "pocketmq-spark-classes.jar"
        with zipfile.ZipFile(classes, "w") as out:
            for item in jar.infolist():
                if item.filename != SERVICE:
                    out.writestr(item, jar.read(item))
    spark.sql(f"ADD JAR '{classes}'")
    return spark


def rows_of(frame: Any) -> list[tuple]:
    return [tuple(r) for r in frame.orderBy("segment", "physical_offset").collect()]


def both(spark: Any, root: Path, **options: str) -> tuple[list[tuple], list[tuple]]:
    frames = []
    for source in ("pocketmq", JVM_CLASS):
        reader = spark.read.format(source)
        for key, value in options.items():
            reader = reader.option(key, value)
        frames.append(reader.load(str(root)))
    assert frames[0].schema == frames[1].schema
    if options.get("report") == "true":
        return sorted(map(tuple, frames[0].collect()), key=str), sorted(
            map(tuple, frames[1].collect()), key=str
        )
    return rows_of(frames[0]), rows_of(frames[1])


@pytest.mark.spark
def test_jvm_and_python_sources_give_the_same_rows(jvm: Any, tmp_path: Path) -> None:
    root = tmp_path / "store"
    write_store(root, varied_messages(200))
    python_rows, jvm_rows = both(jvm, root, includeSystemTopics="true")
    assert len(python_rows) > 200 and jvm_rows == python_rows
    assert REPLY_TOPIC in {r[19] for r in jvm_rows}  # kept with the system topics ...
    states = {r[26] for r in jvm_rows}
    assert {"poisoned", "marked_for_deletion"} <= states
    for options in (
        {},
        {"topics": "Orders,%DLQ%group-a", "states": "available,poisoned"},
        {"startTime": "1700000000500", "endTime": "2023-11-14T22:13:22.100", "batchRows": "7"},
        {"maxPartitionBytes": "8k"},
    ):
        python_rows, jvm_rows = both(jvm, root, **options)
        assert jvm_rows == python_rows, options
        assert REPLY_TOPIC not in {r[19] for r in jvm_rows}  # ... and left out without them
    pruned = jvm.read.format(JVM_CLASS).load(str(root)).select("physical_offset", "msg_id", "tags")
    assert "ColumnarToRow" in pruned._jdf.queryExecution().executedPlan().toString()
    assert sorted(map(tuple, pruned.collect())) == sorted((r[0], r[24], r[20]) for r in python_rows)

    # Damage: a bad body CRC, a torn tail, a file that is not a segment, damage mid-segment.
    shutil.copytree(root, tmp_path / "damaged", ignore=shutil.ignore_patterns("lock"))
    root = tmp_path / "damaged"
    segments = segment_paths(root)
    flip_byte(segments[0], 400)  # in the second record of the first segment or its body
    flip_byte(segments[1], 4)  # the magic of the first record of the second segment
    end = data_end(segments[-1])
    with open(segments[-1], "r+b") as handle:
        handle.seek(end)
        handle.write(b"\x00\x00\x01\x00\xda\xa3\x20\xa7" + bytes(range(1, 33)))
    (root / "commitlog" / "00000000000000000000.bak").write_bytes(b"copy")
    # Bytes that are not UTF-8 in a topic and in a property: both sources repair them alike.
    first = segments[0].read_bytes()
    with open(segments[0], "r+b") as handle:
        for needle, bad in (
            (b"Payments", b"\xffayments"),
            ("blue\u00e9".encode(), b"blue\xff\xa9"),
        ):
            handle.seek(first.index(needle))
            handle.write(bad)
    python_rows, jvm_rows = both(jvm, root, includeSystemTopics="true")
    assert jvm_rows == python_rows
    assert "\ufffdayments" in {r[19] for r in jvm_rows}
    assert any("blue\ufffd\ufffd" in r[22].values() for r in jvm_rows)
    assert any(r[5] is False for r in jvm_rows)
    python_report, jvm_report = both(jvm, root, report="true")
    assert jvm_report == python_report
    assert any(r[6] for r in jvm_report) and any(r[8] for r in jvm_report)

    # A store as Apache RocketMQ writes it: fillers, an IPv6 store host, a V2 record.
    rocketmq = tmp_path / "rocketmq"
    rocketmq_store(rocketmq)
    python_rows, jvm_rows = both(jvm, rocketmq, maxPartitionBytes="1000")
    assert len(jvm_rows) == 30 and jvm_rows == python_rows

    # Spark SQL over a catalog table, and errors that say what is wrong.
    jvm.sql(f"CREATE TABLE pmq_jvm USING {JVM_CLASS} OPTIONS (path '{rocketmq}')")
    try:
        assert jvm.sql("SELECT count(*) FROM pmq_jvm WHERE topic = 'TopicTest'").first()[0] == 29
    finally:
        jvm.sql("DROP TABLE pmq_jvm")
    with pytest.raises(Exception, match="unknown pocketmq option"):
        jvm.read.format(JVM_CLASS).option("topic", "x").load(str(rocketmq)).count()
    with pytest.raises(Exception, match="no such folder"):
        jvm.read.format(JVM_CLASS).load(str(tmp_path / "missing")).count()


@pytest.mark.spark
def test_a_session_with_the_jar_picks_the_jvm_source_by_its_short_name(cli_run: Any) -> None:
    """In the session `pocketmq export` started in a process of its own (the shared session
    must keep the Python source as pocketmq): tests/spark/cli_process.py's pick_checks resolve
    ``pocketmq`` to the JVM source in Spark SQL, keep ``pocketmq_python`` readable and refuse
    forcing the Python source while the jar is on the classpath."""
    assert cli_run.status["pick"] == "jvm", cli_run.stderr[-3000:]


def test_without_javac_the_commands_fall_back_to_the_python_source(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `pocketmq export` and `report` do for a new session (sparkexport.cli.jar_for)."""
    pytest.importorskip("pyspark")
    from pocketmq.sparkexport.cli import jar_for
    from pocketmq.sparkexport.jvm import JvmBuildError

    monkeypatch.setenv("POCKETMQ_JVM_CACHE", str(tmp_path / "cache"))  # nothing built there
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # and no javac
    said: list[str] = []
    jar, why = jar_for("auto", said.append)
    assert jar is None and why.startswith("the JVM data source needs javac (a JDK 17 or newer")
    assert said == []  # no "building" line before the reason
    assert jar_for("python", said.append) == (None, "asked for")
    with pytest.raises(JvmBuildError, match="needs javac"):
        jar_for("jvm", said.append)
