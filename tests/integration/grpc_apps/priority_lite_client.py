"""The official RocketMQ 5.x Python client's priority and lite APIs against the endpoint given;
prints one JSON object with what happened.

    HOME=$(mktemp -d) python priority_lite_client.py ENDPOINT SCENARIO --topic T [--group G]

Scenarios: ``priority`` sends one message per ``--priorities`` value (as
rocketmq-clients/python/example/priority_producer_example.py does, ``message.priority = i``),
then a simple consumer takes them; ``lite-produce`` sends one message with ``lite_topic`` (as
lite_producer_example.py); ``lite-subscribe`` starts a LitePushConsumer bound to the topic and
calls ``subscribe_lite`` (as lite_push_consumer_example.py). Errors are reported, not raised.
"""

from __future__ import annotations

import argparse
import json
import sys
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


def lite_produce(args: argparse.Namespace) -> dict:
    producer = Producer(configuration(args), (args.topic,))
    producer.startup()
    try:
        message = Message()
        message.topic = args.topic
        message.body = b"lite"
        message.lite_topic = "lite-test-1"
        producer.send(message)
        return {"sent": True}
    except Exception as error:  # noqa: BLE001 (the outcome is the point)
        return failure(error)
    finally:
        producer.shutdown()


class Listener(MessageListener):
    def consume(self, message: Message) -> ConsumeResult:
        return ConsumeResult.SUCCESS


def lite_subscribe(args: argparse.Namespace) -> dict:
    consumer = LitePushConsumer(configuration(args), args.group, args.topic, Listener())
    consumer.startup()
    try:
        consumer.subscribe_lite("lite-test-1")
        return {"subscribed": True}
    except Exception as error:  # noqa: BLE001
        return failure(error)
    finally:
        consumer.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("scenario", choices=("priority", "lite-produce", "lite-subscribe"))
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="priority-lite-group")
    parser.add_argument("--priorities", default="0,1,2")
    args = parser.parse_args()
    run = {"priority": priority, "lite-produce": lite_produce, "lite-subscribe": lite_subscribe}
    print(json.dumps(run[args.scenario](args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
