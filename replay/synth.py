"""A synthetic university hour of HTTPS flows, shaped like the study's trace.

:class:`SyntheticTrace` is pure and deterministic: everything comes from
``random.Random(seed)``; time is simulated. :func:`write_synthetic` writes a trace's files.
The model (numbers at ``scale=1``; ``docs/replay.md`` explains each choice):

- *Visits* arrive as a Poisson process whose rate follows a slow wave plus random bursts
  (peaks near 1,000 named flows/s around a mean near 594/s). A visit is one client browsing
  one site: it yields a few flows (geometric count, mean ``flows_per_visit``) spread over the
  following seconds, all to the site's address.
- Clients are drawn from a Zipf-like activity distribution; sites by category (social, CDN,
  cloud, other, in the study's observed shares) and within a category by Zipf-like
  popularity, so popular sites are revisited and the per-client cache absorbs most flows.
- Dead sites (names that still resolve, no HTTPS server any more, mostly cloud VMs) are a
  separate, large, rarely-revisited pool, drawn with probability ``dead_visit_share``
  (tuned so that about 20% of notary requests go to them, as the study's 503s).
- Flows to addresses without a name (CDN request routing) are added so that they make up
  ``unnamed_share`` of all flows (46% in the study); they have no entry in the name map.
- Named sites are also given a farm role: good, dead, slow (handshake delay), rotating
  (certificate changes), one of the mitm roles (clients saw a forged certificate: under the
  most popular root, under the least popular one, under an untrusted root, or with the
  attacker on the notary's path too) or misconfigured (genuine, but refused by CA
  validation), and a CA root chosen with the skewed popularity of real roots (top 1/5/10
  roots ~20%/59%/80% of sites).
"""

from __future__ import annotations

import contextlib
import csv
import heapq
import ipaddress
import json
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ReplayInputError
from replay.flows import (
    CANONICAL_COLUMNS,
    FLOW_FORMATS,
    LEGACY_HEADER,
    NEW_HEADER,
    FlowRecord,
    format_canonical,
    nfdump_legacy_row,
    nfdump_new_row,
)

ROOT_WEIGHTS = (0.20, 0.14, 0.10, 0.08, 0.07, 0.06, 0.05, 0.05, 0.04, 0.04,
                0.05, 0.04, 0.03, 0.03, 0.02)
CATEGORIES = ("social", "cdn", "cloud", "other")
ROLES = ("good", "dead", "slow", "rotating", "mitm", "mitm-tail", "mitm-untrusted",
         "mitm-notary-path", "misconfigured")
# the roles whose clients were shown a forged certificate (docs/rootstore.md)
ATTACK_ROLES = ("mitm", "mitm-tail", "mitm-untrusted", "mitm-notary-path")
SPECIAL_ROLES = ("slow", "rotating", *ATTACK_ROLES, "misconfigured")
NAMED_NET = ipaddress.ip_network("198.18.0.0/15")
UNNAMED_NET = ipaddress.ip_network("100.64.0.0/10")
CLIENT_NET = ipaddress.ip_network("10.0.0.0/8")
MAX_ACTIVE_TIMEOUT = 300.0
DEAD_FLOWS_PER_VISIT = 1.3


@dataclass(frozen=True)
class SynthConfig:
    """Parameters of the synthetic trace; defaults reproduce the study's hour at scale 1."""

    seed: int = 1
    scale: float = 1.0
    duration: float = 3600.0
    start: float = 1366563600.0  # 2013-04-21 17:00 UTC (noon local at the study's site)
    named_flow_rate: float = 594.0
    unnamed_share: float = 0.46
    flows_per_visit: float = 3.2
    visit_spread: float = 20.0
    clients: int = 30000
    client_zipf: float = 0.7
    category_shares: tuple[float, float, float, float] = (0.18, 0.24, 0.09, 0.49)
    category_sites: tuple[int, int, int, int] = (12, 6000, 4000, 30000)
    site_zipf: float = 1.05
    dead_visit_share: float = 0.16
    dead_sites: int = 60000
    unnamed_addresses: int = 12000
    burst_rate: float = 1 / 90.0
    burst_gain: tuple[float, float] = (0.25, 0.55)
    burst_seconds: tuple[float, float] = (5.0, 40.0)
    wave_amplitude: float = 0.15
    wave_period: float = 1800.0
    slow_share: float = 0.01
    rotating_share: float = 0.01
    mitm_share: float = 0.005
    mitm_tail_share: float = 0.001
    mitm_untrusted_share: float = 0.001
    mitm_notary_path_share: float = 0.001
    misconfigured_share: float = 0.005
    min_role_sites: int = 1
    mean_flow_bytes: float = 700_000.0
    sni_share: float = 0.0
    special_visits: int = 1

    def validate(self) -> None:
        if not 0 < self.scale <= 10:
            raise ReplayInputError("scale must be in (0, 10]")
        if not 0 < self.duration <= 86400:
            raise ReplayInputError("duration must be in (0, 86400] seconds")
        if not 0 <= self.unnamed_share < 1:
            raise ReplayInputError("unnamed share must be in [0, 1)")
        if not 0 <= self.dead_visit_share < 1:
            raise ReplayInputError("dead visit share must be in [0, 1)")
        if self.flows_per_visit < 1:
            raise ReplayInputError("flows per visit must be >= 1")

    def scaled(self, n: int) -> int:
        return max(1, int(round(n * self.scale)))


@dataclass(frozen=True)
class Site:
    host: str
    address: str
    category: str
    role: str
    root: int


@dataclass
class SynthSummary:
    flows: int = 0
    named_flows: int = 0
    unnamed_flows: int = 0
    visits: int = 0
    dead_visits: int = 0
    peak_named_per_s: int = 0
    reached: float = 0.0  # trace seconds generated so far (progress)
    per_second_named: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("per_second_named")
        d.pop("reached")
        return d


class _Zipf:
    """Draw ranks 0..n-1 with P(k) ~ 1/(k+1)^s, via a cumulative table (bounded n)."""

    def __init__(self, n: int, s: float) -> None:
        weights = [1.0 / (k + 1) ** s for k in range(n)]
        total = 0.0
        self.cum: list[float] = []
        for w in weights:
            total += w
            self.cum.append(total)
        self.total = total

    def draw(self, rng: random.Random) -> int:
        import bisect

        return min(bisect.bisect_left(self.cum, rng.random() * self.total), len(self.cum) - 1)


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    if lam > 50:
        return max(0, int(round(rng.gauss(lam, math.sqrt(lam)))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _address(net: ipaddress.IPv4Network | ipaddress.IPv6Network, i: int) -> str:
    return str(net.network_address + 1 + i % (net.num_addresses - 2))


class SyntheticTrace:
    """The site catalogue and a flow stream for one configuration."""

    def __init__(self, config: SynthConfig) -> None:
        config.validate()
        self.config = config
        self.rng = random.Random(config.seed)
        self.sites_by_category: dict[str, list[Site]] = {}
        self.dead: list[Site] = []
        self._build_sites()
        self.client_pick = _Zipf(config.scaled(config.clients), config.client_zipf)
        self.site_pick = {c: _Zipf(len(s), config.site_zipf)
                          for c, s in self.sites_by_category.items()}
        self.summary = SynthSummary()

    # -- catalogue -------------------------------------------------------------------------
    def _root(self) -> int:
        return self.rng.choices(range(len(ROOT_WEIGHTS)), ROOT_WEIGHTS)[0]

    def _build_sites(self) -> None:
        c = self.config
        idx = 0
        names = {
            "social": lambda i: f"www.social{i}.test",
            "cdn": lambda i: f"a{i}.cdn-{'abc'[i % 3]}.test",
            "cloud": lambda i: f"app{i}.cloud-{'xy'[i % 2]}.test",
            "other": lambda i: f"www.site{i}.test",
        }
        for cat, n in zip(CATEGORIES, c.category_sites, strict=True):
            count = n if cat == "social" else c.scaled(n)
            sites = []
            for i in range(count):
                sites.append(Site(names[cat](i), _address(NAMED_NET, idx), cat, "good",
                                  self._root()))
                idx += 1
            self.sites_by_category[cat] = sites
        total = idx + c.scaled(c.dead_sites)
        if total > NAMED_NET.num_addresses - 2:
            raise ReplayInputError(f"{total} sites do not fit in {NAMED_NET}; lower --scale")
        for i in range(c.scaled(c.dead_sites)):
            cat = "cloud" if i % 4 else "other"
            host = f"vm{i}.gone-{'xy'[i % 2]}.test" if cat == "cloud" else f"old{i}.gone.test"
            self.dead.append(Site(host, _address(NAMED_NET, idx), cat, "dead", self._root()))
            idx += 1
        # special roles among the non-social named sites, spread over popularity ranks
        pool = [s for cat in ("cdn", "cloud", "other") for s in self.sites_by_category[cat]]
        order = list(range(len(pool)))
        self.rng.shuffle(order)
        pos = 0
        for role, share in (("slow", c.slow_share), ("rotating", c.rotating_share),
                            ("mitm", c.mitm_share), ("mitm-tail", c.mitm_tail_share),
                            ("mitm-untrusted", c.mitm_untrusted_share),
                            ("mitm-notary-path", c.mitm_notary_path_share),
                            ("misconfigured", c.misconfigured_share)):
            n = max(c.min_role_sites, int(round(len(pool) * share)))
            for j in order[pos:pos + n]:
                s = pool[j]
                pool[j] = Site(s.host, s.address, s.category, role, s.root)
            pos += n
        k = 0
        for cat in ("cdn", "cloud", "other"):
            n = len(self.sites_by_category[cat])
            self.sites_by_category[cat] = pool[k:k + n]
            k += n

    def sites(self) -> Iterator[Site]:
        for cat in CATEGORIES:
            yield from self.sites_by_category[cat]
        yield from self.dead

    def special_sites(self) -> list[Site]:
        return [s for cat in CATEGORIES for s in self.sites_by_category[cat]
                if s.role in SPECIAL_ROLES]

    def name_map(self) -> Iterator[tuple[str, str]]:
        for s in self.sites():
            yield s.address, s.host

    # -- traffic ---------------------------------------------------------------------------
    def _rate_profile(self) -> list[float]:
        """Named-flow rate per second: a slow wave times random bursts."""
        c, rng = self.config, self.rng
        n = int(math.ceil(c.duration))
        base = c.named_flow_rate * c.scale
        phase = rng.random() * 2 * math.pi
        gain = [1.0] * n
        t = 0.0
        while True:
            t += rng.expovariate(c.burst_rate)
            if t >= n:
                break
            g = rng.uniform(*c.burst_gain)
            length = rng.uniform(*c.burst_seconds)
            for s in range(int(t), min(n, int(t + length))):
                gain[s] = max(gain[s], 1.0 + g)
        mean_gain = sum(gain) / n
        return [base / mean_gain * g * (1 + c.wave_amplitude
                                        * math.sin(2 * math.pi * s / c.wave_period + phase))
                for s, g in enumerate(gain)]

    def _flow(self, start: float, src: str, dst: str, sni: str | None) -> FlowRecord:
        rng = self.rng
        sigma = 2.0
        mu = math.log(self.config.mean_flow_bytes) - sigma * sigma / 2
        size = max(300, int(rng.lognormvariate(mu, sigma)))
        duration = min(MAX_ACTIVE_TIMEOUT, rng.lognormvariate(math.log(4.0), 1.2))
        packets = max(3, size // 900)
        return FlowRecord(round(start, 3), round(start + duration, 3), src, dst,
                          rng.randrange(32768, 61000), 443, 6, packets, size, sni)

    def _client(self) -> str:
        return _address(CLIENT_NET, self.client_pick.draw(self.rng) * 7919)

    def _visit_site(self) -> Site:
        c, rng = self.config, self.rng
        if rng.random() < c.dead_visit_share:
            return self.dead[rng.randrange(len(self.dead))]
        cat = rng.choices(CATEGORIES, c.category_shares)[0]
        return self.sites_by_category[cat][self.site_pick[cat].draw(rng)]

    def flows(self) -> Iterator[FlowRecord]:
        """All flows in start-time order (bounded look-ahead heap)."""
        c, rng = self.config, self.rng
        rates = self._rate_profile()
        heap: list[tuple[float, int, FlowRecord]] = []
        seq = 0
        mean_extra = c.flows_per_visit - 1
        p_more = mean_extra / (1 + mean_extra) if mean_extra > 0 else 0.0
        unnamed_ratio = c.unnamed_share / (1 - c.unnamed_share)
        n_unnamed = c.scaled(c.unnamed_addresses)
        # mean named flows per visit: dead sites see 1.3 flows, live sites flows_per_visit
        per_visit = (c.dead_visit_share * DEAD_FLOWS_PER_VISIT
                     + (1 - c.dead_visit_share) * c.flows_per_visit)
        self.summary.per_second_named = [0] * len(rates)
        # every slow/rotating/mitm/misconfigured site is visited at least ``special_visits``
        # times, so even
        # tiny traces exercise each farm role
        forced: dict[int, list[Site]] = {}
        for site in self.special_sites():
            for _ in range(c.special_visits):
                forced.setdefault(rng.randrange(max(1, len(rates) // 2)), []).append(site)
        for sec, rate in enumerate(rates):
            t0 = c.start + sec
            visits = [self._visit_site() for _ in range(_poisson(rng, rate / per_visit))]
            for site in visits + forced.get(sec, []):
                src = self._client()
                self.summary.visits += 1
                k = 1
                if site.role == "dead":
                    self.summary.dead_visits += 1
                    k += rng.random() < DEAD_FLOWS_PER_VISIT - 1
                else:
                    while rng.random() < p_more and k < 200:
                        k += 1
                t = t0 + rng.random()
                for j in range(k):
                    if j:
                        t += rng.expovariate(k / c.visit_spread)
                    if t >= c.start + c.duration:
                        break
                    sni = site.host if c.sni_share and rng.random() < c.sni_share else None
                    seq += 1
                    heapq.heappush(heap, (t, seq, self._flow(t, src, site.address, sni)))
            for _ in range(_poisson(rng, rate * unnamed_ratio)):
                t = t0 + rng.random()
                dst = _address(UNNAMED_NET, rng.randrange(n_unnamed))
                seq += 1
                heapq.heappush(heap, (t, seq, self._flow(t, self._client(), dst, None)))
            horizon = t0 + 1
            while heap and heap[0][0] < horizon:
                rec = heapq.heappop(heap)[2]
                yield self._count(rec)
        while heap:
            yield self._count(heapq.heappop(heap)[2])

    def _count(self, rec: FlowRecord) -> FlowRecord:
        s = self.summary
        s.flows += 1
        s.reached = rec.start - self.config.start
        if rec.dst.startswith("100."):
            s.unnamed_flows += 1
        else:
            s.named_flows += 1
            i = int(rec.start - self.config.start)
            if 0 <= i < len(s.per_second_named):
                s.per_second_named[i] += 1
        return rec

    def farm_spec(self) -> dict[str, object]:
        return {
            "version": 1,
            "seed": self.config.seed,
            "roots": len(ROOT_WEIGHTS),
            "sites": [{"host": s.host, "role": s.role, "root": s.root, "category": s.category}
                      for s in self.sites()],
        }


def write_synthetic(trace: Any, out: Path, formats: Sequence[str]) -> dict[str, Any]:
    """Write a synthetic trace's flow files, name map, farm spec and ``synth.json``."""
    cfg = trace.config
    for f in formats:
        if f not in FLOW_FORMATS:
            raise ReplayInputError(f"unknown flow format {f!r}; choose from {FLOW_FORMATS}")
    out.mkdir(parents=True, exist_ok=True)
    with (out / "names.txt").open("w", encoding="utf-8") as fh:
        fh.write("# address name (synthetic reverse-DNS map)\n")
        for addr, host in trace.name_map():
            fh.write(f"{addr} {host}\n")
    (out / "farm-spec.json").write_text(json.dumps(trace.farm_spec()) + "\n", encoding="utf-8")
    files = {"canonical": out / "flows.csv", "nfdump-legacy": out / "flows-nfdump-legacy.csv",
             "nfdump-new": out / "flows-nfdump-new.csv"}
    with contextlib.ExitStack() as stack:
        writers: list[tuple[Any, Callable[[FlowRecord], list[str]]]] = []
        for f in formats:
            fh = stack.enter_context(files[f].open("w", encoding="utf-8", newline=""))
            w = csv.writer(fh, lineterminator="\n")
            if f == "canonical":
                w.writerow(CANONICAL_COLUMNS)
                writers.append((w, format_canonical))
            elif f == "nfdump-legacy":
                w.writerow(LEGACY_HEADER)
                writers.append((w, nfdump_legacy_row))
            else:
                w.writerow(NEW_HEADER)
                writers.append((w, nfdump_new_row))
        for rec in trace.flows():
            for w, fmt in writers:
                w.writerow(fmt(rec))
    s = trace.summary
    info = {"config": {k: v for k, v in cfg.__dict__.items()},
            "summary": s.as_dict(),
            "peak_named_flows_per_s": max(s.per_second_named, default=0),
            "mean_named_flows_per_s": s.named_flows / cfg.duration,
            "files": {f: str(files[f]) for f in formats}}
    (out / "synth.json").write_text(json.dumps(info, indent=2, default=str) + "\n",
                                    encoding="utf-8")
    return info
