"""5.x message types PRIORITY and LITE with the official Python client (rocketmq-python-client),
topics made by ``pocketmq topic create --message-type``. Priority messages are served highest
first; a lite push consumer gets exactly the lite topics it subscribed to, each in order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient
from tests.integration.test_grpc_official_client import create_topic, start_grpc_broker

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")
pytest.importorskip(
    "rocketmq", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
)

APP = Path(__file__).parent / "grpc_apps" / "priority_lite_client.py"


def run_app(broker: Process, home: Path, scenario: str, *args: str) -> dict:
    completed = subprocess.run(
        [sys.executable, str(APP), broker.extra["grpc"], scenario, *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def bind_group(broker: Process, group: str, parent: str, **attributes: str) -> None:
    # mqadmin updateSubGroup --attributes +lite.bind.topic=<parent>
    attributes = {"+lite.bind.topic": parent, **attributes}
    body = json.dumps({"groupName": group, "attributes": attributes})
    with RawClient(broker.address) as client:
        response = client.call(
            RemotingCommand(
                code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body.encode()
            )
        )
    assert response.code == 0, response.remark


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("priority-lite")) as cluster:
        broker = start_grpc_broker(cluster)
        create_topic(broker, "priority-topic", "PRIORITY")  # 4 queues: priorities 0, 1, 2, 3+
        create_topic(broker, "parent-topic", "LITE")
        create_topic(broker, "normal-topic", "NORMAL")
        for group in ("lite-group", "lite-group-2", "lite-group-remoting"):
            bind_group(broker, group, "parent-topic")
        bind_group(broker, "bound-elsewhere", "other-parent")
        create_topic(broker, "wild-parent", "LITE")
        bind_group(broker, "wild-group", "wild-parent", **{"+lite.sub.wildcard": "true"})
        yield broker


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


def test_priority_messages_are_served_highest_first(broker: Process, home: Path) -> None:
    result = run_app(
        broker, home, "priority", "--topic", "priority-topic", "--priorities", "1,0,3,2,9"
    )
    assert result["sent"] == [1, 0, 3, 2, 9]
    # A backlog: 9 and 3 share the highest queue (in sending order), then 2, 1, 0.
    assert [m["priority"] for m in result["received"]] == [3, 9, 2, 1, 0]
    assert [m["body"] for m in result["received"]][:2] == ["priority-3", "priority-9"]


def test_a_priority_topic_over_remoting_pop(broker: Process) -> None:
    # A remoting producer picks queues itself; POP still serves the higher queues first.
    with RawClient(broker.address) as client:
        for queue in (0, 2, 1):
            response = client.send_message(
                "priority-topic", f"q{queue}".encode(), queue_id=queue, properties=""
            )
            assert response.code == 0
        _, popped = client.pop("priority-topic", "remoting-priority-group")
        assert [m.body for m, _ in popped] == [
            b"priority-3",
            b"priority-9",
            b"priority-2",  # within a queue, in the order stored
            b"q2",
            b"priority-1",
            b"q1",
            b"priority-0",
            b"q0",
        ]


def test_a_lite_consumer_gets_its_lite_topics_in_order(broker: Process, home: Path) -> None:
    result = run_app(
        broker,
        home,
        "lite",
        "--topic",
        "parent-topic",
        "--group",
        "lite-group",
        "--subscribe",
        "lite-a,lite-b",
        "--send",
        "lite-a,lite-c,lite-b",
        "--count",
        "5",
        "--expect",
        "10",
    )
    assert "error" not in result, result
    received = [tuple(entry) for entry in result["received"]]
    # Nothing of lite-c, which it did not subscribe to; each lite topic in the order sent.
    assert sorted(received) == sorted(
        [(lite, f"{lite}-{i}") for lite in ("lite-a", "lite-b") for i in range(5)]
    )
    for lite in ("lite-a", "lite-b"):
        assert [body for name, body in received if name == lite] == [
            f"{lite}-{i}" for i in range(5)
        ]


def test_lite_topics_are_separate_queues_per_group(broker: Process, home: Path) -> None:
    # lite-c was sent to above with no subscriber: a consumer subscribing now still gets it,
    # and lite-a, consumed by lite-group, is still whole for another group.
    result = run_app(
        broker,
        home,
        "lite",
        "--topic",
        "parent-topic",
        "--group",
        "lite-group-2",
        "--subscribe",
        "lite-c,lite-a",
        "--send",
        "lite-d",
        "--count",
        "1",
        "--expect",
        "10",
    )
    received = [tuple(entry) for entry in result["received"]]
    assert sorted(received) == sorted(
        [(lite, f"{lite}-{i}") for lite in ("lite-a", "lite-c") for i in range(5)]
    )


def test_lite_messages_only_go_to_lite_parents(broker: Process, home: Path) -> None:
    sent = run_app(broker, home, "lite-produce", "--topic", "normal-topic")
    # refused by the client itself: the route of a NORMAL topic does not accept LITE
    assert sent["error"] == "IllegalArgumentException" and "LITE" in sent["message"], sent
    sent = run_app(broker, home, "lite-produce", "--topic", "parent-topic", "--lite", "bad.name")
    assert "bad.name" in sent["message"], sent


def test_a_remoting_send_with_a_lite_topic_goes_to_its_lmq(broker: Process, home: Path) -> None:
    # A 4.x-style producer sets __LITE_TOPIC itself; the broker routes it as a gRPC send.
    with RawClient(broker.address) as client:
        for i in range(2):
            response = client.send_message(
                "parent-topic",
                f"lite-r-{i}".encode(),
                queue_id=2,
                properties=f"__LITE_TOPIC\x01lite-r\x02UNIQ_KEY\x01raw-lite-{i}\x02",
            )
            assert response.code == 0, response.remark
            assert response.ext_fields["queueId"] == "0"  # the LMQ's one queue
            assert response.ext_fields["queueOffset"] == str(i)
        refused = client.send_message(
            "parent-topic", b"x", properties="__LITE_TOPIC\x01bad.name\x02"
        )
        assert refused.code == 13 and "bad.name" in (refused.remark or "")  # MESSAGE_ILLEGAL
    result = run_app(
        broker,
        home,
        "lite",
        "--topic",
        "parent-topic",
        "--group",
        "lite-group-remoting",
        "--subscribe",
        "lite-r",
        "--send",
        "lite-e",
        "--count",
        "1",
        "--expect",
        "2",
    )
    assert "error" not in result, result
    assert [tuple(entry) for entry in result["received"]] == [
        ("lite-r", "lite-r-0"),
        ("lite-r", "lite-r-1"),
    ]


@pytest.mark.parametrize(
    ("group", "bound"), [("never-bound", "not set"), ("bound-elsewhere", "other-parent")]
)
def test_only_a_group_bound_to_the_parent_consumes_its_lite_topics(
    broker: Process, home: Path, group: str, bound: str
) -> None:
    result = run_app(
        broker, home, "lite", "--topic", "parent-topic", "--group", group, "--count", "0"
    )
    assert "received" not in result, result
    assert "bind topic not match" in result["message"] and bound in result["message"], result


def test_a_wildcard_group_consumes_every_lite_topic(broker: Process, home: Path) -> None:
    # lite.sub.wildcard: subscribe_lite_all (COMPLETE_ADD) brings every lite topic of the
    # parent, subscribe_lite (PARTIAL_ADD) is refused.
    result = run_app(
        broker,
        home,
        "lite",
        "--topic",
        "wild-parent",
        "--group",
        "wild-group",
        "--subscribe-all",
        "--subscribe",
        "",
        "--send",
        "wild-a,wild-b",
        "--count",
        "2",
        "--expect",
        "4",
    )
    assert "error" not in result, result
    assert "wildcard" in result["refused"]["message"], result
    assert sorted(tuple(entry) for entry in result["received"]) == [
        ("wild-a", "wild-a-0"),
        ("wild-a", "wild-a-1"),
        ("wild-b", "wild-b-0"),
        ("wild-b", "wild-b-1"),
    ]
