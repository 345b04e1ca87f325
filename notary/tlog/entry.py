"""The log entry: one observation the notary commits to (pure).

An entry is the RFC 8785 canonical JSON of::

    {"host": "example.org", "ip": null, "observed_at": 1795324044, "port": 443,
     "sha1": "8F:C0:...", "sha256": "AB:CD:...", "type": "converge-observation/1"}

``ip`` is the address a client named (``POST /target/<host>+<port>/<ip>`` or v2 ``ip``),
whose record the notary keeps apart; ``null`` when the notary resolved the name itself.
``observed_at`` is when the notary first saw that certificate for that target. One entry is
logged per (target record, certificate): the first time a probe puts a certificate into a
target's history, or the first time an answer cites a certificate recorded before the log
existed. Later probes that see the same certificate, and every cache hit, add nothing: the
log grows with what the notary commits to, not with its traffic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from notary.core.canonical import canonical_json
from notary.core.fingerprint import colon_hex
from notary.core.target import Target, normalise_host, parse_ip
from notary.errors import BadInput

ENTRY_TYPE = "converge-observation/1"


@dataclass(frozen=True)
class Entry:
    host: str
    port: int
    ip: str | None
    sha256: bytes
    sha1: bytes
    observed_at: int

    @classmethod
    def of(cls, target: Target, sha1: bytes, sha256: bytes, observed_at: int) -> Entry:
        ip = None if target.ip is None or target.ip.compressed == target.host else (
            target.ip.compressed)
        return cls(target.host, target.port, ip, sha256, sha1, observed_at)

    @property
    def key(self) -> str:
        """What the log dedupes on: the target record's key and the certificate."""
        loc = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        where = loc if self.ip is None else f"{loc}/{self.ip}"
        return f"{where} {self.sha256.hex()}"

    def to_json(self) -> dict[str, Any]:
        return {
            "type": ENTRY_TYPE,
            "host": self.host,
            "port": self.port,
            "ip": self.ip,
            "sha256": colon_hex(self.sha256),
            "sha1": colon_hex(self.sha1),
            "observed_at": self.observed_at,
        }

    def encode(self) -> bytes:
        return canonical_json(self.to_json())


MEMBERS = frozenset({"type", "host", "port", "ip", "sha256", "sha1", "observed_at"})
MAX_ENTRY_BYTES = 4096  # a host name is at most 253 bytes: an entry is well under 1 KB
_COLON_HEX = {n: re.compile(f"(?:[0-9A-F]{{2}}:){{{n - 1}}}[0-9A-F]{{2}}") for n in (20, 32)}


def decode(data: bytes) -> dict[str, Any]:
    """An entry exactly as the notary logs them (:meth:`Entry.encode`), for a monitor: every
    member present and of its form, nothing else, in canonical form. Anything else raises
    ValueError (its message says why), whatever in it a parser would choke on: a notary that
    logs something else is misbehaving, and a monitor must say so rather than skip it."""
    if len(data) > MAX_ENTRY_BYTES:
        raise ValueError(f"longer than {MAX_ENTRY_BYTES} bytes")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:  # RecursionError: deeply nested brackets
        raise ValueError(f"not JSON ({type(exc).__name__})") from exc
    if not isinstance(doc, dict) or doc.get("type") != ENTRY_TYPE:
        raise ValueError(f"not a {ENTRY_TYPE} entry")
    if set(doc) != MEMBERS:
        raise ValueError(f"members {sorted(doc)}, not {sorted(MEMBERS)}")
    host, port, ip, at = doc["host"], doc["port"], doc["ip"], doc["observed_at"]
    try:
        if not isinstance(host, str) or normalise_host(host) != host:
            raise ValueError("host is not a normalised host name or address")
    except BadInput as exc:
        raise ValueError(f"host: {exc.message}") from exc
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ValueError("port is not an integer from 1 to 65535")
    if ip is not None and (not isinstance(ip, str) or (a := parse_ip(ip)) is None
                           or a.compressed != ip or ip == host):
        raise ValueError("ip is neither null nor an address other than the host")
    for name, size in (("sha256", 32), ("sha1", 20)):
        if not isinstance(doc[name], str) or not _COLON_HEX[size].fullmatch(doc[name]):
            raise ValueError(f"{name} is not {size} bytes of upper-case colon hex")
    if not isinstance(at, int) or isinstance(at, bool) or at < 0:
        raise ValueError("observed_at is not a non-negative integer")
    if canonical_json(doc) != data:
        raise ValueError("not in canonical form (RFC 8785)")
    return doc
