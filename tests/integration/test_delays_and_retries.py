"""Delay levels, timers, retries and the DLQ on a real broker process running a manual clock.

Time moves only through POCKETMQ_CLOCK requests, so a two-hour delay level or sixteen retries
take well under a second of real time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import ResponseCode
from pocketmq.broker.protocol.message_codec import MessageExt, decode_messages
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

DELAYS_MS = [
    1000,
    5000,
    10000,
    30000,
    60000,
    120000,
    180000,
    240000,
    300000,
    360000,
    420000,
    480000,
    540000,
    600000,
    1200000,
    1800000,
    3600000,
    7200000,
]


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:  # noqa: ANN001
    with Cluster(tmp_path) as running:
        yield running


@pytest.fixture
def broker(cluster: Cluster) -> Process:
    return cluster.start_standalone(extra_args=["--clock", "manual"])


def pull_all(
    client: RawClient, topic: str, queue_id: int = 0, offset: int = 0, group: str = "g"
) -> list[MessageExt]:
    found: list[MessageExt] = []
    while True:
        response = client.pull(topic, queue_id, offset, group=group)
        if response.code != ResponseCode.SUCCESS:
            return found
        found.extend(decode_messages(response.body))
        offset = int(response.ext_fields["nextBeginOffset"])


def test_every_delay_level_is_due_at_exactly_its_delay(broker: Process) -> None:
    with RawClient(broker.address) as client:
        start = int(client.clock()["now"])
        for level in range(1, 19):
            sent = client.send_message(
                "Delayed",
                f"level-{level}".encode(),
                properties=f"DELAY\x01{level}\x02UNIQ_KEY\x01U{level:03d}\x02",
            )
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert pull_all(client, "Delayed") == []  # nothing is available before its time
        for level, delay in enumerate(DELAYS_MS, start=1):
            client.clock("set", time=str(start + delay - 1))
            assert len(pull_all(client, "Delayed")) == level - 1, f"level {level} came early"
            client.clock("set", time=str(start + delay))
            delivered = pull_all(client, "Delayed")
            assert len(delivered) == level, f"level {level} not delivered at its delay"
            last = delivered[-1]
            assert last.body == f"level-{level}".encode() and last.store_timestamp == start + delay
            assert last.properties["UNIQ_KEY"] == f"U{level:03d}" and "DELAY" not in last.properties
        assert int(client.clock()["pending"]) == 0


def test_a_level_above_the_maximum_is_clamped_and_a_bad_level_is_refused(broker: Process) -> None:
    with RawClient(broker.address) as client:
        bad = client.send_message("Clamp", b"x", properties="DELAY\x01soon\x02")
        assert bad.code == ResponseCode.MESSAGE_ILLEGAL and "DELAY" in bad.remark
        assert (
            client.send_message("Clamp", b"late", properties="DELAY\x0199\x02").code
            == ResponseCode.SUCCESS
        )
        client.clock("advance", duration="2h")
        assert pull_all(client, "Clamp")[0].body == b"late"


def test_timers_fire_at_their_millisecond_and_survive_a_kill(broker: Process) -> None:
    with RawClient(broker.address) as client:
        now = int(client.clock()["now"])
        assert (
            client.send_message("Timed", b"in-1234ms", properties="TIMER_DELAY_MS\x011234\x02").code
            == 0
        )
        assert (
            client.send_message(
                "Timed", b"at", properties=f"TIMER_DELIVER_MS\x01{now + 90_000}\x02"
            ).code
            == 0
        )
        assert (
            client.send_message(
                "Timed", b"past", properties=f"TIMER_DELIVER_MS\x01{now - 5}\x02"
            ).code
            == 0
        )
        too_far = client.send_message("Timed", b"x", properties="TIMER_DELAY_SEC\x01300000\x02")
        assert too_far.code == ResponseCode.MESSAGE_ILLEGAL and "max delay" in too_far.remark
        assert [m.body for m in pull_all(client, "Timed")] == [b"past"]
        client.clock("advance", duration="1233ms")
        assert len(pull_all(client, "Timed")) == 1
        client.clock("advance", duration="1ms")
        delivered = pull_all(client, "Timed")
        assert [m.body for m in delivered] == [b"past", b"in-1234ms"]
        assert delivered[1].store_timestamp == now + 1234
    broker.kill()  # the 90 s timer is still waiting
    broker.start()
    with RawClient(broker.address) as client:
        client.clock("set", time=str(now + 90_000))
        bodies = [m.body for m in pull_all(client, "Timed")]
        assert bodies == [b"past", b"in-1234ms", b"at"], "a pending timer was lost or repeated"


def test_sixteen_failures_give_seventeen_deliveries_then_the_dlq(broker: Process) -> None:
    group = "orders-service"
    with RawClient(broker.address) as client:
        assert (
            client.send_message(
                "Orders", b"order-1", properties="UNIQ_KEY\x01ORIGINAL0001\x02KEYS\x01order-1\x02"
            ).code
            == 0
        )
        deliveries: list[MessageExt] = pull_all(client, "Orders", group=group)
        assert len(deliveries) == 1
        retry_offset = 0
        for attempt in range(16):
            message = deliveries[-1]
            assert client.send_back(message.commitlog_offset, group).code == ResponseCode.SUCCESS
            # Level 3 + reconsume times: 10s, 30s, 1m ... 2h.
            client.clock("advance", duration=f"{DELAYS_MS[2 + attempt]}ms")
            retried = pull_all(client, f"%RETRY%{group}", offset=retry_offset, group=group)
            assert len(retried) == 1, f"attempt {attempt + 1}: retry not delivered after its delay"
            retry_offset += 1
            assert retried[0].reconsume_times == attempt + 1
            assert retried[0].properties["ORIGIN_MESSAGE_ID"] == "ORIGINAL0001"
            deliveries.append(retried[0])
        assert len(deliveries) == 17
        assert client.send_back(deliveries[-1].commitlog_offset, group).code == ResponseCode.SUCCESS
        client.clock("advance", duration="3h")
        assert pull_all(client, f"%RETRY%{group}", offset=retry_offset, group=group) == []
        dead = pull_all(client, f"%DLQ%{group}", group=group)
        assert len(dead) == 1 and dead[0].body == b"order-1"
        assert dead[0].properties["RETRY_TOPIC"] == "Orders"
        assert dead[0].properties["ORIGIN_MESSAGE_ID"] == "ORIGINAL0001"
        assert dead[0].properties["RECONSUME_TIME"] == "17"
    inspected = subprocess.run(
        [
            sys.executable,
            "-m",
            "pocketmq.cli",
            "store",
            "inspect",
            str(broker.extra["data"]),
            "--topic",
            "Orders",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    rows = [
        json.loads(line)
        for line in inspected.stdout.splitlines()
        if not line.startswith('{"summary"')
    ]
    assert rows[0]["state"] == "poisoned", "the original message was not marked poisoned"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """A pocketmq admin command with its --json output."""
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_dlq_list_resend_and_msg_show_from_the_command_line(broker: Process) -> None:
    group = "billing"
    with RawClient(broker.address) as client:
        assert (
            client.send_message(
                "Invoices", b"invoice-7", properties="UNIQ_KEY\x01INVOICE7\x02"
            ).code
            == 0
        )
        first = pull_all(client, "Invoices", group=group)[0]
        # A negative delay level sends the message straight to the DLQ (what consumer.poison does).
        assert (
            client.send_back(first.commitlog_offset, group, delay_level=-1).code
            == ResponseCode.SUCCESS
        )
    listed = cli("dlq", "list", "--group", group, "--broker", broker.address)
    assert listed.returncode == 0, listed.stderr
    [entry] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert entry["body"] == "invoice-7" and entry["properties"]["RETRY_TOPIC"] == "Invoices"
    shown = cli("msg", "show", first.offset_msg_id, "--broker", broker.address)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "poisoned"
    by_key = cli("msg", "show", "INVOICE7", "--topic", "Invoices", "--broker", broker.address)
    assert json.loads(by_key.stdout.splitlines()[0])["commitlog_offset"] == first.commitlog_offset
    resent = cli("dlq", "resend", "--group", group, "--all", "--broker", broker.address)
    [outcome] = [json.loads(line) for line in resent.stdout.splitlines()]
    assert outcome["outcome"] == "resent" and outcome["topic"] == "Invoices"
    again = cli(
        "dlq",
        "resend",
        "--group",
        group,
        "--id",
        "INVOICE7",
        "--id",
        "NOSUCHID",
        "--broker",
        broker.address,
    )
    outcomes = {o["msg_id"]: o["outcome"] for o in map(json.loads, again.stdout.splitlines())}
    assert outcomes == {
        "INVOICE7": "already resent",
        "NOSUCHID": "not found in the dead-letter queue",
    }
    with RawClient(broker.address) as client:
        bodies = [
            m.body for q in range(8) for m in pull_all(client, "Invoices", queue_id=q, group=group)
        ]
        # The group gets only the resent copy: the original stays stored, poisoned for it.
        assert bodies.count(b"invoice-7") == 1


def test_an_admin_delete_marks_the_message_and_hides_it(broker: Process) -> None:
    with RawClient(broker.address) as client:
        assert (
            client.send_message("Mistakes", b"oops", properties="UNIQ_KEY\x01OOPS1\x02").code == 0
        )
        assert len(pull_all(client, "Mistakes")) == 1
        deleted = cli("msg", "delete", "OOPS1", "--topic", "Mistakes", "--broker", broker.address)
        assert deleted.returncode == 0, deleted.stderr
        assert json.loads(deleted.stdout)["state"] == "marked_for_deletion"
        assert pull_all(client, "Mistakes") == []


def test_a_message_dead_lettered_by_one_group_still_reaches_the_others(broker: Process) -> None:
    with RawClient(broker.address) as client:
        assert (
            client.send_message("Shared", b"shared-1", properties="UNIQ_KEY\x01SHARED1\x02").code
            == 0
        )
        first = pull_all(client, "Shared", group="group-a")[0]
        assert (
            client.send_back(first.commitlog_offset, "group-a", delay_level=-1).code
            == ResponseCode.SUCCESS
        )
        assert pull_all(client, "Shared", group="group-a") == []  # poisoned for group-a
        assert [m.body for m in pull_all(client, "Shared", group="group-b")] == [b"shared-1"]


def test_a_restart_in_the_middle_of_delays_and_retries_loses_and_repeats_nothing(
    broker: Process,
) -> None:
    group = "restarting"
    with RawClient(broker.address) as client:
        start = int(client.clock()["now"])
        for level in (3, 5, 17):  # 10 s, 1 m, 1 h
            assert (
                client.send_message(
                    "Later", f"L{level}".encode(), properties=f"DELAY\x01{level}\x02"
                ).code
                == 0
            )
        assert client.send_message("Work", b"w1", properties="UNIQ_KEY\x01W1\x02").code == 0
        first = pull_all(client, "Work", group=group)[0]
        assert client.send_back(first.commitlog_offset, group).code == 0  # a retry due in 10 s
        client.clock("set", time=str(start + 30_000))  # L3 and the retry are delivered
        assert [m.body for m in pull_all(client, "Later")] == [b"L3"]
        assert [m.body for m in pull_all(client, f"%RETRY%{group}", group=group)] == [b"w1"]
    broker.kill()  # L5 and L17 are still waiting
    broker.start()
    with RawClient(broker.address) as client:
        # The manual clock resumes no earlier than the newest stored message (delivered at +10 s).
        assert int(client.clock()["now"]) >= start + 10_000
        assert [m.body for m in pull_all(client, "Later")] == [b"L3"]
        client.clock("set", time=str(start + 2 * 3_600_000))
        assert [m.body for m in pull_all(client, "Later")] == [b"L3", b"L5", b"L17"]
        assert [m.body for m in pull_all(client, f"%RETRY%{group}", group=group)] == [b"w1"]
