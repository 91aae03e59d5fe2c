"""What the push consumer's rooms share, alone: the subscriptions with the group's retry topic.
(The rooms themselves are tested through ``PushConsumer`` in test_client_consumer.py.)"""

from __future__ import annotations

from typing import cast

from pocketmq.client import PushConsumer
from pocketmq.client._push_common import PushOptions, Subscription, Subscriptions
from pocketmq.client.filter import TagExpression


def subscriptions(message_model: str) -> Subscriptions:
    consumer = PushConsumer("G", namesrv="127.0.0.1:1", message_model=message_model)  # type: ignore[arg-type]
    return Subscriptions(cast(PushOptions, consumer), created_ms=1000)


def test_clustering_subscribes_the_groups_retry_topic_with_the_first_topic() -> None:
    subs = subscriptions("clustering")
    assert subs.all() == {} and subs.of("%RETRY%G") is None
    orders = Subscription(TagExpression.parse("A || B"), 2000)
    subs.topics["Orders"] = orders
    retry = subs.of("%RETRY%G")
    assert retry is not None and (retry.expression.expression, retry.sub_version) == ("*", 1000)
    assert subs.all() == {"Orders": orders, "%RETRY%G": retry}
    assert subs.of("Orders") is orders and subs.of("Other") is None
    del subs.topics["Orders"]  # unsubscribed: the retry topic goes too
    assert subs.all() == {} and subs.of("%RETRY%G") is None


def test_broadcasting_has_no_retry_topic() -> None:
    subs = subscriptions("broadcasting")
    subs.topics["Orders"] = Subscription(TagExpression.parse("*"), 2000)
    assert list(subs.all()) == ["Orders"] and subs.of("%RETRY%G") is None
