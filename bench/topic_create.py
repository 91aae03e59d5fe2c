"""Topic creation cost as the topic table grows: admin create, then auto-create on send.

    python bench/topic_create.py [--topics 10000] [--send-topics 2000] [--dir /tmp]

An embedded broker with its store on disk (so ``config/topics.json`` is written as in a real
deployment) and its in-process name server. Rows:
  table create   ``TopicManager.create`` alone (the broker's table and its files, no network)
  admin create   UPDATE_AND_CREATE_TOPIC one topic at a time, each awaited (``Admin.create_topic``)
  send create    the first send to a new topic, auto-created by the broker (autoCreateTopicEnable)

Each row prints the seconds taken by the first and the last thousand (or tenth) of the run and
their ratio: a flat per-topic cost gives a ratio near 1, a cost that grows with the table a
ratio that grows with the run.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from pocketmq.broker.app import Broker
from pocketmq.broker.services.topics import TopicManager
from pocketmq.client import Admin, Message, Producer


def _split(durations: list[float]) -> tuple[int, float, float]:
    chunk = min(1000, max(1, len(durations) // 10))
    return chunk, sum(durations[:chunk]), sum(durations[-chunk:])


def _row(name: str, durations: list[float]) -> None:
    chunk, first, last = _split(durations)
    print(
        f"{name:<14} {len(durations):>6} topics  first {chunk}: {first:6.2f} s  "
        f"last {chunk}: {last:6.2f} s  ratio {last / first:5.2f}  total {sum(durations):6.2f} s"
    )


def run_table(topics: int, root: Path) -> None:
    manager = TopicManager(
        root / "table" / "config" / "topics.json", default_queue_nums=8, auto_create=True
    )
    durations = []
    for i in range(topics):
        started = time.perf_counter()
        manager.create(f"BenchTopic{i}", read_queue_nums=4, write_queue_nums=4)
        durations.append(time.perf_counter() - started)
    manager.persist()
    _row("table create", durations)


async def run(topics: int, send_topics: int, root: Path) -> None:
    async with Broker(port=0, store=root / "store") as broker:
        namesrv = broker.namesrv_address
        async with Admin(namesrv) as admin:
            durations = []
            for i in range(topics):
                started = time.perf_counter()
                await admin.create_topic(f"BenchTopic{i}", queues=4)
                durations.append(time.perf_counter() - started)
        _row("admin create", durations)
        if send_topics:
            async with Producer("bench-topic-create", namesrv=namesrv) as producer:
                durations = []
                for i in range(send_topics):
                    started = time.perf_counter()
                    await producer.send(Message(topic=f"AutoTopic{i}", body=b"x"))
                    durations.append(time.perf_counter() - started)
            _row("send create", durations)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--send-topics", type=int, default=2_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pocketmq-topics-", dir=args.dir))
    try:
        run_table(args.topics, root)
        asyncio.run(run(args.topics, args.send_topics, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
