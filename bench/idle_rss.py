"""Resident memory of an idle ``pocketmq standalone``, with and without the gRPC front-end.

    python bench/idle_rss.py [--runs 3] [--settle 3] [--json]

Starts the installed ``pocketmq`` console script (the one beside this interpreter) as
``pocketmq standalone --data <temp folder> --port P --namesrv-port N --grpc-port G`` (the
README's command, on free ports and a fresh store), and once more with ``--no-grpc`` instead of
``--grpc-port``; waits for its ``ready`` line plus ``--settle`` seconds, reads ``VmRSS`` from
``/proc/<pid>/status``, stops it with SIGTERM. The floor, measured the same way in the same
run: this interpreter running an idle uvloop loop and nothing else. Each variant ``--runs``
times, alternating; the median is reported. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POCKETMQ = Path(sys.executable).parent / "pocketmq"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


IDLE_LOOP = (
    "import asyncio, signal, uvloop\n"
    "async def main():\n"
    "    stop = asyncio.Event()\n"
    "    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)\n"
    "    print('ready', flush=True)\n"
    "    await stop.wait()\n"
    "uvloop.run(main())\n"
)


def measure(variant: str, settle_s: float) -> int:
    """VmRSS (KiB) of one idle process, ``settle_s`` after it said ready."""
    with tempfile.TemporaryDirectory(prefix="pocketmq-rss-") as data:
        if variant == "floor":
            command = [sys.executable, "-c", IDLE_LOOP]
        else:
            command = [
                str(POCKETMQ),
                "standalone",
                "--data",
                data,
                "--port",
                str(free_port()),
                "--namesrv-port",
                str(free_port()),
            ]
            grpc = variant == "grpc"
            command += ["--grpc-port", str(free_port())] if grpc else ["--no-grpc"]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if "ready" not in line:
                raise RuntimeError(f"{' '.join(command)} did not start: {line!r}")
            time.sleep(settle_s)
            return rss_kib(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after ready")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    samples: dict[str, list[int]] = {"grpc": [], "no-grpc": [], "floor": []}
    for _ in range(args.runs):
        for variant, values in samples.items():
            values.append(measure(variant, args.settle))
    # VmRSS is in KiB; MiB below.
    result = {
        name: {"runs_kib": values, "median_mib": round(statistics.median(values) / 1024, 1)}
        for name, values in samples.items()
    }
    if args.json:
        print(json.dumps(result))
        return
    for name, values in result.items():
        label = {
            "grpc": "pocketmq standalone",
            "no-grpc": "pocketmq standalone --no-grpc",
            "floor": "floor: python + idle uvloop",
        }[name]
        runs = ", ".join(f"{kib / 1024:.1f}" for kib in values["runs_kib"])
        print(f"{label:32} median {values['median_mib']:.1f} MiB (runs: {runs} MiB)")


if __name__ == "__main__":
    main()
