"""Reading pocketmq (and Apache RocketMQ) stores with Spark.

    from pocketmq import sparkexport
    sparkexport.register(spark)                       # once per session
    df = spark.read.format("pocketmq").load("/data/store")

Public API (needs the ``spark`` extra; from a pocketmq checkout:
``python3 -m pip install -e '.[spark]'``):

* :func:`register` - register the ``pocketmq`` data source with a session: the JVM source
  (``sparkexport/jvm``) when its jar is on the session's classpath, the Python source otherwise.
* :func:`session` - a SparkSession with the JVM source's jar on ``spark.jars`` (built at first
  use) and the source registered.
* :func:`read_store` - ``register`` + ``spark.read.format("pocketmq")...load(store)`` in one call.
* :func:`read_store_fallback` - the same DataFrame without registering anything
  (``binaryFile`` + ``mapInArrow``), for clusters where Python data sources cannot be registered.
* :data:`SCHEMA_DDL` - the columns, as a Spark DDL string.

:mod:`sparkexport.scan` (record walking, options, partition plans) imports without Spark; the
names above raise an ImportError that says what to install when pyspark or pyarrow is missing.
See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FORMAT", "SCHEMA_DDL", "read_store", "read_store_fallback", "register", "session"]

FORMAT = "pocketmq"


def __getattr__(name: str) -> Any:
    if name == "register":
        from pocketmq.sparkexport.source import register

        return register
    if name == "session":
        from pocketmq.sparkexport.source import session

        return session
    if name == "read_store":
        from pocketmq.sparkexport.source import read_store

        return read_store
    if name == "read_store_fallback":
        from pocketmq.sparkexport.fallback import read_store_fallback

        return read_store_fallback
    if name == "SCHEMA_DDL":
        from pocketmq.sparkexport._require import require_spark

        require_spark()
        from pocketmq.sparkexport.columns import SPARK_SCHEMA_DDL

        return SPARK_SCHEMA_DDL
    raise AttributeError(f"module 'sparkexport' has no attribute {name!r}")
