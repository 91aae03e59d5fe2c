"""The pocketmq name server: broker registration, expiry and topic routes (RocketMQ namesrv).

* ``RouteInfoManager`` (``routes``): the routing tables, pure and synchronous, time passed in;
* ``NameServer`` (``server``): the asyncio remoting server around it;
* ``serve``: run one until cancelled (``pocketmq namesrv``).
"""

from __future__ import annotations

from .routes import BrokerLiveInfo, RegisterResult, RouteInfoManager
from .server import DEFAULT_PORT, NameServer, serve

__all__ = [
    "DEFAULT_PORT",
    "BrokerLiveInfo",
    "NameServer",
    "RegisterResult",
    "RouteInfoManager",
    "serve",
]
