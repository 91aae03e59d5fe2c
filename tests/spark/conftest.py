"""One local SparkSession for the whole test session (starting one costs seconds).

Settings from shared/research/spark.md: no UI, two shuffle partitions, no AQE, serial GC and
C1 only (faster JVM start), workers started with this interpreter (PYSPARK_PYTHON), UTC."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
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
