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
    """The broker's settings: defaults < the ``-c`` file < ``POCKETMQ_*`` variables < flags
    (``broker/config_properties.py``; docs/configuration.md). ``namesrv``: the default name
    servers."""
    from pocketmq.broker.config import BrokerConfig
    from pocketmq.broker.config_properties import (
        ConfigProblem,
        apply_settings,
        environment_settings,
        read_config_file,
    )

    base = BrokerConfig(
        data_dir=Path("./pocketmq-data"), grpc_port=8081, http_port=8082, namesrv_addrs=namesrv
    )
    from_file: dict[str, Any] = {}
    try:
        if args.config:
            settings = read_config_file(args.config)
            warning = settings.warning()
            if warning:
                logging.getLogger("pocketmq").warning("%s", warning)
            from_file = {"config_file": Path(args.config), **settings.values}
        from_environment = environment_settings()
        flags = _flag_settings(args)
        config = apply_settings(base, from_file, from_environment, flags)
    except ConfigProblem as problem:
        raise UsageError(str(problem)) from None
    given = from_file.keys() | from_environment.keys() | flags.keys()
    config.grpc_port = _grpc_port(config.grpc_port, "grpc_port" in given)
    return config


def _flag_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the command line gives (field -> value); a flag not given is left out."""
    from pocketmq.broker.config_properties import find_setting

    flags: dict[str, Any] = {}
    for flag, field in (
        ("host", "host"),
        ("port", "port"),
        ("name", "broker_name"),
        ("cluster", "cluster_name"),
        ("flush", "flush"),
        ("grpc_port", "grpc_port"),
        ("http_port", "http_port"),
        ("grpc_tls", "grpc_tls"),
        ("seed", "seed"),
    ):
        if getattr(args, flag, None) is not None:
            flags[field] = getattr(args, flag)
    if args.advertise is not None:
        flags.update(_advertised(args.advertise))
    if args.data is not None:
        flags["data_dir"] = Path(args.data)
    if args.memory:
        flags["data_dir"] = None
    if getattr(args, "namesrv", None) is not None:  # broker only: standalone has its own
        flags["namesrv_addrs"] = [a for a in args.namesrv.split(";") if a]
    if args.delay_levels:
        setting = find_setting("messageDelayLevel")
        assert setting is not None
        try:
            flags["store.delay_levels"] = setting.kind.parse(args.delay_levels)
        except ValueError as error:
            raise UsageError(f"--delay-levels: {error}") from None
    for flag, field, value in (
        ("no_grpc", "grpc_port", None),
        ("no_http", "http_port", None),
        ("no_vip_channel", "vip_channel", False),
        ("remoting_tls", "remoting_tls", True),
        ("grpc_auto_create_topics", "grpc_auto_create_topics", True),
        ("clean_file_forcibly", "clean_file_forcibly", True),
    ):
        if getattr(args, flag):
            flags[field] = value
    tls_cert, tls_key = _tls_files(args)
    if tls_cert is not None:
        flags["tls_cert"], flags["tls_key"] = tls_cert, tls_key
    access_keys = _access_keys(args)
    if access_keys:
        flags["access_keys"] = access_keys
    if args.acl_file:
        flags["acl_file"] = Path(args.acl_file)
    return flags


def _advertised(text: str) -> dict[str, Any]:
    """``--advertise HOST`` or ``HOST:PORT`` (``[v6]:PORT``) as settings."""
    host, colon, port_text = text.rpartition(":")
    if not colon or "]" in port_text or (host.count(":") and not host.startswith("[")):
        return {"advertised_host": text}  # a host alone (an IPv6 address without brackets too)
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise UsageError(f"--advertise {text}: {port_text!r} is not a port (1-65535)")
    if not host:
        raise UsageError(f"--advertise {text}: no host before the port")
    return {"advertised_host": host.strip("[]"), "advertised_port": int(port_text)}


def _grpc_port(port: int | None, asked: bool) -> int | None:
    """The gRPC front-end's port: on by default (8081) when the grpc extra is installed; asked
    for (a flag, the file or the environment) without it, a usage error."""
    from pocketmq.broker.grpc import grpc_available

    if port is None or grpc_available():
        return port
    hint = "from a pocketmq checkout: python3 -m pip install -e '.[grpc]'"
    if asked:
        raise UsageError(f"--grpc-port: the gRPC front-end is not installed ({hint})")
    logging.getLogger("pocketmq").warning(
        "gRPC front-end off (for the RocketMQ 5.x SDKs, %s)", hint
    )
    return None


def _access_keys(args: argparse.Namespace) -> dict[str, str]:
    access_key = args.access_key or os.environ.get("POCKETMQ_ACCESS_KEY")
    secret_key = args.secret_key or os.environ.get("POCKETMQ_SECRET_KEY")
    if bool(access_key) != bool(secret_key):
        raise UsageError("--access-key and --secret-key go together")
    return {access_key: secret_key} if access_key and secret_key else {}


def _clock(args: argparse.Namespace, seed: int | None = None) -> Any:
    from pocketmq.broker.app import SEEDED_START_MS
    from pocketmq.broker.services.clock import ManualClock, SystemClock

    if args.clock != "manual":
        return SystemClock()
    # A seeded run's manual clock starts at a fixed time: its timestamps repeat run to run.
    return ManualClock(SEEDED_START_MS if seed is not None else None)


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

    default = os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")
    config = _config(args, [a for a in default.split(";") if a])
    limits = _limits(args)
    return _run(lambda: run_broker(config, _clock(args, config.seed), limits))


def standalone(args: argparse.Namespace) -> int:
    from pocketmq.broker.serve import run_standalone

    config = _config(args, [])
    limits = _limits(args)
    return _run(
        lambda: run_standalone(
            config, config.host, args.namesrv_port, _clock(args, config.seed), limits
        )
    )
