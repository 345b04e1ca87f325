"""The root-store world: a synthetic web PKI for the restricted-root-store comparison (made
with :mod:`replay.pki`, served by :class:`replay.farm.SNIFarm`).

The world has ``roots`` public roots whose popularity is skewed like Table 3 of the 2015
thesis (AddTrust 18944, GlobalSign 13788, Equifax 11285, ... then a geometric tail), one
intermediate under each, a private root outside the public store, and sites grouped in
organisations (an organisation's sites share one root, as the thesis observed). Every
certificate follows the web-PKI profile that ``cryptography``'s verifier enforces (SKI/AKI,
non-critical SAN, serverAuth EKU), so good sites verify and bad ones fail for the intended
reason only.

Roles (what the client is shown; the farm serves the same, except for ``mitm``):

* ``good``: leaf + intermediate; ``good-full``: leaf + intermediate + root;
  ``good-direct``: a leaf issued by the root itself, sent alone;
* ``self-signed``; ``private-ca``: leaf + intermediate under the private root;
* ``expired``; ``wrong-host`` (a certificate for another name);
* ``missing-intermediate``: the server sends only the leaf, issued by an intermediate;
* ``mitm``: the farm (the notary's clean path) serves the genuine chain, while the client is
  shown a forged leaf from a rogue intermediate under the *most popular* root.

Files under the world directory: ``roots.pem`` (the public store), ``private-root.pem``,
``leaf.key``, ``chains/<host>.pem`` (served), ``client-view.jsonl``, ``hosts.txt``
(``host:port`` lines for ``replay rootstore scan``), ``hosts`` (``IP name`` lines) and
``world.json``.
``now`` is an argument; keys come from the OS random source.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from replay.errors import ReplayInputError, ReplayIOError
from replay.farm import SiteFiles, SNIFarm
from replay.pki import CA, LEAF_DAYS, der, key_pem, make_ca, make_leaf, new_key, pem, write_atomic

THESIS_TABLE3 = (
    ("AddTrust", 18944), ("GlobalSign", 13788), ("Equifax", 11285), ("Go Daddy", 6621),
    ("GeoTrust", 6557), ("VeriSign", 4083), ("Parallels", 4048), ("DigiCert", 3697),
    ("Thawte", 3470),
)
# Each tail root has 0.88 times the sites of the one before: with 40 roots the whole world
# then matches the thesis's 97,415 sites (top 1 ~ 19%, top 5 ~ 59%, top 10 ~ 78%).
TAIL_RATIO = 0.88
BAD_ROLES = ("self-signed", "private-ca", "expired", "wrong-host", "missing-intermediate",
             "mitm")
GOOD_ROLES = ("good", "good-full", "good-direct")
ROLES = GOOD_ROLES + BAD_ROLES
MAX_SITES = 100_000
MAX_ROOTS = 64
SUFFIXES = ("test", "example", "co.uk")


POPULARITY_MODELS = ("thesis", "zipf:S", "uniform")


def root_weights(n: int, model: str = "thesis") -> list[float]:
    """Popularity weights of ``n`` roots under a model:

    * ``thesis``: Table 3's nine counts, then a geometric tail (ratio :data:`TAIL_RATIO`).
      A coverage curve measured on such a world returns this input, so it cannot confirm
      the thesis; the other models show what the analysis measures.
    * ``zipf:S``: weight of the root of rank r is 1 / r**S (S > 0; S near 1 is a common fit
      of web popularity, vary it to see the curve move);
    * ``uniform``: every root equally popular (no concentration at all).
    """
    if n < 1:
        raise ReplayInputError("a world needs at least one root")
    if model == "thesis":
        counts = [float(c) for _, c in THESIS_TABLE3[:n]]
        while len(counts) < n:
            counts.append(counts[-1] * TAIL_RATIO)
        return counts
    if model == "uniform":
        return [1.0] * n
    if model.startswith("zipf:"):
        try:
            exponent = float(model[5:])
        except ValueError:
            exponent = -1.0
        if not 0 < exponent <= 10:
            raise ReplayInputError(f"zipf exponent must be in (0, 10], got {model[5:]!r}")
        return [1.0 / (r + 1) ** exponent for r in range(n)]
    raise ReplayInputError(f"unknown popularity model {model!r}; choose thesis, zipf:S or "
                           "uniform")


@dataclass(frozen=True)
class WorldSite:
    host: str
    org: int
    root: int
    role: str


def plan_sites(n: int, roots: int, seed: int, bad_share: float = 0.2,
               popularity: str = "thesis") -> list[WorldSite]:
    """Deterministic site list: organisations of Zipf-like size, each on one root drawn by
    :func:`root_weights`; every bad role appears at least once when ``n`` allows."""
    if not 1 <= n <= MAX_SITES or not 1 <= roots <= MAX_ROOTS:
        raise ReplayInputError(f"sites must be 1..{MAX_SITES} and roots 1..{MAX_ROOTS}")
    rng = random.Random(seed)
    weights = root_weights(roots, popularity)
    sites: list[WorldSite] = []
    org = 0
    while len(sites) < n:
        size = min(n - len(sites), max(1, int(rng.paretovariate(1.6))))
        root = rng.choices(range(roots), weights)[0]
        for j in range(size):
            suffix = SUFFIXES[j % len(SUFFIXES)]
            prefix = ("www.", "", "shop.", "mail.")[(j // len(SUFFIXES)) % 4]
            extra = "" if j < 4 * len(SUFFIXES) else f"s{j}."
            sites.append(WorldSite(f"{extra}{prefix}org{org}.{suffix}", org, root, "good"))
        org += 1
    roles: list[str] = []
    n_bad = max(len(BAD_ROLES), round(n * bad_share)) if n >= 2 * len(BAD_ROLES) else 0
    roles += [BAD_ROLES[i % len(BAD_ROLES)] for i in range(n_bad)]
    roles += [GOOD_ROLES[i % len(GOOD_ROLES)] if i % 5 == 0 else "good"
              for i in range(n - n_bad)]
    rng.shuffle(roles)
    return [WorldSite(s.host, s.org, s.root, r) for s, r in zip(sites, roles, strict=True)]


class RootWorld:
    """Build (``build``) or load (``load``) a world directory."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    @classmethod
    def build(cls, directory: Path, now: dt.datetime, *, sites: int = 200, roots: int = 20,
              seed: int = 1, port: int = 443, popularity: str = "thesis") -> RootWorld:
        plan = plan_sites(sites, roots, seed, popularity=popularity)
        try:
            (directory / "chains").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReplayIOError(f"cannot create {directory}: {exc}") from exc
        weights = root_weights(roots, popularity)
        names = [THESIS_TABLE3[i][0] if i < len(THESIS_TABLE3) else f"Tail {i}"
                 for i in range(roots)]
        public = [make_ca(f"Synthetic {names[i]} Root", f"Synthetic {names[i]}", now)
                  for i in range(roots)]
        inters = [make_ca(f"Synthetic {names[i]} Issuing CA", f"Synthetic {names[i]}", now, r)
                  for i, r in enumerate(public)]
        private = make_ca("Corporate Private Root", "Private Corp", now)
        private_int = make_ca("Corporate Private Issuing CA", "Private Corp", now, private)
        rogue = make_ca("Rogue Issuing CA", f"Synthetic {names[0]}", now, public[0])
        leaf_key = new_key()
        start = now - dt.timedelta(days=1)
        views: list[dict[str, Any]] = []
        for s in plan:
            served, client = _chains(s, public, inters, private_int, rogue, leaf_key, start,
                                     now)
            write_atomic(directory / "chains" / f"{_safe(s.host)}.pem", pem(*served))
            views.append({"host": s.host, "port": port, "role": s.role, "org": s.org,
                          "root": s.root,
                          "chain": [base64.b64encode(der(c)).decode() for c in client]})
        write_atomic(directory / "roots.pem", pem(*(r.cert for r in public)))
        write_atomic(directory / "private-root.pem", pem(private.cert))
        write_atomic(directory / "leaf.key", key_pem(leaf_key))
        write_atomic(directory / "client-view.jsonl",
               "".join(json.dumps(v) + "\n" for v in views).encode())
        write_atomic(directory / "hosts.txt", "".join(f"{s.host}:{port}\n" for s in plan).encode())
        write_atomic(directory / "hosts", "".join(f"127.0.0.1 {s.host}\n" for s in plan).encode())
        manifest = {"version": 1, "sites": len(plan), "roots": roots, "seed": seed,
                    "port": port, "root_names": names, "root_weights": weights,
                    "popularity": popularity,
                    "roles": {r: sum(s.role == r for s in plan) for r in ROLES}}
        write_atomic(directory / "world.json", (json.dumps(manifest, indent=2) + "\n").encode())
        return cls(directory)

    def manifest(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((self.dir / "world.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ReplayIOError(f"{self.dir}: not a root world ({exc})") from exc
        return data

    def hosts(self) -> list[str]:
        return [p.name[:-4] for p in sorted((self.dir / "chains").glob("*.pem"))]

    def farm_sites(self) -> dict[str, SiteFiles]:
        """What the SNI farm serves for each host: its chain file and the shared leaf key."""
        hosts = self.hosts()
        if not hosts:
            raise ReplayInputError(f"{self.dir}: the world has no sites")
        key = self.dir / "leaf.key"
        return {h: SiteFiles((self.dir / "chains" / f"{h}.pem",), key, "world") for h in hosts}

    def farm(self, host: str = "127.0.0.1", port: int = 0) -> SNIFarm:
        """An SNI farm serving this world on one loopback port (``start()`` gives the port)."""
        return SNIFarm(self.farm_sites(), host, port)


def _chains(s: WorldSite, public: list[CA], inters: list[CA], private_int: CA, rogue: CA,
            key: ec.EllipticCurvePrivateKey, start: dt.datetime, now: dt.datetime
            ) -> tuple[list[x509.Certificate], list[x509.Certificate]]:
    root, inter = public[s.root], inters[s.root]
    role = s.role
    if role == "good-full":
        chain = [make_leaf([s.host], inter, key, start), inter.cert, root.cert]
    elif role == "good-direct":
        chain = [make_leaf([s.host], root, key, start)]
    elif role == "self-signed":
        chain = [make_leaf([s.host], None, key, start)]
    elif role == "private-ca":
        chain = [make_leaf([s.host], private_int, key, start), private_int.cert]
    elif role == "expired":
        old = now - dt.timedelta(days=LEAF_DAYS + 30)
        chain = [make_leaf([s.host], inter, key, old), inter.cert]
    elif role == "wrong-host":
        chain = [make_leaf([f"other-{s.host}"], inter, key, start), inter.cert]
    elif role == "missing-intermediate":
        chain = [make_leaf([s.host], inter, key, start)]
    else:  # good, mitm
        chain = [make_leaf([s.host], inter, key, start), inter.cert]
    if role == "mitm":
        return chain, [make_leaf([s.host], rogue, key, start), rogue.cert]
    return chain, chain


def _safe(host: str) -> str:
    if "/" in host or host.startswith(".") or not host:
        raise ReplayInputError(f"unsafe host name {host!r}")
    return host


def load_client_view(path: Path, max_sites: int = MAX_SITES) -> list[dict[str, Any]]:
    """The client-view JSONL: ``{"host", "port", "role", "chain": [base64 DER, ...]}``."""
    out: list[dict[str, Any]] = []
    try:
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                if len(out) >= max_sites:
                    raise ReplayInputError(f"{path}: more than {max_sites} sites")
                try:
                    doc = json.loads(line)
                    doc["chain_der"] = [base64.b64decode(c, validate=True)
                                        for c in doc["chain"]]
                except (ValueError, KeyError, TypeError) as exc:
                    raise ReplayInputError(f"{path}:{n}: bad client-view line") from exc
                out.append(doc)
    except OSError as exc:
        raise ReplayIOError(f"cannot read {path}: {exc}") from exc
    return out


__all__ = ["BAD_ROLES", "GOOD_ROLES", "POPULARITY_MODELS", "ROLES", "THESIS_TABLE3",
           "RootWorld", "WorldSite", "load_client_view", "plan_sites", "root_weights"]
