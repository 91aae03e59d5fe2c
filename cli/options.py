"""Options every command that talks to servers takes: where the name servers are, and the ACL
account to sign with (the ``pocketmq`` commands spell the first ``--namesrv``, mqadmin's views
``-n/--namesrvAddr``)."""

from __future__ import annotations

import argparse
import os

__all__ = ["add_server_options"]


def add_server_options(parser: argparse.ArgumentParser, *names: str) -> None:
    """``names`` (the name-server option's spellings), ``--access-key`` and ``--secret-key``."""
    parser.add_argument(
        *names,
        dest="namesrv",
        metavar="ADDRS",
        default=os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876"),
        help="name servers, ';'-separated (default $NAMESRV_ADDR, else 127.0.0.1:9876)",
    )
    # every command that takes name servers talks to servers: it can sign for their ACL
    parser.add_argument(
        "--access-key",
        metavar="AK",
        default=os.environ.get("POCKETMQ_ACCESS_KEY") or None,
        help="sign requests with this ACL account (default $POCKETMQ_ACCESS_KEY)",
    )
    parser.add_argument(
        "--secret-key",
        metavar="SK",
        default=os.environ.get("POCKETMQ_SECRET_KEY") or None,
        help="its secret key (default $POCKETMQ_SECRET_KEY)",
    )
