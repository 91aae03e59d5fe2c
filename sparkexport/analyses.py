"""What a RocketMQ user asks of a store, as DataFrame functions over the ``pocketmq`` source.

Each function takes the DataFrame ``spark.read.format("pocketmq")`` gives (read it with
``includeSystemTopics=true``: delays wait in ``SCHEDULE_TOPIC_XXXX`` and transactions in
``RMQ_SYS_TRANS_HALF_TOPIC`` / ``RMQ_SYS_TRANS_OP_HALF_TOPIC``; :func:`read_for_analyses` does
it) and returns a DataFrame; nothing is collected, so they run on a cluster as they do locally.

A broker writes a message again at each step of its life, every copy keeping the properties,
among them the unique key ``UNIQ_KEY`` that joins them (:func:`copies` names each copy's stage):

========== ==================================================================================
stage      the copy
========== ==================================================================================
sent       as the producer sent it, in its topic
scheduled  waiting for a delay level in ``SCHEDULE_TOPIC_XXXX`` (queue = level - 1) with
           ``REAL_TOPIC`` / ``REAL_QID`` / ``DELAY``; a retry waits here too, its
           ``REAL_TOPIC`` being ``%RETRY%<group>`` and ``RECONSUME_TIME`` its number
delivered  written to its real topic when the level was due (``REAL_TOPIC`` kept, ``WAIT=false``)
retry      a retry delivered to ``%RETRY%<group>`` (reconsume times = its number)
dlq        in ``%DLQ%<group>`` once the retries ran out or the consumer gave up
resent     written back from the DLQ to its topic (``RETRY_TOPIC``; ``ORIGIN_MESSAGE_ID`` kept)
half       a transaction's half message in ``RMQ_SYS_TRANS_HALF_TOPIC``; each check-back
           writes it again with ``TRANSACTION_CHECK_TIMES`` raised
op         the op record of a commit or rollback (``RMQ_SYS_TRANS_OP_HALF_TOPIC``, tag ``d``,
           body ``<half queue offset>,``): it has no unique key and is joined to the half copy
           at that queue offset
committed  the committed copy in the real topic (transaction type ``commit``)
discarded  a half message checked too often, copied to ``TRANS_CHECK_MAX_TIME_TOPIC``
========== ==================================================================================

Records of other system topics (state records, timer wheel, ...) have no stage and are left out.
Times are the broker's store times (``store_timestamp_ms``), so they compare across copies.
"""

from __future__ import annotations

import os
from typing import Any

from pocketmq.store.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels
from pocketmq.store.topics import (
    DLQ_TOPIC_PREFIX,
    REPLY_TOPIC_POSTFIX,
    RETRY_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SYSTEM_TOPIC_PREFIX,
    SYSTEM_TOPICS,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

__all__ = [
    "ANALYSIS_COLUMNS",
    "STAGES",
    "copies",
    "delay_accuracy",
    "lifecycle",
    "narrow",
    "rates",
    "read_for_analyses",
    "retry_funnel",
    "transaction_outcomes",
    "transactions",
]

STAGES = (
    "sent",
    "scheduled",
    "delivered",
    "retry",
    "dlq",
    "resent",
    "half",
    "op",
    "committed",
    "discarded",
)
# Outcomes of a transaction, as transactions() names them.
COMMITTED, ROLLED_BACK, DISCARDED, UNKNOWN = "committed", "rolled back", "discarded", "unknown"


def _functions() -> Any:
    from pyspark.sql import functions

    return functions


# The columns the analyses use; bodies are kept only for op records (they name half messages).
ANALYSIS_COLUMNS = (
    "topic",
    "properties",
    "msg_id",
    "queue_id",
    "queue_offset",
    "reconsume_times",
    "transaction_type",
    "size",
    "store_timestamp",
    "store_timestamp_ms",
    "physical_offset",
)


def read_for_analyses(spark: Any, store_dir: str | os.PathLike[str], **options: Any) -> Any:
    """The store's DataFrame as the analyses need it: system topics kept, and only the columns
    they use (:func:`narrow`), so that ``.cache()`` holds little more than the properties."""
    from pocketmq.sparkexport.source import read_store

    return narrow(read_store(spark, store_dir, includeSystemTopics=True, **options))


def narrow(frame: Any) -> Any:
    """``frame`` with only the columns the analyses use; ``body`` only for op records."""
    F = _functions()
    return frame.select(
        *ANALYSIS_COLUMNS,
        F.when(F.col("topic") == TRANS_OP_HALF_TOPIC, F.col("body")).alias("body"),
    )


def _is_system(topic: Any) -> Any:
    """``store.topics.is_system_topic`` as a column expression (the same three rules)."""
    return (
        topic.isin(*SYSTEM_TOPICS)
        | topic.startswith(SYSTEM_TOPIC_PREFIX)
        | topic.endswith("_" + REPLY_TOPIC_POSTFIX)
    )


def _prop(name: str) -> Any:
    return _functions().col("properties").getItem(name)


def copies(frame: Any) -> Any:
    """One row per copy of a message: ``key`` (the unique key), ``stage`` (see the module),
    ``topic``, ``target_topic`` (where a scheduled or half copy goes), ``group`` (of a retry,
    DLQ or retry-scheduled copy), ``producer_group`` (of a half copy), ``queue_id``,
    ``queue_offset``, ``reconsume_times``, ``delay_level``, ``check_times``,
    ``store_timestamp_ms``, ``physical_offset``.

    Every analysis but :func:`rates` starts from these rows and takes them as its input too:
    for several analyses of one store, ``rows = copies(frame).cache()`` and pass ``rows``."""
    F = _functions()
    if "stage" in frame.columns:
        return frame  # already the copies
    topic = F.col("topic")
    real_topic = _prop("REAL_TOPIC")
    stage = (
        F.when(topic == SCHEDULE_TOPIC, "scheduled")
        .when(topic == TRANS_HALF_TOPIC, "half")
        .when(topic == TRANS_OP_HALF_TOPIC, "op")
        .when(topic == TRANS_CHECK_MAX_TIME_TOPIC, "discarded")
        .when(topic.startswith(DLQ_TOPIC_PREFIX), "dlq")
        .when(topic.startswith(RETRY_TOPIC_PREFIX), "retry")
        .when(_is_system(topic), F.lit(None))
        .when(F.col("transaction_type") == "commit", "committed")
        .when(_prop("RETRY_TOPIC") == topic, "resent")
        .when(real_topic.isNotNull() & (_prop("WAIT") == "false"), "delivered")
        .otherwise("sent")
    )
    # The retry's group: from its topic, or from the topic a scheduled retry waits for.
    group_topic = F.when(topic == SCHEDULE_TOPIC, real_topic).otherwise(topic)
    group = F.when(
        group_topic.startswith(RETRY_TOPIC_PREFIX),
        group_topic.substr(F.lit(len(RETRY_TOPIC_PREFIX) + 1), F.length(group_topic)),
    ).when(
        topic.startswith(DLQ_TOPIC_PREFIX),
        topic.substr(F.lit(len(DLQ_TOPIC_PREFIX) + 1), F.length(topic)),
    )
    rows = frame.select(
        F.coalesce(_prop("UNIQ_KEY"), F.col("msg_id")).alias("key"),
        stage.alias("stage"),
        topic,
        F.when(topic.isin(SCHEDULE_TOPIC, TRANS_HALF_TOPIC), real_topic).alias("target_topic"),
        group.alias("group"),
        F.when(topic == TRANS_HALF_TOPIC, _prop("PGROUP")).alias("producer_group"),
        "queue_id",
        "queue_offset",
        "reconsume_times",
        F.when(
            topic == SCHEDULE_TOPIC,
            F.coalesce(_prop("DELAY").cast("int"), F.col("queue_id") + 1),
        ).alias("delay_level"),
        F.when(
            topic == TRANS_HALF_TOPIC,
            F.coalesce(_prop("TRANSACTION_CHECK_TIMES").cast("int"), F.lit(0)),
        ).alias("check_times"),
        "store_timestamp_ms",
        "physical_offset",
        F.when(topic == TRANS_OP_HALF_TOPIC, F.col("body")).alias("_op_body"),
    ).filter(F.col("stage").isNotNull())
    # Op records: the body lists half queue offsets ("3," or, batched, "3,4,"); each names the
    # half copy at that offset of the half topic's queue 0, whose key is the transaction's.
    ops = (
        rows.filter(F.col("stage") == "op")
        .select(
            *[c for c in rows.columns if c not in ("key", "_op_body")],
            F.explode(F.split(F.col("_op_body").cast("string"), ",")).alias("_half_offset"),
        )
        .filter(F.col("_half_offset") != "")
        .withColumn("_half_offset", F.col("_half_offset").cast("long"))
    )
    halves = rows.filter(F.col("stage") == "half").select(
        F.col("key"), F.col("queue_offset").alias("_half_offset")
    )
    ops = ops.join(halves, "_half_offset", "left").drop("_half_offset")
    others = rows.filter(F.col("stage") != "op").drop("_op_body")
    return others.unionByName(ops.select(*others.columns))


def lifecycle(frame: Any) -> Any:
    """One row per message (unique key) with the time of each stage of its life:

    ``key``, ``topic`` (the topic it was sent to), ``sent_ms`` (when the producer's copy was
    stored: plain, delayed or half message), ``sent_copies`` (more than 1: the producer sent it
    again, e.g. a send retried after a timeout), ``delay_level``, ``scheduled_ms``,
    ``delivered_ms`` (a delayed message: when it waited and when it reached its topic),
    ``retries`` (array of ``{group, reconsume_times, delay_level, requested_ms, delivered_ms}``,
    in order), ``retry_count``, ``dlq_group``, ``dlq_ms``, ``resent_ms``, ``half_ms`` (first half
    copy), ``check_times``, ``op_ms``, ``committed_ms``, ``discarded_ms``, ``tx_outcome``
    (null for a message that is not transactional), ``first_ms``, ``last_ms``."""
    F = _functions()
    rows = copies(frame)
    ms = F.col("store_timestamp_ms")

    def first(stage: str, value: Any = None) -> Any:
        chosen = ms if value is None else value
        return F.min(F.when(F.col("stage") == stage, chosen))

    user_delay = (F.col("stage") == "scheduled") & ~F.col("target_topic").startswith(
        RETRY_TOPIC_PREFIX
    )
    # What the producer wrote: a plain copy, a delayed one (it waits first) or a half message.
    sent = (
        (F.col("stage") == "sent")
        | user_delay
        | ((F.col("stage") == "half") & (F.col("check_times") == 0))
    )
    per_key = rows.groupBy("key").agg(
        F.first(
            F.when(F.col("stage").isin("sent", "delivered", "committed", "resent"), F.col("topic")),
            ignorenulls=True,
        ).alias("_own_topic"),
        F.first(F.col("target_topic"), ignorenulls=True).alias("_target_topic"),
        F.min(F.when(sent, ms)).alias("sent_ms"),
        F.count(F.when(sent, 1)).alias("sent_copies"),
        F.min(F.when(user_delay, F.col("delay_level"))).alias("delay_level"),
        F.min(F.when(user_delay, ms)).alias("scheduled_ms"),
        first("delivered").alias("delivered_ms"),
        F.max(F.when(F.col("stage").isin("retry", "dlq"), F.col("reconsume_times"))).alias(
            "_reconsumed"
        ),
        F.first(F.when(F.col("stage") == "dlq", F.col("group")), ignorenulls=True).alias(
            "dlq_group"
        ),
        first("dlq").alias("dlq_ms"),
        first("resent").alias("resent_ms"),
        first("half").alias("half_ms"),
        F.max(F.col("check_times")).alias("check_times"),
        first("op").alias("op_ms"),
        first("committed").alias("committed_ms"),
        first("discarded").alias("discarded_ms"),
        F.min(ms).alias("first_ms"),
        F.max(ms).alias("last_ms"),
    )
    retries = (
        _retry_steps(rows)
        .groupBy("key")
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        "reconsume_times", "group", "delay_level", "requested_ms", "delivered_ms"
                    )
                )
            ).alias("_retries")
        )
    )
    tx_outcome = (
        F.when(F.col("half_ms").isNull(), F.lit(None))
        .when(F.col("committed_ms").isNotNull(), COMMITTED)
        .when(F.col("discarded_ms").isNotNull(), DISCARDED)
        .when(F.col("op_ms").isNotNull(), ROLLED_BACK)
        .otherwise(UNKNOWN)
    )
    empty = F.array().cast(
        "array<struct<reconsume_times:int,group:string,delay_level:int,"
        "requested_ms:bigint,delivered_ms:bigint>>"
    )
    return per_key.join(retries, "key", "left").select(
        "key",
        F.coalesce("_own_topic", "_target_topic").alias("topic"),
        "sent_ms",
        "sent_copies",
        "delay_level",
        "scheduled_ms",
        "delivered_ms",
        F.coalesce("_retries", empty).alias("retries"),
        F.size(F.coalesce("_retries", empty)).alias("retry_count"),
        "dlq_group",
        "dlq_ms",
        "resent_ms",
        "half_ms",
        "check_times",
        "op_ms",
        "committed_ms",
        "discarded_ms",
        tx_outcome.alias("tx_outcome"),
        "first_ms",
        "last_ms",
    )


def _retry_steps(rows: Any) -> Any:
    """One row per retry of a message for a group: when it was asked for (its scheduled copy)
    and delivered (its copy in ``%RETRY%<group>``), matched by key, group and reconsume times."""
    F = _functions()
    asked = (
        rows.filter(
            (F.col("stage") == "scheduled") & F.col("target_topic").startswith(RETRY_TOPIC_PREFIX)
        )
        .groupBy("key", "group", "reconsume_times")
        .agg(
            F.min("delay_level").alias("delay_level"),
            F.min("store_timestamp_ms").alias("requested_ms"),
        )
    )
    arrived = (
        rows.filter(F.col("stage") == "retry")
        .groupBy("key", "group", "reconsume_times")
        .agg(F.min("store_timestamp_ms").alias("delivered_ms"))
    )
    return asked.join(arrived, ["key", "group", "reconsume_times"], "full_outer").select(
        "key",
        F.col("reconsume_times").cast("int").alias("reconsume_times"),
        "group",
        F.col("delay_level").cast("int").alias("delay_level"),
        "requested_ms",
        "delivered_ms",
    )


def delay_accuracy(frame: Any, delay_levels: str = DEFAULT_DELAY_LEVELS) -> Any:
    """Per delay level (user delays and retries alike): ``delay_level``, ``delay_ms`` (the
    level's delay, from ``delay_levels``: the broker's ``messageDelayLevel``), ``scheduled``
    (copies that waited), ``delivered``, ``pending`` (not delivered: still waiting, or
    delivered where this store does not hold it), and the lateness of each delivery,
    delivered store time minus due time (waiting copy's store time + the level's delay), in
    milliseconds: ``late_ms_min``, ``late_ms_avg``, ``late_ms_p50``, ``late_ms_p95``,
    ``late_ms_max``. A waiting copy is matched to the delivered copy with its key, its real
    topic and reconsume times, written at or after it."""
    F = _functions()
    levels = parse_delay_levels(delay_levels)
    rows = copies(frame)
    waiting = rows.filter(F.col("stage") == "scheduled").select(
        "key",
        F.col("target_topic").alias("_to"),
        "reconsume_times",
        "delay_level",
        F.col("store_timestamp_ms").alias("scheduled_ms"),
        F.col("physical_offset").alias("_waiting_at"),
    )
    arrived = rows.filter(F.col("stage").isin("delivered", "retry")).select(
        "key",
        F.col("topic").alias("_to"),
        "reconsume_times",
        F.col("store_timestamp_ms").alias("delivered_ms"),
    )
    joined = (
        waiting.join(arrived, ["key", "_to", "reconsume_times"], "left")
        .filter(F.col("delivered_ms").isNull() | (F.col("delivered_ms") >= F.col("scheduled_ms")))
        .groupBy("_waiting_at", "delay_level", "scheduled_ms")
        .agg(F.min("delivered_ms").alias("delivered_ms"))
    )
    level_ms = F.element_at(
        F.array(*[F.lit(int(v)) for v in levels]),
        F.least(F.greatest(F.col("delay_level"), F.lit(1)), F.lit(len(levels))),
    )
    late = F.col("delivered_ms") - (F.col("scheduled_ms") + level_ms)
    return (
        joined.withColumn("_late", late)
        .groupBy("delay_level")
        .agg(
            F.first(level_ms).alias("delay_ms"),
            F.count("*").alias("scheduled"),
            F.count("delivered_ms").alias("delivered"),
            F.min("_late").alias("late_ms_min"),
            F.avg("_late").alias("late_ms_avg"),
            F.percentile_approx("_late", 0.5).alias("late_ms_p50"),
            F.percentile_approx("_late", 0.95).alias("late_ms_p95"),
            F.max("_late").alias("late_ms_max"),
        )
        .withColumn("pending", F.col("scheduled") - F.col("delivered"))
        .select(
            F.col("delay_level").cast("int").alias("delay_level"),
            "delay_ms",
            "scheduled",
            "delivered",
            "pending",
            "late_ms_min",
            "late_ms_avg",
            "late_ms_p50",
            "late_ms_p95",
            "late_ms_max",
        )
        .orderBy("delay_level")
    )


def retry_funnel(frame: Any) -> Any:
    """Per consumer group, how far its messages went: ``group``, ``step`` (1, 2, ... for retry
    1, 2, ...; then the DLQ and the resend from it), ``stage`` (``retry 1``, ..., ``dead-lettered``,
    ``resent``) and ``messages`` (distinct messages that reached the step). A retry counts once
    asked for (its scheduled copy) even if not delivered yet; ``resent`` counts dead letters of
    the group written back to their topic later."""
    F = _functions()
    rows = copies(frame)
    retried = (
        rows.filter(
            ((F.col("stage") == "scheduled") & F.col("target_topic").startswith(RETRY_TOPIC_PREFIX))
            | (F.col("stage") == "retry")
        )
        .select("group", "key", F.col("reconsume_times").cast("int").alias("step"))
        .distinct()
        .groupBy("group", "step")
        .agg(F.count("*").alias("messages"))
        .withColumn("stage", F.concat(F.lit("retry "), F.col("step").cast("string")))
    )
    dead = (
        rows.filter(F.col("stage") == "dlq")
        .groupBy("group", "key")
        .agg(F.min("store_timestamp_ms").alias("dlq_ms"))
    )
    resent = (
        dead.join(
            rows.filter(F.col("stage") == "resent").select(
                "key", F.col("store_timestamp_ms").alias("resent_ms")
            ),
            "key",
        )
        .filter(F.col("resent_ms") >= F.col("dlq_ms"))
        .select("group", "key")
        .distinct()
        .groupBy("group")
        .agg(F.count("*").alias("messages"))
    )
    # After the last retry step of any group (steps beyond 1000 do not happen: 16 by default).
    dead_counts = dead.groupBy("group").agg(F.count("*").alias("messages"))
    return (
        retried.select("group", "step", "stage", "messages")
        .unionByName(
            dead_counts.select(
                "group",
                F.lit(1001).alias("step"),
                F.lit("dead-lettered").alias("stage"),
                "messages",
            )
        )
        .unionByName(
            resent.select(
                "group", F.lit(1002).alias("step"), F.lit("resent").alias("stage"), "messages"
            )
        )
        .orderBy("group", "step")
    )


def transactions(frame: Any) -> Any:
    """One row per transaction (unique key of its half message): ``key``, ``producer_group``,
    ``topic``, ``half_ms``, ``check_times`` (check-backs: the highest ``TRANSACTION_CHECK_TIMES``
    of its half copies), ``half_copies``, ``ended_ms`` and ``outcome``: ``committed`` (a
    committed copy), ``rolled back`` (an op record and no committed copy), ``discarded``
    (checked too often) or ``unknown`` (not ended in this store)."""
    F = _functions()
    rows = copies(frame)
    halves = (
        rows.filter(F.col("stage") == "half")
        .groupBy("key")
        .agg(
            F.first("producer_group", ignorenulls=True).alias("producer_group"),
            F.first("target_topic", ignorenulls=True).alias("_real_topic"),
            F.count("*").alias("half_copies"),
        )
    )
    life = lifecycle(rows).filter(F.col("half_ms").isNotNull())
    ended = F.coalesce("committed_ms", "discarded_ms", "op_ms")
    return (
        life.join(halves, "key")
        .select(
            "key",
            "producer_group",
            F.col("_real_topic").alias("topic"),
            "half_ms",
            "check_times",
            "half_copies",
            F.when(F.col("tx_outcome") != UNKNOWN, ended).alias("ended_ms"),
            F.col("tx_outcome").alias("outcome"),
        )
        .orderBy("half_ms", "key")
    )


def transaction_outcomes(frame: Any) -> Any:
    """Per producer group and outcome: ``transactions``, ``checks`` (check-backs in all),
    ``max_checks``."""
    F = _functions()
    return (
        transactions(frame)
        .groupBy("producer_group", "outcome")
        .agg(
            F.count("*").alias("transactions"),
            F.sum("check_times").alias("checks"),
            F.max("check_times").alias("max_checks"),
        )
        .orderBy("producer_group", "outcome")
    )


def rates(frame: Any, every: str = "1 minute", *, system_topics: bool = False) -> Any:
    """Records and bytes written per topic, queue and time window (``every``: a Spark interval,
    ``1 minute`` by default), by store time: ``topic``, ``queue_id``, ``window_start`` (a
    timestamp), ``records``, ``bytes``, ``per_second`` (records / the window's seconds).
    System topics are left out unless ``system_topics`` (``%RETRY%`` and ``%DLQ%`` are kept)."""
    F = _functions()
    topic = F.col("topic")
    rows = frame
    if not system_topics:
        rows = rows.filter(~_is_system(topic))
    window = F.window("store_timestamp", every)
    seconds = F.col("_window.end").cast("long") - F.col("_window.start").cast("long")
    return (
        rows.groupBy("topic", "queue_id", window.alias("_window"))
        .agg(F.count("*").alias("records"), F.sum("size").cast("long").alias("bytes"))
        .select(
            "topic",
            "queue_id",
            F.col("_window.start").alias("window_start"),
            "records",
            "bytes",
            (F.col("records") / seconds).alias("per_second"),
        )
        .orderBy("window_start", "topic", "queue_id")
    )
