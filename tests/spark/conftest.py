"""One local SparkSession for the whole test session (starting one costs seconds).

Settings from shared/research/spark.md: no UI, two shuffle partitions, no AQE, serial GC and
C1 only (faster JVM start), workers started with this interpreter (PYSPARK_PYTHON), UTC."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip(
        "pyspark", reason="from a pocketmq checkout: python3 -m pip install -e '.[spark]'"
    )
    pytest.importorskip(
        "pyarrow", reason="from a pocketmq checkout: python3 -m pip install -e '.[spark]'"
    )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17 or 21")
    from pyspark.sql import SparkSession

    from pocketmq import sparkexport

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pocketmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    sparkexport.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lifecycle_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A store written by a real broker on a manual clock (tests/spark/broker_stores.py)."""
    from tests.spark.broker_stores import lifecycle_store as write

    return write(tmp_path_factory.mktemp("lifecycle"))


@pytest.fixture(scope="session")
def cli_run(spark: Any, lifecycle_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One Spark start in a process of its own, shared by the CLI tests of two modules."""
    from pocketmq.sparkexport.jvm import JvmBuildError, build_jar
    from tests.spark.cli_process import CliRun

    try:
        build_jar()  # beforehand, so the commands' output does not depend on the cache
    except JvmBuildError as error:
        pytest.skip(str(error))
    work = tmp_path_factory.mktemp("cli")
    env = {**os.environ}
    env.pop("SPARK_LOCAL_IP", None)  # as a user's shell has it: the commands bind by themselves
    env.pop("POCKETMQ_SPARK_SOURCE", None)
    env["POCKETMQ_SPARK_MASTER"] = "local[2]"
    env["POCKETMQ_SPARK_DRIVER_MEMORY"] = "1g"
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cli_process", str(lifecycle_store), str(work)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    status = json.loads(done.stdout.splitlines()[-1])
    return CliRun(store=lifecycle_store, work=work, status=status, stderr=done.stderr)


@pytest.fixture(scope="session")
def jvm_jar() -> Path:
    """The JVM data source's jar (built at first use; skipped where it cannot be built)."""
    pytest.importorskip("pyspark")
    from pocketmq.sparkexport.jvm import JvmBuildError, build_jar

    try:
        return build_jar()
    except JvmBuildError as error:
        pytest.skip(str(error))
