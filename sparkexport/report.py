"""``pocketmq report STORE --out report.html``: the analyses of a store as one static HTML page.

The page holds the analyses of :mod:`sparkexport.analyses` (rates per topic over time, delay
accuracy per level, the retry and DLQ funnel per group, transaction outcomes and check counts,
and the journeys of the messages with the most eventful lives) as charts drawn by plotly, whose
JavaScript is inlined, so the file opens offline and can be mailed; under each chart, the same
numbers as a table (``<table class="numbers" id=...>``, one ``data-col`` per cell), capped at
:data:`TABLE_ROWS_MAX` rows with the cut said on the page.

Needs the ``spark`` extra (pyspark, and plotly for the charts).
"""

from __future__ import annotations

import datetime as dt
import html
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pocketmq.store.durations import DEFAULT_DELAY_LEVELS, parse_delay_levels

__all__ = ["TABLE_ROWS_MAX", "Report", "collect_report", "render_html", "report_main"]

TABLE_ROWS_MAX = 500  # rows per table; charts get what the tables show
JOURNEYS_MAX = 40  # messages drawn in the journeys chart

# Columns of each table: (column, heading). Times are shown as UTC ISO text.
RATE_COLUMNS = [
    ("topic", "topic"),
    ("queue_id", "queue"),
    ("window_start", "window start (UTC)"),
    ("records", "records"),
    ("bytes", "bytes"),
    ("per_second", "records/s"),
]
DELAY_COLUMNS = [
    ("delay_level", "level"),
    ("delay_ms", "delay ms"),
    ("scheduled", "scheduled"),
    ("delivered", "delivered"),
    ("pending", "pending"),
    ("late_ms_min", "late min ms"),
    ("late_ms_avg", "late avg ms"),
    ("late_ms_p50", "late p50 ms"),
    ("late_ms_p95", "late p95 ms"),
    ("late_ms_max", "late max ms"),
]
FUNNEL_COLUMNS = [("group", "group"), ("stage", "stage"), ("messages", "messages")]
OUTCOME_COLUMNS = [
    ("producer_group", "producer group"),
    ("outcome", "outcome"),
    ("transactions", "transactions"),
    ("checks", "checks"),
    ("max_checks", "max checks"),
]
TRANSACTION_COLUMNS = [
    ("key", "transaction"),
    ("producer_group", "producer group"),
    ("topic", "topic"),
    ("half_ms", "half stored"),
    ("check_times", "checks"),
    ("ended_ms", "ended"),
    ("outcome", "outcome"),
]
JOURNEY_COLUMNS = [
    ("key", "message"),
    ("topic", "topic"),
    ("first_ms", "first copy"),
    ("last_ms", "last copy"),
    ("copies", "copies"),
    ("stages", "stages"),
]
TIME_COLUMNS = {"half_ms", "ended_ms", "first_ms", "last_ms"}


@dataclass(slots=True)
class Report:
    """What the page shows: rows of each analysis, as plain values (collected once)."""

    store: str
    generated: str
    records: int
    topics: list[tuple[str, int]]  # (topic, records), system topics included
    rates: list[dict[str, Any]] = field(default_factory=list)
    rates_total: int = 0
    delays: list[dict[str, Any]] = field(default_factory=list)
    funnel: list[dict[str, Any]] = field(default_factory=list)
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    transactions: list[dict[str, Any]] = field(default_factory=list)
    transactions_total: int = 0
    journeys: list[dict[str, Any]] = field(default_factory=list)
    journey_copies: list[dict[str, Any]] = field(default_factory=list)


def _rows(frame: Any, limit: int | None = None) -> list[dict[str, Any]]:
    limited = frame.limit(limit) if limit is not None else frame
    return [row.asDict(recursive=True) for row in limited.collect()]


def _capped(frame: Any) -> tuple[list[dict[str, Any]], int]:
    """The first TABLE_ROWS_MAX rows, and how many there are (at least that many plus one
    when more: the page then says it shows the first ones)."""
    rows = _rows(frame, TABLE_ROWS_MAX + 1)
    return rows[:TABLE_ROWS_MAX], len(rows)


def collect_report(
    spark: Any,
    store_dir: str | os.PathLike[str],
    *,
    every: str = "1 minute",
    delay_levels: str = DEFAULT_DELAY_LEVELS,
    say: Callable[[str], None] = lambda text: None,
    source: str | None = None,
) -> Report:
    """Run every analysis on the store (read once, cached) and collect what the page shows;
    ``source`` picks the data source as ``sparkexport.source.use_source`` does."""
    from pyspark.sql import functions as F

    from pocketmq.sparkexport import analyses

    store = os.fspath(store_dir)
    frame = analyses.read_for_analyses(spark, store, source=source).cache()
    try:
        say(f"reading {store}")
        topics = [
            (row.topic, row["count"])
            for row in frame.groupBy("topic").count().orderBy(F.desc("count"), "topic").collect()
        ]
        report = Report(
            store=store,
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            records=sum(count for _, count in topics),
            topics=topics,
        )
        say("rates per topic and queue")
        report.rates, report.rates_total = _capped(analyses.rates(frame, every))
        rows = analyses.copies(frame).cache()  # every other analysis starts from the copies
        try:
            say("delay accuracy")
            report.delays = _rows(analyses.delay_accuracy(rows, delay_levels))
            say("retry and DLQ funnel")
            report.funnel, _ = _capped(analyses.retry_funnel(rows))
            say("transactions")
            report.outcomes = _rows(analyses.transaction_outcomes(rows))
            report.transactions, report.transactions_total = _capped(analyses.transactions(rows))
            say("message journeys")
            journeys = (
                rows.groupBy("key")
                .agg(
                    F.first(
                        F.when(
                            F.col("stage").isin("sent", "delivered", "committed"), F.col("topic")
                        ),
                        ignorenulls=True,
                    ).alias("topic"),
                    F.min("store_timestamp_ms").alias("first_ms"),
                    F.max("store_timestamp_ms").alias("last_ms"),
                    F.count("*").alias("copies"),
                    F.concat_ws(", ", F.array_distinct(F.collect_list("stage"))).alias("stages"),
                )
                .filter(F.col("copies") > 1)
                .orderBy(F.desc("copies"), "key")
            )
            report.journeys = _rows(journeys, JOURNEYS_MAX)
            keys = [row["key"] for row in report.journeys]
            if keys:
                report.journey_copies = _rows(
                    rows.filter(F.col("key").isin(keys))
                    .select("key", "stage", "topic", "store_timestamp_ms", "reconsume_times")
                    .orderBy("store_timestamp_ms", "key")
                )
        finally:
            rows.unpersist()
        return report
    finally:
        frame.unpersist()


# -- rendering -------------------------------------------------------------------------------


def _iso(ms: Any) -> str:
    if ms is None:
        return ""
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _cell(name: str, value: Any) -> str:
    if value is None:
        return ""
    if name in TIME_COLUMNS:
        return _iso(value)
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return stamp.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value == value else ""
    return str(value)


def _table(table_id: str, columns: Sequence[tuple[str, str]], rows: list[dict], total: int) -> str:
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td data-col="{name}">{html.escape(_cell(name, row.get(name)))}</td>'
            for name, _ in columns
        )
        + "</tr>"
        for row in rows
    )
    cut = (
        f'<p class="cut">showing the first {len(rows):,} rows (there are more)</p>'
        if total > len(rows)
        else ""
    )
    if not rows:
        return f'<p class="empty" id="{table_id}-empty">nothing in this store</p>'
    return (
        f'<table class="numbers" id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>{cut}"
    )


def _figure(fig: Any, div_id: str) -> str:
    fig.update_layout(
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        height=360,
        font={"size": 14},
        legend={"font": {"size": 13}},
    )
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


def _rates_chart(report: Report) -> str:
    import plotly.graph_objects as go

    per_topic: dict[str, dict[Any, int]] = {}
    for row in report.rates:
        series = per_topic.setdefault(row["topic"], {})
        series[row["window_start"]] = series.get(row["window_start"], 0) + row["records"]
    fig = go.Figure()
    for topic, series in sorted(per_topic.items()):
        times = sorted(series)
        fig.add_trace(
            go.Bar(x=[_cell("", t) for t in times], y=[series[t] for t in times], name=topic)
        )
    fig.update_layout(
        barmode="stack",
        title="Records written per topic (all queues) per window",
        xaxis_title="window start (UTC)",
        yaxis_title="records",
    )
    return _figure(fig, "rates-chart")


def _delay_chart(report: Report) -> str:
    import plotly.graph_objects as go

    levels = [f"level {r['delay_level']} ({r['delay_ms'] / 1000:g} s)" for r in report.delays]
    fig = go.Figure()
    for name, column in (("scheduled", "scheduled"), ("delivered", "delivered")):
        fig.add_trace(go.Bar(x=levels, y=[r[column] for r in report.delays], name=name))
    fig.add_trace(
        go.Scatter(
            x=levels,
            y=[r["late_ms_p95"] for r in report.delays],
            name="late p95 (ms)",
            yaxis="y2",
            mode="lines+markers",
        )
    )
    fig.update_layout(
        title="Delay levels: copies and lateness (delivered store time - due time)",
        barmode="group",
        yaxis={"title": "copies"},
        yaxis2={
            "title": "late p95 ms",
            "overlaying": "y",
            "side": "right",
            "range": [0, max([1, *(r["late_ms_p95"] or 0 for r in report.delays)]) * 1.1],
        },
    )
    return _figure(fig, "delay-chart")


def _funnel_chart(report: Report) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    groups: dict[str, list[dict]] = {}
    for row in report.funnel:
        groups.setdefault(row["group"], []).append(row)
    for group, rows in sorted(groups.items()):
        fig.add_trace(
            go.Funnel(
                name=group,
                y=[r["stage"] for r in rows],
                x=[r["messages"] for r in rows],
                textinfo="value",
            )
        )
    fig.update_layout(title="Retry and DLQ funnel per consumer group (messages)")
    return _figure(fig, "funnel-chart")


def _outcome_chart(report: Report) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    outcomes = sorted({r["outcome"] for r in report.outcomes})
    for group in sorted({r["producer_group"] for r in report.outcomes}):
        found = {r["outcome"]: r for r in report.outcomes if r["producer_group"] == group}
        fig.add_trace(
            go.Bar(
                x=outcomes,
                y=[found[o]["transactions"] if o in found else 0 for o in outcomes],
                name=group,
                text=[f"{found[o]['checks']} checks" if o in found else "" for o in outcomes],
            )
        )
    fig.update_layout(
        title="Transactions per outcome (text: check-backs)",
        barmode="group",
        yaxis_title="transactions",
    )
    return _figure(fig, "outcome-chart")


def _journey_chart(report: Report) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    stages: dict[str, list[dict]] = {}
    for row in report.journey_copies:
        stages.setdefault(row["stage"], []).append(row)
    for stage, rows in stages.items():
        fig.add_trace(
            go.Scatter(
                x=[_iso(r["store_timestamp_ms"]) for r in rows],
                y=[r["key"] for r in rows],
                mode="markers",
                marker={"size": 12},
                name=stage,
                text=[f"{r['topic']} (reconsume {r['reconsume_times']})" for r in rows],
            )
        )
    for row in report.journeys:
        fig.add_trace(
            go.Scatter(
                x=[_iso(row["first_ms"]), _iso(row["last_ms"])],
                y=[row["key"], row["key"]],
                mode="lines",
                line={"color": "#bbbbbb"},
                showlegend=False,
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title="Journeys: each copy of the messages with the most copies, by store time",
        height=max(360, 28 * len(report.journeys) + 120),
        xaxis_title="store time (UTC)",
    )
    fig.update_yaxes(type="category", autorange="reversed")
    return _figure(fig, "journey-chart")


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #222; }
h1 { font-size: 26px; } h2 { font-size: 20px; margin-top: 36px; border-bottom: 1px solid #ddd; }
table.numbers { border-collapse: collapse; font-size: 14px; margin: 8px 0 4px; }
table.numbers th, table.numbers td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
table.numbers th { background: #f3f3f3; }
p.note, p.cut, p.empty { color: #555; font-size: 14px; }
"""


def render_html(report: Report) -> str:
    """The page: plotly.js inlined once, then each section's chart and table."""
    import plotly
    import plotly.offline

    topics = "".join(
        f'<tr><td data-col="topic">{html.escape(t)}</td><td data-col="records">{n}</td></tr>'
        for t, n in report.topics
    )
    sections = [
        (
            "rates",
            "Rates per topic and queue",
            "Records and bytes written per topic, queue and window, by store time (system "
            "topics left out; retry and DLQ topics kept).",
            _rates_chart(report) if report.rates else "",
            _table("rates", RATE_COLUMNS, report.rates, report.rates_total),
        ),
        (
            "delays",
            "Delay accuracy per level",
            "Each copy that waited in SCHEDULE_TOPIC_XXXX (delayed messages and retries), "
            "matched to the copy delivered to its real topic; late = delivered store time - "
            "(waiting copy's store time + the level's delay).",
            _delay_chart(report) if report.delays else "",
            _table("delays", DELAY_COLUMNS, report.delays, len(report.delays)),
        ),
        (
            "funnel",
            "Retries and the DLQ per consumer group",
            "Messages that reached each retry (by reconsume times), were dead-lettered, and "
            "were resent from the DLQ.",
            _funnel_chart(report) if report.funnel else "",
            _table("funnel", FUNNEL_COLUMNS, report.funnel, len(report.funnel)),
        ),
        (
            "transactions",
            "Transactions",
            "Outcome of each half message: committed (a committed copy), rolled back (an op "
            "record, no committed copy), discarded (checked too often), unknown (not ended).",
            _outcome_chart(report) if report.outcomes else "",
            _table("outcomes", OUTCOME_COLUMNS, report.outcomes, len(report.outcomes))
            + _table(
                "transaction-list",
                TRANSACTION_COLUMNS,
                report.transactions,
                report.transactions_total,
            ),
        ),
        (
            "journeys",
            "Message journeys",
            f"The {JOURNEYS_MAX} messages with the most copies (joined by unique key).",
            _journey_chart(report) if report.journeys else "",
            _table("journey-list", JOURNEY_COLUMNS, report.journeys, len(report.journeys)),
        ),
    ]
    body = "".join(
        f'<section id="section-{key}"><h2>{html.escape(title)}</h2>'
        f'<p class="note">{html.escape(note)}</p>{chart}{table}</section>'
        for key, title, note, chart, table in sections
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>pocketmq report: {html.escape(report.store)}</title>"
        f"<style>{_STYLE}</style>"
        f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>"
        f"<h1>pocketmq report</h1>"
        f'<p class="note">store <code id="store">{html.escape(report.store)}</code>: '
        f'<span id="records">{report.records}</span> records; generated {report.generated} '
        f"by pocketmq with plotly {plotly.__version__}.</p>"
        f'<table class="numbers" id="topics"><thead><tr><th>topic</th><th>records</th></tr>'
        f"</thead><tbody>{topics}</tbody></table>{body}</body></html>"
    )


def report_main(
    store_dir: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    every: str = "1 minute",
    delay_levels: str = DEFAULT_DELAY_LEVELS,
    progress: bool = True,
    source: str | None = None,
) -> int:
    """What ``pocketmq report`` runs; returns the exit status (0 written, 1 the Spark job
    failed, 2 a wrong argument: not a store, delay levels that do not parse, the extra or
    plotly missing, ``source="jvm"`` and a jar that cannot be built). ``source`` as
    ``sparkexport.cli.export_main``'s."""
    from pocketmq.sparkexport._require import SparkMissingError, require_spark
    from pocketmq.store.reader import check_store_folder

    def say(text: str) -> None:
        if progress:
            print(text, file=sys.stderr, flush=True)

    store = os.fspath(store_dir)
    try:
        parse_delay_levels(delay_levels)
    except ValueError as error:
        print(f"pocketmq report: --delay-levels: {error}", file=sys.stderr)
        return 2
    try:
        check_store_folder(store)
    except FileNotFoundError as error:  # no such folder, or NotAStoreError
        print(f"pocketmq report: {error}", file=sys.stderr)
        return 2
    try:
        require_spark()
        import plotly  # noqa: F401 - the charts need it
    except (SparkMissingError, ImportError) as error:
        print(
            f"pocketmq report: {error} (from a pocketmq checkout: python3 -m pip install -e "
            "'.[spark]')",
            file=sys.stderr,
        )
        return 2
    from pocketmq.sparkexport.cli import session_for

    started = time.perf_counter()
    spark = session_for("pocketmq report", "pocketmq-report", source=source, say=say)
    if isinstance(spark, int):
        return spark
    try:
        report = collect_report(
            spark, store, every=every, delay_levels=delay_levels, say=say, source=source
        )
    except Exception as error:  # noqa: BLE001 - a failed job is reported, not raised
        print(f"pocketmq report: the analysis failed: {error}", file=sys.stderr)
        return 1
    page = render_html(report)
    with open(out, "w", encoding="utf-8") as file:
        file.write(page)
    say(
        f"wrote {out} ({len(page) / 1e6:.1f} MB) in {time.perf_counter() - started:.1f} s: "
        f"{report.records:,} records"
    )
    return 0
