"""Canonical JSON (RFC 8785, JCS) for the values the extended format uses.

Supported: objects with string keys, arrays, strings, booleans, null and integers with
magnitude below 2**53. Floats are refused (the format has none), so number serialisation is
the integer's shortest decimal form, as JCS requires. Keys are sorted by code point; every
key in the format is ASCII, for which that equals JCS's UTF-16 order (refused otherwise).
Strings are emitted as UTF-8 with only ``"``, ``\\`` and control characters escaped, using
the short escapes and lower-case ``\\u00xx`` as JCS prescribes.
"""

from __future__ import annotations

import json
from typing import Any

from notary.errors import BadData

MAX_SAFE_INT = 2**53 - 1


def _check(value: Any, depth: int = 0) -> None:
    if depth > 16:
        raise BadData("canonical JSON nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise BadData("integer outside the interoperable range")
        return
    if isinstance(value, list):
        for item in value:
            _check(item, depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str) or not key.isascii():
                raise BadData("canonical JSON keys must be ASCII strings")
            _check(item, depth + 1)
        return
    raise BadData(f"canonical JSON cannot encode {type(value).__name__}")


def canonical_json(value: Any) -> bytes:
    """The JCS serialisation of ``value`` as UTF-8 bytes."""
    _check(value)
    text = json.dumps(
        value, ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
    )
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate ("\ud800") has no UTF-8 form
        raise BadData("canonical JSON strings must be valid Unicode") from exc


def is_canonical(raw: bytes) -> bool:
    """Whether ``raw`` is exactly the canonical serialisation of what it parses to."""
    try:
        return canonical_json(json.loads(raw)) == raw
    except (ValueError, UnicodeDecodeError, BadData, RecursionError):
        return False


__all__ = ["canonical_json", "is_canonical"]
