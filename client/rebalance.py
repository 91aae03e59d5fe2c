"""Queue allocation strategies: which queues of a topic this consumer owns.

Pure functions with RocketMQ's signature ``(group, current_client_id, all_queues,
all_client_ids) -> owned queues``. Every consumer of a group computes its share from the
same sorted lists, so the shares cover every queue exactly once (when the consumers agree
on the lists).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .message import MessageQueue

__all__ = ["AllocateStrategy", "allocate_averagely", "allocate_averagely_by_circle"]

AllocateStrategy = Callable[[str, str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def _prepare(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> tuple[list[MessageQueue], list[str], int] | None:
    if not current_cid or not mq_all or not cid_all:
        return None
    mqs = sorted(set(mq_all))
    cids = sorted(set(cid_all))
    if current_cid not in cids:  # RocketMQ logs this and owns nothing
        return None
    return mqs, cids, cids.index(current_cid)


def allocate_averagely(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragely``: contiguous blocks; the first ``len(mqs) % len(cids)``
    consumers get one queue more. With more consumers than queues the last ones get none."""
    prepared = _prepare(current_cid, mq_all, cid_all)
    if prepared is None:
        return []
    mqs, cids, index = prepared
    n_mq, n_cid = len(mqs), len(cids)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n_mq - start)
    return [mqs[(start + i) % n_mq] for i in range(max(count, 0))]


def allocate_averagely_by_circle(
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragelyByCircle``: queue ``i`` goes to consumer ``i % n``."""
    prepared = _prepare(current_cid, mq_all, cid_all)
    if prepared is None:
        return []
    mqs, cids, index = prepared
    return [mq for i, mq in enumerate(mqs) if i % len(cids) == index]
