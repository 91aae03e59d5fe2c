"""Timer lateness and the delivery rate of a burst of due messages, on the system clock.

    python bench/timers.py [--timers 10000] [--spread-ms 3000] [--burst 10000]

An embedded broker (uvloop, store on disk in a temp folder) receives timer messages over the
remoting protocol. Lateness = the delivered copy's store time minus its due time (when the
broker fired it), and the time a long-polling consumer received it minus its due time. The
ceiling in the same run: the lateness of bare ``loop.call_at`` callbacks, same count and spread.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time

import uvloop

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_frame
from pocketmq.broker.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeaderV2
from pocketmq.broker.protocol.message_codec import decode_messages


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def bare_call_at(count: int, spread_ms: int) -> list[float]:
    loop = asyncio.get_running_loop()
    lateness: list[float] = []
    done = asyncio.Event()
    start = loop.time() + 0.5
    for i in range(count):
        due = start + (i * spread_ms / count) / 1000

        def fire(due: float = due) -> None:
            lateness.append((loop.time() - due) * 1000)
            if len(lateness) == count:
                done.set()

        loop.call_at(due, fire)
    await done.wait()
    return lateness


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = FrameDecoder()
        self.opaque = 0
        self.waiters: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while data := await self.reader.read(1 << 20):
            for frame in self.decoder.feed(data):
                waiter = self.waiters.pop(frame.opaque, None)
                if waiter is not None:
                    waiter.set_result(frame)

    def request(self, command: RemotingCommand) -> asyncio.Future[RemotingCommand]:
        self.opaque += 1
        command.opaque = self.opaque
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.waiters[self.opaque] = future
        self.writer.write(encode_frame(command))
        return future


async def run_timers(
    broker: Broker, topic: str, dues_ms: list[int]
) -> tuple[list[float], list[float], float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    client = Client(reader, writer)
    pending = []
    for i, due in enumerate(dues_ms):
        header = SendMessageRequestHeaderV2(
            producer_group="bench",
            topic=topic,
            default_topic="TBW102",
            default_topic_queue_nums=1,
            queue_id=0,
            sys_flag=0,
            born_timestamp=0,
            flag=0,
            properties=f"TIMER_DELIVER_MS\x01{due}\x02UNIQ_KEY\x01T{i}\x02",
        )
        pending.append(
            client.request(
                RemotingCommand(
                    code=RequestCode.SEND_MESSAGE_V2,
                    ext_fields=header.to_ext_fields(),
                    body=b"x" * 100,
                )
            )
        )
        if len(pending) >= 256:
            await asyncio.gather(*pending)
            pending = []
    await asyncio.gather(*pending)
    fired: list[float] = []
    received: list[float] = []
    offset = 0
    last_store = 0
    while len(fired) < len(dues_ms):
        header = PullMessageRequestHeader(
            consumer_group="bench",
            topic=topic,
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=64,
            sys_flag=0x4 | 0x2,
            commit_offset=0,
            suspend_timeout_millis=5000,
            subscription="*",
            sub_version=0,
        )
        response = await client.request(
            RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=header.to_ext_fields())
        )
        now_ms = time.time() * 1000
        if response.code == 0:
            for message in decode_messages(response.body):
                due = (
                    int(message.properties["TIMER_OUT_MS"])
                    if "TIMER_OUT_MS" in message.properties
                    else int(dues_ms[int(message.properties["UNIQ_KEY"][1:])])
                )
                fired.append(message.store_timestamp - due)
                received.append(now_ms - due)
                last_store = max(last_store, message.store_timestamp)
            offset = int(response.ext_fields["nextBeginOffset"])
    writer.close()
    client.task.cancel()
    span_ms = last_store - min(dues_ms)
    return fired, received, span_ms


async def main(args: argparse.Namespace) -> None:
    ceiling = await bare_call_at(args.timers, args.spread_ms)
    with tempfile.TemporaryDirectory(prefix="pocketmq-timers-") as data:
        async with Broker(BrokerConfig(port=0, data_dir=data)) as broker:
            start = int(time.time() * 1000) + 3000
            dues = [start + i * args.spread_ms // args.timers for i in range(args.timers)]
            fired, received, _ = await run_timers(broker, "TimerBench", dues)
            burst_due = int(time.time() * 1000) + 3000
            _, _, burst_span = await run_timers(broker, "BurstBench", [burst_due] * args.burst)
    print(f"{args.timers:,} timers spread over {args.spread_ms} ms (lateness, ms)")
    print(f"{'':<34}{'p50':>8}{'p99':>8}{'max':>8}")
    for name, values in (
        ("ceiling: loop.call_at", ceiling),
        ("broker fired (store time - due)", fired),
        ("consumer received - due", received),
    ):
        print(
            f"{name:<34}{percentile(values, 0.5):>8.2f}{percentile(values, 0.99):>8.2f}{max(values):>8.2f}"
        )
    rate = args.burst / max(burst_span / 1000, 1e-3)
    print(
        f"burst of {args.burst:,} timers due at the same ms: all delivered {burst_span} ms after the due time = {rate:,.0f} msg/s"
    )
    print(f"(median lateness fired {statistics.median(fired):.2f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--spread-ms", type=int, default=3000)
    parser.add_argument("--burst", type=int, default=10_000)
    uvloop.run(main(parser.parse_args()))
