"""Running the servers until told to stop: ``pocketmq namesrv``, ``broker`` and ``standalone``.

Each prints one line containing ``ready`` on stdout once it accepts connections (scripts and
tests wait for it) and shuts down cleanly on SIGINT or SIGTERM: the store is flushed, the
``abort`` file removed, and the broker unregisters from its name servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from ssl import SSLContext

from pocketmq.broker.app import Broker, access_control, tls_files
from pocketmq.broker.config import BrokerConfig
from pocketmq.broker.namesrv import NameServer
from pocketmq.broker.remoting.server import ServerLimits
from pocketmq.broker.remoting.tls import server_context
from pocketmq.broker.services.acl import AccessControl
from pocketmq.broker.services.clock import Clock
from pocketmq.broker.services.memory import release_free_heap

__all__ = ["run_broker", "run_namesrv", "run_standalone"]


def _stop_on_signals() -> asyncio.Event:
    """An event SIGINT and SIGTERM set from now on (instead of killing the process)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return stop


async def _ready_until_stopped(line: str) -> None:
    """Print the ready line, then wait for SIGINT or SIGTERM. The handlers are in place before
    the line is printed: a signal sent as soon as it is read stops the servers cleanly (before,
    one that came in between killed the process: store not closed, no unregistration)."""
    stop = _stop_on_signals()
    # Everything allocated so far lives as long as the process: keep it out of the collector's
    # sight, and collect young objects less often, so that collections do not show up as
    # latency spikes under load.
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    release_free_heap()  # what start-up freed: idle, nothing would reuse it
    print(line, flush=True)
    sys.stdout.flush()
    await stop.wait()


async def run_namesrv(
    host: str,
    port: int,
    acl: AccessControl | None = None,
    limits: ServerLimits | None = None,
    ssl: SSLContext | None = None,
) -> None:
    """A name server; with ``acl``, every request is checked by it (``broker/services/acl.py``);
    ``limits``: its connection limits (default ``ServerLimits()``); ``ssl``: TLS beside
    plaintext."""
    server = NameServer(guard=acl.check_remoting if acl is not None else None, limits=limits)
    if acl is not None:
        logging.getLogger("pocketmq.namesrv").info("ACL on (%s)", acl.summary())
    port = await server.start(host, port, ssl)
    try:
        await _ready_until_stopped(f"pocketmq namesrv ready on {host}:{port}")
    finally:
        await server.close()


async def run_broker(
    config: BrokerConfig, clock: Clock | None = None, limits: ServerLimits | None = None
) -> None:
    async with Broker(config, clock=clock, limits=limits) as broker:
        grpc = f", grpc {broker.grpc_address}" if broker.grpc_address else ""
        grpc += f", http {broker.http_address}" if broker.http_address else ""
        await _ready_until_stopped(
            f"pocketmq broker {config.broker_name} ready on {broker.address}{grpc} "
            f"(flush {config.flush})"
        )


async def run_standalone(
    config: BrokerConfig,
    namesrv_host: str,
    namesrv_port: int,
    clock: Clock | None = None,
    limits: ServerLimits | None = None,
) -> None:
    """Name server and broker in one process, the broker registered with the name server;
    both check requests with the ACL the config asks for and have the same connection limits."""
    acl = access_control(config)
    server = NameServer(guard=acl.check_remoting if acl is not None else None, limits=limits)
    ssl = None
    if config.remoting_tls:
        # One certificate for both ports: the broker is given the pair made here.
        config.tls_cert, config.tls_key = tls_files(config)
        ssl = server_context(config.tls_cert, config.tls_key)
    namesrv_port = await server.start(namesrv_host, namesrv_port, ssl)
    config.namesrv_addrs = [f"{namesrv_host}:{namesrv_port}"]
    try:
        async with Broker(config, clock=clock, limits=limits) as broker:
            grpc = f", grpc {broker.grpc_address}" if broker.grpc_address else ""
            grpc += f", http {broker.http_address}" if broker.http_address else ""
            await _ready_until_stopped(
                f"pocketmq standalone ready: name server {namesrv_host}:{namesrv_port}, "
                f"broker {broker.address}{grpc}, data {config.data_dir or 'in memory'}"
            )
    finally:
        await server.close()
