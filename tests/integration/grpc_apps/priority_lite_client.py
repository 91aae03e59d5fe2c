"""The official RocketMQ 5.x Python client's priority and lite APIs against the endpoint given;
prints one JSON object with what happened.

    HOME=$(mktemp -d) python priority_lite_client.py ENDPOINT SCENARIO --topic T [--group G]

Scenarios: ``priority`` sends one message per ``--priorities`` value (as
rocketmq-clients/python/example/priority_producer_example.py does, ``message.priority = i``),
then a simple consumer takes them; ``lite`` starts a LitePushConsumer bound to the topic (as
lite_push_consumer_example.py), ``subscribe_lite`` to each of ``--subscribe``, then sends
``--count`` messages to each of ``--send`` lite topics, interleaved (as lite_producer_example.py,
``message.lite_topic``), and reports what the listener got, in the order consumed, once it has
``--expect`` messages (or after 30 s), with ``--subscribe-all`` calling ``subscribe_lite_all``
first (COMPLETE_ADD, which a wildcard group answers with every lite topic); after the
``subscribe_lite`` calls, ``subscribe_lite_all`` sends the client's whole set at once (see
``lite``). ``lite-produce`` sends one message to ``--lite``.
Errors are reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    LitePushConsumer,
    Message,
    MessageListener,
    Producer,
    SimpleConsumer,
)


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    return ClientConfiguration(args.endpoint, Credentials(), request_timeout=5)


def failure(error: Exception) -> dict:
    return {"error": type(error).__name__, "message": str(error)}


def priority(args: argparse.Namespace) -> dict:
    producer = Producer(configuration(args), (args.topic,))
    producer.startup()
    sent = []
    try:
        for value in (int(p) for p in args.priorities.split(",")):
            message = Message()
            message.topic = args.topic
            message.body = f"priority-{value}".encode()
            message.tag = "TagA"
            message.priority = value
            producer.send(message)
            sent.append(value)
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(
        configuration(args), args.group, {args.topic: FilterExpression()}, await_duration=5
    )
    consumer.startup()
    received = []
    deadline = time.time() + 30
    try:
        while len(received) < len(sent) and time.time() < deadline:
            for message in consumer.receive(32, 15):
                received.append({"priority": message.priority, "body": message.body.decode()})
                consumer.ack(message)
    finally:
        consumer.shutdown()
    return {"sent": sent, "received": received}


def lite_message(topic: str, lite: str, body: str) -> Message:
    message = Message()
    message.topic = topic
    message.body = body.encode()
    message.lite_topic = lite
    return message


def lite_produce(args: argparse.Namespace) -> dict:
    producer = Producer(configuration(args), (args.topic,))
    producer.startup()
    try:
        producer.send(lite_message(args.topic, args.lite, "lite"))
        return {"sent": True}
    except Exception as error:  # noqa: BLE001 (the outcome is the point)
        return failure(error)
    finally:
        producer.shutdown()


class Recorder(MessageListener):
    """Keeps (lite topic, body) of each message consumed, in the order consumed."""

    def __init__(self, expect: int) -> None:
        self.got: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.enough = threading.Event()
        self.expect = expect

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            self.got.append((message.lite_topic or "", message.body.decode()))
            if len(self.got) >= self.expect:
                self.enough.set()
        return ConsumeResult.SUCCESS


def lite(args: argparse.Namespace) -> dict:
    recorder = Recorder(args.expect)
    consumer = LitePushConsumer(configuration(args), args.group, args.topic, recorder)
    consumer.startup()
    result: dict = {}
    try:
        if args.subscribe_all:
            # a wildcard group: COMPLETE_ADD takes every lite topic; PARTIAL_ADD is refused
            consumer.subscribe_lite_all()
            try:
                consumer.subscribe_lite("one-more")
            except Exception as error:  # noqa: BLE001
                result["refused"] = failure(error)
        for name in args.subscribe.split(",") if args.subscribe else ():
            consumer.subscribe_lite(name)
        if args.subscribe:
            # 5.1.2's subscribe_lite sends its PARTIAL_ADD with the name split into characters
            # (lite_topic_set.extend(name)), so until the client's COMPLETE_ADD of the set it
            # keeps, which it sends every 30 s, the broker (RocketMQ's proxy too) has it
            # subscribed to "l", "i", ... Send that COMPLETE_ADD now instead of waiting for it.
            consumer.subscribe_lite_all()
        producer = Producer(configuration(args), (args.topic,))
        producer.startup()
        try:
            for i in range(args.count):
                for name in args.send.split(","):
                    producer.send(lite_message(args.topic, name, f"{name}-{i}"))
        finally:
            producer.shutdown()
        recorder.enough.wait(30)
        time.sleep(1)  # anything beyond what was expected would show up here
        with recorder.lock:
            result["received"] = [list(entry) for entry in recorder.got]
    except Exception as error:  # noqa: BLE001
        result.update(failure(error))
    finally:
        consumer.shutdown()
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("scenario", choices=("priority", "lite", "lite-produce"))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="priority-lite-group")
    parser.add_argument("--priorities", default="0,1,2")
    parser.add_argument("--lite", default="lite-test-1")
    parser.add_argument("--subscribe", default="lite-a")
    parser.add_argument("--send", default="lite-a")
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--expect", type=int, default=3)
    parser.add_argument("--subscribe-all", action="store_true")
    args = parser.parse_args()
    run = {"priority": priority, "lite": lite, "lite-produce": lite_produce}
    print(json.dumps(run[args.scenario](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
