"""The legacy Convergence v1 response body, byte for byte (see docs/wire-format.md).

Signed bytes: ``{"fingerprintList": [...]}`` serialised as Python's ``json.dumps`` with
default separators (``", "`` and ``": "``), each entry
``{"timestamp": {"start": "<unix s>", "finish": "<unix s>"}, "fingerprint": "<SHA-1>"}``,
newest ``finish`` first. The body is the signed bytes with ``, "signature": "<base64>"``
inserted before the final ``}``. The signature is RSASSA-PKCS1-v1_5 with SHA-1.
"""

from __future__ import annotations

import base64
import json
from collections import OrderedDict

from notary.core.fingerprint import colon_hex
from notary.core.history import History
from notary.errors import BadData

_SIG_MARK = b', "signature": "'


def signed_payload(history: History) -> bytes:
    """The exact bytes the legacy signature covers, for ``history`` (already ordered)."""
    entries = ", ".join(
        f'{{"timestamp": {{"start": "{obs.first_seen:d}", "finish": "{obs.last_seen:d}"}},'
        f' "fingerprint": "{colon_hex(obs.sha1)}"}}'
        for obs in history
    )
    return ('{"fingerprintList": [' + entries + "]}").encode("ascii")


def body(payload: bytes, signature: bytes) -> bytes:
    """The full response body: ``payload`` with the base64 signature inserted."""
    if not payload.endswith(b"}"):
        raise BadData("legacy payload must be a JSON object")
    return payload[:-1] + _SIG_MARK + base64.b64encode(signature) + b'"}'


def split_body(raw: bytes) -> tuple[bytes, bytes]:
    """Recipe (b): the signed bytes and the decoded signature of a response body.

    Raises :class:`BadData` when the body has no signature or is not shaped like one.
    """
    idx = raw.rfind(_SIG_MARK)
    if idx < 0 or not raw.endswith(b'"}'):
        raise BadData("response body has no trailing signature")
    sig_b64 = raw[idx + len(_SIG_MARK) : -2]
    try:
        sig = base64.b64decode(sig_b64, validate=True)
    except ValueError as exc:
        raise BadData("response signature is not valid base64") from exc
    return raw[:idx] + b"}", sig


def reserialise_without_signature(raw: bytes) -> bytes:
    """Recipe (a): parse preserving key order, drop ``signature``, dump with defaults."""
    try:
        obj = json.loads(raw, object_pairs_hook=OrderedDict)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadData("response body is not JSON") from exc
    if not isinstance(obj, OrderedDict) or "signature" not in obj:
        raise BadData("response body has no signature")
    del obj["signature"]
    return json.dumps(obj).encode("utf-8")


__all__ = ["body", "reserialise_without_signature", "signed_payload", "split_body"]
