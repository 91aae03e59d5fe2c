"""Traffic statistics of a broker: what went in and out, how fast, how long it took.

The fronts report, the admin codes, the Prometheus endpoint and the dashboard read. Modelled on
RocketMQ's ``BrokerStatsManager`` / ``StatsItem`` (moving rates), ``StoreStatsService`` (the
broker-wide ``putTps`` / ``getTransferredTps`` strings) and ``BrokerStats`` (today's and
yesterday's totals), with the 5.x metrics' latency buckets.

Public interface (``BrokerStats``, one per broker, ``broker.stats``):

Recording (the hot path; each call is a few dict and integer operations):
    ``sent_one(topic, size, ms)``        a send stored one message of ``size`` record bytes in
                                          ``ms`` (SendService, every front)
    ``sent(topic, count, size, ms)``     the same of a batch of ``count`` messages
    ``put_failed``                        sends the store refused (incremented by SendService)
    ``got(group, topic, count, size)``    a read handed messages to a consumer: PULL, POP, gRPC
    ``missed()``                          a read found no message
    ``read(ms)``                          the store's read time of one pull or one popped queue
    ``connection_opened(front)`` / ``connection_closed(front)``   a client connection's first
        heartbeat and its end (the client registry calls them); front "remoting" or "grpc"

Reading:
    ``topic_put[topic]`` / ``group_get[(topic, group)]``  ``StatsItem``: cumulative ``messages``,
        ``bytes`` and ``times`` (calls); ``minute(now)``, ``hour(now)``, ``day(now)`` give a
        ``BrokerStatsItem`` (sum, tps, avgpt) over RocketMQ's windows (last minute sampled every
        10 s, last hour every 10 min, last day every hour), from the oldest snapshot kept to
        ``now`` (``monotonic_ms()``; to the last snapshot without it); ``bytes_minute(now)`` the
        same of bytes. The readers below pass ``now``.
    ``put_total`` / ``get_total``           messages in / out since the broker started
    ``put_tps()`` / ``get_tps()``           "<10 s> <60 s> <600 s>" as RocketMQ's runtime info
    ``topic_put_tps(topic)`` / ``group_get_tps(group, topic)``   the minute window's rate
    ``totals``                              ``DayTotals``: put/get totals at this morning's and
        yesterday morning's midnight (the broker clock's local date), RocketMQ's BrokerStats
    ``stats_data(name, key)``               VIEW_BROKER_STATS_DATA's ``BrokerStatsData`` of
        TOPIC_PUT_NUMS / TOPIC_PUT_SIZE (key: topic), GROUP_GET_NUMS / GROUP_GET_SIZE (key:
        ``topic@group``) or BROKER_PUT_NUMS / BROKER_GET_NUMS (key: the cluster name), or None
        when there is no such item
    ``broker_put`` / ``broker_get``         the broker-wide ``StatsItem``s (reads that found
        messages are ``broker_get.times``)
    ``send_latency`` / ``pull_latency``     ``Histogram``: ``buckets`` (upper bounds in ms, the
        5.x ``rocketmq_rpc_latency`` ones), ``counts`` (one per bucket, then +Inf, not
        cumulative; ``cumulative()`` gives Prometheus' buckets), ``count``, ``sum_ms``,
        ``quantile(q)``
    ``put_times``                           the same over RocketMQ's putMessageDistributeTime
        buckets; ``put_time_max_ms`` / ``get_time_max_ms`` the slowest put and read
    ``get_found_tps()`` / ``get_miss_tps()`` / ``get_total_tps()``   reads per second (calls,
        not messages), as runtime info's getFoundTps / getMissTps / getTotalTps
    ``connections``                          {front: ``ConnectionCounts`` (opened, closed,
        ``current``)}
    ``boot_ms``                              when the stats began (the broker clock)

Keeping it current: ``sample()`` every second (``run()`` does it until cancelled) takes the
snapshots the rates are computed from, and rolls the day totals over at midnight.

Limits: at most ``items_max`` topics and as many (topic, group) pairs are tracked; traffic of
further ones still counts in the totals. ``forget_topic`` and ``forget_group`` drop items of a
deleted topic or group.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable

import msgspec

from pocketmq.broker.protocol.admin_stats import BrokerStatsData, BrokerStatsItem

__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "PUT_DISTRIBUTION_BOUNDS_MS",
    "RPC_LATENCY_BUCKETS_MS",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "BrokerStats",
    "BrokerStatsData",
    "BrokerStatsItem",
    "ConnectionCounts",
    "DayTotals",
    "Histogram",
    "StatsItem",
]

# BrokerStatsManager's item names, as VIEW_BROKER_STATS_DATA and mqadmin statsAll name them.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"  # key: the cluster name
BROKER_GET_NUMS = "BROKER_GET_NUMS"

# RemotingMetricsManager's rocketmq_rpc_latency histogram bounds, in ms.
RPC_LATENCY_BUCKETS_MS: tuple[float, ...] = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)

# StoreStatsService's put time distribution, [<=0ms] [0~10ms] ... [5~10s] [10s~]: Java counts
# whole ms below each bound; here a bucket holds the times <= its bound (the same but for a time
# of exactly a bound), the first one those <= 1 ms.
PUT_DISTRIBUTION_BOUNDS_MS: tuple[float, ...] = (
    1,
    10,
    50,
    100,
    200,
    500,
    1000,
    2000,
    3000,
    4000,
    5000,
    10_000,
)
# Both sets of bounds: the one histogram a send updates, read through either.
_SEND_BOUNDS_MS = tuple(sorted(set(RPC_LATENCY_BUCKETS_MS) | set(PUT_DISTRIBUTION_BOUNDS_MS)))

# StatsItem's windows, minute, hour and day: (sampling period ms, snapshots kept); a rate is
# over the first..last snapshot kept.
_WINDOWS = ((10_000, 7), (600_000, 7), (3_600_000, 25))
# StoreStatsService samples the broker-wide counts every second and keeps 600 s of them.
_BROKER_SAMPLES = 601

ITEMS_MAX = 100_000


_Snapshot = tuple[int, int, int, int]  # (at ms, messages, bytes, times)


def _window(snapshots: deque[_Snapshot], field: int, live: _Snapshot | None) -> BrokerStatsItem:
    """StatsItem.computeStatsData: last minus first, per second, per call; ``live`` (the counts
    now) is the last point when given, so a rate includes what happened since the last sample."""
    if not snapshots:
        return BrokerStatsItem()
    first, last = snapshots[0], live or snapshots[-1]
    total = last[field] - first[field]
    elapsed = last[0] - first[0]
    calls = last[3] - first[3]
    return BrokerStatsItem(
        sum=total,
        tps=total * 1000.0 / elapsed if elapsed > 0 else 0.0,
        avgpt=total / calls if calls > 0 else 0.0,
    )


class StatsItem:
    """Cumulative counts of one topic (in) or one topic and group (out), with the snapshots
    that RocketMQ's minute, hour and day rates are computed from."""

    __slots__ = ("bytes", "extra", "messages", "windows")

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        # calls = messages - extra: a single send or read adds a message and no extra, so the
        # per-send path updates two counts, not three
        self.extra = 0
        # minute, hour, day (the order of _WINDOWS)
        self.windows: tuple[deque[_Snapshot], ...] = tuple(
            deque(maxlen=kept) for _, kept in _WINDOWS
        )

    @property
    def times(self) -> int:
        """Calls (sends, or reads that found messages)."""
        return self.messages - self.extra

    def add(self, count: int, size: int) -> None:
        """One call of ``count`` messages of ``size`` bytes."""
        self.messages += count
        self.bytes += size
        self.extra += count - 1

    def snapshot(self, window: int, now: int) -> None:
        self.windows[window].append((now, self.messages, self.bytes, self.times))

    def _live(self, now: int | None) -> _Snapshot | None:
        return None if now is None else (now, self.messages, self.bytes, self.times)

    def minute(self, now: int | None = None) -> BrokerStatsItem:
        """Messages over the minute window; with ``now`` (the stats' monotonic ms) up to now,
        else up to the last sample."""
        return _window(self.windows[0], 1, self._live(now))

    def hour(self, now: int | None = None) -> BrokerStatsItem:
        return _window(self.windows[1], 1, self._live(now))

    def day(self, now: int | None = None) -> BrokerStatsItem:
        return _window(self.windows[2], 1, self._live(now))

    def bytes_minute(self, now: int | None = None) -> BrokerStatsItem:
        return _window(self.windows[0], 2, self._live(now))

    def data(self, field: int, now: int | None = None) -> BrokerStatsData:
        live = self._live(now)
        minute, hour, day = (_window(w, field, live) for w in self.windows)
        return BrokerStatsData(stats_minute=minute, stats_hour=hour, stats_day=day)


class Histogram:
    """A latency histogram with fixed bounds (ms); ``counts[i]`` holds observations
    ``<= buckets[i]`` and above the bound before it, the last one those above every bound."""

    __slots__ = ("buckets", "counts", "sum_ms")

    def __init__(self, buckets: tuple[float, ...] = RPC_LATENCY_BUCKETS_MS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum_ms = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def observe(self, ms: float) -> None:
        self.counts[bisect_left(self.buckets, ms)] += 1
        self.sum_ms += ms

    def rebucket(self, bounds: tuple[float, ...]) -> Histogram:
        """The same observations over ``bounds``, each of which must be one of this
        histogram's bounds (so a fine histogram on the hot path serves several views)."""
        out = Histogram(bounds)
        out.sum_ms = self.sum_ms
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            out.counts[bisect_left(bounds, bound)] += count
        return out

    def quantile(self, q: float) -> float:
        """The ``q`` quantile, interpolated in its bucket (StoreStatsService's
        findPutMessageEntireTimePX); the last bound for values above every bound."""
        rank = self.count * q
        passed = 0
        for index, count in enumerate(self.counts):
            if count and rank <= passed + count:
                if index == len(self.buckets):
                    return float(self.buckets[-1])
                low = self.buckets[index - 1] if index else 0.0
                return low + (self.buckets[index] - low) * (rank - passed) / count
            passed += count
        return 0.0

    def cumulative(self) -> list[int]:
        """Prometheus' ``_bucket`` values: observations ``<=`` each bound, then the total."""
        out, running = [], 0
        for value in self.counts:
            running += value
            out.append(running)
        return out


class ConnectionCounts(msgspec.Struct):
    opened: int = 0
    closed: int = 0

    @property
    def current(self) -> int:
        return self.opened - self.closed


class DayTotals(msgspec.Struct, rename="camel"):
    """RocketMQ's BrokerStats: the broker's put and get totals at the last two midnights."""

    msg_put_total_yesterday_morning: int = 0
    msg_put_total_today_morning: int = 0
    msg_get_total_yesterday_morning: int = 0
    msg_get_total_today_morning: int = 0


def _local_date(epoch_ms: int) -> datetime.date:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000).date()


class BrokerStats:
    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        monotonic_ms: Callable[[], int] | None = None,
        items_max: int = ITEMS_MAX,
        cluster: str = "DefaultCluster",
    ) -> None:
        # Rates use the monotonic clock (real throughput, even on a manual broker clock);
        # day totals and boot time use the broker's clock, so `advance 1d` rolls the day.
        self.now_ms = now_ms
        self.monotonic_ms = monotonic_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self.items_max = items_max
        self.topic_put: dict[str, StatsItem] = {}
        self.group_get: dict[tuple[str, str], StatsItem] = {}
        # BROKER_PUT_NUMS / BROKER_GET_NUMS, keyed by the cluster name as in RocketMQ
        self.cluster = cluster
        # The broker's put totals are the topics' sums (refreshed when read: a send updates
        # only its topic), with the topics forgotten or past ``items_max`` in ``_put_other``.
        self._put_whole = self._new_item()
        self._put_other = StatsItem()
        self.broker_get = self._new_item()
        self.put_failed = 0
        self.get_miss_calls = 0  # reads that found none
        # read as send_latency and put_times; counts and sum kept apart for the per-send path
        self._send_times = Histogram(_SEND_BOUNDS_MS)
        self._send_counts = self._send_times.counts
        self._send_sum_ms = 0.0
        self.pull_latency = Histogram()
        # the slowest put and read seen
        self.put_time_max_ms = 0.0
        self.get_time_max_ms = 0.0
        self.connections: dict[str, ConnectionCounts] = {}
        self.totals = DayTotals()
        self.boot_ms = now_ms()
        self._day = _local_date(self.boot_ms)
        # (at ms, messages in, messages out, reads that found, reads that missed)
        self._broker_samples: deque[tuple[int, int, int, int, int]] = deque(maxlen=_BROKER_SAMPLES)
        self._next_sample = [0] * len(_WINDOWS)

    # -- recording (hot path) -----------------------------------------------------------------

    def sent_one(self, topic: str, size: int, ms: float) -> None:
        """A send stored one message of ``size`` bytes in ``ms``. (Written out in one function
        of a few operations: this runs for every send.)"""
        self._send_counts[bisect_left(_SEND_BOUNDS_MS, ms)] += 1
        self._send_sum_ms += ms
        if ms > self.put_time_max_ms:
            self.put_time_max_ms = ms
        item = self.topic_put.get(topic) or self._topic_item(topic)
        item.messages += 1
        item.bytes += size

    def sent(self, topic: str, count: int, size: int, ms: float) -> None:
        """A send (a batch) stored ``count`` messages of ``size`` bytes in all, in ``ms``."""
        self._send_counts[bisect_left(_SEND_BOUNDS_MS, ms)] += 1
        self._send_sum_ms += ms
        if ms > self.put_time_max_ms:
            self.put_time_max_ms = ms
        (self.topic_put.get(topic) or self._topic_item(topic)).add(count, size)

    def _topic_item(self, topic: str) -> StatsItem:
        if len(self.topic_put) >= self.items_max:
            return self._put_other
        item = self.topic_put[topic] = self._new_item()
        return item

    @property
    def send_latency(self) -> Histogram:
        """Send times over the 5.x ``rocketmq_rpc_latency`` bounds."""
        self._send_times.sum_ms = self._send_sum_ms
        return self._send_times.rebucket(RPC_LATENCY_BUCKETS_MS)

    @property
    def put_times(self) -> Histogram:
        """Send times over RocketMQ's putMessageDistributeTime bounds."""
        self._send_times.sum_ms = self._send_sum_ms
        return self._send_times.rebucket(PUT_DISTRIBUTION_BOUNDS_MS)

    def read(self, ms: float) -> None:
        """A read of the store (one pull or one queue of a pop) took ``ms``."""
        self.pull_latency.observe(ms)
        if ms > self.get_time_max_ms:
            self.get_time_max_ms = ms

    def missed(self) -> None:
        """A read found no message."""
        self.get_miss_calls += 1

    def put(self, topic: str, count: int, size: int) -> None:
        """Messages stored without a send's timing."""
        (self.topic_put.get(topic) or self._topic_item(topic)).add(count, size)

    def got(self, group: str, topic: str, count: int, size: int) -> None:
        self.broker_get.add(count, size)  # its times: reads that found messages
        key = (topic, group)
        item = self.group_get.get(key)
        if item is None:
            if len(self.group_get) >= self.items_max:
                return
            item = self.group_get[key] = self._new_item()
        item.add(count, size)

    @property
    def broker_put(self) -> StatsItem:
        """The broker-wide put counts (BROKER_PUT_NUMS), summed now."""
        whole, messages, size, extra = self._put_whole, 0, 0, 0
        for item in (*self.topic_put.values(), self._put_other):
            messages += item.messages
            size += item.bytes
            extra += item.extra
        whole.messages, whole.bytes, whole.extra = messages, size, extra
        return whole

    @property
    def put_total(self) -> int:
        return self.broker_put.messages

    @property
    def put_bytes_total(self) -> int:
        return self.broker_put.bytes

    @property
    def get_total(self) -> int:
        return self.broker_get.messages

    @property
    def get_bytes_total(self) -> int:
        return self.broker_get.bytes

    @property
    def get_found_calls(self) -> int:
        return self.broker_get.times

    def _new_item(self) -> StatsItem:
        # Zero snapshots now: a topic's first messages count in its rates (RocketMQ's first
        # sample only comes at the next tick, after them).
        item, now = StatsItem(), self.monotonic_ms()
        for window in range(len(_WINDOWS)):
            item.snapshot(window, now)
        return item

    def connection_opened(self, front: str) -> None:
        counts = self.connections.get(front)
        if counts is None:
            counts = self.connections[front] = ConnectionCounts()
        counts.opened += 1

    def connection_closed(self, front: str) -> None:
        counts = self.connections.get(front)
        if counts is None:
            counts = self.connections[front] = ConnectionCounts()
        counts.closed += 1

    def forget_topic(self, topic: str) -> None:
        gone = self.topic_put.pop(topic, None)
        if gone is not None:  # still in the broker's totals
            other = self._put_other
            other.messages += gone.messages
            other.bytes += gone.bytes
            other.extra += gone.extra
        for key in [k for k in self.group_get if k[0] == topic]:
            del self.group_get[key]

    def forget_group(self, group: str) -> None:
        for key in [k for k in self.group_get if k[1] == group]:
            del self.group_get[key]

    # -- sampling -----------------------------------------------------------------------------

    def sample(self) -> None:
        """Take the snapshots that are due and roll the day totals over at midnight."""
        now = self.monotonic_ms()
        self._broker_samples.append(
            (now, self.put_total, self.get_total, self.broker_get.times, self.get_miss_calls)
        )
        for window, (period, _) in enumerate(_WINDOWS):
            if now < self._next_sample[window]:
                continue
            self._next_sample[window] = now + period
            for items in (
                self.topic_put.values(),
                self.group_get.values(),
                (self.broker_put, self.broker_get),
            ):
                for item in items:
                    item.snapshot(window, now)
        today = _local_date(self.now_ms())
        if today != self._day:
            # BrokerStats.record at each midnight; a clock advanced by days leaves
            # yesterday's morning equal to today's: nothing was counted in between.
            elapsed_days = (today - self._day).days
            totals = self.totals
            totals.msg_put_total_yesterday_morning = (
                totals.msg_put_total_today_morning if elapsed_days == 1 else self.put_total
            )
            totals.msg_get_total_yesterday_morning = (
                totals.msg_get_total_today_morning if elapsed_days == 1 else self.get_total
            )
            totals.msg_put_total_today_morning = self.put_total
            totals.msg_get_total_today_morning = self.get_total
            self._day = today

    async def run(self, period_s: float = 1.0) -> None:
        """Sample every ``period_s`` seconds until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(period_s)

    # -- reading ------------------------------------------------------------------------------

    def _broker_tps(self, field: int, seconds: int) -> str:
        samples = self._broker_samples
        if len(samples) <= seconds:
            return ""  # StoreStatsService leaves a window it has not seen whole empty
        first, last = samples[-(seconds + 1)], samples[-1]
        elapsed = last[0] - first[0]
        return str((last[field] - first[field]) * 1000.0 / elapsed if elapsed > 0 else 0.0)

    def put_tps(self) -> str:
        """Messages stored per second over 10, 60 and 600 s: runtime info's ``putTps``."""
        return " ".join(self._broker_tps(1, s) for s in (10, 60, 600))

    def get_tps(self) -> str:
        """Messages handed out per second: ``getTransferredTps``."""
        return " ".join(self._broker_tps(2, s) for s in (10, 60, 600))

    def get_found_tps(self) -> str:
        """Reads that found messages per second: ``getFoundTps``."""
        return " ".join(self._broker_tps(3, s) for s in (10, 60, 600))

    def get_miss_tps(self) -> str:
        """Reads that found none per second: ``getMissTps``."""
        return " ".join(self._broker_tps(4, s) for s in (10, 60, 600))

    def get_total_tps(self) -> str:
        """Reads per second, found or not: ``getTotalTps``."""
        parts = []
        for seconds in (10, 60, 600):
            found, miss = self._broker_tps(3, seconds), self._broker_tps(4, seconds)
            parts.append(str(float(found) + float(miss)) if found else "")
        return " ".join(parts)

    def topic_put_tps(self, topic: str) -> float:
        item = self.topic_put.get(topic)
        return item.minute(self.monotonic_ms()).tps if item is not None else 0.0

    def group_get_tps(self, group: str, topic: str) -> float:
        item = self.group_get.get((topic, group))
        return item.minute(self.monotonic_ms()).tps if item is not None else 0.0

    def stats_data(self, name: str, key: str) -> BrokerStatsData | None:
        if name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE):
            item = self.topic_put.get(key)
        elif name in (GROUP_GET_NUMS, GROUP_GET_SIZE):
            topic, _, group = key.partition("@")
            item = self.group_get.get((topic, group))
        elif name in (BROKER_PUT_NUMS, BROKER_GET_NUMS) and key == self.cluster:
            item = self.broker_put if name == BROKER_PUT_NUMS else self.broker_get
        else:
            return None
        if item is None:
            return None
        return item.data(2 if name.endswith("_SIZE") else 1, self.monotonic_ms())
