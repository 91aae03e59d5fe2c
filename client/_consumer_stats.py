"""A push consumer's figures per topic (RocketMQ's ``ConsumerStatsManager``), for the
``statusTable`` of GET_CONSUMER_RUNNING_INFO: mean pull and consume times over the last minute,
messages pulled, consumed and failed per second over the last minute, and failures in the last
hour. Kept in one-second buckets, at most an hour's worth per topic.

Counting runs once per message consumed, so it is a few list updates on the current second's
bucket; the buckets are summed only when a broker asks.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final

from pocketmq.broker.protocol.admin_bodies import ConsumeStatus

__all__ = ["ConsumerStats"]

_MINUTE_S: Final = 60
_HOUR_S: Final = 3600

# A bucket: [second, pull time sum (ms), pulls, messages pulled, consume time sum (ms),
# messages consumed, of which failed]
_SECOND, _PULL_RT, _PULLS, _PULLED, _CONSUME_RT, _CONSUMED, _FAILED = range(7)


class ConsumerStats:
    def __init__(self, clock_s: Callable[[], float] = time.monotonic) -> None:
        self._clock_s = clock_s
        self._buckets: dict[str, deque[list[float]]] = {}
        self._current: dict[str, list[float]] = {}  # each topic's newest bucket

    def _bucket(self, topic: str) -> list[float]:
        now = int(self._clock_s())
        bucket = self._current.get(topic)
        if bucket is not None and bucket[_SECOND] == now:
            return bucket
        buckets = self._buckets.get(topic)
        if buckets is None:
            buckets = self._buckets[topic] = deque()
        while buckets and buckets[0][_SECOND] <= now - _HOUR_S:
            buckets.popleft()
        bucket = [now, 0.0, 0, 0, 0.0, 0, 0]
        buckets.append(bucket)
        self._current[topic] = bucket
        return bucket

    def pulled(self, topic: str, rt_ms: float, messages: int) -> None:
        """A pull that found messages (RocketMQ counts those only)."""
        bucket = self._bucket(topic)
        bucket[_PULL_RT] += rt_ms
        bucket[_PULLS] += 1
        bucket[_PULLED] += messages

    def consumed(self, topic: str, rt_ms: float, *, ok: bool) -> None:
        bucket = self._bucket(topic)
        bucket[_CONSUME_RT] += rt_ms
        bucket[_CONSUMED] += 1
        if not ok:
            bucket[_FAILED] += 1

    def status(self, topic: str) -> ConsumeStatus:
        buckets = self._buckets.get(topic)
        if not buckets:
            return ConsumeStatus()
        now = int(self._clock_s())
        minute = [b for b in buckets if b[_SECOND] > now - _MINUTE_S]
        pulls = sum(b[_PULLS] for b in minute)
        consumed = sum(b[_CONSUMED] for b in minute)
        failed = sum(b[_FAILED] for b in minute)
        return ConsumeStatus(
            pull_rt=sum(b[_PULL_RT] for b in minute) / pulls if pulls else 0.0,
            pull_tps=sum(b[_PULLED] for b in minute) / _MINUTE_S,
            consume_rt=sum(b[_CONSUME_RT] for b in minute) / consumed if consumed else 0.0,
            consume_ok_tps=(consumed - failed) / _MINUTE_S,
            consume_failed_tps=failed / _MINUTE_S,
            consume_failed_msgs=int(sum(b[_FAILED] for b in buckets if b[_SECOND] > now - _HOUR_S)),
        )
