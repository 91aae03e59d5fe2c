"""Request signatures of the RocketMQ 5.x clients (``MQv2-HMAC-SHA1``).

Every call carries ``authorization: MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex>``, the hex being HMAC-SHA1 over the value of
``x-mq-date-time`` keyed with the secret key. Only the date-time is signed, so the check is
the same for every RPC. The Python client signs its local time labelled "Z" and the Node.js
client writes the hex in upper case: no clock-skew window, and the comparison ignores case.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["AuthError", "check_signature", "sign"]

ALGORITHM = "MQv2-HMAC-SHA1"


class AuthError(Exception):
    """The call is not signed, or not signed with a known key; the text says which."""


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


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


def check_signature(metadata: Mapping[str, str], credentials: Mapping[str, str]) -> str | None:
    """The access key a call was signed with, after checking the signature.

    ``credentials`` maps access keys to secret keys; when it is empty nothing is checked and
    None is returned. Raises AuthError for a missing, anonymous or wrong signature.
    """
    if not credentials:
        return None
    authorization = metadata.get("authorization")
    if not authorization:
        raise AuthError("the call is not signed (no authorization header)")
    fields = _fields(authorization)
    access_key = fields.get("Credential", "")
    if not access_key:
        raise AuthError("the call is signed without an access key (anonymous)")
    secret_key = credentials.get(access_key)
    if secret_key is None:
        raise AuthError(f"access key {access_key!r} is not known to this broker")
    date_time = metadata.get("x-mq-date-time")
    if not date_time:
        raise AuthError("the call has no x-mq-date-time header to check the signature against")
    if fields.get("SignedHeaders", "x-mq-date-time").lower() != "x-mq-date-time":
        raise AuthError(f"signed headers {fields.get('SignedHeaders')!r} are not supported")
    expected = sign(secret_key, date_time)
    if not hmac.compare_digest(expected, fields.get("Signature", "").lower()):
        raise AuthError(f"the signature does not match access key {access_key!r}")
    return access_key
