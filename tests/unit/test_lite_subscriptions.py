"""The lite subscription registry's modes (RocketMQ's LiteSubscriptionRegistryImpl): shared,
exclusive (eviction, tombstones, the notice told again), wildcard; the OffsetOption targets;
the group attributes as mqadmin sends them."""

from __future__ import annotations

import pytest

from pocketmq.broker.services.lite import (
    POLICY_LAST,
    POLICY_MAX,
    POLICY_MIN,
    Eviction,
    LiteSubscriptions,
    OffsetOption,
    is_exclusive,
    is_wildcard,
    offset_target,
    parse_lmq,
    resets_on,
)

G, P = "group", "parent"


def test_a_shared_group_lets_every_client_hold_a_lite_topic() -> None:
    table = LiteSubscriptions()
    assert table.add_partial(G, P, "a", ["x"], exclusive=False) == []
    assert table.add_partial(G, P, "b", ["x", "y"], exclusive=False) == []
    assert table.poppable(G, P, "a") == {"x"}
    assert table.poppable(G, P, "b") == {"x", "y"}


def test_an_exclusive_group_moves_a_lite_topic_to_its_newest_subscriber() -> None:
    table = LiteSubscriptions()
    table.add_partial(G, P, "a", ["x", "y"], exclusive=True)
    evicted = table.add_partial(G, P, "b", ["x"], exclusive=True)
    assert evicted == [Eviction("a", G, P, "x")]
    assert table.of(G, P, "a") == {"y"} and table.poppable(G, P, "b") == {"x"}
    # Another group's subscription to the same lite topic is not touched.
    assert table.add_partial("other", P, "c", ["x"], exclusive=True) == []
    assert table.poppable(G, P, "b") == {"x"}


def test_an_evicted_client_resending_its_set_is_told_again_and_cannot_pop_it() -> None:
    table = LiteSubscriptions()
    table.add_partial(G, P, "a", ["x"], exclusive=True)
    table.add_partial(G, P, "b", ["x"], exclusive=True)
    # a ignored the notice: its 30 s COMPLETE_ADD still names x
    assert table.add_complete(G, P, "a", ["x", "z"], exclusive=True) == ["x"]
    assert table.of(G, P, "a") == {"x", "z"}
    assert table.poppable(G, P, "a") == {"z"}
    # once its set no longer names x, the tombstone goes
    assert table.add_complete(G, P, "a", ["z"], exclusive=True) == []
    assert table.tombstones == {}


def test_reclaiming_a_lite_topic_clears_the_own_tombstone_and_evicts_the_holder() -> None:
    table = LiteSubscriptions()
    table.add_partial(G, P, "a", ["x"], exclusive=True)
    table.add_partial(G, P, "b", ["x"], exclusive=True)
    assert table.add_partial(G, P, "a", ["x"], exclusive=True) == [Eviction("b", G, P, "x")]
    assert table.poppable(G, P, "a") == {"x"}
    assert table.poppable(G, P, "b") == set()


def test_wildcard_clients_and_departures() -> None:
    table = LiteSubscriptions()
    table.add_wildcard(G, P, "w")
    assert table.is_wildcard(G, P, "w") and not table.is_wildcard(G, P, "other")
    table.remove_all(G, P, "w")
    assert not table.is_wildcard(G, P, "w")
    table.add_wildcard(G, P, "w")
    table.add_partial(G, P, "a", ["x"], exclusive=True)
    table.add_partial(G, P, "b", ["x"], exclusive=True)
    table.drop_client("w")
    table.drop_client("a")
    assert table.wildcard == {} and table.tombstones == {}


def test_an_expired_lite_topic_leaves_every_subscription_of_its_parent() -> None:
    table = LiteSubscriptions()
    table.add_partial(G, P, "a", ["x", "y"], exclusive=False)
    table.add_partial("g2", P, "b", ["x"], exclusive=False)
    table.add_partial(G, "other-parent", "c", ["x"], exclusive=False)
    assert sorted(table.drop_lite(P, "x")) == [("g2", "b"), (G, "a")]
    assert table.of(G, P, "a") == {"y"} and table.of("g2", P, "b") == set()
    assert table.of(G, "other-parent", "c") == {"x"}


@pytest.mark.parametrize(
    ("option", "current", "expected"),
    [
        (OffsetOption("policy", POLICY_LAST), 4, None),
        (OffsetOption("policy", POLICY_MIN), 4, 2),
        (OffsetOption("policy", POLICY_MAX), 4, 9),
        (OffsetOption("offset", 5), None, 5),
        (OffsetOption("offset", 50), None, 9),
        (OffsetOption("offset", -3), None, 2),
        (OffsetOption("tail_n", 1), 4, 3),
        (OffsetOption("tail_n", 10), 4, 2),
        (OffsetOption("tail_n", 1), None, None),  # only with a committed offset
        (OffsetOption("timestamp", 1_700_000_000_000), 4, None),  # RocketMQ ignores it
    ],
)
def test_offset_targets(option: OffsetOption, current: int | None, expected: int | None) -> None:
    assert offset_target(option, current, 2, 9) == expected


def test_group_attributes_as_sent_with_or_without_the_plus() -> None:
    assert is_exclusive({"+lite.sub.model": "Exclusive"})
    assert not is_exclusive({"lite.sub.model": "Shared"}) and not is_exclusive({})
    assert is_wildcard({"lite.sub.wildcard": "anything"}) and not is_wildcard({})
    assert resets_on(
        {"+lite.sub.reset.offset.unsubscribe": "TRUE"}, "lite.sub.reset.offset.unsubscribe"
    )
    assert not resets_on(
        {"lite.sub.reset.offset.exclusive": "yes"}, "lite.sub.reset.offset.exclusive"
    )


def test_lmq_names_parse_back() -> None:
    assert parse_lmq("%LMQ%parent|lite-1") == ("parent", "lite-1")
    assert parse_lmq("parent") is None and parse_lmq("%LMQ%nolite") is None
