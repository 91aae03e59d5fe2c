"""Hostile input against a real ``pocketmq standalone``: fuzzed frames, half-sent frames,
slowloris, idle floods and malformed gRPC bodies, on every port; what it survives and what it costs.

    python bench/fuzz_frames.py [--seed N] [--frames 3000] [--half-sent 64] [--half-mib 8]
                                [--slowloris 64] [--idle 4200] [--grpc-calls 400]
                                [--frame-timeout 10] [--first-request-timeout 5] [--json]

Starts the ``pocketmq`` console script beside this interpreter as ``pocketmq standalone`` on
free ports with a store in a temporary folder, the gRPC front-end on, and the remoting limits
the flags name (``--limit``; the buffered-bytes cap and the connection cap are the broker's
defaults, the two deadlines shorter so that a run takes under a minute). Then, each attack
seeded from ``--seed``:

1. fuzzed frames (valid frames of random request codes and fields, frames with bytes flipped,
   random length fields, serialize types, JSON and binary headers, plain garbage) on the broker
   and the name-server ports, a few per connection;
2. at once: ``--half-sent`` connections each sending ``--half-mib`` MiB of a frame announcing
   16 MiB and never the rest; ``--slowloris`` connections trickling a valid frame one byte a
   second; ``--idle`` connections that send nothing (more than the broker's connection cap);
   raw garbage and idle connections on the gRPC port;
3. ``--grpc-calls`` calls of every gRPC method with a random body (unary and streams).

It prints: frames fuzzed, whether the broker process died (crash), whether a normal client's
send and pull round trip (and a name-server route query, and a gRPC QueryRoute) still works
within ``--health-timeout`` s during the attacks and after them (hang), the connections
closed for each limit (from the broker's log), the gRPC status codes of malformed calls, the
tracebacks in the broker's log, and the broker's resident memory before the attacks and its
peak under them (``VmHWM``, Linux ``/proc``). Everything is on 127.0.0.1, bounded in count and
time. The test ``tests/integration/test_hostile_input.py`` runs these attacks at a small scale.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pocketmq.broker.grpc.server import HANDSHAKE_TIMEOUT_MS
from pocketmq.broker.protocol import FrameDecoder, RemotingCommand, RequestCode, encode_frame
from pocketmq.broker.protocol.codes import SerializeType
from pocketmq.broker.protocol.errors import LocalProtocolError
from pocketmq.broker.protocol.headers import (
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    SendMessageRequestHeaderV2,
)

POCKETMQ = Path(sys.executable).parent / "pocketmq"
FRAME_MAX = 16 * 1024 * 1024
READY_S = 30.0
CODES = [int(code) for code in RequestCode]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- the broker process ------------------------------------------------------------------------


@dataclass
class Standalone:
    process: subprocess.Popen[bytes]
    log_path: Path
    broker: str
    namesrv: str
    grpc: str

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def closes(self) -> Counter[str]:
        """Connections closed per limit (and for a malformed frame), as its log says."""
        return closes_in_log(self.log_text())

    def memory_kib(self, key: str = "VmHWM") -> int:
        """``VmHWM`` (peak resident memory) or ``VmRSS`` of the process, KiB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"no {key} for process {self.process.pid}")

    def stop(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_standalone(
    folder: Path, limits: list[str], command: list[str] | None = None
) -> Standalone:
    """``pocketmq standalone`` with its data and log in ``folder``, gRPC on, ``--limit`` each of
    ``limits``; returns once it printed its ready line."""
    port, namesrv_port, grpc_port = free_port(), free_port(), free_port()
    log_path = folder / "standalone.log"
    args = [
        *(command or [str(POCKETMQ)]),
        "standalone",
        "--data",
        str(folder / "data"),
        "--port",
        str(port),
        "--namesrv-port",
        str(namesrv_port),
        "--grpc-port",
        str(grpc_port),
        *[arg for limit in limits for arg in ("--limit", limit)],
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "POCKETMQ_LOG_LEVEL": "INFO"}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env)
    assert process.stdout is not None
    os.set_blocking(process.stdout.fileno(), False)
    deadline, seen = time.monotonic() + READY_S, b""
    while b"ready" not in seen:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"standalone did not start:\n{log_path.read_text()[-3000:]}")
        with contextlib.suppress(BlockingIOError, TypeError):
            seen += os.read(process.stdout.fileno(), 4096)
        time.sleep(0.05)
    return Standalone(
        process,
        log_path,
        f"127.0.0.1:{port}",
        f"127.0.0.1:{namesrv_port}",
        f"127.0.0.1:{grpc_port}",
    )


# Lines of RemotingServer._log_closes: "<server>: closed <n> connection(s) <why> (last: ...)".
_CLOSE_LINE = re.compile(r"(\w+): (?:closed|refused) (\d+) connections? (.*) \(last: ")
_REASONS = {
    "whose frame was not whole": "frame_timeout",
    "that sent no whole frame within": "first_request_timeout",
    "idle for": "idle",
    "to keep partial frames under": "buffered_bytes",
    "to admit new ones": "evicted",
    "none of them idle": "refused",
}
_MALFORMED_LINE = re.compile(r"(WARNING).*closing [\d.:]+: ")


def closes_in_log(text: str) -> Counter[str]:
    """Connections closed per limit (and for a malformed frame), as the broker logged them."""
    closes: Counter[str] = Counter()
    for match in _CLOSE_LINE.finditer(text):
        why = match.group(3)
        reason = next((r for key, r in _REASONS.items() if key in why), why)
        closes[reason] += int(match.group(2))
    closes["malformed"] = len(_MALFORMED_LINE.findall(text))
    return closes


# -- fuzzed frames -----------------------------------------------------------------------------


def _random_text(rng: random.Random, most: int = 24) -> str:
    alphabet = "abcXYZ019_-%@ .:;|\x00\x01\x02\u00e9\u4e2d\ud7ff"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))


def _random_value(rng: random.Random) -> str:
    return rng.choice(
        [
            str(rng.randint(-(2**63), 2**63)),
            str(rng.randint(-2, 100)),
            _random_text(rng),
            "true",
            "",
            "*",
            "9" * rng.randint(1, 40),
            "TBW102",
            "%RETRY%g",
        ]
    )


_KEYS = [
    "topic", "consumerGroup", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
    "suspendTimeoutMillis", "subscription", "subVersion", "a", "b", "c", "d", "e", "f", "g", "h",
    "i", "j", "k", "l", "m", "n", "producerGroup", "offset", "group", "delayLevel", "key",
    "beginTimestamp", "endTimestamp", "maxNum", "msgId", "invisibleTime", "pollTime", "extraInfo",
    "bornTime", "initMode", "expType", "exp", "order", "brokerName", "clusterName", "namespace",
]  # fmt: skip


def _valid_frame(rng: random.Random) -> bytes:
    code = rng.choice(CODES) if rng.random() < 0.9 else rng.randint(-(2**15), 2**15 - 1)
    fields = {rng.choice(_KEYS): _random_value(rng) for _ in range(rng.randint(0, 8))}
    body = rng.randbytes(rng.choice([0, 0, 1, 8, 64, 600])) if rng.random() < 0.6 else None
    if body is not None and rng.random() < 0.3:
        body = json.dumps({_random_text(rng): _random_value(rng) for _ in range(3)}).encode()
    command = RemotingCommand(
        code=code,
        opaque=rng.randint(0, 2**31 - 1),
        flag=rng.choice([0, 0, 0, 2]),
        ext_fields=fields,
        body=body,
    )
    kind = rng.choice([SerializeType.JSON, SerializeType.ROCKETMQ])
    try:
        return encode_frame(command, kind)
    except LocalProtocolError:  # a value the binary header cannot carry (a code past a short)
        return encode_frame(command, SerializeType.JSON)


def _json_header_frame(rng: random.Random) -> bytes:
    header = rng.choice(
        [
            b'{"code":%d,"extFields":%s}'
            % (rng.randint(0, 400), rng.choice([b"[]", b"1", b'"x"', b"null"])),
            b'{"code":"%s","flag":%d}' % (_random_text(rng).encode(), rng.randint(-9, 9)),
            b"{code:10,extFields:{'topic':'" + _random_text(rng).encode() + b"'}}",
            b'{"code":1e999,"opaque":-1}',
            b'{"code":10,"extFields":{"topic":"\\ud800"}}',
            b"[" * rng.randint(1, 3000) + b"]" * rng.randint(0, 3000),
            b'{"code":10' + b"," * rng.randint(0, 50) + b"}",
            rng.randbytes(rng.randint(0, 200)),
        ]
    )
    body = rng.randbytes(rng.randint(0, 50))
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _binary_header_frame(rng: random.Random) -> bytes:
    remark = rng.randbytes(rng.randint(0, 20))
    ext = b""
    for _ in range(rng.randint(0, 4)):
        key, value = rng.randbytes(rng.randint(0, 8)), rng.randbytes(rng.randint(0, 8))
        ext += struct.pack(">h", rng.choice([len(key), -1, 300])) + key
        ext += struct.pack(">i", rng.choice([len(value), -1, 2**30])) + value
    header = struct.pack(
        ">hbhii", rng.randint(-(2**15), 2**15 - 1), rng.randint(-128, 127), 0, 1, rng.choice([0, 2])
    )
    header += struct.pack(">i", rng.choice([len(remark), -5, 10**6])) + remark
    header += struct.pack(">i", rng.choice([len(ext), len(ext) + 7, -1])) + ext
    return struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header


def fuzzed_frame(rng: random.Random) -> bytes:
    """One hostile frame, or the start of one: the kinds a fuzzer of the protocol tries."""
    kind = rng.random()
    if kind < 0.35:
        return _valid_frame(rng)
    if kind < 0.55:  # a valid frame with a few bytes changed
        frame = bytearray(_valid_frame(rng))
        for _ in range(rng.randint(1, 4)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        return bytes(frame)
    if kind < 0.7:
        return _json_header_frame(rng)
    if kind < 0.8:
        return _binary_header_frame(rng)
    if kind < 0.9:  # length and header words out of range
        length = rng.choice([-1, 0, 3, 4, FRAME_MAX, FRAME_MAX + 1, 2**31 - 1, rng.randint(5, 99)])
        word = rng.choice([0, 2**24 - 1, (rng.randint(2, 255) << 24) | 4, -1])
        return struct.pack(">iI", length, word & 0xFFFFFFFF) + rng.randbytes(rng.randint(0, 30))
    return rng.randbytes(rng.randint(1, 300))


@dataclass
class FuzzResult:
    frames: int = 0
    connections: int = 0
    answers: int = 0  # response frames received
    closed: int = 0  # connections the server closed (a malformed frame)


async def fuzz(
    address: str, rng: random.Random, frames: int, *, concurrency: int = 32, quiet_s: float = 0.2
) -> FuzzResult:
    """Send ``frames`` fuzzed frames, 1-4 per connection, reading answers until the server
    closes the connection or is quiet for ``quiet_s``."""
    result = FuzzResult()
    host, _, port = address.rpartition(":")
    batches: list[bytes] = []
    while result.frames < frames:
        count = min(rng.randint(1, 4), frames - result.frames)
        batches.append(b"".join(fuzzed_frame(rng) for _ in range(count)))
        result.frames += count
    gate = asyncio.Semaphore(concurrency)

    async def one(data: bytes) -> None:
        async with gate:
            reader, writer = await asyncio.open_connection(host, int(port))
            decoder = FrameDecoder()
            try:
                writer.write(data)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                while True:
                    try:
                        chunk = await asyncio.wait_for(reader.read(1 << 16), quiet_s)
                    except TimeoutError:
                        return
                    except ConnectionError:
                        chunk = b""
                    if not chunk:
                        result.closed += 1
                        return
                    with contextlib.suppress(Exception):
                        result.answers += len(decoder.feed(chunk))
            finally:
                writer.close()

    result.connections = len(batches)
    await asyncio.gather(*(one(batch) for batch in batches))
    return result


# -- connections that hold the server's resources ----------------------------------------------


@dataclass
class Held:
    """Attack connections kept open; ``closed`` counts those the server has closed."""

    name: str
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    opened: int = 0
    failed: int = 0  # could not even connect (or were reset at once)
    closed: int = 0

    def watch(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        self.writers.append(writer)

        async def until_closed() -> None:
            with contextlib.suppress(ConnectionError):
                while await reader.read(1 << 16):
                    pass
            self.closed += 1

        self.tasks.append(asyncio.ensure_future(until_closed()))

    def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        for writer in self.writers:
            writer.close()


async def _connect(
    address: str, held: Held
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    host, _, port = address.rpartition(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        held.failed += 1
        return None
    held.watch(reader, writer)
    return reader, writer


async def half_sent(address: str, connections: int, bytes_each: int, rng: random.Random) -> Held:
    """Each connection sends ``bytes_each`` bytes of a frame announcing the 16 MiB maximum."""
    held = Held("half-sent")
    header = b'{"code":10,"flag":0,"opaque":1,"extFields":{}}'
    head = struct.pack(">ii", FRAME_MAX - 4, len(header)) + header

    filler = rng.randbytes(1 << 20)  # one random MiB, sent again and again (no copy each)

    async def one() -> None:
        pair = await _connect(address, held)
        if pair is None:
            return
        writer, left = pair[1], bytes_each
        with contextlib.suppress(ConnectionError):
            writer.write(head[:left])
            left -= len(head)
            while left > 0 and not writer.is_closing():
                writer.write(filler[:left])
                left -= len(filler)
                await writer.drain()

    await asyncio.gather(*(one() for _ in range(connections)))
    return held


async def slowloris(address: str, connections: int, interval_s: float, duration_s: float) -> Held:
    """Each connection trickles a valid frame, one byte per ``interval_s``, for ``duration_s``
    (a task that the caller awaits or cancels)."""
    held = Held("slowloris")
    frame = encode_frame(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=1, body=b"{}" * 200))

    async def one() -> None:
        pair = await _connect(address, held)
        if pair is None:
            return
        writer = pair[1]
        end = time.monotonic() + duration_s
        for i in range(len(frame) - 1):  # never the last byte
            if time.monotonic() > end or writer.is_closing():
                return
            try:
                writer.write(frame[i : i + 1])
                await writer.drain()
            except ConnectionError:
                return
            await asyncio.sleep(interval_s)

    held.tasks.extend(asyncio.ensure_future(one()) for _ in range(connections))
    return held


async def idle_flood(address: str, connections: int, *, concurrency: int = 256) -> Held:
    """Connections that send nothing."""
    held = Held("idle")
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            await _connect(address, held)

    await asyncio.gather(*(one() for _ in range(connections)))
    return held


async def grpc_garbage(address: str, connections: int, rng: random.Random) -> Held:
    """On the gRPC port: half the connections send bytes that are not HTTP/2, half nothing."""
    held = Held("grpc-garbage")
    for i in range(connections):
        pair = await _connect(address, held)
        if pair is not None and i % 2:
            with contextlib.suppress(ConnectionError):
                pair[1].write(rng.randbytes(rng.randint(1, 4096)))
    return held


# -- gRPC ----------------------------------------------------------------------------------------


async def grpc_malformed(
    address: str, calls: int, rng: random.Random, *, noise: bool = True
) -> Counter[str]:
    """``calls`` calls of random MessagingService methods with a malformed body; the status
    names. ``noise``: random bytes before the broken part, which now and then make it parse."""
    import grpc

    from pocketmq.broker.grpc.stubs import service_pb2

    methods = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].methods
    statuses: Counter[str] = Counter()
    gate = asyncio.Semaphore(32)
    async with grpc.aio.insecure_channel(address) as channel:

        async def one() -> None:
            method = rng.choice(methods)
            path = f"/{method.containing_service.full_name}/{method.name}"
            body = _malformed_protobuf(rng, noise)
            # a client id, or Telemetry answers CLIENT_ID_REQUIRED before it reads the stream
            options: dict[str, Any] = {"timeout": 5, "metadata": (("x-mq-client-id", "fuzz"),)}
            async with gate:
                try:
                    if method.client_streaming:
                        call = channel.stream_stream(path)(iter([body]), **options)
                        async for _ in call:
                            pass
                    elif method.server_streaming:
                        async for _ in channel.unary_stream(path)(body, **options):
                            pass
                    else:
                        await channel.unary_unary(path)(body, **options)
                    statuses["OK"] += 1
                except grpc.aio.AioRpcError as error:
                    statuses[error.code().name] += 1

        await asyncio.gather(*(one() for _ in range(calls)))
    return statuses


def _malformed_protobuf(rng: random.Random, noise: bool) -> bytes:
    """Bytes no protobuf message parses (a truncated varint, a field of wire type 7, a length
    past the end), after random bytes if ``noise``."""
    broken = rng.choice(
        [b"\x08", b"\x0f", b"\x0a\x7f", b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"]
    )
    return rng.randbytes(rng.randint(0, 64)) + broken if noise and rng.random() < 0.5 else broken


# -- a normal client ---------------------------------------------------------------------------


async def _call(address: str, command: RemotingCommand) -> RemotingCommand:
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        command.opaque = 1
        writer.write(encode_frame(command))
        decoder = FrameDecoder()
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError("closed by the server")
            for frame in decoder.feed(data):
                if frame.is_response:
                    return frame
    finally:
        writer.close()


async def round_trip(standalone: Standalone, topic: str = "HealthTopic") -> None:
    """A send and a pull of it on the broker, a route query on the name server and a gRPC
    QueryRoute; raises if any fails."""
    body = f"health {time.monotonic()}".encode()
    send = SendMessageRequestHeaderV2(
        producer_group="health",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=1,
        queue_id=0,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=0,
    )
    sent = await _call(
        standalone.broker,
        RemotingCommand(
            code=RequestCode.SEND_MESSAGE_V2, ext_fields=send.to_ext_fields(), body=body
        ),
    )
    if sent.code != 0:
        raise RuntimeError(f"send refused: {sent.code} {sent.remark}")
    pull = PullMessageRequestHeader(
        consumer_group="health",
        topic=topic,
        queue_id=0,
        queue_offset=int(sent.ext_fields["queueOffset"]),
        max_msg_nums=1,
        sys_flag=0x4,
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
    )
    pulled = await _call(
        standalone.broker,
        RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=pull.to_ext_fields()),
    )
    if pulled.code != 0 or body not in (pulled.body or b""):
        raise RuntimeError(f"pull did not return the message: {pulled.code} {pulled.remark}")
    route = await _call(
        standalone.namesrv,
        RemotingCommand(
            code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
            ext_fields=GetRouteInfoRequestHeader(topic=topic).to_ext_fields(),
        ),
    )
    if route.code != 0:
        raise RuntimeError(f"no route from the name server: {route.code} {route.remark}")
    import grpc

    from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc

    async with grpc.aio.insecure_channel(standalone.grpc) as channel:
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        await service_pb2_grpc.MessagingServiceStub(channel).QueryRoute(request)


async def healthy(standalone: Standalone, timeout_s: float) -> str | None:
    """None if a normal client's round trip works within ``timeout_s``, else why not."""
    try:
        async with asyncio.timeout(timeout_s):
            await round_trip(standalone)
    except TimeoutError:
        return f"no round trip within {timeout_s} s"
    except Exception as error:
        return f"{type(error).__name__}: {error}"
    return None


# -- the run -------------------------------------------------------------------------------------


async def attack(
    standalone: Standalone, args: argparse.Namespace, say: Callable[[str], None]
) -> dict[str, Any]:
    rng = random.Random(args.seed)
    report: dict[str, Any] = {"seed": args.seed, "health": {}}
    report["rss_before_kib"] = standalone.memory_kib("VmRSS")
    report["health"]["before"] = await healthy(standalone, args.health_timeout)

    started = time.monotonic()
    broker_fuzz = await fuzz(standalone.broker, rng, args.frames - args.frames // 3)
    namesrv_fuzz = await fuzz(standalone.namesrv, rng, args.frames // 3)
    report["fuzz"] = {"broker": vars(broker_fuzz), "namesrv": vars(namesrv_fuzz)}
    report["frames_fuzzed"] = broker_fuzz.frames + namesrv_fuzz.frames
    say(f"fuzzed {report['frames_fuzzed']} frames in {time.monotonic() - started:.1f} s")

    held: list[Held] = []
    try:
        held.append(
            await half_sent(standalone.broker, args.half_sent, args.half_mib * 1024 * 1024, rng)
        )
        held.append(await half_sent(standalone.namesrv, args.half_sent // 4, 1024 * 1024, rng))
        # every deadline passed, the sweeps after them run, their log lines written
        handshake_s = HANDSHAKE_TIMEOUT_MS / 1000 if args.grpc_idle else 0
        wait_s = max(args.frame_timeout, args.first_request_timeout, handshake_s) + 3
        held.append(await slowloris(standalone.broker, args.slowloris, 1.0, wait_s + 10))
        held.append(await idle_flood(standalone.broker, args.idle))
        held.append(await idle_flood(standalone.namesrv, args.idle // 8))
        held.append(await grpc_garbage(standalone.grpc, args.grpc_idle, rng))
        placed = time.monotonic()
        say(
            f"held {sum(h.opened for h in held)} connections ({sum(h.failed for h in held)} refused)"
        )
        report["health"]["during"] = await healthy(standalone, args.health_timeout)
        report["grpc_malformed"] = dict(await grpc_malformed(standalone.grpc, args.grpc_calls, rng))
        say(f"grpc: {report['grpc_malformed']}")
        await asyncio.sleep(max(0.0, wait_s - (time.monotonic() - placed)))
        report["held"] = {
            h.name + (f"-{i}" if i else ""): {
                "opened": h.opened,
                "failed": h.failed,
                "closed": h.closed,
            }
            for i, h in enumerate(held)
        }
        report["rss_peak_kib"] = standalone.memory_kib("VmHWM")
    finally:
        for h in held:
            h.close()
    report["health"]["after"] = await healthy(standalone, args.health_timeout)
    report["crashed"] = not standalone.alive
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--half-sent", type=int, default=64, help="half-sent frames (broker)")
    parser.add_argument("--half-mib", type=int, default=8, help="MiB sent of each (max 15)")
    parser.add_argument("--slowloris", type=int, default=64)
    parser.add_argument("--idle", type=int, default=4200, help="idle connections (broker)")
    parser.add_argument("--grpc-idle", type=int, default=64)
    parser.add_argument("--grpc-calls", type=int, default=400)
    parser.add_argument("--frame-timeout", type=float, default=10.0)
    parser.add_argument("--first-request-timeout", type=float, default=5.0)
    parser.add_argument("--health-timeout", type=float, default=5.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(2**32)
    args.half_mib = max(1, min(args.half_mib, 15))
    say = (lambda _: None) if args.json else (lambda text: print(text, flush=True))
    say(f"seed {args.seed}")
    limits = [
        f"frame_timeout_s={args.frame_timeout}",
        f"first_request_timeout_s={args.first_request_timeout}",
        "warning_interval_s=1",
    ]
    with tempfile.TemporaryDirectory(prefix="pocketmq-fuzz-") as folder:
        standalone = start_standalone(Path(folder), limits)
        try:
            report = asyncio.run(attack(standalone, args, say))
        finally:
            standalone.stop()
        log = standalone.log_text()
    report["closed_by_limit"] = dict(closes_in_log(log))
    report["tracebacks"] = log.count("Traceback")
    report["limits"] = limits
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key in ("frames_fuzzed", "crashed", "health", "closed_by_limit", "held", "tracebacks"):
            print(f"{key}: {report[key]}")
        print(
            f"rss: {report['rss_before_kib'] // 1024} MiB before, {report['rss_peak_kib'] // 1024} MiB peak (VmHWM)"
        )
    failed = report["crashed"] or any(report["health"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
