"""Access control: RocketMQ's plain ACL (``plain_acl.yml``), for every front of the broker and
the name server.

The file has RocketMQ's shape::

    globalWhiteRemoteAddresses: ["10.10.103.*"]     # these addresses need no keys at all
    accounts:
      - accessKey: RocketMQ
        secretKey: "12345678"
        whiteRemoteAddress:                          # from here this key needs no signature
        admin: false                                 # admin: every resource and admin request
        defaultTopicPerm: DENY                       # a topic not listed below
        defaultGroupPerm: SUB                        # a group not listed below
        topicPerms: [topicA=DENY, topicB=PUB|SUB, topicC=SUB]
        groupPerms: [groupA=DENY, groupB=PUB|SUB, groupC=SUB]

A request is checked as ``PlainPermissionManager.validate`` does: a globally white address
passes; otherwise the request names an account (``AccessKey``), from that account's white
address it passes; otherwise its signature must match (``broker/protocol/signing.py``); then
an admin account passes, an admin request code needs one, and every resource the request
touches needs the permission it asks for (``PUB`` to send, ``SUB`` to consume). Groups are
checked as their retry topic ``%RETRY%<group>``, as RocketMQ does. Pure: no asyncio, no sockets.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec

from pocketmq.broker.protocol import RemotingCommand, RequestCode
from pocketmq.broker.protocol.codes import MQVersion
from pocketmq.broker.protocol.headers import (
    BatchAckMessageRequestBody,
    HeartbeatData,
    LockBatchRequestBody,
    UnlockBatchRequestBody,
    decode_json_body,
)
from pocketmq.broker.protocol.signing import ACCESS_KEY, SIGNATURE, signature
from pocketmq.broker.services.persist import ConfigFileError

__all__ = [
    "ADMIN_CODES",
    "ANY",
    "DENY",
    "PUB",
    "SUB",
    "Account",
    "AccessControl",
    "AclFile",
    "AclFileError",
    "Denied",
    "Resource",
    "remoting_resources",
]

log = logging.getLogger("pocketmq.acl")

# Permission bits (acl.common.Permission).
DENY: Final = 1
ANY: Final = 2
PUB: Final = 4
SUB: Final = 8
_PERM_NAMES: Final = {
    "DENY": DENY,
    "PUB": PUB,
    "SUB": SUB,
    "PUB|SUB": PUB | SUB,
    "SUB|PUB": PUB | SUB,
}
RETRY_PREFIX: Final = "%RETRY%"
_UNIQUE_KEY_QUERY: Final = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
_V4_9_3: Final = int(MQVersion.V4_9_4) - 2  # MQVersion.Version.V4_9_3's ordinal

# Requests only an admin account may make. RocketMQ's Permission.ADMIN_CODE (topic and group
# creation and deletion, broker config, static topics), plus what pocketmq or its name server
# serves and RocketMQ leaves unchecked: offset resets, broker (un)registration, route and
# broker-permission changes, the name server's KV writes, and pocketmq's own admin requests
# (the manual clock, message inspection and deletion, the DLQ, transactions).
ADMIN_CODES: Final = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_BROKER_CONFIG,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
        RequestCode.RESET_CONSUMER_OFFSET_IN_BROKER,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.QUERY_DATA_VERSION,  # a broker's liveness on the name server
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.POCKETMQ_CLOCK,
        RequestCode.POCKETMQ_MESSAGE_INFO,
        RequestCode.POCKETMQ_DLQ,
        RequestCode.POCKETMQ_TX,
    }
)


class AclFileError(ConfigFileError):
    """The ACL file cannot be used; the text names the file and the problem (one line)."""


# -- the file ---------------------------------------------------------------------------------


class AccountConfig(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    # YAML reads an unquoted 12345678 as a number: the sample plain_acl.yml has one.
    access_key: str | int
    secret_key: str | int
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None  # absent: DENY, as RocketMQ
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None


class AclFile(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    global_white_remote_addresses: list[str] | None = None
    accounts: list[AccountConfig] | None = None
    # Written by RocketMQ's updateAclConfig; read and ignored.
    data_version: list[dict[str, object]] | None = None


# -- addresses --------------------------------------------------------------------------------


class AddressPattern:
    """``RemoteAddressStrategyFactory``: blank never matches; ``*`` (or ``*.*.*.*``) matches
    all; ``a,b,c`` and ``1.2.3.{4,5}`` list addresses; ``192.168.1.*`` and
    ``192.168.1.1-100`` match IPv4 ranges (each part a number, ``*`` or ``lo-hi``); anything
    else is one address (IPv4 or IPv6)."""

    def __init__(self, text: str | None) -> None:
        text = (text or "").strip()
        self.text = text
        self._all = text in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")
        self._exact: set[ipaddress.IPv4Address | ipaddress.IPv6Address] = set()
        self._ranges: list[list[tuple[int, int]]] = []
        if not text or self._all:
            return
        if text.endswith("}"):
            prefix, _, listed = text[:-1].rpartition("{")
            items = [prefix + item.strip() for item in listed.split(",")]
        else:
            items = [item.strip() for item in text.split(",")]
        for item in items:
            if "*" in item or "-" in item:
                self._ranges.append(_ipv4_range(item))
            else:
                try:
                    self._exact.add(ipaddress.ip_address(item))
                except ValueError:
                    raise ValueError(f"{item!r} is not an IP address") from None

    def matches(self, host: str) -> bool:
        if self._all:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address in self._exact:
            return True
        if isinstance(address, ipaddress.IPv4Address) and self._ranges:
            parts = [int(p) for p in str(address).split(".")]
            return any(
                all(lo <= p <= hi for p, (lo, hi) in zip(parts, bounds, strict=True))
                for bounds in self._ranges
            )
        return False


def _ipv4_range(text: str) -> list[tuple[int, int]]:
    parts = text.split(".")
    if parts and parts[-1] == "*":
        parts += ["*"] * (4 - len(parts))  # "10.10.*" is "10.10.*.*"
    if len(parts) != 4:
        raise ValueError(f"{text!r} is not an IPv4 range (four parts: a number, * or lo-hi)")
    bounds = []
    for part in parts:
        if part == "*":
            bounds.append((0, 255))
            continue
        lo, sep, hi = part.partition("-")
        try:
            low, high = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"{text!r}: {part!r} is not a number, * or lo-hi") from None
        if not 0 <= low <= high <= 255:
            raise ValueError(f"{text!r}: {part!r} is not within 0-255")
        bounds.append((low, high))
    return bounds


def host_of(remote_address: str) -> str:
    """The host of ``host:port`` (``[::1]:5000`` and ``::1:5000`` too)."""
    host = remote_address.rpartition(":")[0] if ":" in remote_address else remote_address
    return host.strip("[]")


# -- accounts and resources -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """A topic, or a group (``kind == "group"``), and the permission a request needs on it."""

    kind: str
    name: str
    perm: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.name}"


def topic_resource(topic: str | None, perm: int) -> Resource | None:
    """A topic; a retry topic ``%RETRY%<group>`` is its group, as RocketMQ checks it."""
    if not topic:
        return None
    if topic.startswith(RETRY_PREFIX):
        return Resource("group", _group_of_retry_topic(topic), perm)
    return Resource("topic", topic, perm)


def group_resource(group: str | None, perm: int) -> Resource | None:
    return Resource("group", group, perm) if group else None


def _group_of_retry_topic(topic: str) -> str:
    # KeyBuilder.parseGroup: a POP retry topic is %RETRY%<group>_<topic> (v1) or
    # %RETRY%<group>+<topic> (v2); "_" may be part of a group name, so only "+" splits.
    return topic[len(RETRY_PREFIX) :].split("+", 1)[0]


def _parse_perm(text: str | None, where: str) -> int:
    if text is None:
        return DENY
    perm = _PERM_NAMES.get(text.strip().replace(" ", ""))
    if perm is None:
        raise ValueError(f"{where}: permission {text!r} is not DENY, PUB, SUB or PUB|SUB")
    return perm


def _parse_resource_perms(items: list[str] | None, where: str) -> dict[str, int]:
    table: dict[str, int] = {}
    for item in items or []:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{where}: {item!r} is not NAME=PERM (e.g. topicA=PUB|SUB)")
        table[name.strip()] = _parse_perm(perm, f"{where} {name.strip()}")
    return table


def check_permission(needed: int, owned: int) -> bool:
    """``Permission.checkPermission``: DENY wins; ANY is PUB or SUB; else the bits must meet."""
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool = False
    white: AddressPattern = field(default_factory=lambda: AddressPattern(None))
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    topic_perms: dict[str, int] = field(default_factory=dict)
    group_perms: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: AccountConfig, where: str) -> Account:
        access_key, secret_key = str(config.access_key), str(config.secret_key)
        if not access_key or not secret_key:
            raise ValueError(f"{where}: accessKey and secretKey must not be empty")
        where = f"account {access_key}"
        try:
            white = AddressPattern(config.white_remote_address)
        except ValueError as error:
            raise ValueError(f"{where}: whiteRemoteAddress {error}") from None
        return cls(
            access_key=access_key,
            secret_key=secret_key,
            admin=config.admin,
            white=white,
            default_topic_perm=_parse_perm(config.default_topic_perm, f"{where} defaultTopicPerm"),
            default_group_perm=_parse_perm(config.default_group_perm, f"{where} defaultGroupPerm"),
            topic_perms=_parse_resource_perms(config.topic_perms, f"{where} topicPerms"),
            group_perms=_parse_resource_perms(config.group_perms, f"{where} groupPerms"),
        )

    def refusal(self, code: int | None, resources: Iterable[Resource]) -> str | None:
        """Why this account may not make the request (None: it may); ``code`` None for gRPC.
        (``PlainPermissionChecker.check``.)"""
        if self.admin:
            return None
        if code is not None and code in ADMIN_CODES:
            return f"request code {code} needs an admin account; {self.access_key} is not one"
        for resource in resources:
            table, default = (
                (self.group_perms, self.default_group_perm)
                if resource.kind == "group"
                else (self.topic_perms, self.default_topic_perm)
            )
            owned = table.get(resource.name)
            if owned is None:
                if not check_permission(resource.perm, default):
                    return f"no default permission for {resource} ({self.access_key})"
            elif not check_permission(resource.perm, owned):
                return f"no permission for {resource} ({self.access_key})"
        return None


# -- what a remoting request touches ----------------------------------------------------------


def remoting_resources(request: RemotingCommand) -> list[Resource]:
    """The topics and groups a request touches and the permission each needs
    (``PlainAccessResource.parse``, and the same rule for the requests pocketmq serves that it
    does not list: lite pulls, POP, offsets queries, queue locks). Raises ValueError for a
    body it cannot read."""
    fields = request.ext_fields or {}
    code = request.code
    found: list[Resource | None] = []
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE) or code in (
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        v1 = code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE)
        topic = fields.get("topic") if v1 else fields.get("b")
        # a send to a retry topic is a consumer's redelivery: SUB on its group
        perm = SUB if (topic or "").startswith(RETRY_PREFIX) else PUB
        found.append(topic_resource(topic, perm))
    elif code == RequestCode.RECALL_MESSAGE:
        found.append(topic_resource(fields.get("topic"), PUB))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        found.append(group_resource(fields.get("group"), SUB))
    elif code in (
        RequestCode.PULL_MESSAGE,
        RequestCode.LITE_PULL_MESSAGE,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        RequestCode.QUERY_CONSUMER_OFFSET,
        RequestCode.POP_MESSAGE,
        RequestCode.POP_LITE_MESSAGE,
        RequestCode.ACK_MESSAGE,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        RequestCode.PEEK_MESSAGE,
        RequestCode.NOTIFICATION,
    ):
        found.append(topic_resource(fields.get("topic"), SUB))
        found.append(group_resource(fields.get("consumerGroup"), SUB))
    elif code == RequestCode.BATCH_ACK_MESSAGE:
        try:
            batch = decode_json_body(request.body or b"{}", BatchAckMessageRequestBody)
        except Exception as error:
            raise ValueError(f"batch ack body unreadable: {error}") from None
        for ack in batch.acks or ():
            topic = ack.t if ack.t is not None else ack.topic
            group = ack.c if ack.c is not None else ack.consumerGroup
            found.append(topic_resource(topic, SUB))
            found.append(group_resource(group, SUB))
    elif code == RequestCode.QUERY_MESSAGE:
        found.append(topic_resource(fields.get("topic"), SUB))
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        found.append(group_resource(fields.get("consumerGroup"), SUB))
    elif code == RequestCode.HEART_BEAT:
        try:
            heartbeat = decode_json_body(request.body or b"{}", HeartbeatData)
        except Exception as error:  # any decoding failure: refused, as RocketMQ's AclException
            raise ValueError(f"heartbeat body unreadable: {error}") from None
        for consumer in heartbeat.consumer_data_set or ():
            found.append(group_resource(consumer.group_name, SUB))
            for subscription in consumer.subscription_data_set or ():
                found.append(topic_resource(subscription.topic, SUB))
    elif code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        body: LockBatchRequestBody | UnlockBatchRequestBody
        try:
            if code == RequestCode.LOCK_BATCH_MQ:
                body = decode_json_body(request.body or b"{}", LockBatchRequestBody)
            else:
                body = decode_json_body(request.body or b"{}", UnlockBatchRequestBody)
        except Exception as error:
            raise ValueError(f"lock body unreadable: {error}") from None
        found.append(group_resource(body.consumer_group, SUB))
    return [resource for resource in found if resource is not None]


# -- the policy -------------------------------------------------------------------------------


class Denied(Exception):
    """A refused request; the text is the remark sent back (never a secret)."""


class AccessControl:
    """The accounts and white addresses, and the checks of every front. ``allowed`` and
    ``denied`` count the checked requests per request code (gRPC: per RPC name)."""

    def __init__(self, accounts: Iterable[Account] = (), global_white: Iterable[str] = ()) -> None:
        self.accounts: dict[str, Account] = {}
        for account in accounts:
            if account.access_key in self.accounts:
                raise ValueError(f"account {account.access_key} is listed twice")
            self.accounts[account.access_key] = account
        self.global_white = [AddressPattern(text) for text in global_white]
        self.allowed: Counter[int | str] = Counter()
        self.denied: Counter[int | str] = Counter()
        self._last_log: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    # -- building ------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, extra: Iterable[Account] = ()) -> AccessControl:
        """Read a ``plain_acl.yml``; ``AclFileError`` naming the file and the problem."""
        import msgspec.yaml  # needs PyYAML, read only when an ACL file is given

        try:
            data = Path(path).read_bytes()
            parsed = msgspec.yaml.decode(data, type=AclFile) if data.strip() else AclFile()
            accounts = [
                Account.from_config(config, f"account #{number}")
                for number, config in enumerate(parsed.accounts or [], 1)
            ]
            if not accounts and not parsed.global_white_remote_addresses:
                raise ValueError("no accounts and no globalWhiteRemoteAddresses")
            try:
                white = [str(text) for text in parsed.global_white_remote_addresses or []]
                return cls([*accounts, *extra], white)
            except ValueError as error:
                raise ValueError(f"globalWhiteRemoteAddresses: {error}") from None
        except (OSError, ValueError, msgspec.DecodeError) as error:
            # YAML errors span lines (a caret under the spot): one line for the operator
            text = " ".join(str(error).split())
            raise AclFileError(f"ACL file {path}: {text}") from None

    @classmethod
    def from_keys(cls, keys: dict[str, str]) -> AccessControl:
        """``--access-key/--secret-key``: each pair an admin account."""
        return cls(Account(ak, sk, admin=True) for ak, sk in keys.items())

    @staticmethod
    def admin_account(access_key: str, secret_key: str) -> Account:
        return Account(access_key, secret_key, admin=True)

    @property
    def an_admin(self) -> Account | None:
        """An admin account (the broker signs its registrations with it)."""
        return next((a for a in self.accounts.values() if a.admin), None)

    # -- checks --------------------------------------------------------------------------

    def globally_white(self, host: str) -> bool:
        return any(pattern.matches(host) for pattern in self.global_white)

    def check_remoting(self, request: RemotingCommand, remote_address: str) -> str | None:
        """None when ``request`` may run, else the remark of the NO_PERMISSION answer."""
        try:
            self._check_remoting(request, host_of(remote_address))
        except Denied as denial:
            self.denied[request.code] += 1
            self._log_denial(str(request.code), remote_address, str(denial))
            return str(denial)
        self.allowed[request.code] += 1
        return None

    def _check_remoting(self, request: RemotingCommand, host: str) -> None:
        if self.globally_white(host):
            return
        fields = request.ext_fields or {}
        access_key = fields.get(ACCESS_KEY)
        if not access_key:
            raise Denied("access denied: ACL is on and the request carries no AccessKey")
        account = self.accounts.get(access_key)
        if account is None:
            raise Denied(f"access denied: no account for AccessKey {access_key}")
        if account.white.matches(host):
            return
        signed = fields
        if request.version <= _V4_9_3 and _UNIQUE_KEY_QUERY in fields:
            # Java clients up to 4.9.3 add this flag after signing: RocketMQ leaves it out
            signed = {k: v for k, v in fields.items() if k != _UNIQUE_KEY_QUERY}
        expected = signature(account.secret_key, signed, request.body)
        if not hmac.compare_digest(expected.encode(), fields.get(SIGNATURE, "").encode()):
            raise Denied(f"access denied: signature check failed for AccessKey {access_key}")
        try:
            resources = remoting_resources(request)
        except ValueError as error:
            raise Denied(f"access denied: {error}") from None
        refusal = account.refusal(request.code, resources)
        if refusal is not None:
            raise Denied(f"access denied: {refusal}")

    def authorize(self, account: Account, what: str, resources: Iterable[Resource]) -> None:
        """gRPC: after the signature, the resources (Denied if refused); counts ``what``."""
        refusal = account.refusal(None, resources)
        if refusal is not None:
            self.count_denied(what)
            raise Denied(f"access denied: {refusal}")
        self.allowed[what] += 1

    def count_denied(self, what: int | str) -> None:
        self.denied[what] += 1

    def _log_denial(self, what: str, remote_address: str, reason: str) -> None:
        # One line per client address and second at most: a client retrying in a loop must
        # not flood the log; the lines held back are counted in the next one.
        now = time.monotonic()
        if now - self._last_log.get(remote_address, -10.0) < 1.0:
            self._suppressed[remote_address] += 1
            return
        if len(self._last_log) > 10_000:
            self._last_log.clear()
        self._last_log[remote_address] = now
        held = self._suppressed.pop(remote_address, 0)
        log.warning(
            "refused request %s from %s: %s%s",
            what,
            remote_address,
            reason,
            f" ({held} more refused since the last line)" if held else "",
        )

    def log_denial(self, what: str, remote_address: str, reason: str) -> None:
        self._log_denial(what, remote_address, reason)

    def summary(self) -> str:
        """For the start-up line: how many accounts, how many admins, white addresses."""
        admins = sum(1 for a in self.accounts.values() if a.admin)
        white = f", global white addresses {', '.join(p.text for p in self.global_white)}"
        return (
            f"{len(self.accounts)} account(s), {admins} admin{white if self.global_white else ''}"
        )
