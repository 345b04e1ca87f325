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
from dataclasses import dataclass
from typing import Any

from notary.core.canonical import canonical_json
from notary.core.fingerprint import colon_hex
from notary.core.target import Target

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


def decode(data: bytes) -> dict[str, Any]:
    """Parse an entry for a monitor (raises ValueError on anything but an entry object)."""
    doc = json.loads(data)
    if not isinstance(doc, dict) or doc.get("type") != ENTRY_TYPE:
        raise ValueError("not a converge-observation/1 entry")
    for name, kind in (("host", str), ("port", int), ("sha256", str), ("sha1", str),
                       ("observed_at", int)):
        if not isinstance(doc.get(name), kind) or isinstance(doc.get(name), bool):
            raise ValueError(f"entry field {name} is missing or of the wrong type")
    if doc.get("ip") is not None and not isinstance(doc["ip"], str):
        raise ValueError("entry field ip must be a string or null")
    return doc
