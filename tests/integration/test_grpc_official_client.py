"""The official RocketMQ 5.x Python client (rocketmq-python-client) against a real pocketmq
process, through the gRPC front-end: what its examples do, checked end to end, and the
remoting side seeing the same messages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster import Cluster, Process, free_port

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")
pytest.importorskip(
    "rocketmq", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
)

APP = Path(__file__).parent / "grpc_apps" / "official_client.py"
RECALL_APP = Path(__file__).parent / "grpc_apps" / "official_recall.py"
RUN_TIMEOUT_S = 90


def run_app(
    broker: Process, home: Path, scenario: str, *args: str, timeout: float = RUN_TIMEOUT_S
) -> dict:
    """One scenario of the official client in its own process; its JSON result."""
    completed = subprocess.run(
        [sys.executable, str(APP), broker.extra["grpc"], scenario, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    assert completed.returncode == 0, (
        f"{scenario} failed ({completed.returncode}):\n{completed.stderr[-3000:]}\n"
        f"client log:\n{client_log(home)}"
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def client_log(home: Path) -> str:
    log = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    return "\n".join(log.read_text().splitlines()[-30:]) if log.exists() else "(no client log)"


def pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def create_topic(broker: Process, topic: str, message_type: str, *credentials: str) -> None:
    done = pocketmq(
        "topic",
        "create",
        "--topic",
        topic,
        "--message-type",
        message_type,
        "--queues",
        "4",
        "--namesrv",
        broker.extra["namesrv"],
        *credentials,
    )
    assert done.returncode == 0, done.stderr


def start_grpc_broker(cluster: Cluster, *extra: str) -> Process:
    grpc_port = free_port()
    broker = cluster.start_standalone(extra_args=["--grpc-port", str(grpc_port), *extra])
    broker.extra["grpc"] = f"127.0.0.1:{grpc_port}"
    broker.extra["namesrv"] = f"127.0.0.1:{broker.extra['namesrv_port']}"
    assert f"grpc 127.0.0.1:{grpc_port}" in broker.ready_line
    return broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("grpc-broker")) as cluster:
        broker = start_grpc_broker(cluster)
        for topic, kind in (
            ("normal-topic", "NORMAL"),
            ("async-topic", "NORMAL"),
            ("delay-topic", "DELAY"),
            ("fifo-test-topic", "FIFO"),
            ("transaction-topic", "TRANSACTION"),
            ("push-topic", "NORMAL"),
            ("sql-topic", "NORMAL"),
            ("retry-topic", "NORMAL"),
            ("interop-topic", "MIXED"),
            ("recall-topic", "DELAY"),
        ):
            create_topic(broker, topic, kind)
        yield broker


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """The client's HOME: it writes its log files under ~/logs."""
    path = tmp_path / "home"
    path.mkdir()
    return path


def by_body(entries: list[dict]) -> dict[str, dict]:
    return {entry["body"]: entry for entry in entries}


def test_normal_producer_and_simple_consumer(broker: Process, home: Path) -> None:
    sent = run_app(broker, home, "normal", "--topic", "normal-topic", "--count", "10")["sent"]
    assert len({s["message_id"] for s in sent}) == 10
    assert all(len(s["message_id"]) == 34 and s["message_id"].startswith("01") for s in sent)
    received = run_app(
        broker, home, "simple", "--topic", "normal-topic", "--group", "g-normal", "--count", "10"
    )["received"]
    got = by_body(received)
    assert set(got) == {s["body"] for s in sent}
    for entry in sent:
        message = got[entry["body"]]
        index = entry["body"].rsplit("-", 1)[1]
        assert message["message_id"] == entry["message_id"]
        assert message["topic"] == "normal-topic"
        assert message["tag"] == "TagA"
        assert message["keys"] == [f"key-{index}"]
        assert message["properties"] == {"index": index}
        assert message["delivery_attempt"] == 1
    # Acknowledged: a second consumer of the group finds nothing more.
    again = run_app(
        broker,
        home,
        "simple",
        "--topic",
        "normal-topic",
        "--group",
        "g-normal",
        "--count",
        "1",
        "--until-empty",
    )["received"]
    assert again == []


def test_async_producer(broker: Process, home: Path) -> None:
    sent = run_app(broker, home, "async", "--topic", "async-topic", "--count", "20")["sent"]
    received = run_app(
        broker, home, "simple", "--topic", "async-topic", "--group", "g-async", "--count", "20"
    )["received"]
    assert sorted(m["message_id"] for m in received) == sorted(s["message_id"] for s in sent)


def test_delay_producer_delivers_no_earlier_than_asked(broker: Process, home: Path) -> None:
    sent = run_app(broker, home, "delay", "--topic", "delay-topic", "--count", "3", "--delay", "3")[
        "sent"
    ]
    received = run_app(
        broker, home, "simple", "--topic", "delay-topic", "--group", "g-delay", "--count", "3"
    )["received"]
    got = by_body(received)
    assert set(got) == {s["body"] for s in sent}
    for entry in sent:
        # Whole seconds on the wire: due at deliver_at, received no earlier.
        assert got[entry["body"]]["at"] >= entry["deliver_at"] - 0.05


def test_fifo_producer_and_orderly_push_consumer_keep_group_order(
    broker: Process, home: Path
) -> None:
    done = pocketmq(
        "group", "create", "--group", "g-fifo", "--orderly", "--namesrv", broker.extra["namesrv"]
    )
    assert done.returncode == 0, done.stderr
    sent = run_app(broker, home, "fifo", "--topic", "fifo-test-topic", "--count", "20")["sent"]
    received = run_app(
        broker, home, "push", "--topic", "fifo-test-topic", "--group", "g-fifo", "--count", "20"
    )["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in sent)
    for group in ("group-0", "group-1"):
        expected = [s["body"] for i, s in enumerate(sent) if f"group-{i % 2}" == group]
        got = [m["body"] for m in received if m["message_group"] == group]
        assert got == expected, f"{group} out of order"


def test_push_consumer_receives_everything(broker: Process, home: Path) -> None:
    sent = run_app(broker, home, "normal", "--topic", "push-topic", "--count", "10")["sent"]
    received = run_app(
        broker, home, "push", "--topic", "push-topic", "--group", "g-push", "--count", "10"
    )["received"]
    assert sorted(m["message_id"] for m in received) == sorted(s["message_id"] for s in sent)


def test_sql92_filter_expressions_of_simple_and_push_consumers(broker: Process, home: Path) -> None:
    """FilterExpression(..., FilterType.SQL): the broker hands over exactly the messages whose
    properties match. Each run asks for one more than match: the simple consumer receives
    until a receive finds nothing, the push consumer waits out its timeout, so a message let
    through wrongly would show up."""
    sent = run_app(broker, home, "normal", "--topic", "sql-topic", "--count", "10")["sent"]
    assert len(sent) == 10
    popped = run_app(
        broker,
        home,
        "simple",
        "--topic",
        "sql-topic",
        "--group",
        "g-sql-simple",
        "--sql",
        "index >= 6",
        "--count",
        "5",
        "--until-empty",
    )["received"]
    assert sorted(m["body"] for m in popped) == [f"message-{i}" for i in (6, 7, 8, 9)]
    pushed = run_app(
        broker,
        home,
        "push",
        "--topic",
        "sql-topic",
        "--group",
        "g-sql-push",
        "--sql",
        "TAGS = 'TagA' AND index IN ('1', '3', '4')",
        "--count",
        "4",
        "--timeout",
        "6",
    )["received"]
    assert sorted(m["body"] for m in pushed) == [f"message-{i}" for i in (1, 3, 4)]


def test_push_consumer_failure_is_retried_on_the_5x_backoff(broker: Process, home: Path) -> None:
    """A failed message comes back after the group's first retry delay (1 s), attempt 2."""
    sent = run_app(broker, home, "normal", "--topic", "retry-topic", "--count", "2")["sent"]
    result = run_app(
        broker,
        home,
        "push",
        "--topic",
        "retry-topic",
        "--group",
        "g-retry",
        "--count",
        "2",
        "--fail-first",
        "1",
    )
    assert sorted(m["message_id"] for m in result["received"]) == sorted(
        s["message_id"] for s in sent
    )
    assert all(m["delivery_attempt"] == 2 for m in result["received"])
    assert set(result["failures"].values()) == {1}


def test_recall_message_of_the_official_client(broker: Process, home: Path) -> None:
    """``Producer.recall_message`` with a delayed message's ``recall_handle``: it answers the
    message's id and the message is never delivered; the other one due at the same second is."""
    done = subprocess.run(
        [sys.executable, str(RECALL_APP), broker.extra["grpc"]]
        + ["--topic", "recall-topic", "--group", "g-recall"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    assert done.returncode == 0, f"{done.stderr[-3000:]}\nclient log:\n{client_log(home)}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    recalled, delivered = result["sent"]
    assert recalled["handle"] and result["recalled_id"] == recalled["message_id"]
    assert [r["message_id"] for r in result["received"]] == [delivered["message_id"]], result


def test_transactions_commit_and_rollback(broker: Process, home: Path) -> None:
    committed = run_app(
        broker,
        home,
        "transaction",
        "--topic",
        "transaction-topic",
        "--count",
        "3",
        "--body-prefix",
        "commit",
        "--outcome",
        "commit",
    )["sent"]
    run_app(
        broker,
        home,
        "transaction",
        "--topic",
        "transaction-topic",
        "--count",
        "3",
        "--body-prefix",
        "rollback",
        "--outcome",
        "rollback",
    )
    received = run_app(
        broker,
        home,
        "simple",
        "--topic",
        "transaction-topic",
        "--group",
        "g-tx",
        "--count",
        "4",
        "--until-empty",
    )["received"]
    assert sorted(m["body"] for m in received) == sorted(s["body"] for s in committed)


def test_transaction_check_from_the_server(tmp_path: Path, home: Path) -> None:
    """Left open, a transaction is checked over Telemetry; the checker's COMMIT publishes it."""
    with Cluster(tmp_path) as cluster:
        broker = start_grpc_broker(cluster, "--clock", "manual")
        create_topic(broker, "transaction-topic", "TRANSACTION")
        app = subprocess.Popen(
            [
                sys.executable,
                str(APP),
                broker.extra["grpc"],
                "transaction",
                "--topic",
                "transaction-topic",
                "--count",
                "2",
                "--outcome",
                "check",
                "--timeout",
                "30",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "HOME": str(home)},
        )
        try:
            assert app.stdout is not None
            assert app.stdout.readline().strip() == "READY"
            time.sleep(0.5)  # the producer's settings reach the broker
            advanced = pocketmq("time", "advance", "10s", "--broker", broker.address)
            assert advanced.returncode == 0, advanced.stderr
            out, err = app.communicate(timeout=60)
        finally:
            if app.poll() is None:
                app.kill()
        assert app.returncode == 0, err[-3000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert sorted(result["checked"]) == sorted(s["message_id"] for s in result["sent"])
        received = run_app(
            broker, home, "simple", "--topic", "transaction-topic", "--group", "g", "--count", "2"
        )["received"]
        assert sorted(m["message_id"] for m in received) == sorted(
            s["message_id"] for s in result["sent"]
        )


def test_grpc_and_remoting_see_the_same_messages(broker: Process, home: Path) -> None:
    """Sent over gRPC, read by pocketmq's remoting SDK; sent over remoting, received over gRPC."""
    sent = run_app(
        broker, home, "normal", "--topic", "interop-topic", "--count", "3", "--body-prefix", "grpc"
    )["sent"]
    done = pocketmq(
        "send",
        "--topic",
        "interop-topic",
        "--tags",
        "TagA",
        "--keys",
        "remoting-key",
        "--body",
        "remoting-0",
        "--json",
        "--namesrv",
        broker.extra["namesrv"],
    )
    assert done.returncode == 0, done.stderr
    remoting_id = json.loads(done.stdout.splitlines()[0])["msg_id"]
    consumed = pocketmq(
        "consume",
        "--topic",
        "interop-topic",
        "--group",
        "g-remoting",
        "--from",
        "first",
        "--count",
        "4",
        "--json",
        "--namesrv",
        broker.extra["namesrv"],
    )
    assert consumed.returncode == 0, consumed.stderr
    over_remoting = [json.loads(line) for line in consumed.stdout.splitlines() if line.strip()]
    assert {m["body"] for m in over_remoting} == {s["body"] for s in sent} | {"remoting-0"}
    received = run_app(
        broker, home, "simple", "--topic", "interop-topic", "--group", "g-grpc", "--count", "4"
    )["received"]
    got = by_body(received)
    assert set(got) == {s["body"] for s in sent} | {"remoting-0"}
    assert got["remoting-0"]["message_id"] == remoting_id
    assert got["remoting-0"]["tag"] == "TagA"
    assert got["remoting-0"]["keys"] == ["remoting-key"]


def test_signed_calls_of_the_official_client(tmp_path: Path, home: Path) -> None:
    """With access keys set, the client's MQv2-HMAC-SHA1 signature is accepted, and a client
    with the wrong secret gets nothing through."""
    with Cluster(tmp_path) as cluster:
        broker = start_grpc_broker(cluster, "--access-key", "ak", "--secret-key", "sk")
        credentials = ("--access-key", "ak", "--secret-key", "sk")
        create_topic(broker, "signed-topic", "NORMAL", *credentials)
        sent = run_app(
            broker, home, "normal", "--topic", "signed-topic", "--count", "2", *credentials
        )
        assert len(sent["sent"]) == 2
        refused = subprocess.run(
            [
                sys.executable,
                str(APP),
                broker.extra["grpc"],
                "normal",
                "--topic",
                "signed-topic",
                "--count",
                "1",
                "--access-key",
                "ak",
                "--secret-key",
                "wrong",
            ],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            env={**os.environ, "HOME": str(home)},
            check=False,
        )
        assert refused.returncode != 0
        received = run_app(
            broker,
            home,
            "simple",
            "--topic",
            "signed-topic",
            "--group",
            "g",
            "--count",
            "3",
            "--until-empty",
            *credentials,
        )["received"]
        assert sorted(m["message_id"] for m in received) == sorted(
            s["message_id"] for s in sent["sent"]
        )
