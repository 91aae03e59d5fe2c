"""Hostile input against a real ``pocketmq standalone`` (issue 15), at a small scale: the attacks
of ``bench/fuzz_frames.py`` with short deadlines and small caps. The broker neither crashes nor
hangs (a normal client's send, pull, route query and gRPC call still work), each limit closes
the connections it should and says so in the log, and a malformed gRPC body is answered
INVALID_ARGUMENT with one log line. Random attacks are seeded; a failure names the seed
(set ``POCKETMQ_FUZZ_SEED`` to run it again)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("grpc")
# The attacks are the bench's, a file of the checkout (the wheel's test run has no bench/).
pytestmark = pytest.mark.checkout

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fuzz_frames.py"
WAIT_S = 15.0  # the most any outcome is waited for
CAP = 8 * 1024 * 1024
CONNECTIONS_MAX = 64
LIMITS = [
    "frame_timeout_s=1",
    "first_request_timeout_s=1",
    f"buffered_bytes_max={CAP}",
    f"connections_max={CONNECTIONS_MAX}",
    "warning_interval_s=0.1",
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_frames", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def standalone(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    process = bench.start_standalone(
        tmp_path_factory.mktemp("hostile"), LIMITS, [sys.executable, "-m", "pocketmq.cli"]
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("POCKETMQ_FUZZ_SEED") or random.randrange(2**32))


async def until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return condition()


def closes(standalone: Any) -> Counter[str]:
    """Connections closed per limit, as the broker's log says."""
    return standalone.closes()


async def settled_closes(standalone: Any) -> Counter[str]:
    """The closes once the log has stopped adding to them: the broker logs a close up to a
    sweep (0.25 s) plus the warning interval after it, so a count read at once can still miss
    closes of the test before and credit them to the next one."""
    last = closes(standalone)
    quiet_since = time.monotonic()
    deadline = quiet_since + WAIT_S
    while time.monotonic() - quiet_since < 1.0 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        now = closes(standalone)
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last


async def test_fuzzed_frames_neither_crash_nor_hang_the_broker(
    bench: ModuleType, standalone: Any, seed: int
) -> None:
    rng = random.Random(seed)
    broker = await bench.fuzz(standalone.broker, rng, 300)
    namesrv = await bench.fuzz(standalone.namesrv, rng, 100)
    assert broker.frames + namesrv.frames == 400
    assert broker.closed and namesrv.closed, f"seed {seed}: no malformed frame closed a connection"
    assert standalone.alive, f"seed {seed}: the broker died\n{standalone.log_text()[-3000:]}"
    assert await bench.healthy(standalone, 10.0) is None, f"seed {seed}"
    assert "Traceback" not in standalone.log_text(), f"seed {seed}"


async def test_half_sent_frames_are_capped_in_all(
    bench: ModuleType, standalone: Any, seed: int
) -> None:
    before = await settled_closes(standalone)

    def closed_for(reason: str) -> int:
        return closes(standalone)[reason] - before[reason]

    # 16 MiB offered, 2 MiB on each of 8 connections, against a cap of 8 MiB in all
    held = await bench.half_sent(standalone.broker, 8, 2 * 1024 * 1024, random.Random(seed))
    try:
        assert await until(lambda: closed_for("buffered_bytes") >= 4)
        assert closed_for("buffered_bytes") <= 5  # the rest fitted
        assert await bench.healthy(standalone, 10.0) is None
        assert await until(lambda: held.closed == 8)  # the others at their frame deadline
        # and the broker's log accounts for each of the 8, once
        assert await until(lambda: closed_for("buffered_bytes") + closed_for("frame_timeout") == 8)
    finally:
        held.close()


async def test_a_slowloris_frame_is_closed_at_its_deadline(
    bench: ModuleType, standalone: Any
) -> None:
    before = (await settled_closes(standalone))["frame_timeout"]
    # a byte every 0.1 s: the frame of about 450 bytes would take 45 s, its deadline is 1 s
    held = await bench.slowloris(standalone.broker, 4, 0.1, WAIT_S)
    try:
        assert await until(lambda: held.closed == 4)
        assert await until(lambda: closes(standalone)["frame_timeout"] - before == 4)
    finally:
        held.close()


async def test_an_idle_flood_leaves_room_for_a_new_client(
    bench: ModuleType, standalone: Any
) -> None:
    before = await settled_closes(standalone)
    held = await bench.idle_flood(standalone.broker, CONNECTIONS_MAX + 20)
    try:
        # while the flood holds the connections, a normal client still gets in
        assert await bench.healthy(standalone, 10.0) is None
        assert await until(lambda: closes(standalone)["evicted"] - before["evicted"] >= 20)
        # and every idle one goes once its first frame is overdue
        assert await until(lambda: held.closed == held.opened)
        assert closes(standalone)["first_request_timeout"] > before["first_request_timeout"]
    finally:
        held.close()


async def test_malformed_grpc_bodies_are_invalid_argument_with_one_line(
    bench: ModuleType, standalone: Any, seed: int
) -> None:
    lines_before = standalone.log_text().count("malformed request")
    statuses = await bench.grpc_malformed(standalone.grpc, 40, random.Random(seed), noise=False)
    assert statuses == {"INVALID_ARGUMENT": 40}, f"seed {seed}"
    assert await until(
        lambda: standalone.log_text().count("malformed request") - lines_before == 40
    )
    assert "Traceback" not in standalone.log_text()
    assert await bench.healthy(standalone, 10.0) is None


async def test_a_malformed_message_in_the_middle_of_a_telemetry_stream(
    bench: ModuleType, standalone: Any
) -> None:
    import grpc

    from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2

    settings = service_pb2.TelemetryCommand(
        settings=definition_pb2.Settings(client_type=definition_pb2.ClientType.PRODUCER)
    ).SerializeToString()
    path = "/apache.rocketmq.v2.MessagingService/Telemetry"
    async with grpc.aio.insecure_channel(standalone.grpc) as channel:
        call = channel.stream_stream(path)(
            iter([settings, b"\x0f"]), timeout=10, metadata=(("x-mq-client-id", "mid-stream"),)
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async for _ in call:
                pass
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "TelemetryCommand" in (refused.value.details() or "")
