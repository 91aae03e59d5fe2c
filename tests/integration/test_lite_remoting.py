"""Lite topics over remoting, with the frames a Java client sends: SEND_BATCH_MESSAGE with
``__LITE_TOPIC``, LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE and its ACK_MESSAGE (``liteTopic``),
the LMQs kept out of the name server's routes, and ``pocketmq group create --attribute``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.message_codec import BatchMessage, decode_messages, encode_batch
from tests.integration.cluster import Cluster, Process
from tests.integration.raw import RawClient

PARENT = "lite-parent"
GROUP = "lite-remoting-group"
_WAIT_S = 30.0  # generous: the machine is shared


def pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def cli(broker: Process, *args: str) -> subprocess.CompletedProcess[str]:
    return pocketmq(*args, "--namesrv", f"127.0.0.1:{broker.extra['namesrv_port']}")


def group_attributes(broker: Process, group: str) -> dict[str, str]:
    with RawClient(broker.address) as client:
        response = client.call(RemotingCommand(code=RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert response.code == 0, response.remark
    table = json.loads(response.body)["subscriptionGroupTable"]
    return table[group].get("attributes") or {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("lite-remoting")) as cluster:
        broker = cluster.start_standalone()
        for topic, kind in ((PARENT, "LITE"), ("plain-topic", "NORMAL")):
            done = cli(broker, "topic", "create", "--topic", topic, "--message-type", kind)
            assert done.returncode == 0, done.stderr
        done = cli(broker, "group", "create", "--group", GROUP, "-a", f"+lite.bind.topic={PARENT}")
        assert done.returncode == 0, done.stderr
        yield broker


def lmq(lite: str) -> str:
    return f"%LMQ%{PARENT}|{lite}"


def send_lite(client: RawClient, lite: str, body: str) -> None:
    response = client.send_message(PARENT, body.encode(), properties=f"__LITE_TOPIC\x01{lite}\x02")
    assert response.code == 0, response.remark


def subscribe(client: RawClient, client_id: str, lites: list[str], action: str) -> RemotingCommand:
    entry = {
        "action": action,
        "clientId": client_id,
        "group": GROUP,
        "topic": PARENT,
        "liteTopicSet": lites,
        "version": 1,
    }
    body = json.dumps({"subscriptionSet": [entry]}).encode()
    return client.call(RemotingCommand(code=RequestCode.LITE_SUBSCRIPTION_CTL, body=body))


def pop_lite(
    client: RawClient,
    client_id: str,
    *,
    group: str = GROUP,
    topic: str = PARENT,
    max_count: int = 32,
    poll_ms: int = 0,
) -> RemotingCommand:
    # PopLiteMessageRequestHeader's fields, as MQClientAPIImpl sends them
    ext = {
        "clientId": client_id,
        "consumerGroup": group,
        "topic": topic,
        "maxMsgNum": str(max_count),
        "invisibleTime": "60000",
        "pollTime": str(poll_ms),
        "bornTime": str(int(time.time() * 1000)),
        "attemptId": "attempt-1",
    }
    return client.call(RemotingCommand(code=RequestCode.POP_LITE_MESSAGE, ext_fields=ext))


def ack_lite(client: RawClient, response: RemotingCommand, message: object) -> RemotingCommand:
    # The receipt a client builds (ExtraInfoUtil.buildExtraInfo) from the response header and
    # the message: offset, pop time, invisible time, revive queue, retry flag, broker, queue.
    header = response.ext_fields
    offset = message.queue_offset  # type: ignore[attr-defined]
    extra = (
        f"{offset} {header['popTime']} {header['invisibleTime']} {header['reviveQid']} 0 "
        f"broker-a 0 {offset}"
    )
    ext = {
        "consumerGroup": GROUP,
        "topic": PARENT,
        "queueId": "0",
        "extraInfo": extra,
        "offset": str(offset),
        "liteTopic": message.properties["__LITE_TOPIC"],  # type: ignore[attr-defined]
    }
    return client.call(RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=ext))


def bodies(response: RemotingCommand) -> list[tuple[str, str]]:
    return [(m.properties["__LITE_TOPIC"], m.body.decode()) for m in decode_messages(response.body)]


def test_a_batch_with_lite_topics_goes_to_their_lmqs(broker: Process) -> None:
    items = [("batch-a", "a0"), ("batch-b", "b0"), ("batch-a", "a1")]
    body = encode_batch(
        [
            BatchMessage(body=text.encode(), properties={"__LITE_TOPIC": lite, "UNIQ_KEY": text})
            for lite, text in items
        ]
    )
    with RawClient(broker.address) as client:
        response = client.send_message(PARENT, body, code=RequestCode.SEND_BATCH_MESSAGE)
        assert response.code == ResponseCode.SUCCESS, response.remark
        assert response.ext_fields["transactionId"] == "a0,b0,a1"
        assert response.ext_fields["queueId"] == "0"
        got_a = decode_messages(client.pull(lmq("batch-a"), 0, 0).body)
        got_b = decode_messages(client.pull(lmq("batch-b"), 0, 0).body)
        assert [(m.body, m.queue_offset) for m in got_a] == [(b"a0", 0), (b"a1", 1)]
        assert [m.body for m in got_b] == [b"b0"]
        for queue in range(4):  # nothing of it in the parent's own queues
            assert client.pull(PARENT, queue, 0).code == ResponseCode.PULL_NOT_FOUND
        # One bad lite topic refuses the whole batch: nothing of it is stored.
        bad = encode_batch(
            [
                BatchMessage(body=b"x", properties={"__LITE_TOPIC": "batch-c"}),
                BatchMessage(body=b"y", properties={"__LITE_TOPIC": "bad.name"}),
            ]
        )
        refused = client.send_message(PARENT, bad, code=RequestCode.SEND_BATCH_MESSAGE)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL and "bad.name" in refused.remark
        assert client.pull(lmq("batch-c"), 0, 0).code != ResponseCode.SUCCESS


def test_pop_lite_takes_the_subscribed_lite_topics_in_order(broker: Process) -> None:
    with RawClient(broker.address) as client:
        for lite, text in (("pop-a", "a0"), ("pop-b", "b0"), ("pop-a", "a1"), ("pop-c", "c0")):
            send_lite(client, lite, text)
        assert subscribe(client, "client-1", ["pop-a"], "COMPLETE_ADD").code == 0
        assert subscribe(client, "client-1", ["pop-b"], "PARTIAL_ADD").code == 0
        first = pop_lite(client, "client-1")
        assert first.code == ResponseCode.SUCCESS and first.remark == "FOUND", first.remark
        assert first.ext_fields["reviveQid"] == "999"  # KeyBuilder.POP_ORDER_REVIVE_QUEUE
        assert first.ext_fields["orderCountInfo"] == "0;0;0"
        # pop-c was not subscribed to; each lite topic in the order sent
        assert bodies(first) == [("pop-a", "a0"), ("pop-a", "a1"), ("pop-b", "b0")]
        messages = decode_messages(first.body)
        assert {m.topic for m in messages} == {lmq("pop-a"), lmq("pop-b")}
        # In order: nothing more until those are acknowledged.
        empty = pop_lite(client, "client-1")
        assert empty.code == ResponseCode.POLLING_TIMEOUT and empty.remark == "NO_MESSAGE_IN_QUEUE"
        for message in messages:
            acked = ack_lite(client, first, message)
            assert acked.code == 0, acked.remark
        again = ack_lite(client, first, messages[0])
        assert again.code != 0  # acknowledged already
        send_lite(client, "pop-a", "a2")
        assert bodies(pop_lite(client, "client-1")) == [("pop-a", "a2")]
        # Another group's subscription sees none of this group's progress.
        assert subscribe(client, "client-2", ["pop-c"], "COMPLETE_ADD").code == 0
        assert bodies(pop_lite(client, "client-2")) == [("pop-c", "c0")]
        assert subscribe(client, "client-2", ["pop-c"], "PARTIAL_REMOVE").code == 0
        send_lite(client, "pop-c", "c1")
        assert pop_lite(client, "client-2").code == ResponseCode.POLLING_TIMEOUT


def test_a_held_pop_lite_wakes_on_a_send(broker: Process) -> None:
    with RawClient(broker.address) as popper, RawClient(broker.address) as sender:
        assert subscribe(popper, "client-3", ["held"], "COMPLETE_ADD").code == 0
        result: list[RemotingCommand] = []
        waiting = threading.Thread(
            target=lambda: result.append(pop_lite(popper, "client-3", poll_ms=20_000))
        )
        waiting.start()
        send_lite(sender, "held", "h0")
        waiting.join(_WAIT_S)
        assert result and bodies(result[0]) == [("held", "h0")]


@pytest.mark.parametrize(
    ("overrides", "code", "remark"),
    [
        ({"topic": "plain-topic"}, ResponseCode.INVALID_PARAMETER, "message type not match"),
        ({"topic": "no-such-parent"}, ResponseCode.TOPIC_NOT_EXIST, "not exist"),
        ({"group": "unbound-group"}, ResponseCode.INVALID_PARAMETER, "bind topic not match"),
        ({"max_count": 33}, ResponseCode.INVALID_PARAMETER, "greater than 32"),
    ],
)
def test_pop_lite_refuses_as_its_pre_check(
    broker: Process, overrides: dict[str, object], code: int, remark: str
) -> None:
    with RawClient(broker.address) as client:
        response = pop_lite(client, "client-x", **overrides)  # type: ignore[arg-type]
    assert response.code == code and remark in (response.remark or ""), response.remark


def test_lite_subscription_ctl_refuses_bad_requests(broker: Process) -> None:
    with RawClient(broker.address) as client:
        empty = client.call(
            RemotingCommand(code=RequestCode.LITE_SUBSCRIPTION_CTL, body=b'{"subscriptionSet":[]}')
        )
        assert empty.code == ResponseCode.ILLEGAL_OPERATION
        bad = subscribe(client, "client-4", ["bad.name"], "COMPLETE_ADD")
        assert bad.code == ResponseCode.ILLEGAL_OPERATION and "bad.name" in bad.remark
        many = subscribe(client, "client-4", [f"l{i}" for i in range(2001)], "COMPLETE_ADD")
        assert many.code == ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, many.remark


def test_lmqs_are_not_registered_with_the_name_server(broker: Process) -> None:
    with RawClient(broker.address) as client:
        send_lite(client, "routed", "r0")
    # A topic made after the LMQ: once the name server knows it, the LMQ's registration is past.
    assert cli(broker, "topic", "create", "--topic", "after-lmq").returncode == 0
    with RawClient(f"127.0.0.1:{broker.extra['namesrv_port']}") as namesrv:

        def route(topic: str) -> RemotingCommand:
            return namesrv.call(
                RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic}
                )
            )

        deadline = time.monotonic() + _WAIT_S
        while route("after-lmq").code != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert route("after-lmq").code == 0
        assert route(PARENT).code == 0  # clients route to the parent
        assert route(lmq("routed")).code == ResponseCode.TOPIC_NOT_EXIST


def test_group_create_changes_attributes_and_keeps_the_others(broker: Process) -> None:
    group = "attr-group"
    assert (
        cli(
            broker, "group", "create", "--group", group, "-a", "+a.x=1,+lite.bind.topic=P"
        ).returncode
        == 0
    )
    assert group_attributes(broker, group) == {"a.x": "1", "lite.bind.topic": "P"}
    # Re-created without attributes (a retry count change): the attributes stay.
    done = cli(broker, "group", "create", "--group", group, "--retry-max-times", "3")
    assert done.returncode == 0, done.stderr
    assert group_attributes(broker, group) == {"a.x": "1", "lite.bind.topic": "P"}
    done = cli(
        broker, "group", "create", "--group", group, "--attribute=-a.x", "--attribute", "+b=2"
    )
    assert done.returncode == 0, done.stderr
    assert group_attributes(broker, group) == {"lite.bind.topic": "P", "b": "2"}
    missing = cli(broker, "group", "create", "--group", group, "--attribute=-never-set")
    assert missing.returncode != 0 and "never-set" in missing.stderr
    malformed = cli(broker, "group", "create", "--group", group, "-a", "lite.bind.topic=P")
    assert malformed.returncode != 0 and "+key=value" in malformed.stderr


def test_a_lite_message_renewed_then_acknowledged(broker: Process) -> None:
    with RawClient(broker.address) as client:
        send_lite(client, "renew", "n0")
        assert subscribe(client, "client-5", ["renew"], "COMPLETE_ADD").code == 0
        popped = pop_lite(client, "client-5")
        (message,) = decode_messages(popped.body)
        header = popped.ext_fields
        extra = f"0 {header['popTime']} {header['invisibleTime']} 999 0 broker-a 0 0"
        fields = {
            "consumerGroup": GROUP,
            "topic": PARENT,
            "queueId": "0",
            "extraInfo": extra,
            "offset": "0",
            "liteTopic": "renew",
            "invisibleTime": "90000",
        }
        renewed = client.call(
            RemotingCommand(code=RequestCode.CHANGE_MESSAGE_INVISIBLETIME, ext_fields=fields)
        )
        assert renewed.code == 0, renewed.remark
        assert renewed.ext_fields["reviveQid"] == "999"
        # the old receipt is spent; the new one acknowledges
        assert ack_lite(client, popped, message).code != 0
        assert ack_lite(client, renewed, message).code == 0
        # an ack naming a lite topic of a parent the group is not bound to
        unbound = {**fields, "consumerGroup": "unbound-group"}
        del unbound["invisibleTime"]
        refused = client.call(RemotingCommand(code=RequestCode.ACK_MESSAGE, ext_fields=unbound))
        assert refused.code == ResponseCode.INVALID_PARAMETER, refused.remark
