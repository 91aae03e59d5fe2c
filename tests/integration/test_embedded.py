"""The embedded broker for users' own tests: one process, in-memory store, a manual clock."""

from __future__ import annotations

import asyncio

from pocketmq.broker.app import Broker
from pocketmq.broker.protocol import RemotingCommand, RequestCode, ResponseCode
from pocketmq.broker.protocol.headers import GetRouteInfoRequestHeader, SendMessageRequestHeaderV2
from pocketmq.broker.services.clock import ManualClock
from tests.integration.raw import call


async def test_embedded_broker_with_name_server_and_manual_clock() -> None:
    clock = ManualClock(1_700_000_000_000)
    async with Broker(port=0, store=None, clock=clock) as broker:
        assert broker.config.data_dir is None and broker.namesrv_address is not None
        header = SendMessageRequestHeaderV2(
            producer_group="p",
            topic="Embedded",
            default_topic="TBW102",
            default_topic_queue_nums=4,
            queue_id=0,
            sys_flag=0,
            born_timestamp=0,
            flag=0,
            properties="DELAY\x012\x02",
        )
        sent = await call(
            broker.address,
            RemotingCommand(
                code=RequestCode.SEND_MESSAGE_V2, ext_fields=header.to_ext_fields(), body=b"later"
            ),
        )
        assert sent.code == ResponseCode.SUCCESS
        assert broker.store.max_offset("Embedded", 0) == 0
        assert await broker.advance("5s") == 1
        assert broker.store.max_offset("Embedded", 0) == 1
        assert clock.now_ms() == 1_700_000_005_000
        for _ in range(50):  # the route shows up once the broker has re-registered
            route = await call(
                broker.namesrv_address,
                RemotingCommand(
                    code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
                    ext_fields=GetRouteInfoRequestHeader(topic="Embedded").to_ext_fields(),
                ),
            )
            if route.code == ResponseCode.SUCCESS:
                break
            await asyncio.sleep(0.02)
        assert route.code == ResponseCode.SUCCESS, route.remark
        assert broker.address.encode() in route.body
