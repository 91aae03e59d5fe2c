"""The web dashboard in headless Chromium: the browser set-up the dashboard tests share, some
data to look at, and the screenshots of docs/operations.md.

    python -m tests.integration.dashboard_screenshots      # from the checkout: docs/figures/

starts a standalone broker on a manual clock (``--http-port 0``), sends messages, consumes part
of them (lag), dead-letters one, leaves a transaction and a delayed message pending, and saves
``docs/figures/dashboard-<view>.png`` for each view.

The browser is Debian's ``chromium`` driven through ``chromedriver`` by selenium: nothing
downloads a browser build. Its flags keep it off the network (no updates, sync or background
requests, which a closed network would refuse and log as errors).
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from pocketmq.client import Admin, ConsumeResult, Message, Producer, PushConsumer, ReceivedMessage
from pocketmq.client.transaction import TransactionProducer, TransactionResolution
from tests.integration.cluster import Cluster, Process

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FIGURES = Path(__file__).resolve().parents[2] / "docs" / "figures"
WAIT_S = 30.0  # a guard against hanging on a loaded machine, not a timing assertion

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]


def start_chromium(profile: Path, *, width: int = 1400, height: int = 900) -> WebDriver:
    """Headless Chromium with a fresh profile, its console log readable (``get_log``)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        raise RuntimeError(
            f"{' and '.join(missing)} missing: apt-get install chromium chromium-driver "
            "(.ci/run does; set POCKETMQ_NO_BROWSER=1 to skip the browser tests on purpose)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))


def http_port(process: Process) -> int:
    """The HTTP front's port, from the ready line (``http 127.0.0.1:PORT``)."""
    found = re.search(r"\bhttp \S+:(\d+)", process.ready_line)
    if found is None:
        raise AssertionError(f"no HTTP port in the ready line: {process.ready_line!r}")
    return int(found.group(1))


def open_view(driver: WebDriver, base: str, view: str) -> None:
    """Load ``/dashboard/#/<view>`` afresh and wait until the page has rendered it."""
    driver.get(f"{base}/dashboard/#/{view}")
    driver.refresh()  # a hash change alone would keep the page; load it anew
    name = view.split("?")[0]
    WebDriverWait(driver, WAIT_S).until(
        lambda d: (
            d.execute_script("return document.body.dataset.view") == name
            and d.execute_script("return document.body.dataset.rendered") is not None
        )
    )


def console_errors(driver: WebDriver) -> list[dict[str, Any]]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def wait_for(driver: WebDriver, css: str) -> Any:
    return WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))


def save_page(driver: WebDriver, path: Path, width: int = 1360) -> None:
    """A PNG of the whole page at ``width`` CSS pixels, as tall as its content."""
    bottom = "return Math.ceil(document.querySelector('main').getBoundingClientRect().bottom)"
    metrics = {"width": width, "height": 400, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    # At this width the header's height is settled; the main column ends where the page does.
    metrics["height"] = int(driver.execute_script(bottom))
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    driver.save_screenshot(str(path))
    driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# -- data to look at ------------------------------------------------------------------------


async def populate(namesrv: str) -> dict[str, str]:
    """Orders (4 queues) and Payments (2): messages in, a group 'billing' that consumed the
    first ones (lag on the later ones) and dead-lettered one, a pending transaction and a
    delayed message. Returns the IDs the screenshots trace."""
    async with Admin(namesrv) as admin:
        await admin.create_topic("Orders", 4)
        await admin.create_topic("Payments", 2)
    ids: dict[str, str] = {}
    async with Producer("shop-app", namesrv=namesrv) as producer:
        for i in range(24):
            body = f'{{"order": {1000 + i}, "amount": {10 + i}.50}}'.encode()
            if i == 5:
                body = b"bad payload: not JSON"
            sent = await producer.send(
                Message(topic="Orders", body=body, tags="created", keys=f"order-{1000 + i}")
            )
            if i == 5:
                ids["dead"], ids["dead_queue"] = sent.msg_id, str(sent.queue.queue_id)
        for i in range(6):
            await producer.send(Message(topic="Payments", body=f"payment-{i}".encode()))
    seen: list[bytes] = []
    consumer: PushConsumer

    async def listener(message: ReceivedMessage) -> ConsumeResult:
        seen.append(message.body)
        if message.body.startswith(b"bad"):
            await consumer.poison(message, "unparsable payload")
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("billing", namesrv=namesrv, consume_from="first", listener=listener)
    consumer.subscribe("Orders")
    async with consumer:
        async with asyncio.timeout(WAIT_S):
            while len(seen) < 24:
                await asyncio.sleep(0.05)
    async with Producer("shop-app", namesrv=namesrv) as producer:
        for i in range(24, 41):  # after billing stopped: its lag
            sent = await producer.send(
                Message(
                    topic="Orders",
                    body=f'{{"order": {1000 + i}}}'.encode(),
                    keys=f"order-{1000 + i}",
                )
            )
        delayed = await producer.send(
            Message(topic="Payments", body=b"reminder", properties={"DELAY": "5"})
        )
        ids["delayed"] = delayed.msg_id

    async def check(message: object) -> TransactionResolution:
        return TransactionResolution.UNKNOWN

    async with TransactionProducer("payments-tx", namesrv=namesrv, checker=check) as tx:
        await tx.send_half(Message(topic="Payments", body=b"capture 42.00", keys="tx-42"))
    return ids


async def send_orders(namesrv: str, count: int) -> None:
    async with Producer("shop-app", namesrv=namesrv) as producer:
        for _ in range(count):
            await producer.send(Message(topic="Orders", body=b'{"order": "more"}'))


# -- screenshots ----------------------------------------------------------------------------


def screenshots(out: Path = FIGURES) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with tempfile.TemporaryDirectory() as scratch, Cluster(Path(scratch)) as cluster:
        broker = cluster.start_standalone(extra_args=["--clock", "manual", "--http-port", "0"])
        namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
        ids = asyncio.run(populate(namesrv))
        base = f"http://127.0.0.1:{http_port(broker)}"
        driver = start_chromium(Path(scratch) / "profile", width=1360, height=860)
        try:
            views = {
                "overview": "overview",
                "topics": "topics",
                "groups": "groups?group=billing&topic=Orders",
                "messages": f"messages?topic=Orders&queue={ids['dead_queue']}&count=12",
                "dlq": "dlq?group=billing",  # resent below: the lifecycle shows it
                "lifecycle": f"lifecycle?id={ids['dead']}&topic=Orders",
                "transactions": "transactions",
                "clock": "clock",
            }
            for name, view in views.items():
                open_view(driver, base, view)
                if name == "topics":
                    time.sleep(11)  # the stats' first 10 s sample: rates above zero
                    open_view(driver, base, view)
                if name == "groups":  # the lag line rises as more orders come in
                    for _ in range(3):
                        time.sleep(2.5)
                        asyncio.run(send_orders(namesrv, 5))
                    time.sleep(2.5)
                if name == "dlq":
                    driver.find_element(By.ID, "resend-all").click()
                    wait_for(driver, ".resend-row")
                if name == "clock":
                    driver.find_element(By.CSS_SELECTOR, "button.preset:nth-of-type(2)").click()
                    wait_for(driver, "#advance-outcome p")
                path = out / f"dashboard-{name}.png"
                save_page(driver, path)
                saved.append(path)
            errors = console_errors(driver)
            if errors:
                print("console errors:", errors, file=sys.stderr)
        finally:
            driver.quit()
    return saved


if __name__ == "__main__":
    for path in screenshots():
        print(path)
