"""Apache RocketMQ's official Node.js 5.x client (npm ``rocketmq-client-nodejs``, pinned in
``tests/integration/node/package-lock.json``) against pocketmq's gRPC front-end: its Producer
sends messages with a tag, keys and user properties, its SimpleConsumer receives and acks them
(``tests/integration/node/send_receive.js``), and pocketmq's own SDK reads the same messages
back over remoting.

Needs ``node`` and ``npm`` on PATH (skipped otherwise). The locked dependencies are installed
once with ``npm ci`` into ``$XDG_CACHE_HOME/pocketmq-node-test/<hash>/`` (``~/.cache`` by
default, outside the repository) and reused while the lockfile, Node.js and platform stay the
same; the first run needs the npm registry.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pocketmq.client import PullConsumer, ReceivedMessage
from tests.integration.cluster import Cluster, Process, free_port

NODE_DIR = Path(__file__).parent / "node"
SCRIPT = NODE_DIR / "send_receive.js"
LOCK_FILES = ("package.json", "package-lock.json")
NPM_CI_TIMEOUT_S = 300
NODE_TIMEOUT_S = 60
COUNT = 12
TOPIC = "NodeJsClientTopic"
GROUP = "NodeJsClientGroup"
TAG = "nodejs"


def _run(args: list[str], *, cwd: Path | None = None, timeout: float) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited with {done.returncode}\n"
            f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}"
        )
    return done.stdout


def node_modules(node: str, npm: str) -> Path:
    """The locked dependencies, installed with ``npm ci`` once per lockfile/Node.js/platform."""
    digest = hashlib.sha256()
    for name in LOCK_FILES:
        digest.update((NODE_DIR / name).read_bytes())
    digest.update(_run([node, "--version"], timeout=30).encode())
    digest.update(f"{sys.platform}-{platform.machine()}".encode())
    cache_root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    target = cache_root / "pocketmq-node-test" / digest.hexdigest()[:20]
    installed = target / "node_modules"
    if (installed / "rocketmq-client-nodejs" / "package.json").is_file():
        return installed
    # Install beside the target, then rename it into place: a half-done install is never
    # reused, and a concurrent run that got there first simply wins.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f"{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for name in LOCK_FILES:
            shutil.copy2(NODE_DIR / name, staging / name)
        started = time.monotonic()
        _run(
            [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=staging,
            timeout=NPM_CI_TIMEOUT_S,
        )
        print(f"\nnpm ci into {target} took {time.monotonic() - started:.1f}s")
        try:
            staging.rename(target)
        except OSError:
            if not (installed / "rocketmq-client-nodejs" / "package.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return installed


@pytest.fixture(scope="module")
def nodejs() -> tuple[str, Path]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("the Node.js client test needs `node` and `npm` on PATH")
    return node, node_modules(node, npm)


def grpc_endpoint(broker: Process) -> str:
    match = re.search(r"grpc (\S+:\d+)", broker.ready_line)
    assert match, f"no gRPC endpoint in {broker.ready_line!r}"
    return match.group(1)


def run_node_client(node: str, modules: Path, endpoint: str, broker: Process) -> dict:
    env = {**os.environ, "NODE_PATH": str(modules)}
    args = [
        node,
        str(SCRIPT),
        "--endpoint",
        endpoint,
        "--topic",
        TOPIC,
        "--group",
        GROUP,
        "--count",
        str(COUNT),
        "--tag",
        TAG,
        "--timeout-ms",
        str((NODE_TIMEOUT_S - 15) * 1000),
    ]
    try:
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=NODE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(
            f"the Node.js client hung for {NODE_TIMEOUT_S}s\nstderr:\n{exc.stderr!r}\n"
            f"broker log:\n{broker.log_tail()}"
        )
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        report = {"error": "the last stdout line is not JSON"}
    assert done.returncode == 0 and report.get("ok"), (
        f"the Node.js client failed (exit {done.returncode}): {report.get('error')}\n"
        f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}\n"
        f"broker log:\n{broker.log_tail()}"
    )
    return report


async def read_topic(namesrv: str, topic: str, expected: int) -> list[ReceivedMessage]:
    """Every message of ``topic`` through pocketmq's SDK (plain pulls over remoting). The
    topic was created through gRPC, so the name server may learn its route a bit later."""
    async with PullConsumer(namesrv=namesrv) as puller, asyncio.timeout(20):
        while True:
            out: list[ReceivedMessage] = []
            try:
                for queue in await puller.queues(topic):
                    offset = await puller.min_offset(queue)
                    while offset < await puller.max_offset(queue):
                        result = await puller.pull(queue, offset, 32)
                        out.extend(result.messages)
                        offset = result.next_offset
            except Exception:  # no route yet
                out = []
            if len(out) >= expected:
                return out
            await asyncio.sleep(0.1)


def test_nodejs_client_sends_and_receives(tmp_path: Path, nodejs: tuple[str, Path]) -> None:
    node, modules = nodejs
    with Cluster(tmp_path) as cluster:
        broker = cluster.start_standalone(
            extra_args=["--grpc-port", str(free_port()), "--grpc-auto-create-topics"]
        )
        started = time.monotonic()
        report = run_node_client(node, modules, grpc_endpoint(broker), broker)
        print(f"\nNode.js client: {report['timings']} ({time.monotonic() - started:.1f}s)")

        sent = report["sent"]
        assert len(sent) == COUNT
        sent_ids = [s["messageId"] for s in sent]
        assert len(set(sent_ids)) == COUNT and all(sent_ids), sent_ids

        received = {r["messageId"]: r for r in report["received"]}
        assert set(received) == set(sent_ids), "received ids differ from the sent ones"
        for message in sent:
            got = received[message["messageId"]]
            assert got["topic"] == TOPIC
            assert got["body"] == message["body"]
            assert got["tag"] == message["tag"] == TAG
            assert got["keys"] == message["keys"]
            assert got["properties"] == message["properties"]
            assert got["corrupted"] is False, "body digest mismatch"
            assert got["deliveryAttempt"] == 1

        # The same messages, read by pocketmq's SDK over remoting.
        namesrv = f"127.0.0.1:{broker.extra['namesrv_port']}"
        stored = asyncio.run(read_topic(namesrv, TOPIC, COUNT))
        by_id = {m.msg_id: m for m in stored}
        assert set(by_id) == set(sent_ids)
        for message in sent:
            got_sdk = by_id[message["messageId"]]
            assert got_sdk.body == message["body"].encode()
            assert got_sdk.tags == TAG
            assert list(got_sdk.keys) == message["keys"]
            assert message["properties"].items() <= dict(got_sdk.properties).items()
