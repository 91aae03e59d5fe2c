"""Produce and consume through the SDK against a real broker process, beside a bare uvloop echo.

    python bench/produce_consume.py [--messages 50000] [--flush async sync]

For each flush mode a fresh `pocketmq standalone` process (store in a temp folder) is started;
this process runs the SDK on uvloop. Rows (1 KiB bodies):

  one at a time     await producer.send(...) in a loop
  pipelined         256 sends in flight (asyncio tasks); three rounds, the median by ratio
  pipelined, auto-batch
                    the same with Producer(auto_batch=True) (RocketMQ's autoBatch, defaults:
                    32 KiB of bodies or 10 ms per batch); the batches' mean size beside it
  batch             send_batch of 32 messages
  consume           a PushConsumer reading everything back from the first offset (each body
                    read, each message acked)
  e2e @2000/s       5 s at 2,000 msg/s; latency = receive time - send time (p50, p99)

Ceiling: a bare uvloop echo server in its own process, frames of the same size (the
SEND_MESSAGE_V2 frame of a 1 KiB body), one in flight for the first row and 256 in flight for
the others, measured again right before each row (and each pipelined round) and printed beside
it: this machine's speed drifts by up to 2x within a minute. Each mode prints a CPU speed
probe before and after (a fixed loop timed on each CPU): the phase the figures were taken in.
With two CPUs or more the SDK (this process) runs on the first and the broker and the echo
server on the others (--no-pin: wherever the OS puts them), so a row and its ceiling use the
same CPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import uvloop

from pocketmq.client import Admin, Message, Producer, PushConsumer

BODY = 1024
ECHO_SERVER = r"""
import asyncio, sys, uvloop
class Echo(asyncio.Protocol):
    def connection_made(self, t): self.t = t
    def data_received(self, d): self.t.write(d)
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
uvloop.run(main())
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# The console script beside this interpreter (a venv need not be activated), else the PATH's.
_BESIDE = Path(sys.executable).parent / "pocketmq"
POCKETMQ = str(_BESIDE) if _BESIDE.exists() else "pocketmq"


def standalone_command(namesrv_port: int, data: str, *options: str) -> list[str]:
    """``pocketmq standalone`` with a free broker port, ``namesrv_port`` and its store in
    ``data``."""
    return [
        POCKETMQ,
        "standalone",
        "--port",
        "0",
        "--namesrv-port",
        str(namesrv_port),
        "--data",
        data,
        *options,
    ]


# The CPUs the servers (broker, echo) run on; set by main when pinning. The SDK (this process)
# runs on the others.
SERVER_CPUS: set[int] | None = None
ALL_CPUS: set[int] | None = None  # this process's CPUs before pinning


def start(
    args: list[str], *, ready_within_s: float = 20, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``args`` and return the process with the first line it prints (its ready line)."""
    cpus = SERVER_CPUS
    process = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
    )
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + ready_within_s
    line = b""
    while time.monotonic() < deadline and not line.endswith(b"\n"):
        if selector.select(0.1):
            line += os.read(process.stdout.fileno(), 4096)
    selector.close()
    return process, line.decode().strip()


class Echo:
    """A bare uvloop echo server in its own process and one connection to it: the ceiling,
    measured again right before each rate it is compared with (this machine's speed drifts by
    up to 2x within a minute, so one ceiling for the whole run made the ratios swing)."""

    def __init__(self, frame_size: int) -> None:
        self.frame_size = frame_size
        self.frame = struct.pack(">i", frame_size - 4) + b"x" * (frame_size - 4)

    async def __aenter__(self) -> Echo:
        self.process, port = start([sys.executable, "-c", ECHO_SERVER])
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", int(port))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()
        self.process.kill()
        self.process.wait()

    async def one_at_a_time(self, n: int = 10_000) -> float:
        started = time.perf_counter()
        for _ in range(n):
            self.writer.write(self.frame)
            await self.reader.readexactly(self.frame_size)
        return n / (time.perf_counter() - started)

    async def in_flight(self, n: int = 100_000, window: int = 256) -> float:
        started = time.perf_counter()
        sent = received = received_bytes = 0
        while received < n:
            while sent < n and sent - received < window:
                self.writer.write(self.frame)  # one write per frame, as a client sends them
                sent += 1
            received_bytes += len(await self.reader.read(1 << 20))
            received = received_bytes // self.frame_size
        return n / (time.perf_counter() - started)


class Row(NamedTuple):
    value: float  # msg/s, or ms for the latency rows
    ceiling: float = 0.0  # the echo's rate measured right before the row
    cpu: tuple[float, float] | None = None  # share of a core: this process (SDK), the broker


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuShare:
    """The SDK's (this process) and the broker's CPU over a row: which of them is the limit."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.started = time.perf_counter()
        self.sdk = time.process_time()
        self.broker = process_cpu_s(broker_pid)

    def shares(self) -> tuple[float, float]:
        elapsed = time.perf_counter() - self.started
        return (
            (time.process_time() - self.sdk) / elapsed,
            (process_cpu_s(self.broker_pid) - self.broker) / elapsed,
        )


async def bench_mode(flush: str, messages: int, echo: Echo) -> dict[str, Row]:
    data = tempfile.mkdtemp(prefix="pocketmq-bench-")
    namesrv_port = free_port()
    process, ready = start(standalone_command(namesrv_port, data, "--flush", flush))
    namesrv = f"127.0.0.1:{namesrv_port}"
    results: dict[str, Row] = {}
    body = os.urandom(BODY)
    topic = f"Bench{flush.capitalize()}"
    try:
        async with Producer("bench-producer", namesrv=namesrv) as producer:
            await producer.send(Message(topic=topic, body=body))  # route and connection warm-up
            n = min(5000, messages)
            ceiling = await echo.one_at_a_time()
            started = time.perf_counter()
            for _ in range(n):
                await producer.send(Message(topic=topic, body=body))
            results["one at a time"] = Row(n / (time.perf_counter() - started), ceiling)

            async def worker(sender: Producer, count: int) -> None:
                for _ in range(count):
                    await sender.send(Message(topic=topic, body=body))

            async def in_flight_rounds(sender: Producer) -> Row:
                """256 tasks, each sending in turn: 256 sends in flight. Three rounds, each
                right after an echo round; the row is the round with the median ratio."""
                rounds = []
                for _ in range(3):
                    ceiling = await echo.in_flight()
                    cpu = CpuShare(process.pid)
                    await asyncio.gather(*(worker(sender, per_round) for _ in range(256)))
                    rate = per_round * 256 / (time.perf_counter() - cpu.started)
                    rounds.append(Row(rate, ceiling, cpu.shares()))
                rounds.sort(key=lambda row: row.value / row.ceiling)
                return rounds[1]

            per_round = max(1, messages // 3 // 256)
            results["pipelined (256 in flight)"] = await in_flight_rounds(producer)
            async with Producer(
                "bench-producer-auto", namesrv=namesrv, auto_batch=True
            ) as batching:
                await batching.send(Message(topic=topic, body=body))
                results["pipelined, auto-batch"] = await in_flight_rounds(batching)
                accumulator = batching.auto_batch
                assert accumulator is not None
                mean_batch = accumulator.messages_sent / max(1, accumulator.batches_sent)
            messages = 3 * per_round * 256

            batches = messages // 32 // 16 * 16

            async def batch_worker(count: int) -> None:
                for _ in range(count):
                    await producer.send_batch([Message(topic=topic, body=body) for _ in range(32)])

            ceiling = await echo.in_flight()
            cpu = CpuShare(process.pid)
            await asyncio.gather(*(batch_worker(batches // 16) for _ in range(16)))
            rate = batches * 32 / (time.perf_counter() - cpu.started)
            results["batch of 32 (16 in flight)"] = Row(rate, ceiling, cpu.shares())
        total = 1 + n + messages + (1 + messages) + batches * 32  # (1 + ...): auto-batch
        results["auto-batch mean size"] = Row(mean_batch)

        consumer = PushConsumer(f"bench-consumer-{flush}", namesrv=namesrv, consume_from="first")
        consumer.subscribe(topic, "*")
        received = received_bytes = 0
        ceiling = await echo.in_flight()
        async with consumer:
            cpu = CpuShare(process.pid)
            async for message in consumer:
                received_bytes += len(message.body)  # an application reads at least the body
                await consumer.ack(message)
                received += 1
                if received >= total:
                    break
            rate = received / (time.perf_counter() - cpu.started)
            results["consume"] = Row(rate, ceiling, cpu.shares())
        p50, p99 = await e2e_latency(namesrv, f"{topic}Latency")
        results["e2e p50 ms"], results["e2e p99 ms"] = Row(p50), Row(p99)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(data, ignore_errors=True)
    return results


async def e2e_latency(
    namesrv: str, topic: str, rate: int = 2000, seconds: float = 5.0
) -> tuple[float, float]:
    latencies: list[float] = []
    total = int(rate * seconds)
    consumer = PushConsumer("bench-latency", namesrv=namesrv, consume_from="first")
    consumer.subscribe(topic, "*")
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 8)  # routable before the consumer's first rebalance
    async with Producer("bench-latency-producer", namesrv=namesrv) as producer:
        await producer.send(Message(topic=topic, body=struct.pack(">d", time.time())))
        async with consumer:

            async def consume() -> None:
                async for message in consumer:
                    latencies.append(
                        (time.time() - struct.unpack(">d", message.body[:8])[0]) * 1000
                    )
                    await consumer.ack(message)
                    if len(latencies) > total:
                        return

            task = asyncio.create_task(consume())
            await asyncio.sleep(1.0)  # let the consumer take its queues
            started = time.perf_counter()
            sent = 0
            pending: set[asyncio.Task[object]] = set()
            while sent < total:
                due = int((time.perf_counter() - started) * rate)
                while sent < min(due, total):
                    body = struct.pack(">d", time.time()) + b"x" * (BODY - 8)
                    pending.add(asyncio.create_task(producer.send(Message(topic=topic, body=body))))
                    sent += 1
                pending = {t for t in pending if not t.done()}
                await asyncio.sleep(0.0005)
            await asyncio.gather(*pending)
            await asyncio.wait_for(task, 30)
    measured = latencies[1:]
    ordered = sorted(measured)
    return statistics.median(measured), ordered[int(0.99 * (len(ordered) - 1))]


def cpu_speed_probe() -> str:
    """A fixed Python loop timed on each CPU in turn: this machine's vCPUs swing between a fast
    and a slow phase (about 85 against 150 ms here), each on its own, within seconds, and a
    row's figures follow the phase of the CPUs it ran on."""
    if not hasattr(os, "sched_setaffinity"):
        return "not available"
    allowed = os.sched_getaffinity(0)
    timings = []
    try:
        for cpu in sorted(ALL_CPUS or allowed):
            os.sched_setaffinity(0, {cpu})
            started = time.perf_counter()
            total = 0
            for i in range(3_000_000):
                total += i
            timings.append(f"cpu{cpu} {(time.perf_counter() - started) * 1000:.0f} ms")
    finally:
        os.sched_setaffinity(0, allowed)
    return ", ".join(timings)


def pin(enabled: bool) -> str:
    """With two CPUs or more: this process (the SDK) on the first, the servers (the broker and
    the echo) on the others, so that a row and the echo measured right before it run on the
    same CPUs (each CPU here has its own speed phase; a floating process meets both)."""
    global SERVER_CPUS, ALL_CPUS
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    ALL_CPUS = set(cpus)
    if not enabled or len(cpus) < 2:
        return "not pinned"
    SERVER_CPUS = set(cpus[1:])
    os.sched_setaffinity(0, {cpus[0]})
    return f"SDK on cpu{cpus[0]}, broker and echo server on cpu{','.join(map(str, cpus[1:]))}"


async def main(args: argparse.Namespace) -> None:
    # The frame of a SEND_MESSAGE_V2 with a 1 KiB body is about 1.3 KB; echo that size.
    frame_size = 1320
    print(f"CPUs: {pin(not args.no_pin)}")
    async with Echo(frame_size) as echo:
        print(f"ceiling: bare uvloop echo of {frame_size} B frames, measured right before each row")
        for flush in args.flush:
            before = cpu_speed_probe()
            results = await bench_mode(flush, args.messages, echo)
            print(
                f"\nflush={flush} (CPU speed probe, before: {before}; after: {cpu_speed_probe()})"
            )
            for name, (value, ceiling, cpu) in results.items():
                if name.startswith("e2e"):
                    print(f"  {name:<30}{value:>12.2f}")
                    continue
                shares = f"; CPU: SDK {cpu[0]:.0%}, broker {cpu[1]:.0%}" if cpu else ""
                if name == "pipelined, auto-batch":
                    shares += f"; {results['auto-batch mean size'].value:.1f} per batch"
                elif name == "auto-batch mean size":
                    continue
                print(
                    f"  {name:<30}{value:>12,.0f} msg/s  {value / ceiling:>7.1%} of the echo"
                    f" ({ceiling:,.0f}/s){shares}"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--flush", nargs="+", default=["async", "sync"], choices=("async", "sync"))
    parser.add_argument("--no-pin", action="store_true", help="let the OS place the processes")
    uvloop.run(main(parser.parse_args()))
