"""What a user's shell runs, in one process of its own (the ``cli_run`` fixture in
tests/spark/conftest.py starts it), so that one Spark start serves two modules' tests:

1. ``pocketmq export STORE --out WORK/export``: the CLI starts a quiet local session with the
   JVM data source's jar (built beforehand by the fixture) and says which source reads;
2. in that session (the jar on ``spark.jars``), ``pocketmq`` is the JVM source by its short name
   in Spark SQL, ``pocketmq_python`` the Python one, and forcing the Python one is refused.

(``pocketmq report`` takes its session through the same ``local_session``; its test runs it in
the tests' warm session: in a new JVM the analyses took three times as long.)

Each step's exit status goes to stdout as the last line (JSON); stderr is the commands' own,
with a ``=== step`` line before each step.

    python -m tests.spark.cli_process STORE WORK
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CliRun:
    """What tests/spark/cli_process.py did: ``pocketmq export`` of the lifecycle store in a
    process of its own, then the JVM source's checks in its session."""

    store: Path
    work: Path
    status: dict[str, Any]  # exit status of each step
    stderr: str

    def said(self, step: str) -> list[str]:
        """The stderr lines of one step (export, pick)."""
        part = self.stderr.split(f"=== {step}\n", 1)[1]
        return part.split("\n=== ", 1)[0].splitlines()


def _say(step: str) -> None:
    print(f"=== {step}", file=sys.stderr, flush=True)


def pick_checks(root: Path) -> str:
    """The session the CLI started resolves ``pocketmq`` to the JVM source; returns "jvm"."""
    from pyspark.sql import SparkSession

    from pocketmq.sparkexport.source import read_store, register, use_source
    from tests.spark.stores import rocketmq_store

    spark = SparkSession.getActiveSession()
    assert spark is not None, "the CLI's session is gone"
    rocketmq_store(root)
    picked = register(spark)
    assert picked == "jvm", picked
    spark.sql(f"CREATE TABLE t USING pocketmq OPTIONS (path '{root}', topics 'TopicTest')")
    plan = spark.sql("SELECT * FROM t")._jdf.queryExecution().executedPlan().toString()
    assert "ColumnarToRow" in plan, plan  # the JVM source's columnar batches
    assert spark.sql("SELECT count(*) FROM t").first()[0] == 29
    assert spark.read.format("pocketmq_python").load(str(root)).count() == 30
    # A read forced to the Python source goes through pocketmq_python in this session.
    assert use_source(spark, "python") == ("python", "pocketmq_python")
    assert read_store(spark, root, source="python").count() == 30
    try:
        register(spark, "python")
    except ValueError as error:
        assert "pocketmq_python" in str(error)
    else:
        raise AssertionError("the Python source was forced while the jar is on the classpath")
    return picked


def main(argv: list[str]) -> int:
    from pocketmq.cli import main as pocketmq

    store, work = argv[0], Path(argv[1])
    result: dict[str, object] = {}
    _say("export")
    result["export"] = pocketmq(["export", store, "--out", str(work / "export")])
    _say("pick")
    result["pick"] = pick_checks(work / "rocketmq")
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
