"""BrokerStats: counts, RocketMQ's moving rates and day totals, latency buckets, limits."""

from __future__ import annotations

import datetime

import msgspec
import pytest

from pocketmq.broker.services.stats import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    RPC_LATENCY_BUCKETS_MS,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    BrokerStats,
    Histogram,
)


class Ticks:
    """A monotonic clock and a wall clock the test moves."""

    def __init__(self) -> None:
        self.mono = 1_000_000
        noon = datetime.datetime(2026, 3, 10, 12, 0, 0)
        self.wall = int(noon.timestamp() * 1000)

    def advance(self, ms: int) -> None:
        self.mono += ms
        self.wall += ms


def stats_with_ticks(**kwargs: int) -> tuple[BrokerStats, Ticks]:
    ticks = Ticks()
    stats = BrokerStats(now_ms=lambda: ticks.wall, monotonic_ms=lambda: ticks.mono, **kwargs)
    return stats, ticks


def test_puts_and_gets_count_messages_bytes_and_calls() -> None:
    stats, _ = stats_with_ticks()
    stats.put("Orders", 1, 300)
    stats.put("Orders", 32, 32 * 200)  # one batch
    stats.put("Audit", 1, 100)
    stats.got("billing", "Orders", 10, 2000)
    stats.got("billing", "Orders", 5, 1000)
    orders = stats.topic_put["Orders"]
    assert (orders.messages, orders.bytes, orders.times) == (33, 300 + 6400, 2)
    assert stats.put_total == 34 and stats.put_bytes_total == 6800
    got = stats.group_get[("Orders", "billing")]
    assert (got.messages, got.bytes, got.times) == (15, 3000, 2)
    assert stats.get_total == 15 and stats.get_bytes_total == 3000


def test_minute_rate_is_the_increase_over_the_sampled_window() -> None:
    stats, ticks = stats_with_ticks()
    stats.sample()
    for _ in range(6):  # 60 s: 6 messages (of 100 bytes) every 10 s
        for _ in range(6):
            stats.put("Orders", 1, 100)
        ticks.advance(10_000)
        stats.sample()
    minute = stats.topic_put["Orders"].minute()
    assert minute.sum == 36
    assert minute.tps == 36 / 60  # messages per second over the last minute
    assert minute.avgpt == 1.0  # one message per send
    assert stats.topic_put_tps("Orders") == minute.tps
    assert stats.topic_put["Orders"].bytes_minute().sum == 3600
    # a quiet minute later the window holds no increase
    for _ in range(7):
        ticks.advance(10_000)
        stats.sample()
    assert stats.topic_put["Orders"].minute().sum == 0
    assert stats.topic_put_tps("Orders") == 0.0
    assert stats.topic_put_tps("Unknown") == 0.0


def test_broker_wide_tps_strings_have_runtime_infos_three_windows() -> None:
    stats, ticks = stats_with_ticks()
    stats.sample()
    for _ in range(10):
        stats.put("Orders", 5, 500)
        stats.got("g", "Orders", 2, 200)
        ticks.advance(1000)
        stats.sample()
    ten, sixty, six_hundred = stats.put_tps().split(" ")
    assert float(ten) == 5.0
    assert sixty == "" and six_hundred == ""  # windows not yet seen whole, as RocketMQ
    assert float(stats.get_tps().split(" ")[0]) == 2.0


def test_stats_data_answers_view_broker_stats_data_names() -> None:
    stats, ticks = stats_with_ticks()
    stats.put("Orders", 4, 400)
    stats.got("billing", "Orders", 3, 300)
    ticks.advance(10_000)
    stats.sample()
    nums = stats.stats_data(TOPIC_PUT_NUMS, "Orders")
    size = stats.stats_data(TOPIC_PUT_SIZE, "Orders")
    assert nums is not None and size is not None
    assert nums.stats_minute.sum == 4 and size.stats_minute.sum == 400
    got = stats.stats_data(GROUP_GET_NUMS, "Orders@billing")
    got_size = stats.stats_data(GROUP_GET_SIZE, "Orders@billing")
    assert got is not None and got_size is not None
    assert got.stats_minute.sum == 3 and got_size.stats_minute.sum == 300
    whole = stats.stats_data(BROKER_PUT_NUMS, "DefaultCluster")
    out = stats.stats_data(BROKER_GET_NUMS, "DefaultCluster")
    assert whole is not None and out is not None
    assert whole.stats_minute.sum == 4 and out.stats_minute.sum == 3
    assert stats.stats_data(BROKER_PUT_NUMS, "OtherCluster") is None
    assert stats.stats_data(TOPIC_PUT_NUMS, "Nope") is None
    assert stats.stats_data("NO_SUCH_STATS", "Orders") is None
    # RocketMQ's field names on the wire
    wire = msgspec.json.decode(msgspec.json.encode(nums))
    assert set(wire) == {"statsMinute", "statsHour", "statsDay"}
    assert set(wire["statsMinute"]) == {"sum", "tps", "avgpt"}


def test_day_totals_roll_over_at_midnight_as_broker_stats() -> None:
    stats, ticks = stats_with_ticks()
    stats.put("Orders", 10, 1000)
    stats.got("g", "Orders", 4, 400)
    ticks.advance(13 * 3_600_000)  # past midnight
    stats.sample()
    totals = stats.totals
    assert totals.msg_put_total_today_morning == 10
    assert totals.msg_get_total_today_morning == 4
    assert totals.msg_put_total_yesterday_morning == 0
    stats.put("Orders", 5, 500)
    ticks.advance(24 * 3_600_000)
    stats.sample()
    assert totals.msg_put_total_yesterday_morning == 10
    assert totals.msg_put_total_today_morning == 15
    # a clock moved by several days: nothing was counted in between
    ticks.advance(3 * 24 * 3_600_000)
    stats.sample()
    assert totals.msg_put_total_yesterday_morning == 15
    assert totals.msg_put_total_today_morning == 15


def test_histogram_buckets_are_the_5x_rpc_latency_bounds() -> None:
    assert RPC_LATENCY_BUCKETS_MS == (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
    histogram = Histogram()
    for ms in (0.2, 1.0, 1.5, 9.0, 250.0, 5000.0):
        histogram.observe(ms)
    # 1.0 falls in the 1 ms bucket (<=), 5000 above every bound
    assert histogram.counts == [2, 1, 0, 0, 1, 0, 1, 0, 0, 1]
    assert histogram.cumulative() == [2, 3, 3, 3, 4, 4, 5, 5, 5, 6]
    assert histogram.count == 6
    assert histogram.sum_ms == 0.2 + 1.0 + 1.5 + 9.0 + 250.0 + 5000.0


def test_one_send_histogram_read_over_both_sets_of_bounds() -> None:
    stats, _ = stats_with_ticks()
    for ms in (0.3, 2.0, 8.0, 40.0, 150.0, 6000.0, 20_000.0):
        stats.sent("Orders", 1, 100, ms)
    rpc = stats.send_latency
    assert rpc.buckets == RPC_LATENCY_BUCKETS_MS
    assert rpc.counts == [1, 1, 0, 0, 1, 1, 1, 0, 0, 2]
    assert rpc.count == 7 and rpc.sum_ms == 0.3 + 2.0 + 8.0 + 40.0 + 150.0 + 6000.0 + 20_000.0
    # RocketMQ's putMessageDistributeTime: [<=0ms] [0~10ms] [10~50ms] ... [5~10s] [10s~]
    assert stats.put_times.counts == [1, 2, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1]
    assert stats.put_time_max_ms == 20_000.0
    assert stats.topic_put["Orders"].messages == 7 and stats.put_total == 7


def test_items_past_the_limit_count_only_in_the_totals() -> None:
    stats, _ = stats_with_ticks(items_max=2)
    for topic in ("A", "B", "C"):
        stats.put(topic, 1, 10)
        stats.got("g", topic, 1, 10)
    assert sorted(stats.topic_put) == ["A", "B"]
    assert len(stats.group_get) == 2
    assert stats.put_total == 3 and stats.get_total == 3
    stats.forget_topic("A")
    assert sorted(stats.topic_put) == ["B"]
    assert ("A", "g") not in stats.group_get
    stats.forget_group("g")
    assert not stats.group_get


def test_connections_count_per_front() -> None:
    stats, _ = stats_with_ticks()
    stats.connection_opened("remoting")
    stats.connection_opened("remoting")
    stats.connection_closed("remoting")
    stats.connection_opened("grpc")
    assert stats.connections["remoting"].current == 1
    assert stats.connections["remoting"].opened == 2
    assert stats.connections["grpc"].current == 1


async def test_grpc_sessions_count_as_connections() -> None:
    from types import SimpleNamespace

    pytest.importorskip("grpc")
    from pocketmq.broker.grpc.sessions import SessionRegistry

    stats, _ = stats_with_ticks()
    sessions = SessionRegistry(SimpleNamespace(stats=stats))  # type: ignore[arg-type]
    sessions.touch("client-1")
    sessions.touch("client-1")  # the same client again: one connection
    sessions.touch("client-2")
    sessions.drop("client-1")
    sessions.drop("client-1")  # already gone
    assert stats.connections["grpc"].opened == 2
    assert stats.connections["grpc"].current == 1


def test_client_connections_count_from_first_heartbeat_to_loss() -> None:
    from types import SimpleNamespace

    from pocketmq.broker.protocol.headers import ConsumerData
    from pocketmq.broker.services.clients import ClientRegistry

    stats, _ = stats_with_ticks()
    registry = ClientRegistry(notify=lambda group, channels: None, stats=stats)
    channel = SimpleNamespace(closed=False, attributes={})
    data = ConsumerData(
        group_name="g",
        consume_type="CONSUME_PASSIVELY",
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
    )
    who = {"address": "10.0.0.1:5", "language": "PYTHON", "version": 401}
    registry.register_consumer(data, "c1", channel, 1.0, **who)  # type: ignore[arg-type]
    registry.register_consumer(data, "c1", channel, 2.0, **who)  # type: ignore[arg-type]
    registry.register_producer("p", "c1", channel, 2.0, **who)  # type: ignore[arg-type]
    assert stats.connections["remoting"].current == 1  # one connection, however many roles
    info = registry.consumer_groups["g"].consumers["c1"]
    assert (info.address, info.language, info.version) == ("10.0.0.1:5", "PYTHON", 401)
    registry.connection_lost(channel)
    assert stats.connections["remoting"].current == 0
    assert stats.connections["remoting"].opened == 1
