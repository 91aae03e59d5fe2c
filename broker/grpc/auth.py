"""Access control on the gRPC front: the accounts of the broker's ACL (``plain_acl.yml``,
``broker/services/acl.py``) and the RocketMQ 5.x clients' request signature.

Every call carries ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex>``, the hex being HMAC-SHA1 over the value of
``x-mq-date-time`` (``yyyyMMdd'T'HHmmss'Z'``) keyed with the secret key; the Node.js client
writes the hex in upper case, so the comparison ignores case.

Only the date is signed, so two guards keep an overheard signature from being used again:

* **The date must be recent.** The official Python client signs its *local* time labelled
  "Z" (grpc-compat.md), so a client east or west of UTC is off by its zone offset. The rule:
  the signed date, after taking away a whole number of quarter hours of at most 14 hours
  (every zone offset in use is one), lies within ``WINDOW_S`` (5 minutes) of the broker's
  clock. A date three days old, from 2020, or not a date at all is refused.
* **A call is not accepted twice.** Calls in the same second share date and signature, so
  what is remembered is the signature with ``x-mq-request-id``, a new UUID per call, for as
  long as its date stays acceptable.

That bounds, not removes, the risk of a scheme that signs only the date: someone who can
read a call may resend its signature with another request id within the window. Where that
matters, run gRPC behind TLS (as RocketMQ's proxy does).
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from pocketmq.broker.services.acl import (
    ANY,
    PUB,
    SUB,
    AccessControl,
    Account,
    Denied,
    Resource,
    group_resource,
    host_of,
    topic_resource,
)

__all__ = [
    "AuthError",
    "GrpcAuth",
    "PermissionDenied",
    "grpc_resources",
    "parse_date",
    "settings_resources",
    "sign",
]

ALGORITHM: Final = "MQv2-HMAC-SHA1"
WINDOW_S: Final = 300
ZONE_STEP_S: Final = 900  # zone offsets are whole quarter hours (+05:45, +12:45 too)
ZONE_MAX_S: Final = 14 * 3600  # UTC-12 .. UTC+14
REPLAY_MEMORY_MAX: Final = 200_000  # calls remembered at most (about 40 MB)


class AuthError(Exception):
    """The call is not signed, or not signed with a known key, or signed at another time;
    the text says which (UNAUTHORIZED)."""


class PermissionDenied(Exception):
    """A known account that may not touch this topic or group (FORBIDDEN)."""


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_date(text: str) -> float:
    """Epoch seconds of ``20260101T120000Z``; ValueError for anything else."""
    if len(text) != 16:
        raise ValueError(text)
    return float(calendar.timegm(time.strptime(text, "%Y%m%dT%H%M%SZ")))


def date_refusal(signed_s: float, now_s: float) -> str | None:
    """Why a signed date is not recent enough (None: it is): the skew must lie within
    ``WINDOW_S`` of a whole number of quarter hours of at most 14 hours."""
    skew = now_s - signed_s
    zone = round(skew / ZONE_STEP_S) * ZONE_STEP_S
    if abs(zone) <= ZONE_MAX_S and abs(skew - zone) <= WINDOW_S:
        return None
    return "the signed x-mq-date-time is not within 5 minutes of the broker's clock"


def _fields(authorization: str) -> dict[str, str]:
    algorithm, _, rest = authorization.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError(f"authorization uses {algorithm!r}, expected {ALGORITHM}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, value = part.strip().partition("=")
        if sep:
            fields[name.strip()] = value.strip()
    return fields


class GrpcAuth:
    """Checks calls against an ``AccessControl``; ``now`` is the wall clock (a manual broker
    clock is not the time clients sign)."""

    def __init__(self, acl: AccessControl, now: Callable[[], float] = time.time) -> None:
        self.acl = acl
        self.now = now
        # (access key, request id, signature) -> when it may be forgotten; insertion order is
        # expiry order, so the oldest are at the front
        self._seen: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._retention_s = ZONE_MAX_S + ZONE_STEP_S + WINDOW_S

    def check(
        self, metadata: Mapping[str, str], peer: str, what: str, resources: Iterable[Resource]
    ) -> Account | None:
        """The account a call was made with (None: a globally white address). Raises
        AuthError or PermissionDenied; counts the outcome under ``what`` (the RPC)."""
        try:
            account = self._authenticate(metadata, host_of(peer))
        except AuthError as error:
            self.acl.count_denied(what)
            self.acl.log_denial(what, peer, str(error))
            raise
        if account is None:
            self.acl.allowed[what] += 1
            return None
        try:
            self.acl.authorize(account, what, resources)
        except Denied as denial:
            self.acl.log_denial(what, peer, str(denial))
            raise PermissionDenied(str(denial)) from None
        return account

    def _authenticate(self, metadata: Mapping[str, str], host: str) -> Account | None:
        if self.acl.globally_white(host):
            return None
        authorization = metadata.get("authorization")
        if not authorization:
            raise AuthError("the call is not signed (no authorization header)")
        fields = _fields(authorization)
        access_key = fields.get("Credential", "")
        if not access_key:
            raise AuthError("the call is signed without an access key (anonymous)")
        account = self.acl.accounts.get(access_key)
        if account is None:
            raise AuthError(f"access key {access_key!r} is not known to this broker")
        if account.white.matches(host):
            return account
        date_time = metadata.get("x-mq-date-time")
        if not date_time:
            raise AuthError("the call has no x-mq-date-time header to check the signature against")
        if fields.get("SignedHeaders", "x-mq-date-time").lower() != "x-mq-date-time":
            raise AuthError(f"signed headers {fields.get('SignedHeaders')!r} are not supported")
        given = fields.get("Signature", "").lower()
        if not hmac.compare_digest(sign(account.secret_key, date_time), given):
            raise AuthError(f"the signature does not match access key {access_key!r}")
        try:
            signed_s = parse_date(date_time)
        except ValueError:
            raise AuthError(f"x-mq-date-time {date_time[:32]!r} is not yyyyMMddTHHmmssZ") from None
        now = self.now()
        refusal = date_refusal(signed_s, now)
        if refusal is not None:
            raise AuthError(refusal)
        self._remember(access_key, metadata.get("x-mq-request-id", ""), given, now)
        return account

    def _remember(self, access_key: str, request_id: str, signature: str, now: float) -> None:
        seen = self._seen
        # forget what expired (oldest first), and the oldest beyond the cap
        while seen:
            oldest = next(iter(seen))
            if seen[oldest] > now and len(seen) < REPLAY_MEMORY_MAX:
                break
            seen.popitem(last=False)
        if not request_id:
            # every official client sends one; without it a call cannot be told from a replay
            raise AuthError("the call has no x-mq-request-id")
        key = (access_key, request_id, signature)
        if key in seen:
            raise AuthError("the call was already received (same request id and signature)")
        seen[key] = now + self._retention_s


def grpc_resources(request: Any) -> list[Resource]:
    """The topics and groups an RPC touches and the permission each needs
    (``PlainAccessResource.parse`` for ``GeneratedMessageV3``)."""
    name = request.DESCRIPTOR.name
    found: list[Resource | None] = []

    def topic(resource: Any, perm: int) -> None:
        found.append(topic_resource(resource.name, perm))

    def group(resource: Any) -> None:
        found.append(group_resource(resource.name, SUB))

    if name == "SendMessageRequest":
        for message in request.messages:
            topic(message.topic, PUB)
    elif name in ("RecallMessageRequest", "EndTransactionRequest"):
        topic(request.topic, PUB)
    elif name == "ReceiveMessageRequest":
        group(request.group)
        topic(request.message_queue.topic, SUB)
    elif name in (
        "AckMessageRequest",
        "ForwardMessageToDeadLetterQueueRequest",
        "QueryAssignmentRequest",
        "ChangeInvisibleDurationRequest",
    ):
        group(request.group)
        topic(request.topic, SUB)
    elif name == "QueryRouteRequest":
        topic(request.topic, ANY)
    elif name in ("HeartbeatRequest", "NotifyClientTerminationRequest"):
        if request.HasField("group") and request.group.name:
            group(request.group)
    return [resource for resource in found if resource is not None]


def settings_resources(settings: Any) -> list[Resource]:
    """What a Telemetry ``Settings`` command names: PUB on each publishing topic; SUB on the
    subscription's group and topics."""
    found: list[Resource | None] = []
    if settings.HasField("publishing"):
        found += [topic_resource(t.name, PUB) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        found.append(group_resource(settings.subscription.group.name, SUB))
        found += [
            topic_resource(entry.topic.name, SUB) for entry in settings.subscription.subscriptions
        ]
    return [resource for resource in found if resource is not None]
