"""A broker whose start fails partway gives back what it took: its remoting port, its embedded
name server's port and its store's lock, so the same process can start a broker again."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="from a pocketmq checkout: python3 -m pip install -e '.[grpc]'")

from pocketmq.broker.app import Broker  # noqa: E402
from pocketmq.broker.config import BrokerConfig  # noqa: E402


async def refused(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        _, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_a_taken_grpc_port_undoes_the_start(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        grpc_port = taken.getsockname()[1]
        broker = Broker(BrokerConfig(port=0, grpc_port=grpc_port), store=tmp_path, namesrv=True)
        with pytest.raises(OSError):
            await broker.start()
    # The remoting port and the embedded name server listened before the gRPC front failed
    assert broker.config.port != 0
    assert await refused(broker.config.address)
    assert await refused(broker.config.namesrv_addrs[0])
    # and the store is closed: another broker of this process opens it, and serves
    async with Broker(BrokerConfig(port=0), store=tmp_path, namesrv=True) as again:
        assert not await refused(again.config.address)


async def test_a_locked_store_gives_back_the_ports(tmp_path: Path) -> None:
    async with Broker(BrokerConfig(port=0), store=tmp_path, namesrv=True):
        second = Broker(BrokerConfig(port=0), store=tmp_path, namesrv=True)
        with pytest.raises(Exception, match="already open"):
            await second.start()
        assert await refused(second.config.address)
        assert await refused(second.config.namesrv_addrs[0])
