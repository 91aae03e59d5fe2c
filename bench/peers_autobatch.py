"""The peers' "256 in flight" phase with and without auto-batching, beside the uvloop ceiling.

    python bench/peers_autobatch.py [--rounds 3] [--flush async sync] [--peers ../shared/bench-peers]

``../shared/bench-peers/peer_pocketmq.py`` has no auto-batch option; this script runs its
window-256 phase in the same load shape (1 KiB random bodies, up to 100,000 messages a phase,
bounded at 24 s, a semaphore of 256 sends in flight, one task per send, a topic of 4 queues,
a fresh ``pocketmq standalone`` per flush mode) twice per round: with ``Producer()`` and with
``Producer(auto_batch=True)`` (RocketMQ's defaults: 10 ms, 32 KiB, 32 MiB). Before them, each
round measures the ceiling the peer tables divide by, ``tcp_uvloop_proto_pipe256`` of
``ceil_tcp.py`` (its uvloop Protocol echo server in its own process, 300,000 frames of
1,100 B, 256 in flight), so each rate is also given as a share of the ceiling of its round:
the figure to compare across runs of this noisy machine (NATS JetStream's window 256 was
11.3 % of it in the 2026-11-24 peer run, 77,368/s). Prints JSON lines as the peer scripts do
(``bench``, ``metric``, ``value``, ``unit``, ``round``), then a summary: medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from pocketmq.client import Admin, Message, Producer

sys.path.insert(0, str(Path(__file__).parent))
from produce_consume import free_port, standalone_command, start  # noqa: E402

N = int(os.environ.get("PEER_N", 100_000))
MAX_S = 24.0  # peer_pocketmq.py's bound for its windowed phase (MAX_S * 2)
WINDOW = 256
# NATS JetStream file stream, js.publish_async with 256 in flight: share of the same round's
# uvloop pipelined ceiling, median of 3 (../shared/research/peers-2026-11-24.md)
NATS_WINDOW256_SHARE = 0.113
NATS_WINDOW256_RATE = 77_368


def emit(bench: str, metric: str, value: float, unit: str, **extra: Any) -> None:
    print(json.dumps({"bench": bench, "metric": metric, "value": value, "unit": unit, **extra}))


def ceiling(peers: Path) -> float:
    """``tcp_uvloop_proto_pipe256`` as ``ceil_tcp.py`` measures it (its server and client)."""
    sys.path.insert(0, str(peers))
    import ceil_tcp  # type: ignore[import-not-found]

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, str(peers / "ceil_tcp.py"), "--serve", str(port), "--loop", "uvloop"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ceil_tcp.wait_port(port)
        _, (rate, _) = uvloop.run(ceil_tcp.client(port, 1000, 300_000, WINDOW, 15))
    finally:
        server.terminate()
        server.wait(10)
    return float(rate)


async def window256(namesrv: str, topic: str, auto_batch: bool) -> tuple[float, int, float]:
    """peer_pocketmq.py's phase 2: the rate, the messages sent, and the mean batch size."""
    body = os.urandom(1024)
    pc = time.perf_counter
    async with Producer("peer-bench", namesrv=namesrv, auto_batch=auto_batch) as producer:
        await producer.send(Message(topic=topic, body=body))
        semaphore = asyncio.Semaphore(WINDOW)
        pending: set[asyncio.Future[None]] = set()

        async def one() -> None:
            try:
                await producer.send(Message(topic=topic, body=body))
            finally:
                semaphore.release()

        n = 0
        started = pc()
        deadline = started + MAX_S
        while n < N:
            await semaphore.acquire()
            task = asyncio.ensure_future(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
            if (n & 255) == 0 and pc() > deadline:
                break
        if pending:
            await asyncio.gather(*pending)
        rate = n / (pc() - started)
        accumulator = producer.auto_batch
        mean = accumulator.messages_sent / max(1, accumulator.batches_sent) if accumulator else 1.0
    return rate, n, mean


async def create_topic(namesrv: str, topic: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, 4)


def run_mode(flush: str, round_: int, share_of: float, out: dict[str, list[float]]) -> None:
    namesrv_port = free_port()
    data = tempfile.mkdtemp(prefix="pocketmq-peers-autobatch-")
    process, ready = start(standalone_command(namesrv_port, data, "--flush", flush, "--no-grpc"))
    namesrv = f"127.0.0.1:{namesrv_port}"
    try:
        assert ready, "pocketmq standalone did not start"
        for auto in (False, True):
            topic = "PqPipeAuto" if auto else "PqPipe"
            uvloop.run(create_topic(namesrv, topic))
            rate, n, mean = uvloop.run(window256(namesrv, topic, auto))
            name = f"pocketmq_{flush}_produce_window256" + ("_autobatch" if auto else "")
            emit(name, "msgs_per_s", rate, "msg/s", n=n, round=round_, mean_batch=mean)
            out.setdefault(name, []).append(rate)
            out.setdefault(name + " share", []).append(rate / share_of)
            out.setdefault(name + " batch", []).append(mean)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flush", nargs="+", default=["async"], choices=("async", "sync"))
    default_peers = Path(__file__).resolve().parents[2] / "shared" / "bench-peers"
    parser.add_argument("--peers", type=Path, default=default_peers)
    args = parser.parse_args()
    if not (args.peers / "ceil_tcp.py").exists():
        sys.exit(f"no ceil_tcp.py in {args.peers}: pass --peers <bench-peers folder>")
    out: dict[str, list[float]] = {}
    for round_ in range(1, args.rounds + 1):
        top = ceiling(args.peers)
        emit("tcp_uvloop_proto_pipe256", "frames_per_s", top, "frames/s", round=round_)
        out.setdefault("ceiling", []).append(top)
        for flush in args.flush:
            run_mode(flush, round_, top, out)
    print(f"\nmedians of {args.rounds} rounds (load average now {os.getloadavg()[0]:.1f}):")
    print(f"  uvloop pipelined ceiling       {statistics.median(out['ceiling']):>10,.0f} frames/s")
    for flush in args.flush:
        base = f"pocketmq_{flush}_produce_window256"
        for name in (base, base + "_autobatch"):
            share = statistics.median(out[name + " share"])
            print(
                f"  {name:<44}{statistics.median(out[name]):>10,.0f} msg/s"
                f"  {share:6.1%} of the ceiling ({share / NATS_WINDOW256_SHARE:.2f}x NATS's"
                f" {NATS_WINDOW256_SHARE:.1%}); {statistics.median(out[name + ' batch']):.1f}"
                " per request"
            )
        ratios = [a / b for a, b in zip(out[base + "_autobatch"], out[base], strict=True)]
        print(f"  auto-batch / without, same round: {statistics.median(ratios):.2f}x")
    print(f"  (NATS JetStream window 256 on 2026-11-24: {NATS_WINDOW256_RATE:,}/s)")


if __name__ == "__main__":
    main()
