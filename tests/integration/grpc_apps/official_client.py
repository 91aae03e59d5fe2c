"""What the official RocketMQ 5.x Python client's examples do, one scenario per run, against
the endpoint given; prints one JSON object with what was sent and received.

    HOME=$(mktemp -d) python official_client.py ENDPOINT SCENARIO [options]

Run in its own process by tests/integration/test_grpc_official_client.py: the client keeps
threads and an event loop of its own, and logs into ~/logs (HOME points at a temporary folder).
Scenarios follow rocketmq-clients/python/example: normal, async, delay, fifo and transaction
producers, the simple consumer and the push consumer; only the endpoint is ours.
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
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    credentials = (
        Credentials(args.access_key, args.secret_key) if args.access_key else Credentials()
    )
    return ClientConfiguration(args.endpoint, credentials, request_timeout=args.request_timeout)


def make_message(args: argparse.Namespace, i: int) -> Message:
    message = Message()
    message.topic = args.topic
    message.body = f"{args.body_prefix}-{i}".encode()
    message.tag = args.tag
    message.keys = f"key-{i}"
    message.add_property("index", str(i))
    return message


def filter_expression(args: argparse.Namespace) -> FilterExpression:
    """``--sql`` subscribes by SQL92 over the properties, else ``--expression`` by tag."""
    if args.sql:
        return FilterExpression(args.sql, FilterType.SQL)
    return FilterExpression(args.expression)


def sent_entry(message: Message, receipt) -> dict:  # noqa: ANN001
    return {"message_id": receipt.message_id, "body": message.body.decode(), "at": time.time()}


def received_entry(message: Message) -> dict:
    return {
        "message_id": message.message_id,
        "topic": message.topic,
        "body": message.body.decode(errors="replace"),
        "tag": message.tag,
        "keys": sorted(message.keys or []),
        "properties": dict(message.properties or {}),
        "message_group": message.message_group,
        "delivery_attempt": message.delivery_attempt,
        "delivery_timestamp": message.delivery_timestamp,
        "at": time.time(),
    }


def produce(args: argparse.Namespace) -> dict:
    producer = Producer(configuration(args), (args.topic,))
    producer.startup()
    sent = []
    try:
        if args.scenario == "async":
            pending = []
            for i in range(args.count):
                message = make_message(args, i)
                pending.append((message, producer.send_async(message)))
            sent = [sent_entry(m, future.result(timeout=30)) for m, future in pending]
        else:
            for i in range(args.count):
                message = make_message(args, i)
                if args.scenario == "delay":
                    message.delivery_timestamp = int(time.time()) + args.delay
                elif args.scenario == "fifo":
                    message.message_group = f"group-{i % 2}"
                entry = sent_entry(message, producer.send(message))
                if args.scenario == "delay":
                    entry["deliver_at"] = message.delivery_timestamp
                sent.append(entry)
    finally:
        producer.shutdown()
    return {"sent": sent}


class Checker(TransactionChecker):
    def __init__(self, resolution: TransactionResolution) -> None:
        self.resolution = resolution
        self.checked: list[str] = []
        self.event = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        self.checked.append(message.message_id)
        self.event.set()
        return self.resolution


def transaction(args: argparse.Namespace) -> dict:
    """``--outcome commit|rollback`` ends each transaction at once; ``--outcome check`` leaves it
    open and waits for the broker's check, which the checker answers with ``--check-answer``."""
    answer = (
        TransactionResolution.COMMIT
        if args.check_answer == "commit"
        else TransactionResolution.ROLLBACK
    )
    checker = Checker(answer)
    producer = Producer(configuration(args), (args.topic,), checker)
    producer.startup()
    sent = []
    try:
        for i in range(args.count):
            message = make_message(args, i)
            tx = producer.begin_transaction()
            receipt = producer.send(message, tx)
            sent.append(sent_entry(message, receipt))
            if args.outcome == "commit":
                tx.commit()
            elif args.outcome == "rollback":
                tx.rollback()
        if args.outcome == "check":
            # Ready to be checked: the test moves the broker's clock now.
            print("READY", flush=True)
            deadline = time.time() + args.timeout
            while len(set(checker.checked)) < args.count and time.time() < deadline:
                checker.event.wait(0.2)
                checker.event.clear()
            time.sleep(0.5)  # let the EndTransaction of the last check go out
    finally:
        producer.shutdown()
    return {"sent": sent, "checked": checker.checked}


def simple_consume(args: argparse.Namespace) -> dict:
    consumer = SimpleConsumer(
        configuration(args),
        args.group,
        {args.topic: filter_expression(args)},
        await_duration=args.await_duration,
    )
    consumer.startup()
    received = []
    deadline = time.time() + args.timeout
    try:
        while len(received) < args.count and time.time() < deadline:
            batch = consumer.receive(32, args.invisible)
            for message in batch:
                received.append(received_entry(message))
                consumer.ack(message)
            if args.until_empty and not batch:
                break  # a whole long poll over every queue found nothing more
    finally:
        consumer.shutdown()
    return {"received": received}


class Listener(MessageListener):
    def __init__(self, fail_first: int) -> None:
        self.fail_first = fail_first
        self.failures: dict[str, int] = {}
        self.received: list[dict] = []
        self.lock = threading.Lock()

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            failed = self.failures.get(message.message_id, 0)
            if failed < self.fail_first:
                self.failures[message.message_id] = failed + 1
                return ConsumeResult.FAILURE
            self.received.append(received_entry(message))
            return ConsumeResult.SUCCESS


def push_consume(args: argparse.Namespace) -> dict:
    listener = Listener(args.fail_first)
    consumer = PushConsumer(
        configuration(args), args.group, listener, {args.topic: filter_expression(args)}
    )
    consumer.startup()
    deadline = time.time() + args.timeout
    try:
        while time.time() < deadline:
            with listener.lock:
                if len(listener.received) >= args.count:
                    break
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    with listener.lock:
        return {"received": list(listener.received), "failures": dict(listener.failures)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument(
        "scenario",
        choices=("normal", "async", "delay", "fifo", "transaction", "simple", "push"),
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default="consumer-group")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--tag", default="TagA")
    parser.add_argument("--body-prefix", default="message")
    parser.add_argument("--expression", default="*")
    parser.add_argument("--sql", default="", help="consumers: a SQL92 filter instead of tags")
    parser.add_argument("--delay", type=int, default=3, help="delay scenario: seconds")
    parser.add_argument("--outcome", choices=("commit", "rollback", "check"), default="commit")
    parser.add_argument("--check-answer", choices=("commit", "rollback"), default="commit")
    parser.add_argument("--fail-first", type=int, default=0, help="push: fail each message n times")
    parser.add_argument("--invisible", type=int, default=15)
    parser.add_argument("--await-duration", type=int, default=5)
    parser.add_argument(
        "--until-empty",
        action="store_true",
        help="simple: stop at the first receive that finds nothing (all was sent before)",
    )
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--request-timeout", type=int, default=3)
    parser.add_argument("--access-key", default="")
    parser.add_argument("--secret-key", default="")
    args = parser.parse_args()
    if args.scenario in ("normal", "async", "delay", "fifo"):
        result = produce(args)
    elif args.scenario == "transaction":
        result = transaction(args)
    elif args.scenario == "simple":
        result = simple_consume(args)
    else:
        result = push_consume(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
