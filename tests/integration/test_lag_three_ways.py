"""A group's lag three ways, for the same broker: mqadmin's view (consumerProgress: GET_CONSUME_STATS
through the SDK's ``Admin.consumer_progress``), the Prometheus text of ``/metrics``
(``rocketmq_consumer_lag_messages``) and the web dashboard in headless Chromium. All three must
show the same numbers, per queue where the view has queues.

A real standalone broker on a manual clock; a group consumes the first messages of a topic and
stops, then more are sent: its lag is exactly those. Without /usr/bin/chromium and
/usr/bin/chromedriver this test fails (CI installs both); POCKETMQ_NO_BROWSER=1 skips it on
purpose.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pocketmq.client import Admin, ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage
from tests.integration.cluster import Cluster, Process
from tests.integration.dashboard_screenshots import (
    WAIT_S,
    console_errors,
    http_port,
    open_view,
    start_chromium,
    wait_for,
)

pytestmark = pytest.mark.skipif(
    os.environ.get("POCKETMQ_NO_BROWSER") == "1",
    reason="POCKETMQ_NO_BROWSER=1: the browser tests are skipped on purpose",
)

TOPIC, GROUP = "Lagging", "lag-readers"
CONSUMED, BEHIND = 20, 11


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("lag")) as cluster:
        yield cluster.start_standalone(extra_args=["--clock", "manual", "--http-port", "0"])


async def fall_behind(namesrv: str) -> None:
    """GROUP consumes CONSUMED messages and stops (committing its offsets); BEHIND more
    follow, which it never reads."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, 4)
    async with Producer("lag-app", namesrv=namesrv) as producer:
        for i in range(CONSUMED):
            await producer.send(Message(topic=TOPIC, body=f"early-{i}".encode()))
    seen: list[bytes] = []

    async def listener(message: ReceivedMessage) -> ConsumeResult:
        seen.append(message.body)
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(GROUP, namesrv=namesrv, consume_from="first", listener=listener)
    consumer.subscribe(TOPIC)
    async with consumer:
        async with asyncio.timeout(WAIT_S):
            while len(seen) < CONSUMED:
                await asyncio.sleep(0.05)
    async with Producer("lag-app", namesrv=namesrv) as producer:
        for i in range(BEHIND):
            await producer.send(Message(topic=TOPIC, body=f"late-{i}".encode()))


async def admin_lag(namesrv: str) -> dict[int, int]:
    async with Admin(namesrv) as admin:
        progress = await admin.consumer_progress(GROUP, topic=TOPIC)
    assert progress.lag == sum(q.lag for q in progress.queues)
    return {q.queue.queue_id: q.lag for q in progress.queues}


def metrics_lag(base: str) -> float:
    with urllib.request.urlopen(f"{base}/metrics", timeout=WAIT_S) as response:
        text = response.read().decode()
    [value] = [
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "rocketmq_consumer_lag_messages"
        for sample in family.samples
        if sample.labels.get("topic") == TOPIC and sample.labels.get("consumer_group") == GROUP
    ]
    return value


def test_mqadmin_metrics_and_the_dashboard_show_the_same_lag(
    broker: Process, tmp_path: Path
) -> None:
    namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
    base = f"http://127.0.0.1:{http_port(broker)}"
    asyncio.run(fall_behind(namesrv))

    by_admin = asyncio.run(admin_lag(namesrv))
    by_metrics = metrics_lag(base)

    driver = start_chromium(tmp_path / "profile")
    try:
        open_view(driver, base, f"groups?group={GROUP}&topic={TOPIC}")
        rows = wait_for(driver, "tr.lag-row")
        by_page = {
            int(r.get_attribute("data-queue")): int(r.get_attribute("data-lag")) for r in rows
        }
        page_total = int(driver.find_element("id", "lag-total").get_attribute("data-lag"))
        assert console_errors(driver) == []
    finally:
        driver.quit()

    assert sum(by_admin.values()) == BEHIND  # what the set-up left unread
    assert by_page == by_admin  # per queue
    assert page_total == by_metrics == sum(by_admin.values())
