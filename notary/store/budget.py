"""The store's budget: caps by records and bytes, eviction by last use. Pure settings.

Records fall in two classes, each with its own budget:

* **own** records (``host:port``): what the notary saw at the addresses it resolved itself.
  These carry the durable history clients rely on (``first_seen``).
* **named** records (``host:port/ip``, :attr:`notary.core.target.Target.key` with an address
  a client named) and their chains: anyone can make as many as they like, so they get a
  smaller budget and a time to live, and a flood of them never evicts an own record.

Within a class, a record is evicted before another when it was never used after the probe
that made it and the other was (``useful``), else when it was last used earlier. A record is
*used* when it answers a request from the cache or a request makes it re-probed. So a flood
of distinct targets, each asked once, only ever evicts records that were asked once and
nothing asked since; a record asked again is evicted only after every such record is gone,
and then the least recently used first.

Accounted bytes are the payload (record key, history at 68 bytes per certificate, signed
body, chain DER) plus :data:`ROW_OVERHEAD` per stored row; the backing store's own overhead
comes on top (docs/operations.md gives the measured factors). ``0`` turns a bound off.
"""

from __future__ import annotations

from dataclasses import dataclass

from notary.errors import BadConfig

ROW_OVERHEAD = 32  # bytes accounted per stored row (record, certificate, chain)
OBSERVATION_BYTES = 68  # sha1 + sha256 + first_seen + last_seen
EVICT_TO = 0.9  # an over-budget class is evicted down to this fraction of its caps
EXPIRE_EVERY = 60  # seconds between sweeps of records past their time to live
EVICT_ROUNDS = 64  # bound on eviction rounds per write


def is_named(location: str) -> bool:
    """True for a record about an address a client named (``host:port/ip``)."""
    return "/" in location


@dataclass(frozen=True, slots=True)
class Budget:
    max_records: int = 1_000_000  # own records
    max_bytes: int = 512 * 1024 * 1024
    ttl: int = 90 * 86_400  # seconds an own record is kept unused (0: for ever)
    named_max_records: int = 20_000
    named_max_bytes: int = 32 * 1024 * 1024
    named_ttl: int = 86_400  # seconds a named record is kept unused

    def check(self) -> None:
        for name in ("max_records", "max_bytes", "ttl", "named_max_records",
                     "named_max_bytes", "named_ttl"):
            if getattr(self, name) < 0:
                raise BadConfig(f"store_{name} must not be negative")

    def caps(self, named: bool) -> tuple[int, int]:
        """(records, bytes) caps of a class; 0 is no cap."""
        return (self.named_max_records, self.named_max_bytes) if named else (
            self.max_records, self.max_bytes)

    def ttl_of(self, named: bool) -> int:
        return self.named_ttl if named else self.ttl

    def over(self, named: bool, records: int, nbytes: int) -> bool:
        max_records, max_bytes = self.caps(named)
        return (0 < max_records < records) or (0 < max_bytes < nbytes)

    def excess(self, named: bool, records: int, nbytes: int) -> int:
        """How many least useful records to evict to bring a class down to :data:`EVICT_TO`
        of its caps (an estimate for bytes, from the class's mean record size)."""
        if not self.over(named, records, nbytes) or records <= 0:
            return 0
        max_records, max_bytes = self.caps(named)
        want = 0
        if max_records:
            want = max(want, records - int(max_records * EVICT_TO))
        if max_bytes and nbytes > max_bytes * EVICT_TO:
            mean = max(1, nbytes // records)
            want = max(want, -(-(nbytes - int(max_bytes * EVICT_TO)) // mean))
        return max(1, min(records, want))


UNBOUNDED = Budget(0, 0, 0, 0, 0, 0)

__all__ = ["EVICT_ROUNDS", "EVICT_TO", "EXPIRE_EVERY", "OBSERVATION_BYTES", "ROW_OVERHEAD",
           "UNBOUNDED", "Budget", "is_named"]
