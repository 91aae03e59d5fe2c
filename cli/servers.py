"""``pocketmq standalone``, ``namesrv`` and ``broker``: run the servers until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from .errors import UsageError

__all__ = ["broker", "namesrv", "standalone"]


def _run(coroutine_factory: Callable[[], Coroutine[Any, Any, None]]) -> int:
    import uvloop  # the event loop of the servers; library code never imports it

    from pocketmq.broker.services.persist import ConfigFileError
    from pocketmq.store.errors import StoreError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(coroutine_factory())
    except (StoreError, OSError, ConfigFileError) as error:
        # A locked or unreadable store, a damaged config file, a port in use, a full disk:
        # say it in one line.
        print(f"pocketmq: cannot start: {error}", file=sys.stderr)
        return 1
    return 0


def _config(args: argparse.Namespace, namesrv: list[str]) -> Any:
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.store.config import StoreConfig

    try:
        store = (
            StoreConfig() if not args.delay_levels else StoreConfig(delay_levels=args.delay_levels)
        )
    except ValueError as error:
        raise UsageError(f"--delay-levels: {error}") from None
    tls_cert, tls_key = _tls_files(args)
    return BrokerConfig(
        store=store,
        broker_name=args.name,
        cluster_name=args.cluster,
        host=args.host,
        port=args.port,
        advertised_host=args.advertise,
        namesrv_addrs=namesrv,
        data_dir=None if args.memory else Path(args.data),
        flush=args.flush,
        grpc_port=_grpc_port(args),
        grpc_auto_create_topics=args.grpc_auto_create_topics,
        grpc_tls=args.grpc_tls,
        tls_cert=tls_cert,
        tls_key=tls_key,
        remoting_tls=args.remoting_tls,
        vip_channel=not args.no_vip_channel,
        access_keys=_access_keys(args),
        acl_file=Path(args.acl_file) if args.acl_file else None,
        clean_file_forcibly=args.clean_file_forcibly,
    )


def _grpc_port(args: argparse.Namespace) -> int | None:
    """The gRPC front-end's port: on by default when the grpc extra is installed."""
    from pocketmq.broker.grpc import grpc_available

    if args.no_grpc:
        return None
    if not grpc_available():
        hint = "from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
        if args.grpc_port is not None:
            raise UsageError(f"--grpc-port: the gRPC front-end is not installed ({hint})")
        logging.getLogger("pocketmq").warning(
            "gRPC front-end off (for the RocketMQ 5.x SDKs, %s)", hint
        )
        return None
    return 8081 if args.grpc_port is None else args.grpc_port


def _access_keys(args: argparse.Namespace) -> dict[str, str]:
    access_key = args.access_key or os.environ.get("POCKETMQ_ACCESS_KEY")
    secret_key = args.secret_key or os.environ.get("POCKETMQ_SECRET_KEY")
    if bool(access_key) != bool(secret_key):
        raise UsageError("--access-key and --secret-key go together")
    return {access_key: secret_key} if access_key and secret_key else {}


def _clock(args: argparse.Namespace) -> Any:
    from pocketmq.broker.services.clock import ManualClock, SystemClock

    return ManualClock() if args.clock == "manual" else SystemClock()


def _limits(args: argparse.Namespace) -> Any:
    """The remoting ports' connection limits, the defaults changed by each ``--limit``."""
    from pocketmq.broker.remoting.server import ServerLimits

    try:
        return ServerLimits.with_settings(args.limit)
    except ValueError as error:
        raise UsageError(f"--limit {error}") from None


def namesrv(args: argparse.Namespace) -> int:
    from pocketmq.broker.app import access_control
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.broker.serve import run_namesrv

    keys = _access_keys(args)
    acl_file = Path(args.acl_file) if args.acl_file else None
    tls = _tls_files(args)
    return _run(
        lambda: run_namesrv(
            args.host,
            args.port,
            access_control(BrokerConfig(access_keys=keys, acl_file=acl_file)),
            _limits(args),
            _remoting_ssl(args.host, tls) if args.remoting_tls else None,
        )
    )


def _tls_files(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    return (
        Path(args.tls_cert) if args.tls_cert else None,
        Path(args.tls_key) if args.tls_key else None,
    )


def _remoting_ssl(host: str, files: tuple[Path | None, Path | None]) -> Any:
    """The name server's TLS context: the given pair, or a self-signed one (no data folder:
    a temporary one)."""
    from pocketmq.broker.app import tls_files
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.broker.remoting.tls import server_context

    return server_context(*tls_files(BrokerConfig(host=host, tls_cert=files[0], tls_key=files[1])))


def broker(args: argparse.Namespace) -> int:
    from pocketmq.broker.serve import run_broker

    addrs = [a for a in (args.namesrv or "").split(";") if a]
    config = _config(args, addrs)
    limits = _limits(args)
    return _run(lambda: run_broker(config, _clock(args), limits))


def standalone(args: argparse.Namespace) -> int:
    from pocketmq.broker.serve import run_standalone

    config = _config(args, [])
    limits = _limits(args)
    return _run(lambda: run_standalone(config, args.host, args.namesrv_port, _clock(args), limits))
