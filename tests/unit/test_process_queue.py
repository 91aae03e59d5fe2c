"""ProcessQueue's commit offset: the lowest cached offset, else the next to pull.

Before the offsets were kept in order, the commit offset was the first offset *inserted*, so a
message pulled again below the others (readd here) did not hold the commit offset back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pocketmq.client import MessageQueue
from pocketmq.client._process_queue import ProcessQueue


class Pulled:
    __slots__ = ("queue_offset", "body")

    def __init__(self, offset: int) -> None:
        self.queue_offset = offset
        self.body = b"x" * 10


# add a batch of n new offsets / remove the k-th cached offset (any order) / re-add a done one
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 40)),
        st.tuples(st.just("remove"), st.integers(0, 1000)),
        st.tuples(st.just("readd"), st.integers(0, 1000)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_commit_offset_is_the_lowest_cached_offset(script: list[tuple[str, int]]) -> None:
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    cached: dict[int, None] = {}  # the model, in insertion order
    done: list[int] = []
    next_offset = 0
    for action, number in script:
        if action == "add":
            batch = [Pulled(next_offset + i) for i in range(number)]
            next_offset += number
            pq.next_offset = next_offset
            assert pq.add(batch) == batch
            cached.update(dict.fromkeys(m.queue_offset for m in batch))
        elif action == "remove" and cached:
            offset = list(cached)[number % len(cached)]
            del cached[offset]
            assert pq.remove(offset) == min(cached, default=next_offset)
            done.append(offset)
        elif action == "readd" and done:
            offset = done.pop(number % len(done))  # redelivered after a rollback
            pq.add([Pulled(offset)])
            cached[offset] = None
        # the lowest offset still cached: a message pulled again below the others holds the
        # commit offset back too
        expected = min(cached, default=next_offset)
        assert pq.commit_offset() == expected
        assert (pq.first().queue_offset if pq.first() else None) == min(cached, default=None)
        assert pq.count == len(cached)
        assert pq.span == (next(reversed(cached)) - expected if cached else 0)
