"""The HTTP front's cost: polling a queue in the JSON and binary transports, and a scrape.

    python bench/http_poll.py [--messages 1000] [--body 100] [--rounds 20]

Starts a standalone (in memory, free ports), sends ``--messages`` messages of ``--body`` bytes
to a one-queue topic through the SDK, then prints, each the median of ``--rounds`` requests:
  json      GET .../messages?count=N (base64 payloads): bytes and milliseconds
  binary    the same with Accept: application/octet-stream
  metrics   GET /metrics
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import time

import aiohttp

from pocketmq.client import Message, Producer


async def median_ms(
    session: aiohttp.ClientSession, rounds: int, path: str, **kw: object
) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        async with session.get(path, **kw) as response:  # type: ignore[arg-type]
            size = len(await response.read())
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), size


async def main(messages: int, body: int, rounds: int) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pocketmq.cli", "standalone", "--memory", "--no-grpc"]
        + ["--port", "0", "--namesrv-port", "0", "--http-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    namesrv = re.search(r"name server (\S+),", line)
    http = re.search(r"http (\S+?:\d+)", line)
    assert namesrv is not None and http is not None, line
    try:
        async with aiohttp.ClientSession(f"http://{http.group(1)}") as session:
            topic = {"topic": "Bench", "read_queue_nums": 1, "write_queue_nums": 1}
            async with session.post("/api/topics", json=topic) as response:
                assert response.status == 201
            async with Producer("bench-http", namesrv=namesrv.group(1)) as producer:
                for start in range(0, messages, 50):
                    await asyncio.gather(
                        *(
                            producer.send(Message(topic="Bench", body=b"x" * body))
                            for _ in range(start, min(start + 50, messages))
                        )
                    )
            path = "/api/topics/Bench/queues/0/messages"
            params = {"offset": "0", "count": str(min(messages, 1000))}
            for name, accept in (
                ("json", "application/json"),
                ("binary", "application/octet-stream"),
            ):
                ms, size = await median_ms(
                    session, rounds, path, params=params, headers={"Accept": accept}
                )
                print(f"{name:8} {params['count']} messages of {body} B: {size} bytes, {ms:.1f} ms")
            ms, size = await median_ms(session, rounds, "/metrics")
            print(f"metrics  {size} bytes, {ms:.1f} ms")
    finally:
        process.terminate()
        process.wait(15)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.messages, args.body, args.rounds))
