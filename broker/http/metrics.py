"""``GET /metrics``: Prometheus text from a collector that reads the services at scrape time.

Nothing is counted here: the traffic counters and latency histograms are the stats service's
(``broker/services/stats.py``), lag and inflight the progress service's
(``broker/services/progress.py``, the numbers mqadmin and the dashboard show too). The names
and labels are RocketMQ 5.x's (``BrokerMetricsConstant``, ``DefaultStoreMetricsConstant``,
``RemotingMetricsConstant``); every series carries ``cluster``, ``node_type`` and ``node_id``.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pocketmq.broker.core import BrokerCore
from pocketmq.broker.services.topics import topic_message_type

__all__ = ["BrokerCollector", "routes"]

_BASE = ("cluster", "node_type", "node_id")


class BrokerCollector(Collector):
    def __init__(self, broker: BrokerCore) -> None:
        self.broker = broker

    def _base(self) -> list[str]:
        config = self.broker.config
        return [config.cluster_name, "broker", config.broker_name]

    def collect(self) -> Iterator[Metric]:
        broker, base = self.broker, self._base()
        stats = broker.stats

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=[*_BASE, *labels])

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=[*_BASE, *labels])

        # prometheus_client appends _total to a counter's name: given without it.
        messages_in = counter("rocketmq_messages_in", "Messages stored", ("topic", "message_type"))
        bytes_in = counter(
            "rocketmq_throughput_in", "Bytes of messages stored", ("topic", "message_type")
        )
        for topic, item in sorted(stats.topic_put.items()):
            config = broker.topics.get(topic)
            kind = topic_message_type(config) if config is not None else "NORMAL"
            messages_in.add_metric([*base, topic, kind], item.messages)
            bytes_in.add_metric([*base, topic, kind], item.bytes)
        yield messages_in
        yield bytes_in

        messages_out = counter(
            "rocketmq_messages_out", "Messages handed to consumers", ("topic", "consumer_group")
        )
        bytes_out = counter(
            "rocketmq_throughput_out",
            "Bytes of messages handed to consumers",
            ("topic", "consumer_group"),
        )
        for (topic, group), item in sorted(stats.group_get.items()):
            messages_out.add_metric([*base, topic, group], item.messages)
            bytes_out.add_metric([*base, topic, group], item.bytes)
        yield messages_out
        yield bytes_out

        yield from self._progress(base)

        latency = HistogramMetricFamily(
            "rocketmq_rpc_latency",
            "Time the store took to serve a send or a pull/pop, milliseconds",
            labels=[*_BASE, "protocol_type", "request_code"],
            unit="",
        )
        for code, histogram in (
            ("send_message", stats.send_latency),
            ("pull_message", stats.pull_latency),
        ):
            cumulative = histogram.cumulative()
            buckets = [
                (str(float(b)), float(c))
                for b, c in zip(histogram.buckets, cumulative[:-1], strict=True)
            ]
            buckets.append(("+Inf", float(cumulative[-1])))
            latency.add_metric([*base, "all", code], buckets, histogram.sum_ms)
        yield latency

        store = broker.store
        size = gauge("rocketmq_storage_size", "Bytes of the commitlog", ("storage_type",))
        medium = "memory" if broker.config.data_dir is None else "local"
        size.add_metric(
            [*base, medium], float(store.max_physical_offset - store.min_physical_offset)
        )
        yield size

        topics = gauge("rocketmq_topic_number", "User topics")
        topics.add_metric(base, len(broker.topics.user_topics()))
        yield topics
        groups = gauge("rocketmq_consumer_group_number", "Subscription groups")
        groups.add_metric(base, len(broker.groups.groups))
        yield groups
        permission = gauge("rocketmq_broker_permission", "Broker permission (6: read, write)")
        permission.add_metric(base, broker.config.broker_permission)
        yield permission

        producers = gauge(
            "rocketmq_producer_connections", "Producers connected", ("producer_group",)
        )
        for group, members in sorted(broker.clients.producer_groups.items()):
            live = sum(1 for p in members.values() if not p.connection.closed)
            producers.add_metric([*base, group], live)
        yield producers
        consumers = gauge(
            "rocketmq_consumer_connections", "Consumers connected", ("consumer_group",)
        )
        for group, info in sorted(broker.clients.consumer_groups.items()):
            live = sum(1 for c in info.consumers.values() if not c.connection.closed)
            consumers.add_metric([*base, group], live)
        yield consumers

        half = gauge("rocketmq_half_messages", "Pending transactions (half messages)", ("topic",))
        pending: dict[str, int] = {}
        for transaction in broker.transactions.pending.values():
            pending[transaction.real_topic] = pending.get(transaction.real_topic, 0) + 1
        for topic, count in sorted(pending.items()):
            half.add_metric([*base, topic], count)
        yield half
        timing = gauge(
            "rocketmq_timing_messages", "Messages waiting for their delay level", ("delay_type",)
        )
        timing.add_metric([*base, "delay_level"], broker.schedule.pending())
        yield timing

    def _progress(self, base: list[str]) -> Iterator[Metric]:
        broker = self.broker
        labels = (*_BASE, "topic", "consumer_group")
        lag = GaugeMetricFamily(
            "rocketmq_consumer_lag_messages", "Messages not consumed yet", labels=list(labels)
        )
        inflight = GaugeMetricFamily(
            "rocketmq_consumer_inflight_messages",
            "Messages handed out by POP and not acknowledged",
            labels=list(labels),
        )
        queueing = GaugeMetricFamily(
            "rocketmq_consumer_queueing_latency",
            "Milliseconds the oldest unconsumed message has waited",
            labels=list(labels),
        )
        lag_latency = GaugeMetricFamily(
            "rocketmq_consumer_lag_latency",
            "Milliseconds the oldest message not yet acknowledged (committed) has waited",
            labels=list(labels),
        )
        now = broker.now_ms()
        progress = broker.progress

        def waited(topic: str, queue_id: int, offset: int) -> int:
            stored = progress.queue_time(topic, queue_id, offset)
            return max(now - stored, 0) if stored else 0

        for group in progress.groups():
            by_topic: dict[str, list[int]] = {}
            for queue in progress.group(group).queues:
                totals = by_topic.setdefault(queue.topic, [0, 0, 0, 0])
                totals[0] += queue.lag
                totals[1] += queue.inflight
                if queue.lag > 0:  # RocketMQ's ConsumerLagCalculator: first message past each
                    lagging = waited(queue.topic, queue.queue_id, queue.consumer_offset)
                    totals[3] = max(totals[3], lagging)
                if queue.broker_offset > queue.pull_offset:
                    queued = waited(queue.topic, queue.queue_id, queue.pull_offset)
                    totals[2] = max(totals[2], queued)
            for topic, (lag_sum, inflight_sum, queued_ms, lag_ms) in sorted(by_topic.items()):
                lag.add_metric([*base, topic, group], lag_sum)
                inflight.add_metric([*base, topic, group], inflight_sum)
                queueing.add_metric([*base, topic, group], queued_ms)
                lag_latency.add_metric([*base, topic, group], lag_ms)
        yield lag
        yield inflight
        yield queueing
        yield lag_latency


def routes(broker: BrokerCore) -> list[web.RouteDef]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(broker))

    async def scrape(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return [web.get("/metrics", scrape)]
