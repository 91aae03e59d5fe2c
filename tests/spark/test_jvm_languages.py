"""The JVM data source from the JVM's own languages, as a cluster user runs it: a Scala script in
pyspark's ``spark-shell --jars JAR`` (``spark.read.format("pocketmq")`` and Spark SQL's
``CREATE TABLE ... USING pocketmq``), and a Java program compiled with ``javac`` against
pyspark's jars and the pocketmq jar. Each prints what it read; the figures must be the Python
source's on the same store (through the shared session)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark.stores import varied_messages, write_store

MESSAGES = 40
JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("languages") / "store"
    write_store(root, varied_messages(MESSAGES))
    return root


def expected(spark: Any, store: Path) -> dict[str, int]:
    """Messages per topic and CRC-failed count, as the Python source reads them."""
    frame = spark.read.format("pocketmq").load(str(store))
    per_topic = {r["topic"]: r["count"] for r in frame.groupBy("topic").count().collect()}
    return {**{f"topic {t}": n for t, n in per_topic.items()}, "bad crc": 0}


def figures(output: str) -> dict[str, int]:
    """The ``= name: n`` lines a program printed (Spark's own output is ignored)."""
    found = {}
    for line in output.splitlines():
        if line.startswith("= "):
            name, value = line[2:].rsplit(": ", 1)
            found[name] = int(value)
    return found


def spark_environment() -> dict[str, str]:
    from pocketmq.sparkexport.jvm import pyspark_jars

    environment = dict(os.environ)
    environment["SPARK_HOME"] = str(pyspark_jars().parent)
    environment.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    environment["PYSPARK_PYTHON"] = sys.executable
    return environment


def run(command: list[str], cwd: Path) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        env=spark_environment(),
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"{command[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


def test_scala_and_spark_sql_in_spark_shell(
    spark: Any, jvm_jar: Path, store: Path, tmp_path: Path
) -> None:
    from pocketmq.sparkexport.jvm import pyspark_jars

    script = tmp_path / "read.scala"
    script.write_text(
        f"""
val df = spark.read.format("pocketmq").load("{store}")
df.groupBy("topic").count().collect().foreach(r => println(s"= topic ${{r.getString(0)}}: ${{r.getLong(1)}}"))
println(s"= bad crc: ${{df.filter($"crc_ok" === false).count()}}")
spark.sql("CREATE TABLE messages USING pocketmq OPTIONS (path '{store}')")
println(s"= sql rows: ${{spark.sql("SELECT count(*) FROM messages").first().getLong(0)}}")
System.exit(0)
"""
    )
    shell = pyspark_jars().parent / "bin" / "spark-shell"
    output = run(
        [
            str(shell),
            "--master",
            "local[1]",
            "--jars",
            str(jvm_jar),
            "--driver-java-options",
            JAVA_OPTIONS,
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
            "-i",
            str(script),
        ],
        tmp_path,
    )
    found = figures(output)
    want = expected(spark, store)
    assert found.pop("sql rows") == sum(n for k, n in want.items() if k.startswith("topic "))
    assert found == want


def test_a_java_program(spark: Any, jvm_jar: Path, store: Path, tmp_path: Path) -> None:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.skip("no JDK (javac, java) on PATH")
    from pocketmq.sparkexport.jvm import pyspark_jars

    source = tmp_path / "ReadStore.java"
    source.write_text(
        """
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

public class ReadStore {
    public static void main(String[] args) {
        SparkSession spark = SparkSession.builder().master("local[1]").appName("java")
            .config("spark.ui.enabled", "false").getOrCreate();
        Dataset<Row> df = spark.read().format("pocketmq").load(args[0]);
        for (Row r : df.groupBy("topic").count().collectAsList()) {
            System.out.println("= topic " + r.getString(0) + ": " + r.getLong(1));
        }
        System.out.println("= bad crc: " + df.filter("crc_ok = false").count());
        spark.stop();
    }
}
"""
    )
    classpath = f"{pyspark_jars()}/*:{jvm_jar}"
    run([javac, "--release", "17", "-cp", classpath, "-d", str(tmp_path), str(source)], tmp_path)
    # The module openings Spark's launcher passes on Java 17 (JavaModuleOptions)
    opens = [
        f"--add-opens=java.base/{package}=ALL-UNNAMED"
        for package in (
            "java.lang",
            "java.lang.invoke",
            "java.lang.reflect",
            "java.io",
            "java.net",
            "java.nio",
            "java.util",
            "java.util.concurrent",
            "java.util.concurrent.atomic",
            "sun.nio.ch",
            "sun.nio.cs",
            "sun.security.action",
            "sun.util.calendar",
        )
    ]
    output = run(
        [
            java,
            *JAVA_OPTIONS.split(),
            *opens,
            "-cp",
            f"{classpath}:{tmp_path}",
            "ReadStore",
            str(store),
        ],
        tmp_path,
    )
    assert figures(output) == expected(spark, store)
