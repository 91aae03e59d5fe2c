"""The HTTP front's one table from a service's refusal kind to a status: every kind has one (a
new kind must be placed, not answered 400 by accident), and the retriable kinds are 4xx/5xx a
client may retry (429, 503, 500) or a missing topic (404, retriable as RocketMQ's clients do)."""

from __future__ import annotations

from pocketmq.broker.errors import Kind
from pocketmq.broker.http.errors import STATUS_OF


def test_every_kind_has_a_status() -> None:
    assert set(STATUS_OF) == set(Kind)
    assert all(400 <= status < 600 for status in STATUS_OF.values())


def test_retriable_kinds_map_to_statuses_worth_retrying() -> None:
    for kind in Kind:
        if kind.retriable:
            assert STATUS_OF[kind] in (403, 404, 429, 500, 503), kind
        else:
            assert STATUS_OF[kind] < 500, kind  # the request's fault, not the broker's
