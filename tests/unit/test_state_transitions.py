"""The two transition tables: message states (store/state.py) and transaction statuses
(broker/services/transactions.py). Every change goes through one; a change not in it raises and
writes nothing."""

from __future__ import annotations

import pytest

from pocketmq.broker.errors import Kind, TransactionError
from pocketmq.broker.services.transactions import (
    TX_TRANSITIONS,
    HalfMessage,
    TransactionService,
    TxStatus,
)
from pocketmq.store.message_store import MessageStore, PutMessage
from pocketmq.store.state import TRANSITIONS, IllegalStateChangeError, MessageState

A, U, P, D = (
    MessageState.AVAILABLE,
    MessageState.UNAVAILABLE,
    MessageState.POISONED,
    MessageState.MARKED_FOR_DELETION,
)


def test_the_table_covers_every_state_and_deletion_is_for_good() -> None:
    assert set(TRANSITIONS) == set(MessageState)
    assert TRANSITIONS[D] == {D}
    assert A not in TRANSITIONS[P]  # a dead letter is not made deliverable by a state change


@pytest.mark.parametrize(("current", "new"), [(c, n) for c in MessageState for n in MessageState])
def test_set_state_follows_the_table(current: MessageState, new: MessageState) -> None:
    with MessageStore.in_memory() as store:
        offset = store.put(PutMessage(topic="T", body=b"x")).physical_offset
        if current is not A:
            store.set_state(offset, current, "set up")
        before = store.max_offset("rmq_sys_MESSAGE_STATE", 0)
        if new in TRANSITIONS[current]:
            store.set_state(offset, new, "moved")
            assert store.state_of(offset) is new
        else:
            with pytest.raises(IllegalStateChangeError, match=f"is {current.label}"):
                store.set_state(offset, new, "refused")
            assert store.state_of(offset) is current
            assert store.max_offset("rmq_sys_MESSAGE_STATE", 0) == before  # nothing written


def test_a_state_for_one_group_is_checked_against_that_groups_state() -> None:
    with MessageStore.in_memory() as store:
        offset = store.put(PutMessage(topic="T", body=b"x")).physical_offset
        store.set_state(offset, P, "dead-lettered", group="a")
        store.set_state(offset, P, "dead-lettered too", group="b")  # available for b until now
        assert store.state_of(offset, "b") is P


def test_a_transaction_ends_once() -> None:
    assert TX_TRANSITIONS[TxStatus.PENDING] == set(TxStatus)
    ended = [s for s in TxStatus if s is not TxStatus.PENDING]
    assert all(TX_TRANSITIONS[s] == set() for s in ended)
    half = HalfMessage("TX1", "g", 0, 0, 0, 0, 0, "T")
    TransactionService._move(half, TxStatus.PENDING)  # an UNKNOWN answer, a check
    TransactionService._move(half, TxStatus.COMMITTED)
    for status in TxStatus:
        with pytest.raises(TransactionError) as caught:
            TransactionService._move(half, status)
        assert caught.value.kind is Kind.ILLEGAL_STATE and "is committed" in str(caught.value)
    assert half.status is TxStatus.COMMITTED
