"""Resident memory of an idle ``pocketmq standalone``, with and without its gRPC and HTTP fronts.

    python bench/idle_rss.py [--runs 3] [--settle 3] [--json]

Starts the installed ``pocketmq`` console script (the one beside this interpreter) as
``pocketmq standalone --data <temp folder> --port P --namesrv-port N --grpc-port G
--http-port H`` (the README's command, on free ports and a fresh store: both fronts on), then
with ``--no-http``, with ``--no-grpc`` and with both off; waits for its ``ready`` line plus
``--settle`` seconds, reads ``VmRSS`` (and its anonymous part, ``RssAnon``) from
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


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


IDLE_LOOP = (
    "import asyncio, signal, uvloop\n"
    "async def main():\n"
    "    stop = asyncio.Event()\n"
    "    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)\n"
    "    print('ready', flush=True)\n"
    "    await stop.wait()\n"
    "uvloop.run(main())\n"
)


# variant -> the options after the README command's data folder and ports
VARIANTS = {
    "grpc+http": ["--grpc-port", "{grpc}", "--http-port", "{http}"],
    "grpc": ["--grpc-port", "{grpc}", "--no-http"],
    "http": ["--no-grpc", "--http-port", "{http}"],
    "neither": ["--no-grpc", "--no-http"],
}
LABELS = {
    "grpc+http": "pocketmq standalone",
    "grpc": "pocketmq standalone --no-http",
    "http": "pocketmq standalone --no-grpc",
    "neither": "  ... --no-grpc --no-http",
    "floor": "floor: python + idle uvloop",
}


def measure(variant: str, settle_s: float) -> tuple[int, int]:
    """VmRSS and RssAnon (KiB) of one idle process, ``settle_s`` after it said ready."""
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
            ports = {"grpc": free_port(), "http": free_port()}
            command += [option.format(**ports) for option in VARIANTS[variant]]
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            if "ready" not in line:
                raise RuntimeError(f"{' '.join(command)} did not start: {line!r}")
            time.sleep(settle_s)
            return rss_kib(process.pid), rss_kib(process.pid, "RssAnon")
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
    samples: dict[str, list[tuple[int, int]]] = {name: [] for name in LABELS}
    for _ in range(args.runs):
        for variant, values in samples.items():
            values.append(measure(variant, args.settle))
    # VmRSS is in KiB; MiB below.
    result = {
        name: {
            "runs_kib": [rss for rss, _ in values],
            "median_mib": round(statistics.median(rss for rss, _ in values) / 1024, 1),
            "anon_median_mib": round(statistics.median(anon for _, anon in values) / 1024, 1),
        }
        for name, values in samples.items()
    }
    if args.json:
        print(json.dumps(result))
        return
    for name, values in result.items():
        runs = ", ".join(f"{kib / 1024:.1f}" for kib in values["runs_kib"])
        print(
            f"{LABELS[name]:32} median {values['median_mib']:.1f} MiB, "
            f"anonymous {values['anon_median_mib']:.1f} MiB (runs: {runs} MiB)"
        )


if __name__ == "__main__":
    main()
