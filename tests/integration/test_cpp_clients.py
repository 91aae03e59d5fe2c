"""rocketmq-client-cpp against pocketmq (issue 16): the three Python clients on PyPI that wrap
it, each run in a subprocess (a C library: a crash must not take pytest down) against a real
``pocketmq standalone``; and the exact heartbeat bytes of the issue as a raw frame, on the
broker's port and on its VIP channel (port - 2).

The three clients install the same ``rocketmq`` package, so they cannot share a virtualenv (nor
the ``test`` extra): each is installed with ``pip --target`` into a cache directory of its own,
once per machine, and the test skips with pip's reason when that fails (no wheel here, no
network). Apache's rocketmq-client-python 2.0.0 ships no library; it loads the one beside its
ffi.py, so rocketmq-python-cvs's librocketmq.so (rocketmq-client-cpp 2.1.0) is put there.

The cases (cpp_clients/driver.py): send and consume, orderly, tag expressions, delay levels,
and (a broker of their own each) ACL signatures with ``set_session_credentials`` and Apache's
transaction check-back under a manual clock. None of the three has a SQL92 or TLS API
(docs/clients.md).
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
from typing import Any

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
    *((client, case) for client in CLIENTS for case in ("plain", "orderly", "tags", "delay")),
    ("apache-2.0.0", "transaction"),
]
ACL_ACCOUNT = ("cpp-app", "cpp-secret")
ACL_FILE = f"""\
accounts:
  - accessKey: {ACL_ACCOUNT[0]}
    secretKey: {ACL_ACCOUNT[1]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: PUB|SUB
    topicPerms: [{", ".join(f"CppAcl_{i}=PUB|SUB" for i in range(len(CLIENTS)))}]
  - accessKey: ops
    secretKey: ops-secret
    admin: true
"""

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


def run_driver(
    broker: Process, client: str, topic: str, case: str, cwd: Path, **env: str
) -> dict[str, Any]:
    namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
    environment = {
        **os.environ,
        "PYTHONPATH": str(_client_path(client)),
        "CLIENT_WAIT_S": "40",
        **env,
    }
    try:
        done = subprocess.run(
            [sys.executable, str(DRIVER), namesrv, topic, case, "7" if case == "tags" else "4"],
            capture_output=True,
            text=True,
            timeout=90,
            env=environment,
            cwd=cwd,  # the C library writes its logs under $HOME; keep crumbs here
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{client} {case} hung: {error.stdout!r}\nbroker:\n{broker.log_tail()}")
    assert done.returncode == 0, f"{client} {case}: {done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(("client", "case"), CASES)
def test_cpp_client(standalone: Process, client: str, case: str, tmp_path: Path) -> None:
    topic = f"Cpp_{client.replace('.', '_').replace('-', '_')}_{case}"
    result = run_driver(standalone, client, topic, case, tmp_path)
    assert sorted(set(result["received"])) == sorted(result["sent"]), result
    if case == "transaction":
        assert result["sent"] == ["m0", "m2"]  # the rolled-back m1 and m3 never arrive
    if case == "orderly":
        assert result["received"][: len(result["sent"])] == result["sent"]  # one queue, in order
    if case == "delay":  # level 1 is 1 s: stored again (store timestamp) no earlier
        assert len(result["delays"]) >= 4 and min(result["delays"]) >= 900, result
    if case == "tags":
        # 7 messages tagged A B C A B C A through one queue, subscribed as "TagA || TagC": the
        # orderly consumer has the last one, so a TagB one let through would be in already
        assert result["sent"] == ["m0", "m2", "m3", "m5", "m6"]
        assert result["received"] == result["sent"], result
        assert result["tags"] == ["TagA", "TagC", "TagA", "TagC", "TagA"]


@pytest.fixture(scope="module")
def acl_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    root = tmp_path_factory.mktemp("cpp-acl")
    (root / "plain_acl.yml").write_text(ACL_FILE)
    with Cluster(root) as cluster:
        broker = cluster.start_standalone(extra_args=["--acl-file", str(root / "plain_acl.yml")])
        for i in range(len(CLIENTS)):
            created = pocketmq(
                "topic", "create", "--topic", f"CppAcl_{i}", "--namesrv",
                f"127.0.0.1:{broker.extra['namesrv_port']}",
                "--access-key", "ops", "--secret-key", "ops-secret",
            )  # fmt: skip
            assert created.returncode == 0, created.stderr
        yield broker


@pytest.mark.parametrize("client", list(CLIENTS))
def test_cpp_client_acl_signature(acl_standalone: Process, client: str, tmp_path: Path) -> None:
    """``set_session_credentials`` of a non-admin plain_acl account: sends and consumes; the
    same key with a wrong secret is refused (at the name server, its first request)."""
    topic = f"CppAcl_{list(CLIENTS).index(client)}"
    ak, sk = ACL_ACCOUNT
    result = run_driver(acl_standalone, client, topic, "acl", tmp_path, ACL_AK=ak, ACL_SK=sk)
    # the send with the wrong secret failed (the right one then gets the route the wrong one
    # was refused); the broker logs why, once per address and second
    assert result["refused"], result
    assert sorted(set(result["received"])) == sorted(result["sent"]) == ["m0", "m1", "m2", "m3"]
    log = acl_standalone.log_path.read_text(errors="replace")
    assert f"signature check failed for AccessKey {ak}" in log, acl_standalone.log_tail()


def test_cpp_transaction_check_back(tmp_path: Path) -> None:
    """Apache's TransactionMQProducer leaves every transaction UNKNOWN; once the broker's manual
    clock passes the transaction timeout, CHECK_TRANSACTION_STATE reaches the producer's
    checker over its connection, and its COMMIT / ROLLBACK answers decide what is delivered."""
    with Cluster(tmp_path) as cluster:
        broker = cluster.start_standalone(extra_args=["--clock", "manual"])
        namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
        env = {**os.environ, "PYTHONPATH": str(_client_path("apache-2.0.0")), "CLIENT_WAIT_S": "40"}
        app = subprocess.Popen(
            [sys.executable, str(DRIVER), namesrv, "CppCheck", "check", "4"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        try:
            assert app.stdout is not None
            assert app.stdout.readline().strip() == "SENT", app.stderr and app.stderr.read()
            # past the 6 s transaction timeout; again by a check interval (30 s) while the
            # checks have not all come (a producer not yet known to the broker is skipped)
            for step in ("10s", "30s", "30s", "30s"):
                advanced = pocketmq("time", "advance", step, "--broker", broker.address)
                assert advanced.returncode == 0, advanced.stderr
                try:
                    app.wait(timeout=15)
                    break
                except subprocess.TimeoutExpired:
                    continue
            out, err = app.communicate(timeout=60)
        finally:
            if app.poll() is None:
                app.kill()
        assert app.returncode == 0, err[-2000:]
        result = json.loads(out.strip().splitlines()[-1])
        assert result["checked"] == ["m0", "m1", "m2", "m3"], (result, broker.log_tail())
        assert result["sent"] == ["m0", "m2"]  # the checker committed these, rolled back m1, m3
        assert sorted(set(result["received"])) == ["m0", "m2"], result


def pocketmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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
