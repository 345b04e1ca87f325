"""A synthetic web PKI for the restricted-root-store comparison, and a farm serving it.

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

import asyncio
import base64
import contextlib
import datetime as dt
import json
import random
import ssl
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from replay.errors import ReplayInputError, ReplayIOError

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
LEAF_DAYS = 90
CA_DAYS = 3650
SUFFIXES = ("test", "example", "co.uk")
HANDSHAKE_TIMEOUT = 5.0
IDLE_TIMEOUT = 2.0


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


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)] if org else []
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class CA:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(cn: str, org: str, now: dt.datetime, parent: CA | None = None,
            days: int = CA_DAYS, path_length: int | None = 0) -> CA:
    """A root (``parent`` None) or an intermediate (at most ``path_length`` CAs below it),
    in the web-PKI profile."""
    key = _new_key()
    pub = key.public_key()
    b = (x509.CertificateBuilder().subject_name(_name(cn, org))
         .issuer_name(parent.cert.subject if parent else _name(cn, org))
         .public_key(pub).serial_number(x509.random_serial_number())
         .not_valid_before(now - dt.timedelta(days=30))
         .not_valid_after(now + dt.timedelta(days=days))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None if parent is None
                                              else path_length), critical=True)
         .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                      key_encipherment=False, data_encipherment=False,
                                      key_agreement=False, key_cert_sign=True, crl_sign=True,
                                      encipher_only=False, decipher_only=False), critical=True)
         .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False))
    if parent is not None:
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            parent.key.public_key()), critical=False)
    return CA(key, b.sign(parent.key if parent else key, hashes.SHA256()))


def make_leaf(names: list[str], issuer: CA | None, key: ec.EllipticCurvePrivateKey,
              not_before: dt.datetime, days: int = LEAF_DAYS) -> x509.Certificate:
    """A server certificate for ``names`` (first one as CN); ``issuer`` None: self-signed."""
    subject = _name(names[0])
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(issuer.cert.subject if issuer else subject)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(not_before).not_valid_after(not_before + dt.timedelta(days=days))
         .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]),
                        critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                        critical=False))
    signer = issuer.key if issuer else key
    b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
        signer.public_key()), critical=False)
    return b.sign(signer, hashes.SHA256())


def pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


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
        leaf_key = _new_key()
        start = now - dt.timedelta(days=1)
        views: list[dict[str, Any]] = []
        for s in plan:
            served, client = _chains(s, public, inters, private_int, rogue, leaf_key, start,
                                     now)
            _write(directory / "chains" / f"{_safe(s.host)}.pem", pem(*served))
            views.append({"host": s.host, "port": port, "role": s.role, "org": s.org,
                          "root": s.root,
                          "chain": [base64.b64encode(der(c)).decode() for c in client]})
        _write(directory / "roots.pem", pem(*(r.cert for r in public)))
        _write(directory / "private-root.pem", pem(private.cert))
        _write(directory / "leaf.key", leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
        _write(directory / "client-view.jsonl",
               "".join(json.dumps(v) + "\n" for v in views).encode())
        _write(directory / "hosts.txt", "".join(f"{s.host}:{port}\n" for s in plan).encode())
        _write(directory / "hosts", "".join(f"127.0.0.1 {s.host}\n" for s in plan).encode())
        manifest = {"version": 1, "sites": len(plan), "roots": roots, "seed": seed,
                    "port": port, "root_names": names, "root_weights": weights,
                    "popularity": popularity,
                    "roles": {r: sum(s.role == r for s in plan) for r in ROLES}}
        _write(directory / "world.json", (json.dumps(manifest, indent=2) + "\n").encode())
        return cls(directory)

    def manifest(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads((self.dir / "world.json").read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ReplayIOError(f"{self.dir}: not a root world ({exc})") from exc
        return data

    def hosts(self) -> list[str]:
        return [p.name[:-4] for p in sorted((self.dir / "chains").glob("*.pem"))]


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


def _write(path: Path, data: bytes) -> None:
    try:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError as exc:
        raise ReplayIOError(f"cannot write {path}: {exc}") from exc


class RootFarm:
    """Serve a world's chains over TLS on one loopback port, choosing the chain by SNI."""

    def __init__(self, world: RootWorld, host: str = "127.0.0.1", port: int = 0,
                 max_contexts: int = 1024) -> None:
        self.world = world
        self.host = host
        self.port = port
        self._max = max_contexts
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()
        self._server: asyncio.base_events.Server | None = None
        self.handshakes = 0
        hosts = world.hosts()
        if not hosts:
            raise ReplayInputError(f"{world.dir}: the world has no sites")
        self._known = set(hosts)
        self.listen_context = self._context(hosts[0])
        self.listen_context.sni_callback = self._sni

    def _context(self, host: str) -> ssl.SSLContext:
        ctx = self._contexts.get(host)
        if ctx is not None:
            self._contexts.move_to_end(host)
            return ctx
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.world.dir / "chains" / f"{host}.pem",
                            self.world.dir / "leaf.key")
        self._contexts[host] = ctx
        while len(self._contexts) > self._max:
            self._contexts.popitem(last=False)
        return ctx

    def _sni(self, sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None,
             ctx: ssl.SSLContext) -> int | None:
        self.handshakes += 1
        if name is None or name.lower() not in self._known:
            return None
        try:
            sslobj.context = self._context(name.lower())
        except (OSError, ssl.SSLError):
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        return None

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reader.read(1024), IDLE_TIMEOUT)
        except (OSError, ssl.SSLError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError, TimeoutError, ConnectionError):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def start(self) -> int:
        try:
            self._server = await asyncio.start_server(
                self._conn, self.host, self.port, ssl=self.listen_context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        except OSError as exc:
            raise ReplayIOError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(OSError):
                await self._server.wait_closed()
            self._server = None


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


__all__ = ["BAD_ROLES", "GOOD_ROLES", "POPULARITY_MODELS", "ROLES", "THESIS_TABLE3", "CA",
           "RootFarm", "RootWorld", "WorldSite", "load_client_view", "make_ca", "make_leaf",
           "plan_sites", "root_weights"]
