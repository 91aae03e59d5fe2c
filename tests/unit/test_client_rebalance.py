"""AllocateMessageQueueAveragely (and ByCircle) against RocketMQ's documented behaviour."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pocketmq.client.message import MessageQueue
from pocketmq.client.rebalance import allocate_averagely, allocate_averagely_by_circle


def queues(n: int, topic: str = "T", broker: str = "broker-a") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(n)]


def shares(strategy, n_queues: int, cids: list[str]) -> list[list[int]]:  # type: ignore[no-untyped-def]
    mqs = queues(n_queues)
    return [[mq.queue_id for mq in strategy("G", cid, mqs, cids)] for cid in cids]


@pytest.mark.parametrize(
    ("n_queues", "n_consumers", "expected"),
    [
        # 8 queues, 3 consumers: blocks of 3, 3, 2
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        # 10 queues, 4 consumers: the first 10 % 4 = 2 consumers get one more
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
        (4, 4, [[0], [1], [2], [3]]),
        (4, 2, [[0, 1], [2, 3]]),
        # more consumers than queues: the last ones get nothing
        (4, 6, [[0], [1], [2], [3], [], []]),
        (1, 3, [[0], [], []]),
    ],
)
def test_averagely_documented_examples(
    n_queues: int, n_consumers: int, expected: list[list[int]]
) -> None:
    cids = [f"c{i}" for i in range(n_consumers)]
    assert shares(allocate_averagely, n_queues, cids) == expected


def test_by_circle_deals_queues_round_robin() -> None:
    cids = ["c0", "c1", "c2"]
    assert shares(allocate_averagely_by_circle, 8, cids) == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_inputs_are_sorted_before_allocation() -> None:
    mqs = queues(4, broker="b") + queues(4, broker="a")
    shuffled = list(reversed(mqs))
    mine = allocate_averagely("G", "10.0.0.2@1", shuffled, ["10.0.0.2@1", "10.0.0.1@1"])
    # sorted by (topic, broker name, queue id); consumer ids sorted as strings
    assert mine == [MessageQueue("T", "b", i) for i in range(4)]


def test_unknown_consumer_or_empty_inputs_own_nothing() -> None:
    assert allocate_averagely("G", "x", queues(4), ["a", "b"]) == []
    assert allocate_averagely("G", "a", [], ["a"]) == []
    assert allocate_averagely("G", "a", queues(4), []) == []
    assert allocate_averagely_by_circle("G", "x", queues(4), ["a"]) == []


@given(
    st.integers(min_value=0, max_value=64),
    st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=20, unique=True),
)
def test_shares_partition_the_queues(n_queues: int, cids: list[str]) -> None:
    mqs = queues(n_queues)
    for strategy in (allocate_averagely, allocate_averagely_by_circle):
        parts = [strategy("G", cid, mqs, cids) for cid in cids]
        flat = [mq for part in parts for mq in part]
        assert sorted(flat) == mqs  # every queue exactly once
        sizes = [len(p) for p in parts]
        assert max(sizes) - min(sizes) <= 1
