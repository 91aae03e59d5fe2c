"""``pocketmq report``: the page opens in headless Chromium without console errors, draws its
charts offline, and its tables hold the analyses' numbers.

Without /usr/bin/chromium and /usr/bin/chromedriver the browser test fails (as the dashboard's
do); POCKETMQ_NO_BROWSER=1 skips it on purpose. POCKETMQ_REPORT_SCREENSHOT=docs/figures/report.png
also saves the screenshot shown in docs/spark.md.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from tests.spark.broker_stores import T0

S = 1000


def iso(ms: int | None) -> str:
    if ms is None:
        return ""
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    )


def table(driver: Any, table_id: str) -> list[dict[str, str]]:
    return driver.execute_script(
        """
        const rows = document.querySelectorAll(`#${arguments[0]} tbody tr`);
        return Array.from(rows, tr => Object.fromEntries(
            Array.from(tr.querySelectorAll('td'), td => [td.dataset.col, td.textContent])));
        """,
        table_id,
    )


@pytest.mark.spark
@pytest.mark.skipif(
    os.environ.get("POCKETMQ_NO_BROWSER") == "1",
    reason="POCKETMQ_NO_BROWSER=1: the browser tests are skipped on purpose",
)
def test_the_report_page_shows_the_analyses(
    spark: Any, lifecycle_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pocketmq.sparkexport import analyses
    from pocketmq.sparkexport.report import report_main
    from tests.integration.dashboard_screenshots import console_errors, start_chromium

    out = tmp_path / "report.html"
    # report_main is what `pocketmq report` runs; here it takes the tests' Spark session, which
    # has no JVM jar (tests/spark/cli_process.py shows the jar picked in a session of its own).
    assert report_main(lifecycle_store, out) == 0
    said = capsys.readouterr().err.splitlines()
    assert said[0] == "reading with the Python data source (the session has no JVM jar)"
    assert said[-1].startswith(f"wrote {out} (") and said[-1].endswith(" records"), said
    page = out.read_text(encoding="utf-8")
    assert "<script src=" not in page  # plotly.js is inlined: the page works offline

    frame = analyses.read_for_analyses(spark, lifecycle_store)
    driver = start_chromium(tmp_path / "profile", width=1300, height=1000)
    try:
        driver.get(out.as_uri())
        from selenium.webdriver.support.ui import WebDriverWait

        charts = ["rates-chart", "delay-chart", "funnel-chart", "outcome-chart", "journey-chart"]
        WebDriverWait(driver, 60).until(
            lambda d: d.execute_script(
                "return arguments[0].every(id => document.querySelector(`#${id} .main-svg`))",
                charts,
            )
        )
        assert console_errors(driver) == []
        # Each chart drew its traces (plotly keeps them on the element).
        traces = driver.execute_script(
            "return arguments[0].map(id => document.getElementById(id).data.length)", charts
        )
        assert all(count > 0 for count in traces), traces
        assert driver.find_element("id", "records").text == str(frame.count())

        delays = [
            {
                k: str(v)
                for k, v in r.asDict().items()
                if k in ("delay_level", "scheduled", "delivered", "pending", "late_ms_max")
            }
            for r in analyses.delay_accuracy(frame).collect()
        ]
        shown = [
            {
                k: v
                for k, v in r.items()
                if k in ("delay_level", "scheduled", "delivered", "pending", "late_ms_max")
            }
            for r in table(driver, "delays")
        ]
        assert shown == delays == [
            {"delay_level": "2", "scheduled": "1", "delivered": "1", "pending": "0", "late_ms_max": "0"},
            {"delay_level": "3", "scheduled": "3", "delivered": "3", "pending": "0", "late_ms_max": "0"},
            {"delay_level": "4", "scheduled": "1", "delivered": "1", "pending": "0", "late_ms_max": "0"},
        ]  # fmt: skip

        funnel = [
            {"group": r.group, "stage": r.stage, "messages": str(r.messages)}
            for r in analyses.retry_funnel(frame).collect()
        ]
        assert table(driver, "funnel") == funnel and len(funnel) == 4

        outcomes = [
            {k: str(v) for k, v in r.asDict().items()}
            for r in analyses.transaction_outcomes(frame).collect()
        ]
        assert table(driver, "outcomes") == outcomes and len(outcomes) == 3
        transactions = [
            {
                "key": r.key,
                "producer_group": r.producer_group,
                "topic": r.topic,
                "half_ms": iso(r.half_ms),
                "check_times": str(r.check_times),
                "ended_ms": iso(r.ended_ms),
                "outcome": r.outcome,
            }
            for r in analyses.transactions(frame).collect()
        ]
        assert table(driver, "transaction-list") == transactions
        assert transactions[2]["ended_ms"] == iso(T0 + 96 * S)  # TX3, committed at its 2nd check

        rates = {
            (r.topic, str(r.queue_id), r.window_start.strftime("%Y-%m-%dT%H:%M:%SZ")): str(
                r.records
            )
            for r in analyses.rates(frame).collect()
        }
        assert {
            (r["topic"], r["queue_id"], r["window_start"]): r["records"]
            for r in table(driver, "rates")
        } == rates
        journeys = {r["key"]: r for r in table(driver, "journey-list")}
        assert journeys["R1"]["copies"] == "7" and journeys["TX3"]["copies"] == "5"

        shot = os.environ.get("POCKETMQ_REPORT_SCREENSHOT")
        if shot:  # the figure in docs/spark.md
            height = driver.execute_script("return document.body.scrollHeight")
            driver.set_window_size(1300, min(height + 40, 4200))
            driver.save_screenshot(shot)
    finally:
        driver.quit()


def test_report_of_a_folder_that_is_no_store_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pocketmq.cli import main

    assert main(["report", str(tmp_path / "nothing"), "--out", str(tmp_path / "r.html")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"pocketmq report: no such folder: {tmp_path / 'nothing'}"
    )
    assert not (tmp_path / "r.html").exists()


def test_report_refuses_delay_levels_that_do_not_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pocketmq.sparkexport.report import report_main

    assert report_main(tmp_path, tmp_path / "r.html", delay_levels="1s banana") == 2
    assert capsys.readouterr().err.strip() == (
        "pocketmq report: --delay-levels: delay level 'banana' is not a number followed by "
        "s, m, h or d"
    )
