"""The HTTP front of a real standalone process (manual clock), through aiohttp's client and the
SDK: health, metrics parsed with prometheus_client's parser, a queue's messages in the JSON and
binary transports (decoded here from the layout docs/http.md gives, checksums recomputed), a
state change that pull then respects, the admin routes, and bad input answered with 4xx JSON."""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pocketmq.client import (
    Message,
    MessageView,
    Producer,
    PullConsumer,
    SimpleConsumer,
    TransactionProducer,
    TransactionResolution,
)
from tests.integration.cluster import Cluster, Process

TIMEOUT = aiohttp.ClientTimeout(total=30)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("http")) as cluster:
        yield cluster.start_standalone(extra_args=["--clock", "manual", "--http-port", "0"])


@pytest.fixture
async def http(standalone: Process) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        f"http://{standalone.http_address}", timeout=TIMEOUT
    ) as session:
        yield session


def namesrv(process: Process) -> str:
    return f"127.0.0.1:{process.extra['namesrv_port']}"


async def call(
    http: aiohttp.ClientSession, method: str, path: str, status: int = 200, **kw: Any
) -> Any:
    async with http.request(method, path, **kw) as response:
        body = await response.json()
        assert response.status == status, (response.status, body)
        assert response.content_type == "application/json"
        return body


async def create_topic(http: aiohttp.ClientSession, topic: str, queues: int = 1) -> None:
    await call(
        http,
        "POST",
        "/api/topics",
        201,
        json={"topic": topic, "read_queue_nums": queues, "write_queue_nums": queues},
    )


# -- health ------------------------------------------------------------------------------------


async def test_health_and_readiness_are_up(http: aiohttp.ClientSession) -> None:
    health = await call(http, "GET", "/health")
    assert health["status"] == "up"
    assert health["checks"]["remoting"] == "ok" and health["checks"]["writes"] == "ok"
    ready = await call(http, "GET", "/ready")
    assert ready["status"] == "ready" and ready["checks"]["namesrv"] == "ok"


# -- metrics -----------------------------------------------------------------------------------


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items()))
                found[labels] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    matches = [v for k, v in samples(text, name).items() if wanted <= set(k)]
    assert len(matches) == 1, (name, labels, samples(text, name))
    return matches[0]


async def test_metrics_show_what_was_sent_and_consumed(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic, group = "MetricsTopic", "metrics-group"
    await create_topic(http, topic)
    body = b"m" * 100
    async with Producer("metrics-producer", namesrv=namesrv(standalone)) as producer:
        for _ in range(5):
            await producer.send(Message(topic=topic, body=body))
    async with SimpleConsumer(
        group, namesrv=namesrv(standalone), subscriptions={topic: "*"}, await_duration_s=2
    ) as consumer:
        received: list[Any] = []
        for _ in range(20):
            received += await consumer.receive(3 - len(received))
            if len(received) >= 3:
                break
        assert len(received) == 3
        await consumer.ack(received[0])
        async with http.get("/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text = await response.text()
    assert value(text, "rocketmq_messages_in_total", topic=topic) == 5
    # stored bytes, records' headers and properties included (RocketMQ counts wroteBytes)
    assert value(text, "rocketmq_throughput_in_total", topic=topic) > 500
    assert value(text, "rocketmq_messages_out_total", topic=topic, consumer_group=group) == 3
    assert value(text, "rocketmq_consumer_lag_messages", topic=topic, consumer_group=group) == 2
    inflight = value(text, "rocketmq_consumer_inflight_messages", topic=topic, consumer_group=group)
    assert inflight == 2  # three lent, one acknowledged
    lag_ms = value(text, "rocketmq_consumer_lag_latency", topic=topic, consumer_group=group)
    assert lag_ms >= 0
    labels = dict(next(iter(samples(text, "rocketmq_messages_in_total"))))
    assert labels["node_type"] == "broker" and labels["cluster"] == "DefaultCluster"
    assert value(text, "rocketmq_rpc_latency_count", request_code="send_message") >= 5
    assert value(text, "rocketmq_topic_number") >= 1
    # the same lag the JSON route shows (one computation)
    lag = await call(http, "GET", f"/api/groups/{group}/lag", params={"topic": topic})
    assert lag["lag"] == 2 and lag["inflight"] == 2
    assert [q["consumer_offset"] for q in lag["queues"]] == [3]


# -- the message-state transports -----------------------------------------------------------


def decode_binary(data: bytes) -> list[dict[str, Any]]:
    """The binary transport read from docs/http.md's layout, independently of the broker."""
    out, pos = [], 0
    while pos < len(data):
        offset, state, timestamp = struct.unpack_from("<QBQ", data, pos)
        pos += 17
        message_id = int.from_bytes(data[pos : pos + 16], "little")
        pos += 16
        (checksum, headers_len) = struct.unpack_from("<II", data, pos)
        pos += 8
        headers, end = {}, pos + headers_len
        while pos < end:
            (key_len,) = struct.unpack_from("<I", data, pos)
            key = data[pos + 4 : pos + 4 + key_len].decode()
            pos += 4 + key_len
            kind = data[pos]
            (value_len,) = struct.unpack_from("<I", data, pos + 1)
            headers[key] = (kind, data[pos + 5 : pos + 5 + value_len].decode())
            pos += 5 + value_len
        (length,) = struct.unpack_from("<I", data, pos)
        payload = data[pos + 4 : pos + 4 + length]
        pos += 4 + length
        out.append(
            {
                "offset": offset,
                "state": state,
                "timestamp": timestamp,
                "id": message_id,
                "checksum": checksum,
                "headers": headers,
                "payload": payload,
            }
        )
    return out


def unique_key_number(msg_id: str) -> int:
    """docs/http.md: 32 hex digits, or a 5.x ID ("01" + 32 hex digits) without its version."""
    assert len(msg_id) in (32, 34)
    return int(msg_id[-32:], 16)


async def test_json_and_binary_transports_carry_the_message(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic = "TransportTopic"
    await create_topic(http, topic)
    bodies = [b"first \x00\xff", b"second" * 50, b""]
    sent = []
    async with Producer("transport-producer", namesrv=namesrv(standalone)) as producer:
        for i, body in enumerate(bodies):
            message = Message(topic=topic, body=body or b" ", keys=[f"k-{i}"], tags="T")
            sent.append(await producer.send(message))
    bodies[2] = b" "
    path = f"/api/topics/{topic}/queues/0/messages"
    page = await call(http, "GET", path, params={"offset": "0", "count": "10"})
    assert page["next_offset"] == 3 and page["max_offset"] == 3
    messages = page["messages"]
    assert [m["offset"] for m in messages] == [0, 1, 2]
    for message, result, body in zip(messages, sent, bodies, strict=True):
        payload = base64.b64decode(message["payload"])
        assert payload == body
        assert message["checksum"] == zlib.crc32(payload)
        assert message["id"] == unique_key_number(result.msg_id)
        assert message["state"] == "available"
        assert message["timestamp"] % 1000 == 0 and message["timestamp"] > 10**15
        keys = message["headers"]["KEYS"]
        assert keys["kind"] == "string"
        assert base64.b64decode(keys["value"]).decode() == f"k-{messages.index(message)}"

    async with http.get(
        path, params={"count": "10"}, headers={"Accept": "application/octet-stream"}
    ) as response:
        assert response.status == 200
        assert response.content_type == "application/octet-stream"
        assert response.headers["X-Pocketmq-Count"] == "3"
        data = await response.read()
    binary = decode_binary(data)
    assert len(binary) == 3
    for as_binary, as_json in zip(binary, messages, strict=True):
        assert as_binary["offset"] == as_json["offset"]
        assert as_binary["state"] == 1
        assert as_binary["timestamp"] == as_json["timestamp"]
        assert as_binary["id"] == as_json["id"]
        assert as_binary["checksum"] == zlib.crc32(as_binary["payload"])
        assert as_binary["payload"] == base64.b64decode(as_json["payload"])
        assert as_binary["headers"]["TAGS"] == (2, "T")

    # count limits the page; next_offset continues it
    first = await call(http, "GET", path, params={"offset": "0", "count": "2"})
    assert [m["offset"] for m in first["messages"]] == [0, 1] and first["next_offset"] == 2


async def test_a_poisoned_message_is_filtered_and_never_pulled(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic = "StateTopic"
    await create_topic(http, topic)
    async with Producer("state-producer", namesrv=namesrv(standalone)) as producer:
        for i in range(3):
            await producer.send(Message(topic=topic, body=f"m{i}".encode()))
    base = f"/api/topics/{topic}/queues/0/messages"
    changed = await call(
        http, "PUT", f"{base}/1/state", json={"state": "poisoned", "reason": "bad payload"}
    )
    assert changed["state"] == "poisoned" and changed["offset"] == 1
    poisoned = await call(http, "GET", base, params={"state": "poisoned"})
    assert [m["offset"] for m in poisoned["messages"]] == [1]
    available = await call(http, "GET", base, params={"state": "available"})
    assert [m["offset"] for m in available["messages"]] == [0, 2]
    # a consumer never gets it
    async with PullConsumer("state-readers", namesrv=namesrv(standalone)) as consumer:
        (queue,) = await consumer.queues(topic)
        result = await consumer.pull(queue, 0, 10)
        assert [m.body for m in result.messages] == [b"m0", b"m2"]
    # marked for deletion is for good: poisoning it again is refused with the reason
    await call(http, "PUT", f"{base}/2/state", json={"state": "marked_for_deletion"})
    refused = await call(http, "PUT", f"{base}/2/state", 400, json={"state": "poisoned"})
    assert "marked_for_deletion" in refused["error"]["message"]
    await call(http, "PUT", f"{base}/9/state", 404, json={"state": "poisoned"})
    await call(http, "PUT", f"{base}/0/state", 400, json={"state": "available"})


# -- admin routes ------------------------------------------------------------------------------


async def test_topics_create_list_get_delete(http: aiohttp.ClientSession) -> None:
    await call(
        http,
        "POST",
        "/api/topics",
        201,
        json={"topic": "AdminTopic", "read_queue_nums": 3, "write_queue_nums": 3},
    )
    names = [t["topic"] for t in await call(http, "GET", "/api/topics")]
    assert "AdminTopic" in names and "TBW102" not in names
    assert "TBW102" in [t["topic"] for t in await call(http, "GET", "/api/topics?system=true")]
    # a group's retry topic is listed with the system ones, not among the user's
    await call(http, "POST", "/api/topics", 201, json={"topic": "%RETRY%listing-group"})
    assert "%RETRY%listing-group" not in [
        t["topic"] for t in await call(http, "GET", "/api/topics")
    ]
    every = {t["topic"]: t for t in await call(http, "GET", "/api/topics?system=true")}
    assert every["%RETRY%listing-group"]["system"] is True
    topic = await call(http, "GET", "/api/topics/AdminTopic")
    assert [q["queue_id"] for q in topic["queues"]] == [0, 1, 2]
    assert (await call(http, "DELETE", "/api/topics/AdminTopic")) == {"deleted": "AdminTopic"}
    await call(http, "GET", "/api/topics/AdminTopic", 404)
    await call(http, "DELETE", "/api/topics/SCHEDULE_TOPIC_XXXX", 400)


async def test_dlq_resend_and_lifecycle_with_the_manual_clock(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic, group = "LifeTopic", "life-group"
    await create_topic(http, topic)
    async with Producer("life-producer", namesrv=namesrv(standalone)) as producer:
        sent = await producer.send(Message(topic=topic, body=b"life", keys=["order-7"]))
        delayed = await producer.send(Message(topic=topic, body=b"later", delay_level=3))
    # the delayed one waits (scheduled) until the clock moves 10 s
    before = await call(http, "GET", "/api/clock")
    assert before["manual"] is True and before["pending"] >= 1
    moved = await call(http, "POST", "/api/clock/advance", json={"duration": "10s"})
    assert moved["now_ms"] >= before["now_ms"] + 10_000 and moved["fired"] >= 1
    async with SimpleConsumer(
        group, namesrv=namesrv(standalone), subscriptions={topic: "*"}, await_duration_s=2
    ) as consumer:
        got: list[Any] = []
        for _ in range(20):
            got += await consumer.receive(2)
            if len(got) >= 2:
                break
        by_body = {m.body: m for m in got}
        await consumer.poison(by_body[b"life"], "cannot parse")
        await consumer.ack(by_body[b"later"])
    dead = await call(http, "GET", f"/api/groups/{group}/dlq")
    assert [d["msg_id"] for d in dead] == [sent.msg_id]
    assert "cannot parse" in dead[0]["dead_letter_reason"]
    outcomes = await call(
        http, "POST", f"/api/groups/{group}/dlq/resend", json={"ids": [sent.msg_id]}
    )
    assert [o["outcome"] for o in outcomes] == ["resent"]

    by_key = await call(http, "GET", "/api/messages", params={"topic": topic, "key": "order-7"})
    assert {m["msg_id"] for m in by_key} == {sent.msg_id}
    by_id = await call(http, "GET", f"/api/messages/{sent.offset_msg_id}")
    assert by_id[0]["body"] == "life"
    window = await call(
        http,
        "GET",
        "/api/messages",
        params={"topic": topic, "begin": "0", "end": str(moved["now_ms"] + 60_000)},
    )
    assert {sent.msg_id, delayed.msg_id} <= {m["msg_id"] for m in window}

    life = await call(
        http, "GET", f"/api/messages/{sent.msg_id}/lifecycle", params={"topic": topic}
    )
    events = [e["event"] for e in life["events"]]
    assert events[0] == "sent"
    assert "dead_lettered" in events and "resent" in events
    assert events.index("dead_lettered") < events.index("resent")
    later = await call(http, "GET", f"/api/messages/{delayed.msg_id}/lifecycle")
    later_events = [e["event"] for e in later["events"]]
    assert later_events.index("scheduled") < later_events.index("delivered")

    # offsets reset by time: back to the start of the topic
    lag = await call(http, "GET", f"/api/groups/{group}/lag")
    assert lag["group"] == group
    reset = await call(
        http, "POST", f"/api/groups/{group}/offsets/reset", json={"topic": topic, "timestamp": 0}
    )
    assert [r["new_offset"] for r in reset["queues"]] == [0]
    assert reset["written"] is True and reset["told"] == []  # nobody online: the broker writes
    after = await call(http, "GET", f"/api/groups/{group}/lag", params={"topic": topic})
    assert after["queues"][0]["consumer_offset"] == 0
    groups = [g["group"] for g in await call(http, "GET", "/api/groups")]
    assert group in groups
    assert await call(http, "GET", "/api/transactions") == []


async def test_a_redelivery_is_retried_in_the_lifecycle(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic, group = "RetryTopic", "retry-group"
    await create_topic(http, topic)
    async with Producer("retry-producer", namesrv=namesrv(standalone)) as producer:
        sent = await producer.send(Message(topic=topic, body=b"again"))
    async with SimpleConsumer(
        group, namesrv=namesrv(standalone), subscriptions={topic: "*"}, await_duration_s=1
    ) as consumer:
        first: list[Any] = []
        for _ in range(20):
            first += await consumer.receive(1, invisible_duration_s=10)
            if first:
                break
        assert first, "the message never came"
        # not acknowledged: once its invisible time passes it is delivered again
        await call(http, "POST", "/api/clock/advance", json={"duration": "11s"})
        again: list[Any] = []
        for _ in range(20):
            again += await consumer.receive(1)
            if again:
                break
        assert again and again[0].body == b"again"
        await consumer.ack(again[0])
    life = await call(
        http, "GET", f"/api/messages/{sent.msg_id}/lifecycle", params={"topic": topic}
    )
    events = [e["event"] for e in life["events"]]
    assert events[0] == "sent" and "retried" in events, events


async def test_a_pending_transaction_its_check_and_commit(
    standalone: Process, http: aiohttp.ClientSession
) -> None:
    topic = "TxTopic"
    await create_topic(http, topic)
    asked: list[str] = []

    async def checker(message: MessageView) -> TransactionResolution:
        asked.append(message.msg_id)
        return TransactionResolution.COMMIT

    async with TransactionProducer(
        "http-tx-producers", namesrv=namesrv(standalone), checker=checker
    ) as producer:
        tx = await producer.send_half(Message(topic=topic, body=b"pay"))
        pending = await call(http, "GET", "/api/transactions")
        assert [p["transaction_id"] for p in pending] == [tx.transaction_id]
        assert pending[0]["topic"] == topic and pending[0]["check_times"] == 0
        # past the transaction timeout the broker checks back; the checker commits
        await call(http, "POST", "/api/clock/advance", json={"duration": "7s"})
        for _ in range(100):
            if not await call(http, "GET", "/api/transactions"):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail("the transaction stayed pending after its check")
        assert asked
    msg_id = tx.send_result.msg_id
    life = await call(http, "GET", f"/api/messages/{msg_id}/lifecycle", params={"topic": topic})
    events = [e["event"] for e in life["events"]]
    assert events[0] == "prepared"
    assert "transaction_check" in events
    assert events.index("transaction_check") < events.index("delivered")
    details = [e["detail"] for e in life["events"]]
    assert "committed" in details


# -- bad input ---------------------------------------------------------------------------------


async def test_bad_input_is_a_4xx_json_error(http: aiohttp.ClientSession) -> None:
    await create_topic(http, "BadInputTopic", queues=2)
    base = "/api/topics/BadInputTopic/queues"
    cases: list[tuple[str, str, int, dict[str, Any]]] = [
        ("GET", f"{base}/0/messages?count=0", 400, {}),
        ("GET", f"{base}/0/messages?count=1001", 400, {}),
        ("GET", f"{base}/0/messages?offset=-1", 400, {}),
        ("GET", f"{base}/0/messages?state=sleepy", 400, {}),
        ("GET", f"{base}/7/messages", 400, {}),
        ("GET", f"{base}/x/messages", 400, {}),
        ("GET", "/api/topics/NoSuchTopic/queues/0/messages", 404, {}),
        (
            "POST",
            "/api/topics",
            400,
            {"data": b"{not json", "headers": {"Content-Type": "application/json"}},
        ),
        ("POST", "/api/topics", 400, {"json": ["a list"]}),
        ("POST", "/api/topics", 400, {"json": {"topic": 7}}),
        ("POST", "/api/topics", 400, {"json": {"topic": "T", "read_queue_nums": 0}}),
        ("POST", "/api/topics", 400, {"json": {"topic": "bad topic name!"}}),
        (
            "POST",
            "/api/topics",
            415,
            {"data": b"topic=x", "headers": {"Content-Type": "text/plain"}},
        ),
        ("POST", "/api/topics", 413, {"json": {"topic": "x" * 70_000}}),
        ("PUT", "/api/topics", 405, {"json": {}}),
        ("GET", "/api/groups/nobody/lag", 404, {}),
        ("GET", "/api/messages/NOTANID", 404, {}),
        ("GET", "/api/messages", 400, {}),
        ("GET", "/api/messages?topic=BadInputTopic&begin=5&end=1", 400, {}),
        ("POST", "/api/clock/advance", 400, {"json": {"duration": "soon"}}),
        ("POST", "/api/clock/advance", 400, {"json": {}}),
    ]
    for method, path, status, kw in cases:
        async with http.request(method, path, **kw) as response:
            body = await response.json()
            assert response.status == status, (method, path, response.status, body)
            assert body["error"]["status"] == status and body["error"]["message"], body
    # the broker is still fine
    assert (await call(http, "GET", "/health"))["status"] == "up"


def test_the_ready_line_names_the_http_port(standalone: Process, tmp_path: Path) -> None:
    assert standalone.http_address.startswith("127.0.0.1:")
    assert standalone.http_address != "127.0.0.1:8082"  # port 0: a free one was chosen
