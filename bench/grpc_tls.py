"""What TLS and the permissive port's sniffing front cost on the gRPC front-end.

    python3 bench/grpc_tls.py [--calls 3000]

Three `pocketmq standalone` processes (temporary data folders), one after the other, one per `--grpc-tls`
mode; against each, one grpcio client (sync stub, one channel) makes --calls sequential
QueryRoute calls for an unknown topic (answered at once: the call is all gRPC and transport, no
broker work), after 200 calls of warm-up. Rows:

  off plaintext          grpc's own plaintext port: the ceiling
  enforcing TLS          grpc's own TLS port (the self-signed certificate)
  permissive plaintext   through the sniffing front to the loopback plaintext listener
  permissive TLS         through the sniffing front to the loopback TLS listener
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from pocketmq.broker.grpc.stubs import definition_pb2, service_pb2, service_pb2_grpc

WARM_UP = 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(mode: str, data: Path) -> tuple[subprocess.Popen[str], int]:
    grpc_port = free_port()
    args = ["--port", str(free_port()), "--namesrv-port", str(free_port()), "--data", str(data)]
    process = subprocess.Popen(
        [sys.executable, "-m", "pocketmq.cli", "standalone", *args]
        + ["--grpc-port", str(grpc_port), "--grpc-tls", mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "ready" in line:
            return process, grpc_port
    raise RuntimeError(f"pocketmq standalone --grpc-tls {mode} did not start")


def rate(port: int, credentials: Any, calls: int) -> float:
    target = f"127.0.0.1:{port}"
    channel = (
        grpc.secure_channel(target, credentials)
        if credentials is not None
        else grpc.insecure_channel(target)
    )
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="nope"))
        for _ in range(WARM_UP):
            stub.QueryRoute(request, timeout=5)
        began = time.perf_counter()
        for _ in range(calls):
            stub.QueryRoute(request, timeout=5)
        return calls / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    for mode in ("off", "enforcing", "permissive"):
        data = Path(tempfile.mkdtemp(prefix="pocketmq-tls-bench-"))
        process, port = start(mode, data)
        try:
            if mode != "enforcing":
                rows.append((f"{mode} plaintext", rate(port, None, args.calls)))
            if mode != "off":
                root = (data / "tls" / "pocketmq-cert.pem").read_bytes()
                credentials = grpc.ssl_channel_credentials(root_certificates=root)
                rows.append((f"{mode} TLS", rate(port, credentials, args.calls)))
        finally:
            process.terminate()
            process.wait()
            shutil.rmtree(data, ignore_errors=True)
    ceiling = rows[0][1]
    for name, value in rows:
        print(f"{name:22s} {value:8.0f} calls/s  {value / ceiling:6.1%}")


if __name__ == "__main__":
    main()
