"""The pytest plugin, as a user's own suite uses it: files in a temporary folder, no conftest,
``python -m pytest`` against the installed package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.toolkit_suite import run_user_suite

PASSING = """
import socket

import pytest

from pocketmq.client import Message, Producer, SimpleConsumer, TransactionProducer
from pocketmq.client import TransactionResolution


@pytest.mark.asyncio
async def test_send_delay_and_consume(pocketmq_broker):
    namesrv = pocketmq_broker.namesrv_address
    async with Producer("shop", namesrv=namesrv) as producer:
        await producer.send(Message(topic="Orders", body=b"order-1", tags="created", keys=["o-1"]))
        await producer.send(Message(topic="Orders", body=b"reminder", delay_level=3))  # 10 s
    found = await pocketmq_broker.expect_delivered("Orders", 1, tags="created")
    assert found[0].keys == ["o-1"] and found[0].body == b"order-1"
    assert await pocketmq_broker.advance("10s") == 1
    await pocketmq_broker.expect_delivered("Orders", 2)
    await pocketmq_broker.expect_delivered("Orders", 1, body="reminder")
    async with SimpleConsumer("billing", namesrv=namesrv, subscriptions={"Orders": "*"}) as c:
        got = []
        while len(got) < 2:
            got += await c.receive(16, 30)
        for message in got:
            await c.ack(message)
    await pocketmq_broker.expect_delivered("Orders", 2, consumed_by="billing")
    await pocketmq_broker.nothing_in_flight("billing")
    await pocketmq_broker.nothing_in_flight()


@pytest.mark.asyncio
async def test_transactions_and_idle(pocketmq_broker):
    answers = []

    async def checker(view):
        answers.append(view.msg_id)
        return TransactionResolution.COMMIT

    namesrv = pocketmq_broker.namesrv_address
    async with TransactionProducer("pay", namesrv=namesrv, checker=checker) as producer:
        await producer.send_half(Message(topic="Payments", body=b"p-1"))
        with pytest.raises(AssertionError, match="expected no pending transaction, found 1"):
            await pocketmq_broker.no_pending_transactions()
        fired = await pocketmq_broker.advance_until_idle()
        assert fired >= 1
        await pocketmq_broker.no_pending_transactions(timeout=10)
    assert answers  # asked at least once (a check may be on its way as the answer lands)
    await pocketmq_broker.expect_delivered("Payments", 1, body=b"p-1")


@pytest.mark.pocketmq(default_topic_queue_nums=2, broker_name="broker-x", http=True)
def test_marker_options_and_a_plain_test(pocketmq_broker):
    assert pocketmq_broker.broker.config.broker_name == "broker-x"
    assert pocketmq_broker.broker.config.default_topic_queue_nums == 2
    host, port = pocketmq_broker.http_address.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=5).close()
    before = pocketmq_broker.now_ms()
    assert pocketmq_broker.sync.advance("2h") == 0
    assert pocketmq_broker.now_ms() - before == 2 * 3600 * 1000
    pocketmq_broker.sync.nothing_in_flight()


@pytest.mark.pocketmq(grpc=True)
def test_grpc_front(pocketmq_broker):
    host, port = pocketmq_broker.grpc_address.rsplit(":", 1)
    socket.create_connection((host, int(port)), timeout=5).close()


@pytest.mark.asyncio
async def test_faults_through_the_fixture(pocketmq_broker):
    from pocketmq.client.errors import BrokerError

    namesrv = pocketmq_broker.namesrv_address
    async with Producer("shop", namesrv=namesrv, retries=0) as producer:
        await producer.send(Message(topic="Orders", body=b"before"))
        fault = await pocketmq_broker.faults.plan("system_busy", topic="Orders")
        with pytest.raises(BrokerError):
            await producer.send(Message(topic="Orders", body=b"refused"))
        (listed,) = await pocketmq_broker.faults.list()
        assert listed.id == fault.id and listed.fired == 1
        await pocketmq_broker.faults.crash()
        await pocketmq_broker.faults.crashed()
    await pocketmq_broker.expect_delivered("Orders", 1, body=b"before")  # recovered


def test_faults_from_a_plain_test(pocketmq_broker):
    pocketmq_broker.sync.faults.plan("delay_pull", delay_ms=1000)
    assert [f.kind for f in pocketmq_broker.sync.faults.list()] == ["delay_pull"]
    assert pocketmq_broker.sync.faults.clear() == 1


@pytest.mark.pocketmq(seed=7)
def test_a_seeded_broker_starts_at_the_fixed_time(pocketmq_broker):
    assert pocketmq_broker.now_ms() == 1_767_225_600_000  # 2026-01-01T00:00:00Z


def test_session_broker_first(pocketmq_session_broker):
    pocketmq_session_broker.sync.advance("1h")


def test_session_broker_is_shared(pocketmq_session_broker, pocketmq_broker):
    assert pocketmq_session_broker.namesrv_address != pocketmq_broker.namesrv_address
    with pytest.raises(RuntimeError, match="gRPC front is off"):
        pocketmq_broker.grpc_address
"""

FAILING = """
import pytest

from pocketmq.client import Message, Producer, TransactionProducer, TransactionResolution


async def never(view):
    return TransactionResolution.UNKNOWN


@pytest.mark.asyncio
async def test_wrong_count(pocketmq_broker):
    async with Producer("shop", namesrv=pocketmq_broker.namesrv_address) as producer:
        await producer.send(Message(topic="Orders", body=b"order-1", tags="created"))
        await producer.send(Message(topic="Orders", body=b"order-2", tags="paid"))
    await pocketmq_broker.expect_delivered("Orders", 2, tags="created", timeout=0.5)


@pytest.mark.asyncio
async def test_no_such_topic(pocketmq_broker):
    await pocketmq_broker.expect_delivered("Nowhere", timeout=0.2)


@pytest.mark.asyncio
async def test_unconsumed(pocketmq_broker):
    namesrv = pocketmq_broker.namesrv_address
    async with Producer("shop", namesrv=namesrv) as producer:
        await producer.send(Message(topic="Orders", body=b"order-1"))
    from pocketmq.client import SimpleConsumer

    async with SimpleConsumer("billing", namesrv=namesrv, subscriptions={"Orders": "*"}) as c:
        got = []
        while not got:
            got += await c.receive(1, 300)  # received, never acknowledged
    await pocketmq_broker.nothing_in_flight("billing", timeout=0.5)


@pytest.mark.asyncio
async def test_pending(pocketmq_broker):
    namesrv = pocketmq_broker.namesrv_address
    async with TransactionProducer("pay", namesrv=namesrv, checker=never) as producer:
        await producer.send_half(Message(topic="Payments", body=b"p-1"))
        await pocketmq_broker.no_pending_transactions()


@pytest.mark.asyncio
@pytest.mark.pocketmq(transaction_check_max=1000)
async def test_never_idle(pocketmq_broker):
    namesrv = pocketmq_broker.namesrv_address
    async with TransactionProducer("pay", namesrv=namesrv, checker=never) as producer:
        await producer.send_half(Message(topic="Payments", body=b"p-1"))
        await pocketmq_broker.advance_until_idle(limit="10m")


@pytest.mark.pocketmq(no_such_option=1)
def test_bad_option(pocketmq_broker):
    pass
"""


def test_a_user_suite_uses_the_fixtures_and_helpers(tmp_path: Path) -> None:
    run = run_user_suite(tmp_path, {"test_app.py": PASSING}, "--strict-markers")
    assert run.returncode == 0, run.output
    assert "9 passed" in run.outcome(), run.output


def test_failing_helpers_say_what_they_found(tmp_path: Path) -> None:
    run = run_user_suite(tmp_path, {"test_app.py": FAILING})
    assert run.returncode == 1, run.output
    assert "5 failed, 1 error" in run.outcome(), run.output
    out = run.output
    # expect_delivered: what was asked, how many matched, and the topic's messages
    assert "expected 2 messages in topic 'Orders' with tags='created' within 0.5 s" in out
    assert "found 1 matching" in out and "the topic holds 2:" in out
    assert "tags='paid' keys=[] body=b'order-2'" in out
    assert "expected a message in topic 'Nowhere'" in out
    assert "the topic does not exist; topics with a config:" in out
    # nothing_in_flight: per queue, what is left and why
    assert "expected nothing in flight for group 'billing' within 0.5 s" in out
    assert "1 lent by POP and not acknowledged" in out
    # no_pending_transactions: each pending one
    assert "expected no pending transaction, found 1:" in out
    assert "to topic 'Payments' (producer group 'pay'): 0 check(s) so far" in out
    # advance_until_idle: how far it went and what is still scheduled
    assert "the broker is not idle after" in out and "limit 600 s" in out
    assert "unknown pocketmq broker option(s) no_such_option" in out
    # the failure points at the user's line, not at the toolkit's frames
    assert "testing/assertions.py" not in out, out


def test_a_suite_without_the_fixtures_runs_as_before(tmp_path: Path) -> None:
    plain = """
    def test_plain():
        assert 1 + 1 == 2
    """
    run = run_user_suite(tmp_path, {"test_plain.py": plain}, "--strict-markers")
    assert run.returncode == 0 and "1 passed" in run.outcome(), run.output
    listing = run_user_suite(tmp_path, {}, "--fixtures")
    assert "pocketmq_broker" in listing.output and "pocketmq_session_broker" in listing.output
    markers = run_user_suite(tmp_path, {}, "--markers")
    assert "@pytest.mark.pocketmq(**options)" in markers.output
    off = run_user_suite(tmp_path, {}, "-p", "no:pocketmq", "--fixtures")
    assert "pocketmq_broker" not in off.output


@pytest.mark.checkout  # reads docs/testing.md of the checkout
def test_the_guide_examples_run_as_a_user_suite(tmp_path: Path) -> None:
    """docs/testing.md's pytest examples (those that need no outside store or Docker), each a
    test file of a user's suite."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, flags=re.DOTALL)
    examples = [
        b for b in blocks if "def test_" in b and "_broker" in b and "incident-store" not in b
    ]
    assert len(examples) >= 4, "the plugin, assertions, faults and snapshots examples"
    files = {f"test_guide_{i}.py": text for i, text in enumerate(examples)}
    run = run_user_suite(tmp_path, files)
    assert run.returncode == 0, run.output
    tests = sum(text.count("\ndef test_") + text.count("\nasync def test_") for text in examples)
    assert f"{tests} passed" in run.outcome(), run.output


def test_the_store_option_is_a_place_or_a_store_config() -> None:
    from pocketmq.store.config import StoreConfig
    from pocketmq.testing.embedded import broker_options

    small = StoreConfig(commitlog_segment_size=16 * 1024 * 1024)
    assert broker_options({"store": small, "grpc": True}) == ({"grpc": True}, {"store": small})
    assert broker_options({"store": "memory"}) == ({"store": "memory"}, {})
    with pytest.raises(TypeError, match="store='disk': use 'folder' \\(default\\), 'memory'"):
        broker_options({"store": "disk"})
    with pytest.raises(TypeError, match="unknown pocketmq broker option\\(s\\) colour"):
        broker_options({"colour": "red"})
