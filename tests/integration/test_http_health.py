"""The HTTP front's health when things are not fine, and its access control, against real
standalone processes: a broker whose disk another process fills answers 503 with the reason
(a tmpfs, so root is needed; skipped elsewhere) and 200 again once space returns; with ACL on,
the API wants an admin account's keys while the probes stay open."""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.cluster import Cluster
from tests.integration.tmpfs import small_tmpfs

TIMEOUT = aiohttp.ClientTimeout(total=30)

DISK_MIB = 64


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path, DISK_MIB) as mount:
        yield mount


async def get(session: aiohttp.ClientSession, path: str, **kw: Any) -> tuple[int, Any]:
    async with session.get(path, **kw) as response:
        return response.status, await response.json()


async def test_a_full_disk_makes_health_503_with_the_reason(small_disk: Path) -> None:
    with Cluster(small_disk.parent) as cluster:
        process = cluster.start_standalone(
            extra_args=["--data", str(small_disk / "store"), "--http-port", "0"]
        )
        async with aiohttp.ClientSession(f"http://{process.http_address}", timeout=TIMEOUT) as http:
            status, body = await get(http, "/health")
            assert (status, body["status"]) == (200, "up"), body
            # another process takes the disk up to 95 %
            total, used, _ = shutil.disk_usage(small_disk)
            filler = small_disk / "other-process.bin"
            filler.write_bytes(bytes(int(total * 0.95) - used))
            status, body = await get(http, "/health")
            assert status == 503 and body["status"] == "down", body
            assert body["checks"]["writes"].startswith("refused: disk usage")
            assert any(r.startswith("writes:") for r in body["reasons"])
            assert str(small_disk) not in str(body)  # no server path in a public answer
            status, ready = await get(http, "/ready")
            assert status == 503 and ready["status"] == "not_ready"
            filler.unlink()
            status, body = await get(http, "/health")
            assert (status, body["checks"]["writes"]) == (200, "ok"), body


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with Cluster(tmp_path_factory.mktemp("http-acl")) as cluster:
        process = cluster.start_standalone(
            extra_args=[
                "--memory",
                "--http-port",
                "0",
                "--access-key",
                "ops",
                "--secret-key",
                "ops-secret",
            ]
        )
        yield process.http_address


def basic(access_key: str, secret_key: str) -> dict[str, str]:
    token = base64.b64encode(f"{access_key}:{secret_key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


async def test_with_acl_the_api_wants_an_admin_account(guarded: str) -> None:
    async with aiohttp.ClientSession(f"http://{guarded}", timeout=TIMEOUT) as http:
        assert (await get(http, "/health"))[0] == 200
        async with http.get("/metrics") as response:
            assert response.status == 200
        status, body = await get(http, "/api/broker")
        assert status == 401 and body["error"]["code"] == "unauthorized"
        status, body = await get(http, "/api/broker", headers=basic("ops", "wrong"))
        assert status == 401
        status, body = await get(http, "/api/broker", headers={"Authorization": "Basic !!"})
        assert status == 401
        status, body = await get(http, "/api/broker", headers=basic("ops", "ops-secret"))
        assert status == 200 and body["broker_name"] == "broker-a"


async def test_advancing_a_system_clock_is_a_conflict(guarded: str) -> None:
    async with (
        aiohttp.ClientSession(
            f"http://{guarded}", timeout=TIMEOUT, headers=basic("ops", "ops-secret")
        ) as http,
        http.post("/api/clock/advance", json={"duration": "1h"}) as response,
    ):
        body = await response.json()
        assert response.status == 409, body
        assert "--clock manual" in body["error"]["message"]


async def test_a_front_that_stopped_listening_makes_health_503() -> None:
    from pocketmq.broker.app import Broker
    from pocketmq.broker.config import BrokerConfig

    config = BrokerConfig(port=0, http_port=0, vip_channel=False)
    async with Broker(config) as broker:
        assert broker.http_address is not None
        async with aiohttp.ClientSession(f"http://{broker.http_address}", timeout=TIMEOUT) as http:
            assert (await get(http, "/health"))[0] == 200
            await broker.server.close()  # the remoting port stops accepting connections
            status, body = await get(http, "/health")
            assert status == 503, body
            assert body["checks"]["remoting"].startswith("not listening on 127.0.0.1:")
            assert body["reasons"] == [f"remoting: {body['checks']['remoting']}"]
