"""The image for non-Python users, checked without a Docker engine: the Dockerfile's command
runs here as the container would run it (ports moved to free ones), its HEALTHCHECK command
passes against it and fails without it, and ``--advertise HOST:PORT`` makes clients reach the
broker through a mapped port, as Docker's port publishing does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from pocketmq.cli import build_parser
from pocketmq.client import Message, Producer
from pocketmq.ids import decode_message_id

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.checkout  # reads the Dockerfile and compose file of the checkout


def _final_stage() -> str:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return re.split(r"^FROM .*$", text, flags=re.MULTILINE)[-1]


def _instruction(name: str) -> str:
    found = re.findall(rf"^{name}\s+(.*)$", _final_stage(), flags=re.MULTILINE)
    assert len(found) == 1, f"the image has {len(found)} {name} lines"
    return found[0].strip()


def image_command() -> list[str]:
    entrypoint = json.loads(_instruction("ENTRYPOINT"))
    command = json.loads(_instruction("CMD"))
    assert entrypoint == ["pocketmq"]
    return command


def health_command() -> list[str]:
    line = _instruction("HEALTHCHECK")
    options, _, command = line.partition(" CMD ")
    assert "--interval=" in options and "--start-period=" in options
    return json.loads(command)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _health(port: int) -> subprocess.CompletedProcess[str]:
    command = health_command()
    assert command[0] == "python" and "http://127.0.0.1:8082/health" in command[-1]
    command = [sys.executable, *command[1:-1], command[-1].replace(":8082/", f":{port}/")]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_the_command_and_health_check_agree() -> None:
    args = build_parser().parse_args(image_command())
    assert args.command == "standalone" and args.host == "0.0.0.0"
    assert args.http_port is None and not args.no_http  # the HTTP front on its default, 8082
    assert args.data == "/data"


@contextlib.asynccontextmanager
async def _port_mapping(target: int) -> AsyncIterator[tuple[int, list[int]]]:
    """A published port: connections to the returned port are relayed to ``target``."""
    opened: list[int] = []

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        except OSError:
            writer.close()
            return
        opened.append(1)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], opened
    finally:
        server.close()


async def test_the_image_command_runs_healthy_and_advertises_a_mapped_port(
    tmp_path: Path,
) -> None:
    broker_port, namesrv_port, http_port = _free_port(), _free_port(), _free_port()
    assert _health(http_port).returncode != 0  # nothing there yet: unhealthy
    async with _port_mapping(broker_port) as (published, opened):
        # the image's command, with the ports a test machine has free and the mapped port told
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "pocketmq.cli",
            *image_command(),
            "--data",
            str(tmp_path / "data"),
            "--port",
            str(broker_port),
            "--namesrv-port",
            str(namesrv_port),
            "--grpc-port",
            "0",
            "--http-port",
            str(http_port),
            "--advertise",
            f"127.0.0.1:{published}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            assert process.stdout is not None
            ready = await asyncio.wait_for(process.stdout.readline(), 120)
            # the line a Testcontainers log wait strategy matches
            assert b"pocketmq standalone ready" in ready, ready
            assert f"broker 127.0.0.1:{published}".encode() in ready
            healthy = await asyncio.to_thread(_health, http_port)
            assert healthy.returncode == 0, healthy.stderr
            async with Producer("app", namesrv=f"127.0.0.1:{namesrv_port}") as producer:
                result = await producer.send(Message(topic="Orders", body=b"through the map"))
            assert opened, "the client did not go through the advertised (mapped) port"
            assert decode_message_id(result.offset_msg_id)["port"] == published
        finally:
            process.terminate()
            await asyncio.wait_for(process.wait(), 60)
    assert _health(http_port).returncode != 0  # stopped: unhealthy


def test_compose_health_checks_ask_each_broker_its_own_port() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    image_check = health_command()
    parser = build_parser()
    for name, service in compose["services"].items():
        if "entrypoint" in service:
            continue  # the Spark stage: no health check of its own
        args = parser.parse_args(service["command"])
        check = service.get("healthcheck")
        if args.command == "namesrv":
            assert check == {"disable": True}, f"{name}: a name server has no HTTP front"
            continue
        test = check["test"] if check else ["CMD", *image_check]
        assert test[0] == "CMD"
        port = args.http_port if args.http_port is not None else 8082
        assert f"http://127.0.0.1:{port}/health" in test[-1], f"{name} checks the wrong port"


@pytest.mark.parametrize(
    ("given", "host", "port"),
    [
        ("localhost:32771", "localhost", 32771),
        ("broker-a", "broker-a", None),
        ("[::1]:10911", "::1", 10911),
        ("::1", "::1", None),
    ],
)
def test_advertise_takes_a_host_or_host_and_port(given: str, host: str, port: int | None) -> None:
    from pocketmq.cli.servers import _config

    args = build_parser().parse_args(["standalone", "--advertise", given, "--port", "10911"])
    config = _config(args, [])
    assert (config.advertised_host, config.advertised_port, config.port) == (host, port, 10911)


@pytest.mark.parametrize(
    ("given", "says"),
    [("localhost:0", "'0' is not a port"), ("h:70000", "is not a port"), (":5", "no host")],
)
def test_advertise_refuses_a_bad_port(given: str, says: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", "standalone", "--advertise", given],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
