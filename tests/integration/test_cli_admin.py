"""``pocketmq admin <mqadmin command>`` against one real standalone broker: every command's
table and ``--json`` checked against what was sent, consumed and changed, bad flags and unknown
topics and groups as one-line errors with mqadmin-like exit statuses.

Most commands run in this process (``pocketmq.cli.main``, what the console script calls) to
keep the module fast; a few run the installed console script, as a user types them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pocketmq.cli import main
from tests.integration.cluster import Cluster, Process

POCKETMQ = Path(sys.executable).parent / "pocketmq"
TOPIC = "Orders"
QUEUES = 4


class Ran:
    def __init__(self, status: int, out: str, err: str) -> None:
        self.status, self.out, self.err = status, out, err

    def json(self) -> dict:
        assert self.status == 0, self.err
        return json.loads(self.out)

    def table(self, skip: int = 0) -> list[dict[str, str]]:
        """The first aligned table of the output (after ``skip`` lines) as rows of header ->
        cell, cut where the header's columns start (a last cell may hold spaces)."""
        assert self.status == 0, self.err
        lines = self.out.splitlines()[skip:]
        header = lines[0].split()
        starts = [m.start() for m in re.finditer(r"\S+", lines[0])]
        rows = []
        for line in lines[1:]:
            if not line.strip():
                break
            cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
            rows.append(dict(zip(header, cells, strict=True)))
        return rows

    def error(self, status: int) -> str:
        assert self.status == status, (self.status, self.out, self.err)
        assert "Traceback" not in self.err
        lines = [line for line in self.err.splitlines() if line.strip()]
        return lines[-1]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("cli-admin")) as cluster:
        yield cluster.start_standalone()


@pytest.fixture(scope="module")
def namesrv(server: Process) -> str:
    return f"127.0.0.1:{server.extra['namesrv_port']}"


@pytest.fixture()
def admin(namesrv: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., Ran]:
    """Run ``pocketmq admin ARGS -n NAMESRV`` in this process."""

    def run(*args: str) -> Ran:
        capsys.readouterr()
        try:
            status = main(["admin", *args, "-n", namesrv])
        except SystemExit as exit_:  # argparse's usage errors
            status = int(exit_.code or 0)
        out, err = capsys.readouterr()
        return Ran(status, out, err)

    return run


def _send(namesrv: str, capsys: pytest.CaptureFixture[str], count: int, keys: str) -> list[dict]:
    capsys.readouterr()
    for i in range(count):
        args = ["send", "--topic", TOPIC, "--body", f"order-{keys}-{i}", "--keys", keys]
        assert main([*args, "--tags", "created", "--json", "--namesrv", namesrv]) == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def traffic() -> dict:
    """Filled on first use by ``test_topics_and_messages``: what was sent and consumed."""
    return {}


# -- topics and messages ------------------------------------------------------------------------


def test_topics_and_messages(
    admin: Callable[..., Ran], namesrv: str, capsys: pytest.CaptureFixture[str], traffic: dict
) -> None:
    created = admin("updateTopic", "-t", TOPIC, "-r", "4", "-w", "4", "-a", "+message.type=NORMAL")
    assert created.table()[0]["read_queues"] == "4" and "create topic to" in created.out
    sent = _send(namesrv, capsys, 6, "k1") + _send(namesrv, capsys, 3, "k2")
    traffic["sent"] = sent

    assert TOPIC in admin("topicList", "--json").json()["topics"]
    assert TOPIC in [row["topic"] for row in admin("topicList").table()]
    clustered = admin("topicList", "-c").table()
    assert {"cluster": "DefaultCluster", "topic": TOPIC, "consumer_group": "-"} in clustered

    route = admin("topicRoute", "-t", TOPIC)
    (row,) = route.table()
    assert (row["broker_name"], row["read_queues"], row["write_queues"], row["perm"]) == (
        "broker-a", "4", "4", "6",
    )  # fmt: skip
    assert "Total: 1 brokers, 4 read queues, 4 write queues" in route.out
    assert admin("topicRoute", "-t", TOPIC, "--json").json()["queueDatas"][0]["readQueueNums"] == 4

    per_queue = Counter(m["queue_id"] for m in sent)
    status = admin("topicStatus", "-t", TOPIC, "--json").json()
    assert {q["queue_id"]: q["max_offset"] for q in status["queues"]} == {
        q: per_queue[q] for q in range(QUEUES)
    }
    table = admin("topicStatus", "-t", TOPIC).table()
    assert [int(r["max_offset"]) for r in table] == [per_queue[q] for q in range(QUEUES)]
    for r in table:  # ISO times for a person, "-" for an empty queue
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["last_update"]) or (
            r["last_update"] == "-" and r["max_offset"] == "0"
        )

    # by key: every message whose KEYS hold k2, with its queue and offset
    by_key = admin("queryMsgByKey", "-t", TOPIC, "-k", "k2", "--json").json()["messages"]
    assert sorted(m["msg_id"] for m in by_key) == sorted(m["msg_id"] for m in sent[6:])
    assert len(admin("queryMsgByKey", "-t", TOPIC, "-k", "k2", "-m", "2").table()) == 2

    # by id: a unique key and an offset message id, comma-separated, bodies in UTF-8
    first, last = sent[0], sent[-1]
    ids = f"{first['msg_id']},{last['offset_msg_id']}"
    found = admin("queryMsgById", "-t", TOPIC, "-i", ids, "-f", "UTF-8", "--json").json()
    assert [(m["msg_id"], m["body"]) for m in found["messages"]] == [
        (first["msg_id"], "order-k1-0"),
        (last["msg_id"], "order-k2-2"),
    ]
    shown = admin("queryMsgById", "-t", TOPIC, "-i", first["msg_id"]).out
    assert re.search(r"^store_timestamp\s+\d{4}-\d\d-\d\dT", shown, re.M)
    assert re.search(rf"^queue_offset\s+{first['queue_offset']}$", shown, re.M)

    # by offset: the message at a queue's offset
    at = admin(
        "queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", str(last["queue_id"]),
        "-o", str(last["queue_offset"]), "-f", "UTF-8", "--json",
    ).json()["messages"][0]  # fmt: skip
    assert (at["msg_id"], at["body"], at["tags"]) == (last["msg_id"], "order-k2-2", "created")
    beyond = admin("queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "999")
    assert "no message at offset 999" in beyond.error(1)


def test_consumer_progress_is_sent_minus_consumed(
    admin: Callable[..., Ran], namesrv: str, capsys: pytest.CaptureFixture[str], traffic: dict
) -> None:
    sent = traffic.get("sent") or pytest.skip("needs test_topics_and_messages")
    capsys.readouterr()
    consume = ["consume", "--topic", TOPIC, "--group", "billing", "--from", "first"]
    assert main([*consume, "--count", "5", "--json", "--namesrv", namesrv]) == 0
    consumed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(consumed) == 5

    sent_per_queue = Counter(m["queue_id"] for m in sent)
    consumed_per_queue = Counter(m["queue_id"] for m in consumed)
    progress = admin("consumerProgress", "-g", "billing", "-t", TOPIC, "--json").json()
    assert {q["queue_id"]: q["diff"] for q in progress["queues"]} == {
        q: sent_per_queue[q] - consumed_per_queue[q] for q in range(QUEUES)
    }
    assert progress["diff_total"] == len(sent) - 5
    table = admin("consumerProgress", "-g", "billing", "-t", TOPIC)
    rows = table.table()
    assert [int(r["diff"]) for r in rows] == [
        sent_per_queue[q] - consumed_per_queue[q] for q in range(QUEUES)
    ]
    assert [int(r["broker_offset"]) - int(r["consumer_offset"]) for r in rows] == [
        int(r["diff"]) for r in rows
    ]
    assert f"Consume Diff Total: {len(sent) - 5}" in table.out

    groups = admin("consumerProgress", "--json").json()["groups"]
    (billing,) = [g for g in groups if g["group"] == "billing"]
    assert billing["diff_total"] == progress["diff_total"] + sum(
        q["diff"] for q in admin("consumerProgress", "-g", "billing", "--json").json()["queues"]
        if q["topic"] != TOPIC
    )  # fmt: skip

    # back to the start: the consumer is offline, so the offsets are written (the old path)
    reset = admin("resetOffsetByTime", "-g", "billing", "-t", TOPIC, "-s", "0", "--json").json()
    assert reset["reset_by"] == "offsets"
    assert {q["queue_id"]: q["reset_offset"] for q in reset["queues"]} == dict.fromkeys(
        range(QUEUES), 0
    )
    again = admin("consumerProgress", "-g", "billing", "-t", TOPIC, "--json").json()
    assert again["diff_total"] == len(sent)
    # a time after every message: each queue's end
    later = admin("resetOffsetByTime", "-g", "billing", "-t", TOPIC, "-s", "now").table(1)
    assert {int(r["queue_id"]): int(r["reset_offset"]) for r in later} == {
        q: sent_per_queue[q] for q in range(QUEUES)
    }


def test_online_consumer_connection_and_reset(
    admin: Callable[..., Ran], namesrv: str, traffic: dict
) -> None:
    traffic.get("sent") or pytest.skip("needs test_topics_and_messages")
    consumer = subprocess.Popen(
        [str(POCKETMQ), "consume", "--topic", TOPIC, "--group", "live", "--from", "first"]
        + ["--namesrv", namesrv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until its heartbeat and first commit reach the broker
            connection = admin("consumerConnection", "-g", "live", "--json")
            progress = admin("consumerProgress", "-g", "live", "-t", TOPIC, "--json")
            if (
                connection.status == 0
                and connection.json()["connections"]
                and progress.status == 0
                and progress.json()["diff_total"] == 0
            ):
                break
            assert time.monotonic() < deadline, (connection.err, progress.err)
            time.sleep(0.5)
        cc = connection.json()
        assert cc["subscriptions"][TOPIC] == "*"
        assert cc["consume_type"] == "CONSUME_PASSIVELY" and cc["message_model"] == "CLUSTERING"
        shown = admin("consumerConnection", "-g", "live")
        (client,) = shown.table()
        assert client["client_id"] == cc["connections"][0]["client_id"]
        assert client["language"] == "PYTHON"
        assert "ConsumeType: CONSUME_PASSIVELY" in shown.out

        # -s true: the client (IP) holding each queue, from the consumer's running info
        ips = admin("consumerProgress", "-g", "live", "-t", TOPIC, "-s", "true", "--json").json()
        client_ip = cc["connections"][0]["client_id"].split("@")[0]
        assert {q["client_ip"] for q in ips["queues"]} == {client_ip}

        # online: the broker tells the consumer, which moves back and reads everything again
        reset = admin("resetOffsetByTime", "-g", "live", "-t", TOPIC, "-s", "0", "--json").json()
        assert reset["reset_by"] == "consumers"
        assert {q["queue_id"]: q["offset"] for q in reset["queues"]} == dict.fromkeys(
            range(QUEUES), 0
        )
        all_groups = admin("consumerProgress").table()
        (live,) = [row for row in all_groups if row["group"] == "live"]
        assert (live["count"], live["type"], live["model"]) == ("1", "PUSH", "CLUSTERING")
    finally:
        consumer.send_signal(signal.SIGINT)
        _, err = consumer.communicate(timeout=30)
    assert "Traceback" not in err


def test_producer_connection(admin: Callable[..., Ran], namesrv: str) -> None:
    """A producer of the SDK, online in a thread of its own while the command runs."""
    import asyncio
    import threading

    from pocketmq.client import Message, Producer

    ready, done = threading.Event(), threading.Event()
    failure: list[BaseException] = []

    async def produce() -> None:
        async with Producer("orders-app", namesrv=namesrv) as producer:
            await producer.send(Message(topic=TOPIC, body=b"from-a-producer"))
            ready.set()
            while not done.is_set():
                await asyncio.sleep(0.05)

    def run() -> None:
        try:
            asyncio.run(produce())
        except BaseException as error:  # noqa: BLE001 - reported by the test below
            failure.append(error)
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(60) and not failure, failure
        shown = admin("producerConnection", "-g", "orders-app", "-t", TOPIC, "--json").json()
        (connection,) = shown["connections"]
        assert connection["index"] == "0001" and connection["language"] == "PYTHON"
        (row,) = admin("producerConnection", "-g", "orders-app", "-t", TOPIC).table()
        assert row["client_id"] == connection["client_id"]
    finally:
        done.set()
        thread.join(30)
    assert not failure, failure


# -- groups, brokers, clusters ------------------------------------------------------------------


def test_sub_groups(admin: Callable[..., Ran], server: Process) -> None:
    made = admin(
        "updateSubGroup", "-g", "audit", "-r", "3", "-o", "true", "--attributes", "+k=v", "--json"
    ).json()
    assert made["brokers"] == [{"broker": "broker-a", "addr": server.address}]
    assert made["config"]["retryMaxTimes"] == 3 and made["config"]["consumeMessageOrderly"]
    assert made["config"]["consumeBroadcastEnable"] is False  # mqadmin turns it off
    on_broker = admin("updateSubGroup", "-g", "audit", "-b", server.address)
    assert f"create subscription group to {server.address} success." in on_broker.out

    assert admin("updateSubGroup", "-g", "gone", "-b", "broker-a").status == 0
    only_there = admin("deleteSubGroup", "-g", "gone", "-b", "broker-a", "--json").json()
    assert only_there["brokers"] == [server.address]
    assert "-b nowhere: no broker of that name" in admin(
        "deleteSubGroup", "-g", "gone", "-b", "nowhere"
    ).error(2)
    deleted = admin("deleteSubGroup", "-g", "audit", "-r", "true")
    assert "delete subscription group [audit] from broker [broker-a] success." in deleted.out
    assert "%RETRY%audit" not in admin("topicList", "--json").json()["topics"]


def test_brokers_and_clusters(admin: Callable[..., Ran], server: Process) -> None:
    (broker,) = admin("clusterList").table()
    assert (broker["cluster"], broker["broker_name"], broker["bid"], broker["addr"]) == (
        "DefaultCluster", "broker-a", "0", server.address,
    )  # fmt: skip
    assert broker["activated"] == "yes"
    more = admin("clusterList", "-m", "--json").json()["brokers"][0]
    assert set(more) == {
        "cluster", "broker_name", "in_total_yest", "out_total_yest", "in_total_today",
        "out_total_today",
    }  # fmt: skip

    status = admin("brokerStatus", "-b", server.address, "--json").json()[server.address]
    assert status["brokerActive"] == "true" and "putTps" in status
    rows = admin("brokerStatus", "-c", "DefaultCluster").table()
    assert {"key": "brokerActive", "value": "true"} in rows

    assert admin("updateBrokerConfig", "-k", "fileReservedTime", "-v", "24").status == 0
    config = admin("getBrokerConfig", "-b", "broker-a", "--json").json()
    assert config["broker-a"]["fileReservedTime"] == "24"
    text = admin("getBrokerConfig", "-b", "broker-a").out
    assert text.startswith("============broker-a============\n")
    assert re.search(r"^fileReservedTime\s+24$", text, re.M)
    refused = admin("updateBrokerConfig", "-k", "brokerName", "-v", "other").error(1)
    assert "NO_PERMISSION" in refused and "brokerName" in refused


def test_delete_topic(admin: Callable[..., Ran]) -> None:
    made = admin("updateTopic", "-t", "Doomed", "-c", "DefaultCluster", "-r", "2", "--json")
    (broker,) = made.json()["brokers"]
    assert (broker["read_queues"], broker["write_queues"], broker["perm"]) == (2, 16, 6)
    deleted = admin("deleteTopic", "-t", "Doomed", "-c", "DefaultCluster")
    assert "delete topic [Doomed] from NameServer success." in deleted.out
    gone = admin("deleteTopic", "-t", "Doomed", "--json")
    assert "TOPIC_NOT_EXIST" in gone.error(1)
    assert "Doomed" not in admin("topicList", "--json").json()["topics"]
    assert "TOPIC_NOT_EXIST" in admin("topicRoute", "-t", "Doomed").error(1)


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (("topicStatus", "-t", "NoSuchTopic"), 1, "TOPIC_NOT_EXIST"),
        (("topicRoute", "-t", "NoSuchTopic"), 1, "NoSuchTopic"),
        (("consumerProgress", "-g", "nobody"), 1, "no consume stats of group 'nobody'"),
        (("consumerConnection", "-g", "nobody"), 1, "CONSUMER_NOT_ONLINE"),
        (("producerConnection", "-g", "nobody", "-t", TOPIC), 1, "producer group[nobody]"),
        (("resetOffsetByTime", "-g", "g", "-t", "NoSuchTopic", "-s", "now"), 1, "NoSuchTopic"),
        (("queryMsgById", "-t", TOPIC, "-i", "zz"), 2, "-i zz"),
        (("resetOffsetByTime", "-g", "g", "-t", TOPIC, "-s", "yesterday"), 2, "-s/--timestamp"),
        (("resetOffsetByTime", "-g", "g", "-t", TOPIC), 2, "-s/--timestamp"),
        (("updateTopic", "-t", "T", "-r", "0"), 2, "-r/--readQueueNums: 0 is not at least 1"),
        (("updateTopic", "-t", "T", "-o", "yes"), 2, "'yes' is neither true nor false"),
        (("updateTopic", "-t", "T", "-p", "5"), 2, "perm must be 2 (write), 4 (read) or 6"),
        (("updateTopic", "-t", "T", "-a", "k=v"), 2, "neither +key=value nor -key"),
        (("updateTopic", "-t", "T", "-b", "x:1", "-c", "C"), 2, "not allowed with"),
        (("clusterList", "-c", "NoSuchCluster"), 2, "cluster 'NoSuchCluster' is not known"),
        (("queryMsgById", "-t", TOPIC, "-i", "x", "-f", "klingon"), 2, "not a character set"),
        (("topicStatus",), 2, "-t/--topic"),
    ],
)
def test_errors_are_one_line(
    admin: Callable[..., Ran], args: tuple[str, ...], status: int, said: str
) -> None:
    line = admin(*args).error(status)
    assert said in line, line


def test_the_console_script_and_its_help(namesrv: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(POCKETMQ), *args], capture_output=True, text=True, timeout=60, check=False
        )

    listed = run("admin", "--help")
    assert listed.returncode == 0
    for name in ("topicList", "consumerProgress", "resetOffsetByTime", "updateBrokerConfig"):
        assert name in listed.stdout
    unreachable = run("admin", "clusterList", "-n", "127.0.0.1:1")
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert unreachable.stderr.strip().startswith("pocketmq: cannot reach the name server at")
    missing = run("admin", "topicStatus", "-t", "NoSuchTopic", "-n", namesrv)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "pocketmq: TOPIC_NOT_EXIST (17): topic[NoSuchTopic] not exist"
    ]
