"""End-to-end latency at a steady rate, its tail, and what was going on during the slow samples.

    python bench/latency_tail.py [--rate 2000] [--seconds 5] [--flush async sync] [--runs 1]

As ``../shared/bench-peers/peer_pocketmq.py``'s e2e phase: a producer sends 1 KiB messages at
``--rate`` (whatever is due every 0.5 ms, each send a task), a PushConsumer in the same process
receives and acks them; latency = receive time - the ``time.time()`` stamp written into the body
just before the send. A fresh ``pocketmq standalone`` per flush mode (no gRPC, no HTTP), started
through a wrapper that records, in the broker process, with ``time.time()`` stamps:

  gc        each collection (generation, duration), through ``gc.callbacks``
  file      each file opened for writing or created, through an audit hook (``open``)
  sync      each ``os.fsync``/``os.fdatasync`` (duration), wrapped
  prefault  each call of the commitlog's write-prefault on the event loop (wall and CPU time)
  stall     the event loop late by more than 0.5 ms (a 1 ms ``call_later`` probe)

The same gc callbacks run in this process (the SDK). As an application that cares about its
tail would, this process freezes its heap (``gc.freeze()``) once the producer and the consumer
are up, so that the collections of the measured window do not walk the start-up objects again
(the broker does the same); ``--no-freeze`` leaves the collector as it is, to compare.
Printed: p50, p90, p99, p99.9 and max; then, for the samples above p99, how many overlap each
kind of event (an event overlaps a sample when it ran between the send and the receive), and the
events themselves, a line each.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).parent))
from produce_consume import free_port, standalone_command, start  # noqa: E402

from pocketmq.client import Admin, Message, Producer, PushConsumer  # noqa: E402

TOPIC = "LatencyTail"
STAMP = struct.Struct("<d")
BODY = os.urandom(1024)

# Runs `pocketmq standalone` with the probes; writes the events to $LATENCY_TAIL_EVENTS at exit.
WRAPPER = r"""
import atexit, gc, json, os, sys, time
events = []
started = {}
def on_gc(phase, info):
    if phase == "start":
        started["gc"] = time.time()
    else:
        t0 = started.pop("gc", None)
        if t0 is not None:
            events.append(("gc", t0, time.time() - t0, f"gen{info['generation']}"))
gc.callbacks.append(on_gc)
def audit(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        mode, flags = args[1], args[2]
        if (mode and any(c in mode for c in "wax+")) or (flags and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
            events.append(("file", time.time(), 0.0, os.fsdecode(args[0])[-60:]))
sys.addaudithook(audit)
def timed(name, call):
    def run(fd):
        t0 = time.time()
        try:
            return call(fd)
        finally:
            events.append(("sync", t0, time.time() - t0, name))
    return run
os.fsync, os.fdatasync = timed("fsync", os.fsync), timed("fdatasync", os.fdatasync)
import pocketmq.store.files as files
_prefault = files._DiskSegment.prefault
def prefault(self, start, end):
    t0, cpu = time.time(), time.thread_time()
    try:
        return _prefault(self, start, end)
    finally:
        # wall time counts the loop thread's preemptions too; its CPU time is the call's own
        events.append(("prefault", t0, time.time() - t0, "wall"))
        events.append(("prefault", t0, time.thread_time() - cpu, "cpu"))
files._DiskSegment.prefault = prefault
import uvloop
_new, _run = uvloop.new_event_loop, uvloop.run
def probed_loop():
    loop = _new()
    clock = time.perf_counter  # loop.time() is in whole milliseconds on uvloop
    def tick(due):
        late = clock() - due
        if late > 0.0005:
            events.append(("stall", time.time() - late, late, f"loop late {late * 1e3:.2f} ms"))
        loop.call_later(0.001, tick, clock() + 0.001)
    loop.call_soon(tick, clock())
    return loop
uvloop.run = lambda main, **kw: _run(main, loop_factory=probed_loop, **kw)
def dump():
    with open(os.environ["LATENCY_TAIL_EVENTS"], "w") as out:
        json.dump(events, out)
atexit.register(dump)
from pocketmq.cli import main
sys.argv = ["pocketmq", *sys.argv[1:]]
main()
"""


def percentile(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p / 100))]


async def e2e(
    namesrv: str, rate: int, seconds: float, sdk_events: list, *, freeze: bool
) -> list[tuple]:
    """(send stamp, receive time) per message."""
    total = int(rate * seconds)
    samples: list[tuple[float, float]] = []
    consumer = PushConsumer("latency-tail", namesrv=namesrv, consume_from="first")
    consumer.subscribe(TOPIC, "*")
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, 4)
    async with Producer("latency-tail-p", namesrv=namesrv) as producer, consumer:
        done = asyncio.get_running_loop().create_future()

        async def receive() -> None:
            async for message in consumer:
                samples.append((STAMP.unpack_from(message.body)[0], time.time()))
                await consumer.ack(message)
                if len(samples) >= total and not done.done():
                    done.set_result(None)

        receiver = asyncio.create_task(receive())
        await producer.send(Message(topic=TOPIC, body=STAMP.pack(time.time()) + BODY[8:]))
        await asyncio.sleep(1.0)
        samples.clear()
        if freeze:
            gc.collect()
            gc.freeze()
        sdk_events.clear()
        sent, begun, tasks = 0, time.perf_counter(), set()
        while sent < total:
            due = min(total, int((time.perf_counter() - begun) * rate) + 1)
            while sent < due:
                body = STAMP.pack(time.time()) + BODY[8:]
                task = asyncio.ensure_future(producer.send(Message(topic=TOPIC, body=body)))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                sent += 1
            await asyncio.sleep(0.0005)
        if tasks:
            await asyncio.gather(*tasks)
        await asyncio.wait_for(done, 60)
        receiver.cancel()
    if freeze:
        gc.unfreeze()  # the next run starts as this one did
    return samples


def report(flush: str, samples: list[tuple], events: list[tuple]) -> dict[str, float]:
    latencies = sorted(received - sent for sent, received in samples)
    figures = {p: percentile(latencies, p) * 1e3 for p in (50, 90, 99, 99.9)}
    figures[100] = latencies[-1] * 1e3
    print(
        f"  {flush}: {len(latencies):,} messages, p50 {figures[50]:.2f}, p90 {figures[90]:.2f}, "
        f"p99 {figures[99]:.2f}, p99.9 {figures[99.9]:.2f}, max {figures[100]:.2f} ms"
    )
    slow = [(s, r) for s, r in samples if (r - s) * 1e3 >= figures[99]]
    kinds: dict[str, int] = {}
    seen: dict[tuple, int] = {}
    for sent, received in slow:
        hit = set()
        for event in events:
            kind, at, duration = event[0], event[1], event[2]
            if at <= received and at + duration >= sent:
                hit.add(kind)
                seen[tuple(event)] = seen.get(tuple(event), 0) + 1
        for kind in hit or {"none"}:
            kinds[kind] = kinds.get(kind, 0) + 1
    print(
        f"    {len(slow)} samples at or above p99 overlap: "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
        + " (a sample may overlap several kinds)"
    )
    for event, count in sorted(seen.items(), key=lambda item: -item[1])[:12]:
        kind, _at, duration, what = event
        print(f"      {count:4d} samples  {kind:<6}{duration * 1e3:8.2f} ms  {what}")
    totals: dict[str, list[float]] = {}
    for kind, _at, duration, what in events:
        key = f"{kind} {what.split()[0] if kind != 'file' else ''}".strip()
        totals.setdefault(key, []).append(duration * 1e3)
    print(
        "    all events of the measured window: "
        + ", ".join(
            f"{key} x{len(v)} (max {max(v):.2f}, sum {sum(v):.2f} ms)"
            for key, v in sorted(totals.items())
        )
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--flush", nargs="+", default=["async", "sync"])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--no-freeze",
        dest="freeze",
        action="store_false",
        help="leave this process's collector as it is (no gc.freeze() after start-up)",
    )
    args = parser.parse_args()
    sdk_events: list[tuple] = []
    begun: dict[str, float] = {}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            begun["gc"] = time.time()
        elif "gc" in begun:
            t0 = begun.pop("gc")
            sdk_events.append(("sdk-gc", t0, time.time() - t0, f"gen{info['generation']}"))

    gc.callbacks.append(on_gc)
    print(
        f"end-to-end at {args.rate:,} msg/s for {args.seconds:g} s, 1 KiB, "
        f"SDK heap {'frozen' if args.freeze else 'not frozen'}, load {os.getloadavg()[0]:.2f}"
    )
    results: dict[str, list[dict[str, float]]] = {}
    for run in range(args.runs):
        for flush in args.flush:
            data = tempfile.mkdtemp(prefix="pocketmq-tail-")
            events_file = os.path.join(data, "events.json")
            namesrv_port = free_port()
            command = standalone_command(
                namesrv_port, os.path.join(data, "store"), "--no-grpc", "--no-http"
            )
            command += ["--flush", flush]
            broker, ready = start(
                [sys.executable, "-c", WRAPPER, *command[1:]],
                env={**os.environ, "LATENCY_TAIL_EVENTS": events_file},
            )
            try:
                assert "ready" in ready, f"the broker did not start: {ready!r}"
                samples = uvloop.run(
                    e2e(
                        f"127.0.0.1:{namesrv_port}",
                        args.rate,
                        args.seconds,
                        sdk_events,
                        freeze=args.freeze,
                    )
                )
            finally:
                broker.send_signal(signal.SIGTERM)
                broker.wait(60)
            with open(events_file) as handle:
                events = [tuple(e) for e in json.load(handle)] + sdk_events
            # the measured window only (not the start's collection, nor the stop)
            first = min(sent for sent, _ in samples) - 0.1
            last = max(received for _, received in samples)
            events = [e for e in events if first <= e[1] <= last]
            results.setdefault(flush, []).append(report(f"run {run + 1}, {flush}", samples, events))
            shutil.rmtree(data, ignore_errors=True)
    if args.runs > 1:
        for flush, runs in results.items():
            med = {p: statistics.median(r[p] for r in runs) for p in runs[0]}
            print(
                f"  {flush}, median of {args.runs}: p50 {med[50]:.2f}, p90 {med[90]:.2f}, "
                f"p99 {med[99]:.2f}, p99.9 {med[99.9]:.2f} ms"
            )


if __name__ == "__main__":
    main()
