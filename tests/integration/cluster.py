"""Start real pocketmq processes on 127.0.0.1 for integration tests, and stop them.

    with Cluster(tmp_path) as cluster:
        namesrv = cluster.start_namesrv()
        broker = cluster.start_broker("broker-a", flush="sync")
        ...            # talk to them through the SDK at namesrv.address
        broker.kill()  # SIGKILL; broker.restart() starts it again on the same port and data

Every process is stopped when the block ends, whatever happens.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

READY_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Process:
    name: str
    args: list[str]
    port: int
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    ready_line: str = ""
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def http_address(self) -> str:
        """The HTTP front's host:port, as the ready line reports it."""
        match = re.search(r"http (\S+?:\d+)", self.ready_line)
        assert match is not None, f"no HTTP front in the ready line: {self.ready_line!r}"
        return match.group(1)

    def start(self) -> Process:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "POCKETMQ_LOG_LEVEL": "INFO"}
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "pocketmq.cli", *self.args],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
        )
        log.close()
        self.ready_line = self._wait_ready()
        return self

    def _wait_ready(self) -> str:
        assert self.popen is not None and self.popen.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        selector = selectors.DefaultSelector()
        selector.register(self.popen.stdout, selectors.EVENT_READ)
        buffer = b""
        try:
            while time.monotonic() < deadline:
                if self.popen.poll() is not None:
                    raise RuntimeError(
                        f"{self.name} exited with {self.popen.returncode}; log:\n{self.log_tail()}"
                    )
                if selector.select(timeout=0.1):
                    chunk = os.read(self.popen.stdout.fileno(), 4096)
                    buffer += chunk
                    if b"ready" in buffer:
                        return buffer.decode(errors="replace").strip()
            raise TimeoutError(
                f"{self.name} not ready after {READY_TIMEOUT_S}s; log:\n{self.log_tail()}"
            )
        finally:
            selector.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL: no flush, no clean shutdown, like a crash."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)
        self._close_pipe()

    def stop(self) -> None:
        """SIGTERM and wait: a clean shutdown."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._close_pipe()

    def _close_pipe(self) -> None:
        if self.popen is not None and self.popen.stdout is not None:
            self.popen.stdout.close()

    def restart(self) -> Process:
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


def _grpc_args(extra_args: list[str] | None) -> list[str]:
    """Test brokers serve gRPC and HTTP only when asked (``--grpc-port``, ``--http-port 0``):
    8081 and 8082 would clash, and each front costs start time (aiohttp's import is about half
    a second). ``Process.http_address`` reads the HTTP port from the ready line."""
    extra = list(extra_args or [])
    if "--grpc-port" not in extra and "--no-grpc" not in extra:
        extra.append("--no-grpc")
    if "--http-port" not in extra and "--no-http" not in extra:
        extra.append("--no-http")
    return extra


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.processes: list[Process] = []
        self.namesrv: Process | None = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for process in reversed(self.processes):
            process.stop()

    def start_namesrv(self) -> Process:
        port = free_port()
        process = Process(
            "namesrv", ["namesrv", "--port", str(port)], port, self.root / "namesrv.log"
        )
        self.processes.append(process.start())
        self.namesrv = process
        return process

    def start_broker(
        self, name: str = "broker-a", *, flush: str = "async", extra_args: list[str] | None = None
    ) -> Process:
        assert self.namesrv is not None, "start the name server first"
        port = free_port()
        data = self.root / name
        args = [
            "broker",
            "--name",
            name,
            "--port",
            str(port),
            "--namesrv",
            self.namesrv.address,
            "--data",
            str(data),
            "--flush",
            flush,
            *_grpc_args(extra_args),
        ]
        process = Process(name, args, port, self.root / f"{name}.log", extra={"data": data})
        self.processes.append(process.start())
        return process

    def start_standalone(
        self, *, flush: str = "async", extra_args: list[str] | None = None
    ) -> Process:
        port, namesrv_port = free_port(), free_port()
        args = [
            "standalone",
            "--port",
            str(port),
            "--namesrv-port",
            str(namesrv_port),
            "--data",
            str(self.root / "standalone"),
            "--flush",
            flush,
            *_grpc_args(extra_args),
        ]
        process = Process(
            "standalone",
            args,
            port,
            self.root / "standalone.log",
            extra={"namesrv_port": namesrv_port, "data": self.root / "standalone"},
        )
        self.processes.append(process.start())
        return process
