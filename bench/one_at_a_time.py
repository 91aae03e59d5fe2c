"""Where a one-at-a-time send's round trip goes, against the bare uvloop round trip of the same run.

    python bench/one_at_a_time.py [--messages 10000] [--rounds 3] [--flush async] [--pin none]
    python bench/one_at_a_time.py --instructions [--messages 5120]   (needs valgrind)

Three wall-clock rows, interleaved per round (round 1 of each, then round 2, ...), each with the
CPU both processes spent per round trip (this process: ``time.process_time``; the server:
utime + stime from ``/proc/<pid>/stat``):

  ceiling    a bare uvloop ``Protocol`` echo server in its own process, one frame of the size of
             a 1 KiB SEND_MESSAGE_V2 request in flight, echoed back in full (as
             ``../shared/bench-peers/ceil_tcp.py``)
  raw        the same request frame, encoded once by the SDK's codec, written by a bare uvloop
             ``Protocol`` client to a real ``pocketmq standalone`` (async flush, no gRPC, no
             HTTP): the broker's whole cost, without the SDK's
  sdk        ``await producer.send(Message(...))`` in a loop (the issue's "one at a time")

Then the stages, timed in this process with ``time.perf_counter_ns`` over many repetitions (best
of five), with an embedded broker on a store in a temp folder: the SDK's request encode
(properties, header, frame), the broker's frame decode, its send handler (header parse, checks,
``store.put`` of the message, response fields), ``store.put`` alone, the response frame, and the
SDK's response decode (frame + ``SendResult``). The stage sums are CPU on one core; the
wall-clock rows add the two wake-ups per round trip that the ceiling has too.

--instructions counts instead, with callgrind (as bench/instructions.py, whose helpers it uses):
the SDK's and the broker's instructions per one-at-a-time send (the difference between a run of
N + 512 sends and one of 512, divided by N), each against a broker or an SDK outside valgrind.
Unlike the wall clock, these do not move with the machine's load; the loop turns and system
calls per send, which callgrind does not weigh, are counted by the wall-clock rows.

The ratio the issue asks for is sdk / ceiling (wall clock, same round, median of the rounds).
--pin split puts the servers on CPU 1 and this process on CPU 0, same puts all on CPU 0 (this
VM's round trip is bimodal: ~11 us on one vCPU, ~50-85 us across two).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import uvloop

sys.path.insert(0, str(Path(__file__).parent))
from produce_consume import free_port, standalone_command, start  # noqa: E402

from pocketmq.client import Admin, Message, Producer  # noqa: E402

BODY = os.urandom(1024)
TOPIC = "OneAtATime"
_LENGTH = struct.Struct(">i")

ECHO_SERVER = r"""
import asyncio, struct, uvloop
HDR = struct.Struct(">i")
class Echo(asyncio.Protocol):
    def connection_made(self, t):
        self.t = t; self.buf = bytearray()
    def data_received(self, data):
        buf = self.buf; buf += data; pos = 0; out = []
        while len(buf) - pos >= 4:
            n = HDR.unpack_from(buf, pos)[0]
            if len(buf) - pos - 4 < n: break
            out.append(bytes(buf[pos:pos + 4 + n])); pos += 4 + n
        if pos:
            del buf[:pos]; self.t.write(b"".join(out))
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(3600)
uvloop.run(main())
"""


class FrameClient(asyncio.Protocol):
    """Writes one frame, waits for one whole frame back: the one-in-flight loop, bare."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if len(buffer) >= 4:
            size = 4 + _LENGTH.unpack_from(buffer)[0]
            if len(buffer) >= size:
                del buffer[:size]
                if self.waiter is not None and not self.waiter.done():
                    self.waiter.set_result(None)

    async def round_trip(self, frame: bytes) -> None:
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(frame)
        await self.waiter


def server_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def timed(pid: int, n: int, one: Callable[[], object]) -> tuple[float, float, float]:
    """(wall us, this process's CPU us, the server's CPU us) per round trip of ``n``."""
    wall, cpu, server = time.perf_counter(), time.process_time(), server_cpu_s(pid)
    for _ in range(n):
        await one()  # type: ignore[misc]
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / n * 1e6, cpu / n * 1e6, (server_cpu_s(pid) - server) / n * 1e6


async def request_frame(producer: Producer) -> bytes:
    """The SEND_MESSAGE_V2 frame ``producer.send`` writes for a 1 KiB body, as bytes."""
    from pocketmq.broker.protocol.session import RemotingSession

    message = Message(topic=TOPIC, body=BODY)
    route = await producer._core.routes.get(TOPIC, for_publish=True)
    mq = producer._pick_for(message, None, None, None)[0](route, None)
    properties, _ = producer._wire_properties(message)
    command = producer._send_request(mq, properties, BODY, 0)
    return b"".join(RemotingSession[object]().send_request(command, None, 0.0, 3000.0))


async def wall_rows(args: argparse.Namespace, server_cpus: set[int] | None) -> dict[str, list]:
    rows: dict[str, list[tuple[float, float, float]]] = {"ceiling": [], "raw": [], "sdk": []}
    data = tempfile.mkdtemp(prefix="pocketmq-oaat-")
    namesrv_port = free_port()
    options = ["--no-grpc", "--no-http", "--flush", args.flush]
    broker, ready = start(standalone_command(namesrv_port, data, *options))
    echo, port = start([sys.executable, "-c", ECHO_SERVER])
    loop = asyncio.get_running_loop()
    try:
        assert "ready" in ready, f"the broker did not start: {ready!r}"
        namesrv = f"127.0.0.1:{namesrv_port}"
        async with Admin(namesrv) as admin:
            await admin.create_topic(TOPIC, 4)
        async with Producer("one-at-a-time", namesrv=namesrv) as producer:
            message = Message(topic=TOPIC, body=BODY)
            await producer.send(message)
            frame = await request_frame(producer)
            route = await producer._core.routes.get(TOPIC, for_publish=True)
            broker_addr = next(iter(route.master_addrs().values()))
            host, broker_port = broker_addr.rsplit(":", 1)
            _, raw = await loop.create_connection(FrameClient, host, int(broker_port))
            _, bare = await loop.create_connection(FrameClient, "127.0.0.1", int(port))
            for _ in range(200):  # warm up all three
                await bare.round_trip(frame)
                await raw.round_trip(frame)
                await producer.send(message)
            for round_ in range(args.rounds):
                n = args.messages
                rows["ceiling"].append(await timed(echo.pid, n, lambda: bare.round_trip(frame)))
                rows["raw"].append(await timed(broker.pid, n, lambda: raw.round_trip(frame)))
                rows["sdk"].append(await timed(broker.pid, n, lambda: producer.send(message)))
                print(
                    f"  round {round_ + 1}: "
                    + ", ".join(f"{k} {v[-1][0]:.1f} us" for k, v in rows.items()),
                    flush=True,
                )
            raw.transport.close()
            bare.transport.close()
    finally:
        for process in (broker, echo):
            process.terminate()
            process.wait(30)
        shutil.rmtree(data, ignore_errors=True)
    rows["frame"] = [(len(frame), 0.0, 0.0)]
    return rows


def best_ns(run: Callable[[], object], repeat: int = 2000, tries: int = 5) -> float:
    """Best of ``tries`` of ``repeat`` calls, ns per call."""
    best = float("inf")
    for _ in range(tries):
        t = time.perf_counter_ns()
        for _ in range(repeat):
            run()
        best = min(best, (time.perf_counter_ns() - t) / repeat)
    return best


async def stages() -> list[tuple[str, float]]:
    """The stages of one send in this process, ns each (best of five)."""
    from pocketmq.broker.app import Broker
    from pocketmq.broker.protocol.frames import decode_frame, encode_json_success
    from pocketmq.broker.protocol.session import RemotingSession
    from pocketmq.client.producer import SendStatus
    from pocketmq.store.message_store import PutMessage

    data = tempfile.mkdtemp(prefix="pocketmq-oaat-stages-")
    out: list[tuple[str, float]] = []
    try:
        async with Broker(port=0, store=data) as embedded:
            namesrv = embedded.namesrv_address
            async with Admin(namesrv) as admin:
                await admin.create_topic(TOPIC, 4)
            async with Producer("one-at-a-time-stages", namesrv=namesrv) as producer:
                message = Message(topic=TOPIC, body=BODY)
                await producer.send(message)
                route = await producer._core.routes.get(TOPIC, for_publish=True)
                mq = producer._pick_for(message, None, None, None)[0](route, None)
                client = RemotingSession[object]()

                def sdk_encode() -> None:
                    properties, _ = producer._wire_properties(message)
                    command = producer._send_request(mq, properties, BODY, 0)
                    client.send_request(command, None, 0.0, 3000.0)
                    client.forget(command.opaque, None)

                out.append(("SDK: properties, header, request frame", best_ns(sdk_encode)))
                frame = await request_frame(producer)
                server = RemotingSession[object]()
                out.append(
                    ("broker: request frame decode", best_ns(lambda: server.receive_data(frame)))
                )
                request = server.receive_data(frame)[0][0]
                handler = embedded.server.handlers[request.code]

                class Peer:  # what the send handler reads of its connection
                    remote_address = "127.0.0.1:40000"
                    attributes: dict[str, object] = {}

                peer = Peer()

                def handle() -> object:
                    request.ext_fields = dict(fields)  # the handler may add to the properties
                    return handler(request, peer)  # type: ignore[arg-type]

                fields = dict(request.ext_fields or {})
                out.append(("broker: send handler (incl. store.put)", best_ns(handle)))
                store = embedded.store
                properties = "WAIT\x01true\x02UNIQ_KEY\x01" + "0" * 32 + "\x02CLUSTER\x01x\x02"
                puts = [
                    PutMessage(
                        topic=TOPIC,
                        body=BODY,
                        queue_id=0,
                        properties={"WAIT": "true", "UNIQ_KEY": "0" * 32, "CLUSTER": "x"},
                        properties_text=properties,
                    )
                    for _ in range(10_000)
                ]
                feed = iter(puts)
                out.append(
                    ("  of which store.put", best_ns(lambda: store.put(next(feed)), repeat=1000))
                )
                answer = handle()
                assert isinstance(answer, bytes), type(answer)
                out.append(
                    (
                        "broker: response frame (session.respond)",
                        best_ns(lambda: server.respond(request, answer)),
                    )
                )
                reply = decode_frame(b"".join(server.respond(request, answer) or []))
                assert reply is not None
                ext_json = msgspec.json.encode(reply[0].ext_fields)
                # answers to the opaques the session will give the next requests
                start_opaque = client._next_opaque() + 1
                replies = iter(
                    [encode_json_success(start_opaque + i, ext_json) for i in range(12_000)]
                )
                requests = [producer._send_request(mq, "WAIT\x01true\x02", BODY, 0)] * 12_000
                commands = iter(requests)

                def sdk_decode() -> None:
                    client.send_request(next(commands), None, 0.0, 3000.0)
                    _, answers, _ = client.receive_data(next(replies))
                    producer._result(answers[0][1], SendStatus.SEND_OK, mq, "key")

                with_request = best_ns(sdk_decode, repeat=2000)
                commands = iter(requests)

                def request_only() -> None:
                    command = next(commands)
                    client.send_request(command, None, 0.0, 3000.0)
                    client.forget(command.opaque, None)

                alone = best_ns(request_only, repeat=2000)
                out.append(("SDK: response frame decode + SendResult", with_request - alone))
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return out


ONE_AT_A_TIME_PROGRAM = """
import asyncio, sys, uvloop
from pocketmq.client import Message, Producer
n, namesrv = int(sys.argv[1]), sys.argv[2]
async def main():
    message = Message(topic="Instructions", body=b"x" * 1024)
    # callgrind slows a process 50x: more than the 3 s default per send
    async with Producer("instructions", namesrv=namesrv, send_timeout_ms=600_000) as producer:
        await producer.send(message)  # route, connection, heartbeat
        for _ in range(n):
            await producer.send(message)
uvloop.run(main())
"""


def instructions(n: int) -> list[tuple[str, float]]:
    """Callgrind instructions per one-at-a-time send: the SDK's, then the broker's."""
    import signal
    import subprocess

    import instructions as ins

    work = Path(tempfile.mkdtemp(prefix="pocketmq-oaat-instructions-"))
    try:
        sender = ins.program(work, "sender", ONE_AT_A_TIME_PROGRAM)
        namesrv_port = free_port()
        broker, _ = start(
            standalone_command(namesrv_port, str(work / "sdk-data"), "--no-grpc", "--no-http")
        )
        try:
            sdk = ins.per_message(
                work, "sdk", ins.run_program(work, sender, f"127.0.0.1:{namesrv_port}"), n
            )
        finally:
            broker.terminate()
            broker.wait()

        def broker_run(name: str, count: int) -> None:
            port = free_port()
            command = standalone_command(port, str(work / f"{name}-data"), "--no-grpc", "--no-http")
            process, ready = start(
                [*ins.callgrind_command(work, name), sys.executable, "-m", "pocketmq.cli"]
                + command[1:],
                ready_within_s=600,
                env=ins._ENV,
            )
            try:
                assert ready, "the broker exited before it was ready"
                subprocess.run(
                    [sys.executable, sender, str(count), f"127.0.0.1:{port}"],
                    check=True,
                    timeout=3600,
                )
            finally:
                process.send_signal(signal.SIGINT)
                process.wait()

        on_broker = ins.per_message(work, "broker", broker_run, n)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return [("SDK per send (Producer.send awaited)", sdk), ("broker per send", on_broker)]


def pin(mode: str) -> set[int] | None:
    import produce_consume

    cpus = sorted(os.sched_getaffinity(0))
    if mode == "none" or len(cpus) < 2:
        return None
    mine = {cpus[0]}
    servers = {cpus[0]} if mode == "same" else set(cpus[1:])
    produce_consume.SERVER_CPUS = servers
    os.sched_setaffinity(0, mine)
    return servers


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    parser.add_argument("--pin", choices=("none", "split", "same"), default="none")
    parser.add_argument("--no-stages", action="store_true")
    parser.add_argument("--instructions", action="store_true", help="callgrind counts only")
    args = parser.parse_args()
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("--instructions needs valgrind (apt-get install valgrind)")
        print(f"{args.messages:,} sends of 1 KiB one at a time, callgrind instructions per send")
        for name, value in instructions(args.messages):
            print(f"  {name:<40}{value:>12,.0f}")
        return
    servers = pin(args.pin)
    print(
        f"one at a time, {args.messages:,} round trips x {args.rounds} rounds, 1 KiB body, "
        f"flush {args.flush}, pin {args.pin}, load {os.getloadavg()[0]:.2f}"
    )
    rows = uvloop.run(wall_rows(args, servers))
    frame_size = int(rows.pop("frame")[0][0])
    ceiling = rows["ceiling"]
    print(f"\nframe {frame_size} B; medians of {args.rounds} rounds (us per round trip):")
    print(
        f"  {'row':<10}{'wall':>8}{'rate/s':>10}{'/ceiling':>10}{'client CPU':>12}{'server CPU':>12}"
    )
    for name, samples in rows.items():
        wall = statistics.median(s[0] for s in samples)
        ratio = statistics.median(s[0] / c[0] for s, c in zip(ceiling, samples, strict=True))
        client = statistics.median(s[1] for s in samples)
        server = statistics.median(s[2] for s in samples)
        print(
            f"  {name:<10}{wall:>8.1f}{1e6 / wall:>10,.0f}{ratio:>9.1%}{client:>12.1f}{server:>12.1f}"
        )
    c, r, s = (rows[k] for k in ("ceiling", "raw", "sdk"))
    med = statistics.median
    print(
        "\n  broker's extra wall per send (raw - ceiling):   "
        f"{med(x[0] - y[0] for x, y in zip(r, c, strict=True)):.1f} us"
    )
    print(
        "  SDK's extra wall per send (sdk - raw):          "
        f"{med(x[0] - y[0] for x, y in zip(s, r, strict=True)):.1f} us"
    )
    if not args.no_stages:
        print("\nstages, in one process (best of 5, us):")
        for name, ns in uvloop.run(stages()):
            print(f"  {name:<50}{ns / 1000:>8.2f}")


if __name__ == "__main__":
    main()
