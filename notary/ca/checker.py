"""The notary's CA verifier setting: which verifier decides, and a bounded verdict cache.

* ``perspective`` (default): the network-perspective verifier only; nothing here runs and
  legacy responses are byte-for-byte what they always were.
* ``both``: the CA verdict is computed, logged and put in extended answers (``ca`` field);
  the answers' verdicts and legacy status codes stay the perspective ones.
* ``ca``: as ``both``, and a certificate the notary saw is vouched for (200, ``match``) only
  when its presented chain also passes CA validation; otherwise the answer is 409
  (``mismatch``). The notary can only CA-check chains it saw itself, so a fingerprint it did
  not see is a mismatch as before.

Verdicts are cached per (host, location, leaf SHA-256) for ``ttl`` seconds (a verdict
depends on the time, e.g. expiry), at most ``max_entries`` of them. Time is an argument.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Literal

from notary.ca.stores import full_store, read_fingerprint_list
from notary.ca.verify import CAVerdict, RootStore, verify_chain
from notary.errors import BadConfig

VerifierMode = Literal["perspective", "ca", "both"]
MODES: tuple[VerifierMode, ...] = ("perspective", "ca", "both")
NO_CHAIN = "no presented chain is recorded for this certificate"


def parse_mode(text: str) -> VerifierMode:
    for mode in MODES:
        if text == mode:
            return mode
    raise BadConfig(f"verifier must be one of {', '.join(MODES)}, got {text!r}")


class CAChecker:
    def __init__(
        self, mode: VerifierMode, store: RootStore, *, ttl: int = 60, max_entries: int = 100_000
    ) -> None:
        if mode == "perspective":
            raise BadConfig("the perspective verifier needs no CA checker")
        if ttl < 0 or max_entries < 1:
            raise BadConfig("CA verdict cache: ttl >= 0 and max_entries >= 1")
        self.mode: VerifierMode = mode
        self.store = store
        self._ttl = ttl
        self._max = max_entries
        self._cache: OrderedDict[tuple[str, str, bytes], tuple[int, CAVerdict]] = OrderedDict()
        self.computed = 0

    @property
    def decides(self) -> bool:
        """Whether the CA verdict changes answers (mode ``ca``)."""
        return self.mode == "ca"

    def cached(self, host: str, location: str, sha256: bytes, now: int) -> CAVerdict | None:
        key = (host, location, sha256)
        hit = self._cache.get(key)
        if hit is None or not 0 <= now - hit[0] < self._ttl:
            return None
        self._cache.move_to_end(key)
        return hit[1]

    def check(
        self, host: str, location: str, sha256: bytes, chain: tuple[bytes, ...], now: int
    ) -> CAVerdict:
        """Verify (or take from the cache) the chain presented with leaf ``sha256``."""
        hit = self.cached(host, location, sha256, now)
        if hit is not None:
            return hit
        if not chain:
            return CAVerdict("bad-chain", NO_CHAIN, self.store.name)
        verdict = verify_chain(chain, host, now, self.store)
        self.computed += 1
        key = (host, location, sha256)
        self._cache[key] = (now, verdict)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return verdict




def build_checker(
    mode: str, ca_roots: list[str], ca_trust: Path | None, no_mozilla: bool
) -> CAChecker | None:
    """The checker for the serve settings (reads root files), or ``None`` for perspective."""
    verifier = parse_mode(mode)
    if verifier == "perspective":
        return None
    store = full_store([Path(p) for p in ca_roots], mozilla=not no_mozilla)
    if ca_trust is not None:
        trusted = read_fingerprint_list(ca_trust)
        if not trusted:
            raise BadConfig(f"{ca_trust} lists no root fingerprints")
        store = store.restrict(trusted, f"{store.name}/top-{len(trusted)}")
    return CAChecker(verifier, store)


__all__ = ["MODES", "NO_CHAIN", "CAChecker", "VerifierMode", "build_checker", "parse_mode"]
