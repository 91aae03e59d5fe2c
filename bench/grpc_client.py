"""The official RocketMQ 5.x Python client against pocketmq's gRPC front-end, beside a bare server.

    python3 bench/grpc_client.py [--messages 2000] [--size 1024] [--json]

The client is `rocketmq-python-client` (package `rocketmq`), unchanged. It runs in this process
with HOME pointed at a temporary folder, because importing it creates ~/logs/rocketmq_python/.
Two servers, one after the other, each driven by the same client code:

  ceiling    a bare grpc.aio server on uvloop in its own process, using the client's own
             generated stubs: QueryRoute, Telemetry, Heartbeat and NotifyClientTermination
             answer OK, SendMessage keeps the message in a deque and echoes its id,
             ReceiveMessage pops up to a batch from that deque (never waits), AckMessage says
             OK. So the ceiling is "the client plus gRPC, with no broker work".
  pocketmq   `pocketmq standalone --memory --grpc-auto-create-topics` (free ports), killed at
             the end.

Rows (bodies of --size bytes, default 1 KiB):

  send          --messages sequential `producer.send()`: p50, p99, mean latency, throughput
  send_async    --messages `producer.send_async()` issued at once, every future awaited
  receive+ack   a SimpleConsumer: `receive(32, 15 s)` then `ack()` each message, until it has
                everything sent; messages/s over the whole loop, and the receive-only rate
                (messages / time spent inside receive()) and ack-only rate beside it

Each phase also stops after PHASE_S seconds and reports the rate of what it did.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

PHASE_S = 25.0  # every phase stops after this, whatever --messages says
WARMUP = 50
BATCH = 32
INVISIBLE_S = 15

BARE_SERVER = r"""
import asyncio, collections, sys, zlib
import grpc, uvloop
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc as g

OK = d.Status(code=d.Code.OK, message="OK")
ALL_TYPES = [d.MessageType.NORMAL, d.MessageType.FIFO, d.MessageType.DELAY, d.MessageType.TRANSACTION]


class Bare(g.MessagingServiceServicer):
    def __init__(self):
        self.stored = collections.deque()
        self.offset = 0

    async def QueryRoute(self, request, context):
        broker = d.Broker(name="bare", id=0, endpoints=request.endpoints)
        queues = [
            d.MessageQueue(topic=request.topic, id=i, permission=d.Permission.READ_WRITE,
                           broker=broker, accept_message_types=ALL_TYPES)
            for i in range(4)
        ]
        return s.QueryRouteResponse(status=OK, message_queues=queues)

    async def Heartbeat(self, request, context):
        return s.HeartbeatResponse(status=OK)

    async def NotifyClientTermination(self, request, context):
        return s.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(self, request_iterator, context):
        async for command in request_iterator:
            if command.HasField("settings"):
                settings = d.Settings()
                settings.CopyFrom(command.settings)
                if settings.HasField("publishing"):
                    settings.publishing.max_body_size = 4 * 1024 * 1024
                    policy = settings.backoff_policy
                    policy.max_attempts = 3
                    policy.exponential_backoff.initial.FromMilliseconds(10)
                    policy.exponential_backoff.max.FromMilliseconds(1000)
                    policy.exponential_backoff.multiplier = 2
                yield s.TelemetryCommand(status=OK, settings=settings)

    async def SendMessage(self, request, context):
        entries = []
        for message in request.messages:
            message.system_properties.body_digest.type = d.DigestType.CRC32
            message.system_properties.body_digest.checksum = "%08X" % zlib.crc32(message.body)
            message.system_properties.receipt_handle = "h%d" % self.offset
            message.system_properties.delivery_attempt = 1
            self.stored.append(message)
            entries.append(s.SendResultEntry(status=OK, offset=self.offset,
                                             message_id=message.system_properties.message_id))
            self.offset += 1
        return s.SendMessageResponse(status=OK, entries=entries)

    async def ReceiveMessage(self, request, context):
        popped = [self.stored.popleft() for _ in range(min(request.batch_size, len(self.stored)))]
        if not popped:
            yield s.ReceiveMessageResponse(status=d.Status(code=d.Code.MESSAGE_NOT_FOUND, message="no new message"))
            return
        yield s.ReceiveMessageResponse(status=OK)
        for message in popped:
            yield s.ReceiveMessageResponse(message=message)
        done = s.ReceiveMessageResponse()
        done.delivery_timestamp.GetCurrentTime()
        yield done

    async def AckMessage(self, request, context):
        return s.AckMessageResponse(status=OK, entries=[
            s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=OK)
            for e in request.entries])


async def main():
    server = grpc.aio.server()
    g.add_MessagingServiceServicer_to_server(Bare(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"bare ready {port}", flush=True)
    await server.wait_for_termination()

uvloop.run(main())
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server; return it with its first stdout line that says "ready" ("" if none)."""
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 20
    text = ""
    while time.monotonic() < deadline and process.poll() is None:
        if selector.select(0.1):
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            text += chunk.decode(errors="replace")
            ready = [line for line in text.splitlines() if "ready" in line]
            if ready and text.endswith("\n"):
                selector.close()
                return process, ready[0]
    selector.close()
    return process, ""


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def client_log_errors() -> list[str]:
    """The ERROR lines of the client's own log (~/logs/rocketmq_python, HOME is ours)."""
    path = os.path.join(os.environ["HOME"], "logs", "rocketmq_python", "rocketmq_client.log")
    try:
        with open(path, errors="replace") as log:
            return [line.rstrip() for line in log if "[ERROR]" in line]
    except FileNotFoundError:
        return []


def drive(endpoint: str, tag: str, messages: int, size: int) -> dict[str, Any]:
    """Everything the official client does against one server; returns the figures."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    topic = f"BenchGrpc{tag}"
    group = f"bench-grpc-{tag.lower()}"
    config = ClientConfiguration(endpoint, Credentials())
    body = os.urandom(size)
    results: dict[str, Any] = {}
    errors: list[str] = []

    def message() -> Any:
        m = Message()
        m.topic = topic
        m.body = body
        return m

    log_errors_before = len(client_log_errors())
    producer = Producer(config, (topic,))
    producer.startup()
    sent = 0
    try:
        for _ in range(WARMUP):  # route, channel and Telemetry warm-up
            producer.send(message())
            sent += 1

        latencies: list[float] = []
        deadline = time.perf_counter() + PHASE_S
        started = time.perf_counter()
        for _ in range(messages):
            t0 = time.perf_counter()
            producer.send(message())
            latencies.append(time.perf_counter() - t0)
            if t0 > deadline:
                break
        elapsed = time.perf_counter() - started
        sent += len(latencies)
        ordered = sorted(latencies)
        results["send"] = {
            "count": len(latencies),
            "p50_ms": percentile(ordered, 0.50) * 1000,
            "p99_ms": percentile(ordered, 0.99) * 1000,
            "mean_ms": statistics.fmean(latencies) * 1000,
            "msg_s": len(latencies) / elapsed,
        }

        started = time.perf_counter()
        futures = [producer.send_async(message()) for _ in range(messages)]
        done, not_done = concurrent.futures.wait(futures, timeout=PHASE_S)
        elapsed = time.perf_counter() - started
        failed = [f for f in done if f.exception() is not None]
        if failed:
            errors.append(f"send_async: {len(failed)} failed, first: {failed[0].exception()!r}")
        if not_done:
            errors.append(f"send_async: {len(not_done)} not done after {PHASE_S:.0f} s")
        ok = len(done) - len(failed)
        sent += ok
        results["send_async"] = {"count": ok, "msg_s": ok / elapsed}
    finally:
        producer.shutdown()

    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=5)
    consumer.startup()
    try:
        received = receive_calls = empty_calls = 0
        in_receive = in_ack = 0.0
        seen: set[str] = set()
        deadline = time.perf_counter() + PHASE_S
        started = time.perf_counter()
        while len(seen) < sent and time.perf_counter() < deadline:
            t0 = time.perf_counter()
            batch = consumer.receive(BATCH, INVISIBLE_S)
            t1 = time.perf_counter()
            in_receive += t1 - t0
            receive_calls += 1
            if not batch:
                empty_calls += 1
            for m in batch:
                consumer.ack(m)
                seen.add(m.message_id)
            in_ack += time.perf_counter() - t1
            received += len(batch)
        elapsed = time.perf_counter() - started
        if len(seen) < sent:
            errors.append(
                f"receive: {len(seen)} of {sent} distinct messages after {elapsed:.1f} s "
                f"({empty_calls} empty receives)"
            )
        results["receive"] = {
            "count": received,
            "distinct": len(seen),
            "expected": sent,
            "calls": receive_calls,
            "empty_calls": empty_calls,
            "msg_s": received / elapsed,
            "receive_only_msg_s": received / in_receive if in_receive else 0.0,
            "ack_only_msg_s": received / in_ack if in_ack else 0.0,
        }
    finally:
        consumer.shutdown()
    logged = client_log_errors()[log_errors_before:]
    if logged:
        errors.append(f"{len(logged)} ERROR lines in the client log, first: {logged[0][:300]}")
    results["errors"] = errors
    return results


def bench_bare(messages: int, size: int, env: dict[str, str]) -> dict[str, Any]:
    process, ready = start([sys.executable, "-c", BARE_SERVER], env)
    try:
        if not ready:
            raise RuntimeError("the bare gRPC server did not start")
        port = int(ready.split()[-1])
        return drive(f"127.0.0.1:{port}", "Bare", messages, size)
    finally:
        stop(process)


def bench_pocketmq(messages: int, size: int, env: dict[str, str]) -> dict[str, Any]:
    grpc_port = free_port()
    args = [sys.executable, "-m", "pocketmq.cli", "standalone", "--memory", "--port", "0"]
    args += ["--namesrv-port", str(free_port()), "--grpc-port", str(grpc_port)]
    args += ["--grpc-auto-create-topics"]
    process, ready = start(args, env)
    try:
        if not ready:
            raise RuntimeError("pocketmq standalone did not print a ready line within 20 s")
        return drive(f"127.0.0.1:{grpc_port}", "Pocketmq", messages, size)
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--json", action="store_true", help="also print one JSON object")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="pocketmq-grpc-bench-")
    os.environ["HOME"] = home  # before the first `import rocketmq`: it writes ~/logs at import
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    )
    run_started = time.perf_counter()
    try:
        ceiling = bench_bare(args.messages, args.size, env)
        broker = bench_pocketmq(args.messages, args.size, env)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    total_s = time.perf_counter() - run_started

    rows = [
        ("send p50 (ms)", ("send", "p50_ms"), "{:.2f}"),
        ("send p99 (ms)", ("send", "p99_ms"), "{:.2f}"),
        ("send mean (ms)", ("send", "mean_ms"), "{:.2f}"),
        ("send (msg/s)", ("send", "msg_s"), "{:,.0f}"),
        ("send_async (msg/s)", ("send_async", "msg_s"), "{:,.0f}"),
        ("receive+ack (msg/s)", ("receive", "msg_s"), "{:,.0f}"),
        ("  receive only (msg/s)", ("receive", "receive_only_msg_s"), "{:,.0f}"),
        ("  ack only (msg/s)", ("receive", "ack_only_msg_s"), "{:,.0f}"),
    ]
    print(
        f"official Python client, {args.messages} messages of {args.size} B per phase "
        f"(+{WARMUP} warm-up sends), whole run {total_s:.1f} s"
    )
    print(f"{'':<26}{'ceiling (bare)':>16}{'pocketmq':>12}{'pocketmq/ceiling':>18}")
    print(f"{'(latency: above 1x is slower; rates: below 1x is slower)':>72}")
    ratios: dict[str, float] = {}
    for label, (phase, key), fmt in rows:
        c, p = ceiling[phase][key], broker[phase][key]
        ratio = p / c if c else 0.0
        ratios[f"{phase}.{key}"] = ratio
        print(f"{label:<26}{fmt.format(c):>16}{fmt.format(p):>12}{ratio:>17.2f}x")
    for name, result in (("ceiling", ceiling), ("pocketmq", broker)):
        r = result["receive"]
        print(
            f"{name}: {r['calls']} receive calls ({r['empty_calls']} empty), "
            f"{r['distinct']}/{r['expected']} distinct messages received"
        )
        for error in result["errors"]:
            print(f"{name} PROBLEM: {error}")
    if args.json:
        print(
            json.dumps(
                {
                    "messages": args.messages,
                    "size": args.size,
                    "seconds": round(total_s, 1),
                    "ceiling": ceiling,
                    "pocketmq": broker,
                    "ratios": ratios,
                }
            )
        )


if __name__ == "__main__":
    main()
