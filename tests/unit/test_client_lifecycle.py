"""Every client shares one life cycle (``client._core.CoreClient``): a guard before start and
after close, idempotent start and close, ``async with``, no start after close, and a start
refused by a missing setting that may be tried again."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from pocketmq.client import (
    Admin,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
    SimpleConsumer,
    TransactionProducer,
    TransactionResolution,
)
from pocketmq.client._core import CoreClient
from pocketmq.client.errors import ClientClosedError, ClientUsageError

from .test_client_fake_server import FakeCluster, fake_cluster

Guarded = Callable[[Any], Awaitable[object]]


async def commit(message: object) -> TransactionResolution:
    return TransactionResolution.COMMIT


async def receive_briefly(consumer: PushConsumer) -> None:
    with contextlib.suppress(TimeoutError):  # started, nothing to consume
        await consumer.receive(timeout_ms=10)


async def ack_nothing(consumer: SimpleConsumer) -> None:
    try:
        await consumer.ack(None)  # type: ignore[arg-type]
    except ClientClosedError:
        raise
    except ClientUsageError:  # open: refused as misuse (the fake has no POP to try)
        pass


def push_consumer(namesrv: str) -> PushConsumer:
    consumer = PushConsumer("CG", namesrv=namesrv, client_ip="127.0.0.1")
    consumer.subscribe("T")
    return consumer


# kind -> (client for a name server, a call that needs a started, open client)
CLIENTS: dict[str, tuple[Callable[[str], CoreClient], Guarded]] = {
    "producer": (
        lambda ns: Producer("PG", namesrv=ns, client_ip="127.0.0.1"),
        lambda c: c.send(Message(topic="T", body=b"x")),
    ),
    "transaction producer": (
        lambda ns: TransactionProducer("TG", namesrv=ns, client_ip="127.0.0.1", checker=commit),
        lambda c: c.send_half(Message(topic="T", body=b"x")),
    ),
    "simple consumer": (
        lambda ns: SimpleConsumer(
            "SG", namesrv=ns, client_ip="127.0.0.1", subscriptions={"T": "*"}
        ),
        ack_nothing,
    ),
    "push consumer": (push_consumer, receive_briefly),
    "pull consumer": (
        lambda ns: PullConsumer(namesrv=ns, client_ip="127.0.0.1"),
        lambda c: c.queues("T"),
    ),
    "admin": (lambda ns: Admin(ns, client_ip="127.0.0.1"), lambda c: c.cluster_info()),
}


def _namesrv(cluster: FakeCluster) -> str:
    cluster.add_topic("T", 1)
    return cluster.brokers[0].addr


@pytest.mark.parametrize("kind", sorted(CLIENTS))
async def test_every_client_has_the_same_life_cycle(kind: str) -> None:
    make, guarded = CLIENTS[kind]
    async with fake_cluster() as cluster:
        client = make(_namesrv(cluster))
        assert isinstance(client, CoreClient)
        assert client.client_id == f"127.0.0.1@{client.instance_name}"
        with pytest.raises(ClientClosedError):
            await guarded(client)  # not started
        async with client as entered:
            assert entered is client
            await client.start()  # a second start does nothing
            await guarded(client)
        await client.close()  # a second close does nothing
        with pytest.raises(ClientClosedError):
            await guarded(client)
        with pytest.raises(ClientClosedError):
            await client.start()  # closed for good


async def test_closing_a_client_never_started_is_fine() -> None:
    for make, guarded in CLIENTS.values():
        client = make("127.0.0.1:1")  # nothing listens: nothing may be asked
        await client.close()
        with pytest.raises(ClientClosedError):
            await guarded(client)


async def test_a_start_refused_for_a_missing_setting_can_be_tried_again() -> None:
    async with fake_cluster() as cluster:
        namesrv = _namesrv(cluster)
        producer = TransactionProducer("TG", namesrv=namesrv, client_ip="127.0.0.1")
        consumer = PushConsumer("CG", namesrv=namesrv, client_ip="127.0.0.1")
        simple = SimpleConsumer("SG", namesrv=namesrv, client_ip="127.0.0.1")
        with pytest.raises(ClientUsageError, match="checker"):
            await producer.start()
        for client in (consumer, simple):
            with pytest.raises(ClientUsageError, match="subscribe"):
                await client.start()
        producer.checker = commit
        consumer.subscribe("T")
        simple.subscribe("T")
        for client in (producer, consumer, simple):
            async with client:
                pass
