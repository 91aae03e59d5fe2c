"""``pocketmq standalone -c broker.conf`` with a real RocketMQ properties file, checked through
the SDK; POCKETMQ_* variables and flags over the file; unknown keys warned; a bad value exit 2
with file:line; GET/UPDATE_BROKER_CONFIG (26/25) through raw frames and through ``Admin``; the
change saved into the file; ``--log-level``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.properties import parse_properties
from pocketmq.client import Admin, Message, Producer
from pocketmq.client.errors import BrokerSystemError, NoPermissionError, TopicNotExistError
from tests.integration.cluster import Process, free_port
from tests.integration.raw import RawClient

CONF = """\
# a broker.conf as RocketMQ users write it
brokerClusterName = ConfCluster
brokerName=conf-broker
listenPort : {port}
storePathRootDir={data}
flushDiskType=SYNC_FLUSH
messageDelayLevel=2s \\
    7s
fileReservedTime=48
brokerRole=ASYNC_MASTER
someTypo=1
"""


def _start(tmp_path: Path, conf: Path, *extra: str) -> Process:
    namesrv_port = free_port()
    args = ["standalone", "-c", str(conf), "--namesrv-port", str(namesrv_port), "--no-grpc"]
    args += ["--no-http", *extra]
    process = Process("standalone", args, 0, tmp_path / "standalone.log")
    process.extra["namesrv"] = f"127.0.0.1:{namesrv_port}"
    return process.start()


def _write_conf(tmp_path: Path, port: int, extra: str = "") -> Path:
    conf = tmp_path / "broker.conf"
    conf.write_text(CONF.format(port=port, data=tmp_path / "store") + extra)
    return conf


async def test_standalone_runs_as_the_file_says(tmp_path: Path) -> None:
    port = free_port()
    conf = _write_conf(tmp_path, port)
    process = _start(tmp_path, conf, "--clock", "manual")
    try:
        assert f"127.0.0.1:{port}" in process.ready_line
        namesrv = str(process.extra["namesrv"])
        async with Admin(namesrv) as admin:
            cluster = await admin.cluster_info()
            assert set(cluster.cluster_addr_table) == {"ConfCluster"}
            settings = (await admin.broker_config())["conf-broker"]
            assert settings["listenPort"] == str(port)
            assert settings["flushDiskType"] == "SYNC_FLUSH"
            assert settings["messageDelayLevel"] == "2s 7s"
            assert settings["fileReservedTime"] == "48"
            assert settings["storePathRootDir"] == str(tmp_path / "store")
            assert settings["brokerConfigPath"] == str(conf)
            # the delay levels are the file's: level 2 is 7 s on the manual clock
            async with Producer("conf-producer", namesrv=namesrv) as producer:
                await producer.send(Message(topic="ConfDelayed", body=b"x", delay_level=2))
            await admin.advance_clock("6s")
            assert sum(q.max_offset for q in await admin.topic_status("ConfDelayed")) == 0
            await admin.advance_clock("1s")
            assert sum(q.max_offset for q in await admin.topic_status("ConfDelayed")) == 1
        assert (tmp_path / "store" / "commitlog").is_dir()
    finally:
        process.stop()
    log = (tmp_path / "standalone.log").read_text()
    warning = next(line for line in log.splitlines() if "someTypo" in line)
    assert "WARNING" in warning and str(conf) in warning
    assert "someTypo (line 11)" in warning and "brokerRole (line 10: no replication" in warning
    assert "topic ConfDelayed auto-created" in log
    assert "client " in log and " connected from 127.0.0.1:" in log


async def test_environment_over_the_file_and_flags_over_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = _write_conf(tmp_path, free_port())
    monkeypatch.setenv("POCKETMQ_BROKER_NAME", "env-broker")
    monkeypatch.setenv("POCKETMQ_FILE_RESERVED_TIME_H", "6")
    monkeypatch.setenv("POCKETMQ_CLUSTER_NAME", "EnvCluster")
    process = _start(tmp_path, conf, "--cluster", "FlagCluster")
    try:
        async with Admin(str(process.extra["namesrv"])) as admin:
            settings = await admin.broker_config()
            assert set(settings) == {"env-broker"}
            assert settings["env-broker"]["fileReservedTime"] == "6"
            assert settings["env-broker"]["brokerClusterName"] == "FlagCluster"
    finally:
        process.stop()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("listenPort=ten", "listenPort: expected a whole number from 0 to 65535, got 'ten'"),
        (
            "flushDiskType=SOMETIMES",
            "flushDiskType: expected one of SYNC_FLUSH, ASYNC_FLUSH, got 'SOMETIMES'",
        ),
    ],
)
def test_a_bad_value_exits_2_naming_file_and_line(tmp_path: Path, line: str, expected: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(f"# bad\nbrokerName=b\n{line}\n")
    done = subprocess.run(
        [sys.executable, "-m", "pocketmq.cli", "standalone", "-c", str(conf), "--memory"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"pocketmq: {conf}:3: {expected}"


def _update(client: RawClient, body: str) -> RemotingCommand:
    return client.call(RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=body.encode()))


async def test_get_and_update_broker_config_raw_and_through_the_sdk(tmp_path: Path) -> None:
    port = free_port()
    conf = _write_conf(tmp_path, port)
    process = _start(tmp_path, conf, "--log-level", "debug")
    try:
        with RawClient(f"127.0.0.1:{port}") as client:
            got = client.call(RemotingCommand(code=RequestCode.GET_BROKER_CONFIG))
            assert got.code == ResponseCode.SUCCESS
            text = got.body.decode()
            lines = text.splitlines()
            assert lines == sorted(lines) and all("=" in line for line in lines)
            assert parse_properties(text)["brokerName"] == "conf-broker"
            version = json.loads((got.ext_fields or {})["version"])
            assert set(version) == {"timestamp", "counter", "stateVersion"}

            done = _update(client, "fileReservedTime=24\nautoCreateTopicEnable=false\n")
            assert (done.code, done.remark) == (ResponseCode.SUCCESS, None)
            again = client.call(RemotingCommand(code=RequestCode.GET_BROKER_CONFIG))
            settings = parse_properties(again.body.decode())
            assert settings["fileReservedTime"] == "24"
            assert settings["autoCreateTopicEnable"] == "false"
            newer = json.loads((again.ext_fields or {})["version"])
            assert newer["counter"] == version["counter"] + 1

            refused = _update(client, "brokerName=other\nlistenPort=1\nfileReservedTime=1\n")
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "black list: brokerName, listenPort" in (refused.remark or "")
            unknown = _update(client, "noSuchKey=1\n")
            assert unknown.code == ResponseCode.SYSTEM_ERROR
            assert "unknown keys: noSuchKey" in (unknown.remark or "")
            bad = _update(client, "transactionCheckMax=many\n")
            assert bad.code == ResponseCode.SYSTEM_ERROR
            assert "transactionCheckMax: expected a whole number" in (bad.remark or "")
            unchanged = parse_properties(
                client.call(RemotingCommand(code=RequestCode.GET_BROKER_CONFIG)).body.decode()
            )
            assert unchanged["fileReservedTime"] == "24"  # nothing of a refused body applied

        namesrv = str(process.extra["namesrv"])
        async with Admin(namesrv) as admin:
            # autoCreateTopicEnable=false holds at once: a new topic is not created on send
            async with Producer("conf-producer", namesrv=namesrv) as producer:
                with pytest.raises(TopicNotExistError):
                    await producer.send(Message(topic="NeverCreated", body=b"x"))
            assert await admin.update_broker_config({"transactionCheckMax": 3}) == ["conf-broker"]
            settings = (await admin.broker_config(broker="conf-broker"))["conf-broker"]
            assert settings["transactionCheckMax"] == "3"
            with pytest.raises(NoPermissionError, match="listenPort"):
                await admin.update_broker_config({"listenPort": 1})
            with pytest.raises(BrokerSystemError, match="unknown keys: nope"):
                await admin.update_broker_config({"nope": True})
    finally:
        process.stop()
    saved = conf.read_text()
    assert saved.startswith("# a broker.conf as RocketMQ users write it\n")
    assert parse_properties(saved)["fileReservedTime"] == "24"
    assert parse_properties(saved)["transactionCheckMax"] == "3"
    assert parse_properties(saved)["messageDelayLevel"] == "2s 7s"  # other lines untouched
    log = (tmp_path / "standalone.log").read_text()
    assert "broker config updated by 127.0.0.1:" in log
    assert f"fileReservedTime 48 -> 24, autoCreateTopicEnable true -> false; saved to {conf}" in log
    assert " DEBUG pocketmq.remoting: broker: connection from 127.0.0.1:" in log


async def test_live_settings_reach_the_services() -> None:
    """Each live key, changed through UPDATE_BROKER_CONFIG on an embedded broker, is what the
    service that copied it at the start now uses."""
    from pocketmq.broker.app import Broker
    from tests.integration.raw import call

    body = (
        "flushIntervalCommitLog=250\nflushIntervalConsumeQueue=750\nsyncFlushTimeout=900\n"
        "transactionTimeOut=1000\ntransactionCheckInterval=2000\ntransactionCheckMax=4\n"
        "fileReservedTime=0.5\ndeleteWhen=01;13\ndiskMaxUsedSpaceRatio=60\n"
        "diskSpaceCleanForciblyRatio=70\ndiskSpaceWarningLevelRatio=80\n"
        "cleanFileForciblyEnable=true\ndeleteFileBatchMax=3\ntimerMaxDelaySec=60\n"
        "popInFlightMax=7\nenablePropertyFilter=false\nlongPollHoldsMax=9\nlockExpiryMs=1234\n"
        "autoCreateSubscriptionGroup=false\ndefaultTopicQueueNums=2\n"
        "# only a comment line besides\n"
    )
    async with Broker(port=0, store=None) as broker:
        request = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=body.encode())
        response = await call(broker.address, request)
        assert (response.code, response.remark) == (ResponseCode.SUCCESS, None)
        assert (broker.flush.interval_ms, broker.flush.metadata_interval_ms) == (250, 750)
        assert broker.flush.timeout_ms == 900
        transactions = broker.transactions
        assert (transactions.timeout_ms, transactions.check_interval_ms) == (1000, 2000)
        assert transactions.check_max == 4
        policy = broker.retention.policy
        assert policy.file_reserved_time_ms == 1_800_000
        assert policy.deletion_hours() == {1, 13}
        assert (policy.disk_max_used_space_ratio, policy.forcibly_ratio) == (60, 70)
        assert broker.send.disk.warning_ratio == policy.warning_ratio == 80
        assert policy.clean_file_forcibly and policy.delete_file_batch_max == 3
        assert broker.timer.max_delay_ms == 60_000
        assert broker.pop.in_flight_max == 7
        assert broker.pulls.property_filter is False
        assert (broker.holds.holds_max, broker.locks.expiry_ms) == (9, 1234)
        assert broker.groups.auto_create is False
        assert broker.topics.default_queue_nums == 2
        assert broker.topics.create("Fresh").write_queue_nums == 2
        # a body of comments only changes nothing, and succeeds, as in RocketMQ
        comments = RemotingCommand(code=RequestCode.UPDATE_BROKER_CONFIG, body=b"# nothing\n")
        assert (await call(broker.address, comments)).code == ResponseCode.SUCCESS
