"""The official RocketMQ 5.x Python client's ``Producer.recall_message`` (rocketmq-python-client
5.1.2) against the endpoint given: two messages delayed by ``--delay`` seconds, the first
recalled with its receipt's ``recall_handle``; then a simple consumer takes what arrives until
the second one is in and one more empty receive has passed. Prints one JSON object.

    HOME=$(mktemp -d) python official_recall.py ENDPOINT --topic T --group G
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--delay", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=40.0)
    args = parser.parse_args()
    configuration = ClientConfiguration(args.endpoint, Credentials(), request_timeout=5)

    producer = Producer(configuration, (args.topic,))
    producer.startup()
    sent = []
    try:
        due = int(time.time()) + args.delay  # seconds, as the client sends it
        for body in ("recalled", "delivered"):
            message = Message()
            message.topic = args.topic
            message.body = body.encode()
            message.delivery_timestamp = due
            receipt = producer.send(message)
            sent.append(
                {"body": body, "message_id": receipt.message_id, "handle": receipt.recall_handle}
            )
        recalled_id = producer.recall_message(args.topic, sent[0]["handle"])
    finally:
        producer.shutdown()

    consumer = SimpleConsumer(
        configuration, args.group, {args.topic: FilterExpression()}, await_duration=3
    )
    consumer.startup()
    received: list[dict] = []
    deadline = time.time() + args.timeout
    try:
        while time.time() < deadline:
            batch = consumer.receive(16, 15)
            received += [{"body": m.body.decode(), "message_id": m.message_id} for m in batch]
            for message in batch:
                consumer.ack(message)
            # the recalled message was due with the other: once that one is in, one more
            # (empty) receive shows nothing else comes
            if any(r["body"] == "delivered" for r in received) and not batch:
                break
    finally:
        consumer.shutdown()
    print(json.dumps({"sent": sent, "recalled_id": recalled_id, "received": received}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
