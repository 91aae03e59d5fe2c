"""The ``pocketmq`` command as a newcomer types it: the installed console script, its exit
status, its one-line errors, never a traceback."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

# The console script pip put beside this interpreter: the command a user runs.
POCKETMQ = Path(sys.executable).parent / "pocketmq"
UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: connections are refused at once

pytestmark = pytest.mark.skipif(
    not POCKETMQ.exists(), reason="the pocketmq console script is not installed beside python"
)


def pocketmq(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(POCKETMQ), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        input=stdin,
        env={**os.environ, **(env or {})},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def one_line_error(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


class Standalone:
    """``pocketmq standalone`` in memory, on a manual clock, on free ports."""

    def __init__(self, *extra: str) -> None:
        self.process = subprocess.Popen(
            [str(POCKETMQ), "standalone", "--memory", "--no-grpc", "--port", "0"]
            + ["--namesrv-port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        found = re.search(r"name server (\S+), broker (\S+?),", line)
        assert found, line
        self.namesrv, self.broker = found.groups()

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=30)
        return err


@pytest.fixture(scope="module")
def standalone() -> Iterator[Standalone]:
    server = Standalone("--clock", "manual")
    try:
        yield server
    finally:
        assert "Traceback" not in server.stop()


def test_version_and_help_of_one_action() -> None:
    done = pocketmq("--version")
    assert done.returncode == 0 and re.fullmatch(r"pocketmq \S+\n", done.stdout)
    helped = pocketmq("topic", "create", "--help")
    assert helped.returncode == 0
    assert "usage: pocketmq topic create" in helped.stdout and "--queues" in helped.stdout
    assert "status" not in helped.stdout  # the other actions have their own help


def test_every_option_of_every_command_says_what_it_is() -> None:
    import argparse

    from pocketmq.cli import build_parser

    def walk(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}")
            else:
                yield path, action

    missing = [f"{path} {a.dest}" for path, a in walk(build_parser(), "pocketmq") if not a.help]
    assert missing == []


@pytest.mark.parametrize("command", ["topic", "group", "time", "msg", "dlq", "tx", "id", "store"])
def test_every_command_with_actions_takes_them_as_subcommands(command: str) -> None:
    done = pocketmq(command)
    assert done.returncode == 2 and "ACTION" in done.stderr
    assert f"usage: pocketmq {command} [-h]" in pocketmq(command, "--help").stdout


def test_consume_from_an_unreachable_name_server_fails_at_once() -> None:
    started = time.monotonic()
    done = pocketmq("consume", "--topic", "Orders", "--namesrv", UNREACHABLE, timeout=30)
    line = one_line_error(done, 1)
    assert line.startswith(f"pocketmq: cannot reach the name server at {UNREACHABLE}")
    assert time.monotonic() - started < 10


def test_consume_of_a_topic_that_does_not_exist_waits_then_says_so(standalone: Standalone) -> None:
    done = pocketmq(
        "consume", "--topic", "NoSuchTopic", "--timeout", "1", "--namesrv", standalone.namesrv
    )
    assert done.returncode == 1
    waiting, failed = done.stderr.strip().splitlines()
    assert "'NoSuchTopic' has no route yet; waiting up to 1 s" in waiting
    assert "no route for topic 'NoSuchTopic'" in failed and "topic create" in failed


@pytest.mark.parametrize(
    "args",
    [
        ("send", "--topic", "T", "--body", "x"),
        ("topic", "list"),
        ("time", "get"),
        ("tx", "list"),
        ("dlq", "list", "--group", "g"),
        ("msg", "show", "k", "--topic", "T"),
    ],
)
def test_every_client_command_says_an_unreachable_name_server_in_one_line(
    args: tuple[str, ...],
) -> None:
    line = one_line_error(pocketmq(*args, "--namesrv", UNREACHABLE), 1)
    assert line.startswith(f"pocketmq: cannot reach the name server at {UNREACHABLE}: ")


def test_send_of_a_missing_file() -> None:
    line = one_line_error(pocketmq("send", "--topic", "T", "--file", "/no/such/file"), 2)
    assert line == "pocketmq: --file /no/such/file: No such file or directory"


@pytest.mark.parametrize("level", ["debug", "Info", "WARNING", "warn"])
def test_log_levels_in_any_case(level: str) -> None:
    done = pocketmq("topic", "list", "--namesrv", UNREACHABLE, env={"POCKETMQ_LOG_LEVEL": level})
    assert done.returncode == 1 and "cannot reach the name server" in done.stderr


def test_an_unknown_log_level_is_a_usage_error() -> None:
    done = pocketmq("namesrv", "--port", "0", env={"POCKETMQ_LOG_LEVEL": "chatty"})
    line = one_line_error(done, 2)
    assert "POCKETMQ_LOG_LEVEL='chatty' is not a log level" in line and "DEBUG" in line


def test_bad_numbers_are_usage_errors() -> None:
    for args in (("send", "--topic", "T", "--count", "0"), ("standalone", "--port", "99999")):
        done = pocketmq(*args)
        assert done.returncode == 2 and "usage:" in done.stderr


# The read system call's number, as /proc/PID/syscall shows it (x86_64 0, arm64 63).
_READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}.get(os.uname().machine)


def _wait_reading_stdin(pid: int) -> None:
    """Until a thread of ``pid`` is blocked in read(0, ...): a fixed sleep was too short for the
    CLI's start on a loaded machine. Where /proc cannot tell, a generous sleep."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/syscall") as f:
                    fields = f.read().split()
                if _READ_SYSCALL is None:
                    break
                if fields[:2] == [_READ_SYSCALL, "0x0"]:
                    return
        except OSError:
            pass
        if _READ_SYSCALL is None:
            time.sleep(3.0)
            return
        time.sleep(0.05)
    raise AssertionError("pocketmq send never read its standard input")


def _interrupt_send(stdin: int) -> tuple[int, str]:
    process = subprocess.Popen(
        [str(POCKETMQ), "send", "--topic", "T", "--namesrv", UNREACHABLE],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_reading_stdin(process.pid)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=20)
    return process.returncode, err


def test_ctrl_c_while_send_reads_a_pipe() -> None:
    read_end, write_end = os.pipe()
    try:
        status, err = _interrupt_send(read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert status == 130 and err.strip() == "pocketmq: interrupted"


def test_send_from_a_terminal_says_how_to_end_the_body_and_stops_on_ctrl_c() -> None:
    leader, follower = pty.openpty()
    try:
        status, err = _interrupt_send(follower)
    finally:
        os.close(leader)
        os.close(follower)
    assert status == 130 and "Traceback" not in err
    hint, interrupted = err.strip().splitlines()
    assert "reading the body from standard input; end it with Ctrl-D" in hint
    assert interrupted == "pocketmq: interrupted"


def test_consume_prints_text_quoted_and_binary_as_a_bytes_literal(
    standalone: Standalone, tmp_path: Path
) -> None:
    namesrv = ("--namesrv", standalone.namesrv)
    sent = pocketmq("send", "--topic", "Bodies", "--tags", "t", "--body", "hello", *namesrv)
    assert sent.returncode == 0, sent.stderr
    (tmp_path / "body.bin").write_bytes(b"\x00\x01\xff")
    sent = pocketmq("send", "--topic", "Bodies", "--file", str(tmp_path / "body.bin"), *namesrv)
    assert sent.returncode == 0, sent.stderr
    done = pocketmq("consume", "--topic", "Bodies", "--from", "first", "--count", "2", *namesrv)
    assert done.returncode == 0, done.stderr
    bodies = sorted(line.split(" ", 2)[2] for line in done.stdout.splitlines())
    assert bodies == ["'hello'", "b'\\x00\\x01\\xff'"]


def test_the_clock_through_the_name_server_with_iso_times_and_typed_json(
    standalone: Standalone,
) -> None:
    namesrv = ("--namesrv", standalone.namesrv)
    [state] = [
        json.loads(line) for line in pocketmq("time", "get", "--json", *namesrv).stdout.splitlines()
    ]
    assert state["broker"] == "broker-a" and state["addr"] == standalone.broker
    assert type(state["now_ms"]) is int and state["manual"] is True
    assert type(state["fired"]) is int and type(state["pending"]) is int
    readable = pocketmq("time", "advance", "1h", *namesrv)
    assert readable.returncode == 0, readable.stderr
    assert re.fullmatch(
        r"broker=broker-a addr=\S+ now=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z manual=yes "
        r"fired=\d+ pending=\d+\n",
        readable.stdout,
    )
    # --broker overrides the name server's choice, by name or address
    by_name = pocketmq("time", "get", "--broker", "broker-a", "--json", *namesrv)
    by_addr = pocketmq("time", "get", "--broker", standalone.broker, "--json", *namesrv)
    assert json.loads(by_name.stdout)["addr"] == json.loads(by_addr.stdout)["addr"]


def test_broker_errors_carry_rocketmqs_name_and_number(standalone: Standalone) -> None:
    namesrv = ("--namesrv", standalone.namesrv)
    line = one_line_error(pocketmq("time", "set", "0", *namesrv), 1)
    assert line == "pocketmq: INVALID_PARAMETER (29): the manual clock never goes backwards"
    line = one_line_error(pocketmq("msg", "show", "no-such-key", "--topic", "Bodies", *namesrv), 1)
    assert line.startswith("pocketmq: QUERY_NOT_FOUND (22): ")
    line = one_line_error(pocketmq("dlq", "list", "--group", "nobody", *namesrv), 1)
    assert line.startswith("pocketmq: TOPIC_NOT_EXIST (17): ")


def test_topic_status_shows_iso_times_and_json_keeps_milliseconds(standalone: Standalone) -> None:
    namesrv = ("--namesrv", standalone.namesrv)
    assert (
        pocketmq("topic", "create", "--topic", "Timed", "--queues", "1", *namesrv).returncode == 0
    )
    assert pocketmq("send", "--topic", "Timed", "--body", "x", *namesrv).returncode == 0
    header, row = pocketmq("topic", "status", "--topic", "Timed", *namesrv).stdout.splitlines()
    assert header.split() == [
        "broker_name", "queue_id", "min_offset", "max_offset", "last_update", "message_type"
    ]  # fmt: skip
    assert re.fullmatch(r"broker-a\s+0\s+0\s+1\s+\d{4}-\d\d-\d\dT[\d:.]+Z\s+NORMAL", row)
    [raw] = pocketmq("topic", "status", "--topic", "Timed", "--json", *namesrv).stdout.splitlines()
    assert type(json.loads(raw)["last_update_ms"]) is int


def test_store_inspect_of_a_missing_folder_an_empty_folder_and_a_just_started_store(
    tmp_path: Path,
) -> None:
    line = one_line_error(pocketmq("store", "inspect", str(tmp_path / "nope")), 2)
    assert line == f"pocketmq store inspect: no such folder: {tmp_path / 'nope'}"
    line = one_line_error(pocketmq("store", "inspect", str(tmp_path)), 2)
    assert "not a RocketMQ or pocketmq store" in line
    data = tmp_path / "data"
    server = subprocess.Popen(
        [str(POCKETMQ), "standalone", "--data", str(data), "--no-grpc", "--port", "0"]
        + ["--namesrv-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None and "ready" in server.stdout.readline()
        done = pocketmq("store", "inspect", str(data))
        assert done.returncode == 0 and done.stdout == f"-- empty store: no records in {data}\n"
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    # a clean stop says nothing that reads like an error
    assert "not registered" not in err and "Traceback" not in err and "ERROR" not in err


def test_store_inspect_with_a_limit_judges_only_what_it_read(tmp_path: Path) -> None:
    from pocketmq.store.message_store import MessageStore, PutMessage

    with MessageStore.open(tmp_path) as store:
        for body in (b"one", b"two", b"three"):
            store.put(PutMessage(topic="T", body=body))
    done = pocketmq("store", "inspect", str(tmp_path), "--limit", "1")
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith("-- 1 record read (stopped after --limit 1), ")
    summary = json.loads(
        pocketmq("store", "inspect", str(tmp_path), "--limit", "2", "--json").stdout.splitlines()[
            -1
        ]
    )["summary"]
    assert summary["records"] == 2 and summary["shown"] == 2 and summary["stopped_at_limit"]


def test_a_poison_reason_reaches_dlq_list_and_msg_show(standalone: Standalone) -> None:
    import asyncio

    from pocketmq.client import Message, Producer, PushConsumer

    namesrv = ("--namesrv", standalone.namesrv)

    async def poison_one() -> str:
        async with Producer("poison-app", namesrv=standalone.namesrv) as producer:
            sent = await producer.send(Message(topic="Payloads", body=b"{broken"))
        consumer = PushConsumer("payload-readers", namesrv=standalone.namesrv, consume_from="first")
        consumer.subscribe("Payloads", "*")
        async with consumer:
            async for message in consumer:
                await consumer.poison(message, "bad payload")
                break
        return sent.offset_msg_id

    offset_msg_id = asyncio.run(poison_one())
    [shown] = map(
        json.loads, pocketmq("msg", "show", offset_msg_id, "--json", *namesrv).stdout.splitlines()
    )
    assert shown["state"] == "poisoned" and shown["state_group"] == "payload-readers"
    assert shown["state_reason"] == (
        "dead-lettered to %DLQ%payload-readers by the consumer: bad payload"
    )
    listed = pocketmq("dlq", "list", "--group", "payload-readers", *namesrv)
    assert listed.returncode == 0 and "body                {broken" in listed.stdout
    assert (
        "dead_letter_reason  dead-lettered to %DLQ%payload-readers by the consumer: bad payload"
        in listed.stdout
    )


def _patch_first_record(root: Path, find: bytes, replace: bytes) -> None:
    segment = root / "commitlog" / f"{0:020d}"
    data = segment.read_bytes()
    assert find in data
    segment.write_bytes(data.replace(find, replace, 1))


def test_store_inspect_reports_a_record_it_cannot_decode_and_goes_on(tmp_path: Path) -> None:
    from pocketmq.store.message_store import MessageStore, PutMessage
    from pocketmq.store.record import Host

    with MessageStore.open(tmp_path) as store:
        store.put(PutMessage(topic="T", body=b"one", properties={"KEYS": "key-1"}))
        store.put(PutMessage(topic="T", body=b"two", properties={"KEYS": "key-2"}))
        store.put(PutMessage(topic="T", body=b"three", born_host=Host(b"\x7f\x00\x00\x01", 1)))
    _patch_first_record(tmp_path, b"key-1", b"key\xff1")  # properties that are not UTF-8
    done = pocketmq("store", "inspect", str(tmp_path), "--json")
    assert done.returncode == 1  # damage read: status 1, and every record still listed
    *rows, summary = map(json.loads, done.stdout.splitlines())
    assert [row["body_preview"] for row in rows] == ["one", "two", "three"]
    assert "not UTF-8" in rows[0]["problems"][0] and rows[1]["problems"] == []
    assert summary["summary"]["undecodable_records"] == 1
    text = pocketmq("store", "inspect", str(tmp_path))
    assert "PROBLEM=" in text.stdout and "1 not UTF-8" in text.stdout


def test_store_inspect_of_a_store_host_no_offset_id_can_carry(tmp_path: Path) -> None:
    from pocketmq.store.config import StoreConfig
    from pocketmq.store.message_store import MessageStore, PutMessage
    from pocketmq.store.record import Host

    config = StoreConfig(store_host=Host(b"\x7f\x00\x00\x01", 70000))  # a port over 65535
    with MessageStore.open(tmp_path, config=config) as store:
        store.put(PutMessage(topic="T", body=b"one"))
    done = pocketmq("store", "inspect", str(tmp_path), "--json")
    [row, _summary] = map(json.loads, done.stdout.splitlines())
    assert row["offset_msg_id"] is None and "port out of range" in row["problems"][0]
    assert row["body_preview"] == "one"


def test_a_damaged_config_file_with_no_backup_stops_the_start_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "consumerOffset.json").write_text('{"offsetTablf":{"T@g":{"0":3}}}')
    done = pocketmq(
        "standalone", "--data", str(tmp_path), "--no-grpc", "--port", "0", "--namesrv-port", "0"
    )
    assert done.returncode == 1
    line = done.stderr.strip().splitlines()[-1]  # after the server's INFO log lines
    assert line.startswith("pocketmq: cannot start: ") and "consumerOffset.json is damaged" in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "INFO pocketmq.broker: no access control: open to every client on this machine"),
        (
            ("--access-key", "ak", "--secret-key", "sk"),
            "INFO pocketmq.broker: ACL on (1 account(s), 1 admin): the remoting port",
        ),
    ],
)
def test_the_broker_says_at_start_who_may_connect(args: tuple[str, ...], said: str) -> None:
    server = Standalone(*args)
    err = server.stop()
    assert said in err and "Traceback" not in err
