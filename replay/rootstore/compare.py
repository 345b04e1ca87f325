"""Perspectives trust vs full-store CA trust vs top-k CA trust on one workload. Pure.

For each site we know the chain the *client* was shown and the leaf the *notary* saw from
its own network path. Then:

* perspectives accepts when the notary saw the same leaf as the client (SHA-256 equal);
  it rejects a mismatch and a site the notary could not reach;
* full-store CA trust accepts when the client's chain verifies against the full store;
* top-k CA trust accepts when it verifies against the k most popular roots.

The agreement matrix counts, for each k, the sites in each of the eight accept/reject
patterns ``P F K`` (``+`` accept, ``-`` reject). Sites whose three answers are not all the
same are the *separating cases*, listed with their labels and the CA verdicts' reasons.

When sites carry a label saying what they are (the synthetic farms' roles), each kind of
trust is scored against the truth (:func:`scores`): an *attack* site (its clients were shown
a forged certificate: labels in :data:`ATTACK_LABELS`) rejected is a **catch**, accepted a
**miss**; a *genuine* site (any other label) rejected is a **false alarm**. Counted per site,
and weighted by how often clients validated each site (``SiteRequests``: the replay's notary
requests, and for perspectives the notary's own answers to them).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from notary.ca.verify import CAVerdict, RootStore, verify_chain

PATTERNS = tuple(f"P{p} F{f} K{k}" for p in "+-" for f in "+-" for k in "+-")
ATTACK_LABELS = frozenset({"mitm", "mitm-tail", "mitm-untrusted", "mitm-notary-path"})


@dataclass(frozen=True, slots=True)
class Observed:
    host: str
    port: int
    client_chain: tuple[bytes, ...]
    notary_leaf_sha256: bytes | None  # None: the notary could not reach the site
    label: str = ""  # e.g. the synthetic role, for the report


@dataclass(frozen=True, slots=True)
class SiteComparison:
    site: Observed
    perspective: bool
    full: CAVerdict
    top: dict[int, CAVerdict]

    def pattern(self, k: int) -> str:
        sign = {True: "+", False: "-"}
        return f"P{sign[self.perspective]} F{sign[self.full.ok]} K{sign[self.top[k].ok]}"


@dataclass(frozen=True, slots=True)
class Agreement:
    k: int
    counts: dict[str, int]
    perspective_vs_full: float
    perspective_vs_top: float
    full_vs_top: float
    top_accepts: int


@dataclass
class Comparison:
    sites: list[SiteComparison]
    ks: list[int]
    rows: list[Agreement] = field(default_factory=list)

    def separating(self, k: int) -> list[SiteComparison]:
        return [s for s in self.sites if s.pattern(k) not in ("P+ F+ K+", "P- F- K-")]

    def to_json(self, k_detail: int | None = None) -> dict[str, Any]:
        k_show = k_detail if k_detail is not None else (self.ks[-1] if self.ks else 0)
        return {
            "sites": len(self.sites),
            "ks": self.ks,
            "matrix": [
                {"k": r.k, "counts": r.counts, "agreement": {
                    "perspective_vs_full": r.perspective_vs_full,
                    "perspective_vs_top_k": r.perspective_vs_top,
                    "full_vs_top_k": r.full_vs_top}, "top_k_accepts": r.top_accepts}
                for r in self.rows
            ],
            "separating_k": k_show,
            "separating": [
                {"host": s.site.host, "port": s.site.port, "label": s.site.label,
                 "pattern": s.pattern(k_show), "full": s.full.to_json(),
                 "top_k": s.top[k_show].to_json()}
                for s in (self.separating(k_show) if k_show in self.ks else [])
            ],
            "by_label": {
                label: dict(Counter(s.pattern(k_show) for s in self.sites
                                    if s.site.label == label))
                for label in sorted({s.site.label for s in self.sites})
            } if k_show in self.ks else {},
        }


@dataclass(frozen=True, slots=True)
class SiteRequests:
    """How often clients validated a site, and how many of those validations the notary
    confirmed (``None``: unknown; then the site-level perspective verdict is used)."""

    requests: int
    perspective_accepts: int | None = None


@dataclass(frozen=True, slots=True)
class Score:
    catches: int = 0  # attack, rejected
    misses: int = 0  # attack, accepted
    false_alarms: int = 0  # genuine, rejected
    accepted_genuine: int = 0  # genuine, accepted

    def __add__(self, o: Score) -> Score:
        return Score(self.catches + o.catches, self.misses + o.misses,
                     self.false_alarms + o.false_alarms, self.accepted_genuine + o.accepted_genuine)


def _score(attack: bool, accepted: int, rejected: int) -> Score:
    if attack:
        return Score(catches=rejected, misses=accepted)
    return Score(false_alarms=rejected, accepted_genuine=accepted)


def scores(c: Comparison, k: int, requests: Mapping[tuple[str, int], SiteRequests] | None = None,
           ) -> dict[str, Any]:
    """Catches, misses and false alarms of perspectives, the full store and the top-k store
    over the labelled sites: ``{"sites": {verifier: Score}, "requests": {verifier: Score} or
    None, "labelled": n, "unlabelled": n, "weighted_sites": n, "not_requested": n}``. With
    ``requests``, only the sites clients validated count (per site too): a site nobody
    asked about was never observed by the notary, which says nothing about perspectives."""
    names = ("perspectives", "full CA store", f"top-{k} CA store")
    per_site = {n: Score() for n in names}
    weighted = {n: Score() for n in names} if requests is not None else None
    labelled = unlabelled = weighted_sites = not_requested = 0
    for s in c.sites:
        if not s.site.label:
            unlabelled += 1
            continue
        r = requests.get((s.site.host, s.site.port)) if requests is not None else None
        if requests is not None and (r is None or r.requests <= 0):
            not_requested += 1
            continue
        labelled += 1
        attack = s.site.label in ATTACK_LABELS
        accepts = (s.perspective, s.full.ok, s.top[k].ok)
        for n, ok in zip(names, accepts, strict=True):
            per_site[n] = per_site[n] + _score(attack, int(ok), int(not ok))
        if weighted is None or r is None:
            continue
        weighted_sites += 1
        for i, (n, ok) in enumerate(zip(names, accepts, strict=True)):
            if i == 0 and r.perspective_accepts is not None:
                acc = max(0, min(r.requests, r.perspective_accepts))  # the notary's answers
            else:
                acc = r.requests if ok else 0
            weighted[n] = weighted[n] + _score(attack, acc, r.requests - acc)
    return {"k": k, "sites": per_site, "requests": weighted, "labelled": labelled,
            "unlabelled": unlabelled, "weighted_sites": weighted_sites,
            "not_requested": not_requested}


def perspective_accepts(site: Observed) -> bool:
    if site.notary_leaf_sha256 is None or not site.client_chain:
        return False
    return hashlib.sha256(site.client_chain[0]).digest() == site.notary_leaf_sha256


def compare(
    sites: Sequence[Observed],
    full: RootStore,
    ranking: Sequence[bytes],
    ks: Sequence[int],
    now: int,
) -> Comparison:
    """Verdicts of the three kinds of trust for every site, and the agreement rows per k."""
    wanted = sorted({k for k in ks if k >= 1})
    stores = {k: full.restrict(list(ranking[:k]), f"top-{k}") for k in wanted if ranking}
    out: list[SiteComparison] = []
    for site in sites:
        p = perspective_accepts(site)
        f = verify_chain(site.client_chain, site.host, now, full)
        top: dict[int, CAVerdict] = {}
        for k in wanted:
            store = stores.get(k)
            if store is None:
                top[k] = CAVerdict("unknown-root", "no roots ranked", f"top-{k}")
            elif f.ok:
                top[k] = verify_chain(site.client_chain, site.host, now, store)
            else:
                top[k] = CAVerdict(f.verdict, f.reason, store.name)  # a subset cannot accept
        out.append(SiteComparison(site, p, f, top))
    result = Comparison(out, wanted)
    n = len(out) or 1
    for k in wanted:
        counts = {pat: 0 for pat in PATTERNS}
        for s in out:
            counts[s.pattern(k)] += 1
        result.rows.append(Agreement(
            k, counts,
            sum(s.perspective == s.full.ok for s in out) / n,
            sum(s.perspective == s.top[k].ok for s in out) / n,
            sum(s.full.ok == s.top[k].ok for s in out) / n,
            sum(s.top[k].ok for s in out),
        ))
    return result


__all__ = [
    "ATTACK_LABELS",
    "PATTERNS",
    "Score",
    "SiteRequests",
    "scores",
    "Agreement",
    "Comparison",
    "Observed",
    "SiteComparison",
    "compare",
    "perspective_accepts",
]
