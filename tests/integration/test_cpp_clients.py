"""rocketmq-client-cpp against pocketmq (issue 16): the three Python clients on PyPI that wrap
it, each run in a subprocess (a C library: a crash must not take pytest down) against a real
``pocketmq standalone``; and the exact heartbeat bytes of the issue as a raw frame, on the
broker's port and on its VIP channel (port - 2).

The three clients install the same ``rocketmq`` package, so they cannot share a virtualenv (nor
the ``test`` extra): each is installed with ``pip --target`` into a cache directory of its own,
once per machine, and the test skips with pip's reason when that fails (no wheel here, no
network). Apache's rocketmq-client-python 2.0.0 ships no library; it loads the one beside its
ffi.py, so rocketmq-python-cvs's librocketmq.so (rocketmq-client-cpp 2.1.0) is put there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pocketmq.broker.app import Broker
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.protocol import (
    FrameDecoder,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    encode_frame,
)
from pocketmq.broker.protocol.headers import ConsumerListBody, decode_json_body
from tests.integration.cluster import Cluster, Process

DRIVER = Path(__file__).parent / "cpp_clients" / "driver.py"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pocketmq-test-clients"
CPP_21 = "rocketmq-python-cvs==2.1.0.3"  # bundles rocketmq-client-cpp 2.1.0
CLIENTS = {
    "rocketmq-0.4.4": "rocketmq==0.4.4",  # bundles rocketmq-client-cpp 1.x
    "cvs-2.1.0.3": CPP_21,
    "apache-2.0.0": "rocketmq-client-python==2.0.0",  # no library of its own
}
# Apache's API has transactions; the 1.x-era API (rocketmq, cvs) has none.
CASES = [
    ("rocketmq-0.4.4", "plain"),
    ("rocketmq-0.4.4", "orderly"),
    ("cvs-2.1.0.3", "plain"),
    ("cvs-2.1.0.3", "orderly"),
    ("apache-2.0.0", "plain"),
    ("apache-2.0.0", "orderly"),
    ("apache-2.0.0", "transaction"),
]

# The HEART_BEAT body of the issue, byte for byte as rocketmq-client-cpp writes it.
ISSUE_BODY = (
    b'{"clientID":"10.0.0.7@4242","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
    b'"groupName":"cpp-group","messageModel":1,"subscriptionDataSet":[{"subString":"*",'
    b'"subVersion":"1795513605824","topic":"TopicTest"}]}],"producerDataSet":[]}\n'
)


def _install(spec: str) -> Path:
    """``spec`` in a --target directory of its own (cached); skip with pip's reason if it fails."""
    target = CACHE / spec.replace("==", "-")
    if (target / "rocketmq" / "client.py").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), spec],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        pytest.skip(f"{spec} does not install here: {done.stderr.strip()[-300:]}")
    return target


def _client_path(name: str) -> Path:
    target = _install(CLIENTS[name])
    library = target / "rocketmq" / "librocketmq.so"
    if not library.exists():  # Apache's package: the 2.1.0 library beside its ffi.py
        shutil.copy(_install(CPP_21) / "rocketmq" / "librocketmq.so", library)
    return target


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    with Cluster(tmp_path_factory.mktemp("cpp")) as cluster:
        yield cluster.start_standalone()


@pytest.mark.parametrize(("client", "case"), CASES)
def test_cpp_client(standalone: Process, client: str, case: str, tmp_path: Path) -> None:
    path = _client_path(client)
    namesrv = f"127.0.0.1:{standalone.extra['namesrv_port']}"
    topic = f"Cpp_{client.replace('.', '_').replace('-', '_')}_{case}"
    env = {**os.environ, "PYTHONPATH": str(path), "CLIENT_WAIT_S": "40"}
    try:
        done = subprocess.run(
            [sys.executable, str(DRIVER), namesrv, topic, case, "4"],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            cwd=tmp_path,  # the C library writes its logs under $HOME; keep crumbs here
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{client} {case} hung: {error.stdout!r}\nbroker:\n{standalone.log_tail()}")
    assert done.returncode == 0, f"{client} {case}: {done.stderr[-2000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(set(result["received"])) == sorted(result["sent"]), result
    if case == "transaction":
        assert result["sent"] == ["m0", "m2"]  # the rolled-back m1 and m3 never arrive
    if case == "orderly":
        assert result["received"][: len(result["sent"])] == result["sent"]  # one queue, in order


async def call(address: str, *commands: RemotingCommand) -> list[RemotingCommand]:
    """Requests one after the other on one fresh connection, and their answers (the broker's
    own requests, such as NOTIFY_CONSUMER_IDS_CHANGED after a heartbeat, are passed over)."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    decoder = FrameDecoder()
    answers = []
    try:
        for opaque, command in enumerate(commands, 1):
            command.opaque = opaque
            writer.write(encode_frame(command))
            while len(answers) < opaque:
                data = await reader.read(65536)
                assert data, "the broker closed the connection"
                answers += [frame for frame in decoder.feed(data) if frame.is_response]
        return answers
    finally:
        writer.close()
        await writer.wait_closed()


async def test_issue_heartbeat_bytes_register_the_consumer_on_both_ports() -> None:
    async with Broker(BrokerConfig(port=0)) as broker:
        assert broker.vip_port is not None and broker.vip_port != broker.config.port
        for address in (f"127.0.0.1:{broker.vip_port}", broker.config.address):
            beat, listing = await call(
                address,
                RemotingCommand(code=RequestCode.HEART_BEAT, body=ISSUE_BODY),
                RemotingCommand(
                    code=RequestCode.GET_CONSUMER_LIST_BY_GROUP,
                    ext_fields={"consumerGroup": "cpp-group"},
                ),
            )
            assert beat.code == ResponseCode.SUCCESS, beat.remark
            assert listing.code == ResponseCode.SUCCESS, listing.remark
            body = decode_json_body(listing.body or b"{}", ConsumerListBody)
            assert body.consumer_id_list == ["10.0.0.7@4242"]


async def test_vip_channel_can_be_turned_off() -> None:
    async with Broker(BrokerConfig(port=0, vip_channel=False)) as broker:
        assert broker.vip_port is None


async def test_refused_heartbeat_is_logged_with_the_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with Broker(BrokerConfig(port=0, vip_channel=False)) as broker:
        with caplog.at_level(logging.WARNING, logger="pocketmq.broker"):
            (answer,) = await call(
                broker.config.address,
                RemotingCommand(code=RequestCode.HEART_BEAT, body=b'{"clientID":7,"x":[}'),
            )
        assert answer.code == ResponseCode.SYSTEM_ERROR
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and "from 127.0.0.1:" in refused[0], caplog.text
