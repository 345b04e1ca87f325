"""Root popularity and coverage (the 2015 thesis's Table 3/5 and Figures 17/18). Pure.

Definitions (docs/rootstore.md):

* Each site's chain is verified against the *full* store at one time ``now``. A site whose
  chain verifies is *valid* and is attributed to the root that anchors its verified path.
  Only valid sites enter the popularity table and the coverage denominator (the thesis
  counted the sites "returning a valid certificate chain"); the others are counted by
  verdict.
* Popularity: roots ranked by the number of valid sites they anchor (ties by name, then
  fingerprint, so the ranking is deterministic).
* Coverage at k: the share of valid sites anchored by one of the k most popular roots.
* Organisations: sites are grouped by an organisation key from the Public Suffix List:
  ``registrable`` (the registrable domain: www.example.co.uk -> example.co.uk) or ``label``
  (its first label: example.com and example.co.uk -> example). Each organisation counts
  once, attributed to the root anchoring most of its valid sites (ties: the first site's).
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from cryptography import x509

from notary.ca.verify import CAVerdict, RootStore, load_certificate, verify_chain
from notary.errors import BadData

OrgMode = Literal["registrable", "label"]
MAX_K = 50
# The thesis's reference points ("Analysis of HTTPS Overhead and Minimal Web Certificate Chain
# of Trust", 2015): coverage of its 97,415 valid HTTPS sites by the k most popular roots
# (Figure 17, text of section 4), and of its 80,316 sites after merging one company's sites
# (Figure 18).
THESIS_COVERAGE = {1: 0.20, 5: 0.59, 10: 0.80}
THESIS_ORG_COVERAGE = {1: 0.18, 10: 0.80, 15: 0.85}
MAX_POOL = 10_000


@dataclass(frozen=True, slots=True)
class SiteChain:
    host: str
    port: int
    chain: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class SiteVerdict:
    host: str
    port: int
    verdict: CAVerdict


@dataclass(frozen=True, slots=True)
class RootCount:
    rank: int
    sha256: bytes
    name: str
    sites: int
    share: float  # of valid sites
    cumulative: float


def attribute(
    sites: Iterable[SiteChain],
    full: RootStore,
    now: int,
    pool: Sequence[x509.Certificate] = (),
) -> list[SiteVerdict]:
    """Verify every site's chain against the full store at ``now`` (``pool``: intermediates
    seen elsewhere, used only to name a missing intermediate)."""
    return [SiteVerdict(s.host, s.port, verify_chain(s.chain, s.host, now, full, pool=pool))
            for s in sites]


def intermediate_pool(sites: Iterable[SiteChain], limit: int = MAX_POOL) -> list[x509.Certificate]:
    """The distinct CA certificates sent after the leaf in any chain (at most ``limit``)."""
    seen: set[bytes] = set()
    out: list[x509.Certificate] = []
    for s in sites:
        for der in s.chain[1:]:
            if der in seen or len(out) >= limit:
                continue
            seen.add(der)
            try:
                cert = load_certificate(der)
                ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
            except (BadData, x509.ExtensionNotFound):
                continue
            if ca and cert.issuer != cert.subject:
                out.append(cert)
    return out


def popularity(results: Sequence[SiteVerdict]) -> list[RootCount]:
    """The root popularity table over the valid sites, most popular first."""
    counts: Counter[bytes] = Counter()
    names: dict[bytes, str] = {}
    for r in results:
        v = r.verdict
        if v.ok and v.root_sha256 is not None:
            counts[v.root_sha256] += 1
            names[v.root_sha256] = v.root_name or v.root_sha256.hex()
    total = sum(counts.values())
    order = sorted(counts, key=lambda fp: (-counts[fp], names[fp], fp))
    table: list[RootCount] = []
    running = 0
    for rank, fp in enumerate(order, 1):
        running += counts[fp]
        table.append(RootCount(rank, fp, names[fp], counts[fp], counts[fp] / total,
                               running / total))
    return table


def coverage(table: Sequence[RootCount], max_k: int = MAX_K) -> list[tuple[int, float]]:
    """``(k, share of valid sites)`` for k = 1..max_k (flat once every root is trusted)."""
    out: list[tuple[int, float]] = []
    for k in range(1, max_k + 1):
        out.append((k, table[min(k, len(table)) - 1].cumulative if table else 0.0))
    return out


def verdict_counts(results: Sequence[SiteVerdict]) -> dict[str, int]:
    return dict(Counter(r.verdict.verdict for r in results))


def unevaluable(results: Sequence[SiteVerdict]) -> int:
    """Sites whose chain or name could not be evaluated (counted within their verdicts)."""
    return sum(1 for r in results if r.verdict.unevaluable)


def org_key(host: str, privatesuffix: Callable[[str], str | None], mode: OrgMode) -> str:
    """The organisation key of a host name (IP literals and bare suffixes are their own)."""
    name = host.rstrip(".").lower()
    try:
        ipaddress.ip_address(name.strip("[]"))
        return name
    except ValueError:
        pass
    reg = privatesuffix(name)
    if reg is None:
        return host.lower()
    return reg if mode == "registrable" else reg.split(".", 1)[0]


def merge_by_org(
    results: Sequence[SiteVerdict], key: Callable[[str], str]
) -> list[SiteVerdict]:
    """One representative per organisation (see the module rules), in first-seen order."""
    groups: dict[str, list[SiteVerdict]] = {}
    for r in results:
        groups.setdefault(key(r.host), []).append(r)
    merged: list[SiteVerdict] = []
    for members in groups.values():
        valid = [m for m in members if m.verdict.ok]
        if not valid:
            merged.append(members[0])
            continue
        votes = Counter(m.verdict.root_sha256 for m in valid)
        best = max(votes.values())
        merged.append(next(m for m in valid if votes[m.verdict.root_sha256] == best))
    return merged


def privatesuffix_function() -> Callable[[str], str | None]:
    """The registrable-domain function from the offline Public Suffix List package."""
    from publicsuffixlist import PublicSuffixList

    psl = PublicSuffixList()

    def reg(host: str) -> str | None:
        value = psl.privatesuffix(host)
        return value if isinstance(value, str) else None

    return reg


__all__ = [
    "MAX_K",
    "THESIS_COVERAGE",
    "THESIS_ORG_COVERAGE",
    "OrgMode",
    "RootCount",
    "SiteChain",
    "SiteVerdict",
    "attribute",
    "coverage",
    "intermediate_pool",
    "merge_by_org",
    "org_key",
    "popularity",
    "privatesuffix_function",
    "unevaluable",
    "verdict_counts",
]
