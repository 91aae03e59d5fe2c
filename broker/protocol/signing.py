"""RocketMQ's request signature on the remoting protocol (``AclClientRPCHook``).

A signed request carries ``AccessKey`` and ``Signature`` (and ``SecurityToken`` when the
credentials have one) in its ``extFields``. The signature is HmacSHA1, keyed with the secret
key, over the values of every ``extFields`` entry but ``Signature``, in the order of their
sorted keys, followed by the body; base64 encoded. The broker recomputes it the same way
(``PlainAccessResource.parse``), so one function serves the SDK and the broker.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "sign_fields",
    "signature",
    "signed_content",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


def signed_content(ext_fields: dict[str, str] | None, body: bytes | None) -> bytes:
    """What is signed: the values of the sorted ``extFields`` but ``Signature``, then the body.
    (Java sorts by UTF-16 code units, Python by code points: the same order for every key
    outside the astral planes, which header names never use.)"""
    fields = ext_fields or {}
    text = "".join(fields[key] for key in sorted(fields) if key != SIGNATURE)
    return text.encode() + (body or b"")


def signature(secret_key: str, ext_fields: dict[str, str] | None, body: bytes | None) -> str:
    digest = hmac.new(secret_key.encode(), signed_content(ext_fields, body), hashlib.sha1)
    return base64.b64encode(digest.digest()).decode()


def sign_fields(
    ext_fields: dict[str, str] | None,
    body: bytes | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """A copy of ``ext_fields`` with ``AccessKey`` (and ``SecurityToken``) and the
    ``Signature`` over them; the caller's dict is left alone (it may be a shared template)."""
    fields = dict(ext_fields or {})
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields[SIGNATURE] = signature(secret_key, fields, body)
    return fields
