"""The target farm: the synthetic sites, served over real TLS on loopback.

``prepare`` turns a farm specification (from ``replay synth``) into certificates, a targets
list (host, port, the fingerprint clients saw, role) and a hosts file for the notary.
``FarmServer`` serves them (its TLS listener is :class:`SNIFarm`, which also serves the
root-store worlds):

- one TLS listener for good, rotating and mitm sites, choosing the certificate by SNI
  (``SSLContext.sni_callback``; per-site contexts are built on demand and kept in a bounded
  LRU);
- a slow listener that waits ``slow_delay`` seconds after accepting before the handshake;
- a dead port: bound but never listening, so connections are refused; and a silent port
  that accepts and never answers (dead hosts that drop traffic: the notary's probe times
  out), chosen per dead site by ``silent_share``;
- rotating sites switch between two certificates every ``rotate_period`` seconds (the
  targets list carries the first one);
- mitm sites: the targets list carries a forged certificate's fingerprint while the farm
  serves the genuine one, which is what a notary off the intercepted path sees. The forgery
  comes from a rogue intermediate under the most popular root (``mitm``: every CA store
  accepts it), under the least popular root (``mitm-tail``: a top-k store refuses it) or
  under a root no store holds (``mitm-untrusted``). ``mitm-notary-path``: the attacker is on
  the notary's path as well, so the farm serves the forgery (nobody can catch it);
- misconfigured sites are genuine but refused by CA validation: an expired leaf, a
  self-signed one, or a leaf sent without its intermediate (chosen by a hash of the name).
``roots.pem`` holds the public roots (for a notary's ``--ca-roots``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import socket
import ssl
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.errors import ReplayInputError, ReplayIOError
from replay.pki import SyntheticPKI, fingerprint_sha1, first_cert_der
from replay.synth import ROLES
from replay.workload import write_targets

MAX_SITES = 2_000_000
HANDSHAKE_TIMEOUT = 10.0
IDLE_TIMEOUT = 5.0
MAX_REQUEST_BYTES = 8192
DEFAULT_CONTEXTS = 4096
MAX_CONNECTIONS = 2048
SILENT_HOLD = 30.0


@dataclass(frozen=True)
class FarmPorts:
    main: int = 18443
    slow: int = 18444
    dead: int = 18445
    silent: int = 18446
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class FarmSite:
    host: str
    role: str
    root: int


def load_spec(path: Path) -> tuple[int, list[FarmSite]]:
    """``(roots, sites)`` from a farm specification JSON file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplayIOError(f"cannot read farm spec {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("version") != 1:
        raise ReplayInputError(f"{path}: not a version-1 farm spec")
    roots = int(data.get("roots", 1))
    sites = []
    for i, s in enumerate(data.get("sites", [])):
        if i >= MAX_SITES:
            raise ReplayInputError(f"{path}: more than {MAX_SITES} sites")
        role = s.get("role", "good")
        if role not in ROLES:
            raise ReplayInputError(f"{path}: site {i} has unknown role {role!r}")
        root = int(s.get("root", 0))
        if not 0 <= root < roots:
            raise ReplayInputError(f"{path}: site {i} has root {root} out of range")
        sites.append(FarmSite(str(s["host"]).lower(), role, root))
    return roots, sites


def _safe(host: str) -> str:
    if "/" in host or host.startswith("."):
        raise ReplayInputError(f"unsafe host name {host!r}")
    return host


def _dead_fingerprint(host: str) -> str:
    return fingerprint_sha1(b"gone:" + host.encode())


def silent_dead(host: str, share: float) -> bool:
    """Whether a dead site is a silent one (accepts, never answers) rather than refusing."""
    return hashlib.sha1(host.encode()).digest()[0] < share * 256


MISCONFIGURATIONS = ("expired", "self-signed", "leaf-only")
FORGERIES = {"mitm": "popular", "mitm-tail": "tail", "mitm-untrusted": "untrusted",
             "mitm-notary-path": "popular"}


def _site_certificates(pki: SyntheticPKI, certs: Path, host: str, role: str, root: int,
                       ) -> tuple[list[str], str, str, int]:
    """``(served file names, key path relative to the state, the file clients were shown,
    certificates made)`` for one live site; existing files are reused."""
    made = 0

    def ensure(name: str, make: Any) -> str:
        nonlocal made
        path = certs / name
        if not path.exists():
            path.write_bytes(make())
            made += 1
        return name

    key = f"pki/leaf-{root}.key"
    if role == "misconfigured":
        kind = MISCONFIGURATIONS[hashlib.sha1(host.encode()).digest()[1] % 3]
        served = ensure(f"{host}.{kind}.pem", lambda: pki.misconfigured(host, root, kind))
        return [served], key, served, made
    if role == "mitm-notary-path":  # the attacker sits on the notary's path too
        forged = ensure(f"{host}.forged.pem", lambda: pki.forge(host, "popular"))
        return [forged], "pki/leaf-rogue.key", forged, made
    files = [ensure(f"{host}.{v}.pem", lambda v=v: pki.issue(host, root, v))
             for v in range(2 if role == "rotating" else 1)]
    client = files[0]
    if role in FORGERIES:
        client = ensure(f"{host}.forged-{FORGERIES[role]}.pem",
                        lambda: pki.forge(host, FORGERIES[role]))
    return files, key, client, made


def prepare(spec: Path, state: Path, ports: FarmPorts, now: dt.datetime,
            silent_share: float = 0.0) -> dict[str, Any]:
    """Make (or reuse) certificates; write ``targets.csv``, ``hosts`` and ``farm.json``.

    Dead sites go to the refusing port, or with probability ``silent_share`` (by a hash of
    the name) to the silent port, where connections are accepted and never answered, so a
    notary's probe waits for its timeout, as with hosts that drop packets.
    """
    if not 0 <= silent_share <= 1:
        raise ReplayInputError("silent share must be in [0, 1]")
    roots, sites = load_spec(spec)
    pki = SyntheticPKI(state / "pki", roots, now)
    certs = state / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, int, str, str]] = []
    index: dict[str, dict[str, Any]] = {}
    made = 0
    silent = 0
    for s in sites:
        host = _safe(s.host)
        if s.role == "dead":
            port = ports.silent if silent_dead(host, silent_share) else ports.dead
            silent += port == ports.silent
            rows.append((host, port, _dead_fingerprint(host), s.role))
            continue
        files, key, client, new = _site_certificates(pki, certs, host, s.role, s.root)
        made += new
        fp = fingerprint_sha1(first_cert_der((certs / client).read_bytes()))
        port = ports.slow if s.role == "slow" else ports.main
        rows.append((host, port, fp, s.role))
        index[host] = {"role": s.role, "root": s.root, "files": files, "key": key,
                       "client": client}
    write_targets(rows, state / "targets.csv")
    # the public roots, for a notary's --ca-roots (the rogue root stays out: nobody trusts it)
    (state / "roots.pem").write_bytes(b"".join(r.pem for r in pki.roots))
    with (state / "hosts").open("w", encoding="utf-8") as fh:
        fh.write("# generated by replay farm: every synthetic site resolves to the farm\n")
        for host, *_ in rows:
            fh.write(f"{ports.host} {host}\n")
    info: dict[str, Any] = {
        "version": 1, "host": ports.host, "port": ports.main, "slow_port": ports.slow,
        "dead_port": ports.dead, "silent_port": ports.silent, "silent_dead_sites": silent,
        "sites": len(rows), "certificates_made": made,
        "roles": dict(Counter(s.role for s in sites)),
        "targets": str(state / "targets.csv"), "hosts_file": str(state / "hosts"),
    }
    (state / "farm.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    (state / "sites.json").write_text(json.dumps(index) + "\n", encoding="utf-8")
    return info


@dataclass
class FarmStats:
    accepted: int = 0
    handshakes: Counter[str] = field(default_factory=Counter)
    failed: int = 0
    refused_overload: int = 0


@dataclass(frozen=True)
class SiteFiles:
    """What the farm serves for one host: PEM chain files (one per certificate variant, leaf
    first), the leaf's key, and the site's role (counted per handshake)."""

    chains: tuple[Path, ...]
    key: Path
    role: str


class SNIFarm:
    """One TLS listener on loopback that chooses each site's chain by SNI
    (``SSLContext.sni_callback``; per-site contexts built on demand, kept in a bounded LRU),
    answers one request with a tiny HTTP response, and closes. Sites with several chains
    switch between them every ``rotate_period`` seconds. Serves every world: the target
    farm (:class:`FarmServer`) and the root-store worlds."""

    def __init__(self, sites: dict[str, SiteFiles], host: str = "127.0.0.1", port: int = 0,
                 rotate_period: float = 30.0, max_contexts: int = DEFAULT_CONTEXTS,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        if rotate_period <= 0:
            raise ReplayInputError("rotate period must be > 0")
        self.files = sites
        self.host = host
        self.port = port
        self.rotate_period = rotate_period
        self.max_contexts = max_contexts
        self.max_connections = max_connections
        self._contexts: OrderedDict[tuple[str, int], ssl.SSLContext] = OrderedDict()
        self._sem = asyncio.Semaphore(max_connections)
        self._servers: list[asyncio.base_events.Server] = []
        self.stats = FarmStats()
        self.listen_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        first = next(iter(self.files), None)
        if first is not None:
            self._load_into(self.listen_context, first, 0)
        self.listen_context.sni_callback = self._sni

    def _load_into(self, ctx: ssl.SSLContext, host: str, variant: int) -> None:
        site = self.files[host]
        ctx.load_cert_chain(site.chains[variant % len(site.chains)], site.key)

    def _site_context(self, host: str, variant: int) -> ssl.SSLContext:
        key = (host, variant)
        ctx = self._contexts.get(key)
        if ctx is not None:
            self._contexts.move_to_end(key)
            return ctx
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._load_into(ctx, host, variant)
        self._contexts[key] = ctx
        if len(self._contexts) > self.max_contexts:
            self._contexts.popitem(last=False)
        return ctx

    def variant_at(self, host: str, now: float) -> int:
        chains = self.files[host].chains
        if len(chains) < 2:
            return 0
        return int(now // self.rotate_period) % len(chains)

    def _sni(self, sslobj: ssl.SSLObject | ssl.SSLSocket, name: str | None,
             ctx: ssl.SSLContext) -> int | None:
        if name is None:
            return None
        host = name.lower()
        if host not in self.files:
            return None
        try:
            sslobj.context = self._site_context(host, self.variant_at(host, time.time()))
        except (OSError, ssl.SSLError):
            return ssl.ALERT_DESCRIPTION_INTERNAL_ERROR
        self.stats.handshakes[self.files[host].role] += 1
        return None

    async def _serve_conn(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        self.stats.accepted += 1
        if self._sem.locked():
            self.stats.refused_overload += 1
            writer.close()
            return
        async with self._sem:
            try:
                with contextlib.suppress(asyncio.TimeoutError):
                    data = await asyncio.wait_for(reader.read(MAX_REQUEST_BYTES), IDLE_TIMEOUT)
                    if data:
                        body = b"converge replay farm\n"
                        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                                     b"Connection: close\r\n\r\n" % len(body) + body)
                        await asyncio.wait_for(writer.drain(), IDLE_TIMEOUT)
            except (TimeoutError, OSError, ssl.SSLError, ConnectionError):
                self.stats.failed += 1
            finally:
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError, asyncio.TimeoutError,
                                         ConnectionError):
                    await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def start(self) -> int:
        """Listen; returns the port (chosen by the system when ``port`` was 0)."""
        try:
            server = await asyncio.start_server(
                self._serve_conn, self.host, self.port, ssl=self.listen_context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT, backlog=1024)
        except OSError as exc:
            await self.stop()
            raise ReplayIOError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self._servers = [server]
        self.port = server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        for s in self._servers:
            with contextlib.suppress(OSError):
                await s.wait_closed()
        self._servers = []


class FarmServer(SNIFarm):
    """Serve a prepared farm state directory: the SNI listener on ``ports.main``, and the
    slow, silent and dead ports."""

    def __init__(self, state: Path, ports: FarmPorts, slow_delay: float = 1.0,
                 rotate_period: float = 30.0, max_contexts: int = DEFAULT_CONTEXTS,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        try:
            self.sites: dict[str, dict[str, Any]] = json.loads(
                (state / "sites.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReplayIOError(f"{state}: not a prepared farm ({exc})") from exc
        if slow_delay < 0:
            raise ReplayInputError("slow delay must be >= 0")
        files = {host: SiteFiles(tuple(state / "certs" / f for f in site["files"]),
                                 state / (site.get("key") or f"pki/leaf-{site['root']}.key"),
                                 site["role"])
                 for host, site in self.sites.items()}
        super().__init__(files, ports.host, ports.main, rotate_period, max_contexts,
                         max_connections)
        self.state = state
        self.ports = ports
        self.slow_delay = slow_delay
        self._dead_sock: socket.socket | None = None
        self._slow_sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._silent_sock: socket.socket | None = None
        self._silent_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        p = self.ports
        port = await super().start()
        try:
            slow_sock = _listening(p.host, p.slow)
            silent_sock = _listening(p.host, p.silent)
            dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            dead.bind((p.host, p.dead))  # bound, never listening: connections are refused
        except OSError as exc:
            await self.stop()
            raise ReplayIOError(f"cannot listen on {p.host}: {exc}") from exc
        self._slow_sock = slow_sock
        self._dead_sock = dead
        self._silent_sock = silent_sock
        self._accept_task = asyncio.create_task(self._accept_slow(slow_sock))
        self._silent_task = asyncio.create_task(self._accept_silent(silent_sock))
        return port

    async def _accept_silent(self, sock: socket.socket) -> None:
        """Accept on the silent port and hold each connection, unread, for ``SILENT_HOLD``
        seconds (bounded in number), then close it."""
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(sock)
            self.stats.accepted += 1
            self.stats.handshakes["silent"] += 1
            if len(self._tasks) >= self.max_connections:
                self.stats.refused_overload += 1
                conn.close()
                continue
            task = asyncio.create_task(self._hold(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _hold(self, conn: socket.socket) -> None:
        try:
            await asyncio.sleep(SILENT_HOLD)
        finally:
            conn.close()

    async def _accept_slow(self, sock: socket.socket) -> None:
        """Accept on the slow port; each connection's handshake starts ``slow_delay`` later.

        The accepted socket is not read at all until it is handed to the TLS transport, so
        the client's hello waits in the kernel, as behind a slow server.
        """
        loop = asyncio.get_running_loop()
        while True:
            conn, _ = await loop.sock_accept(sock)
            self.stats.accepted += 1
            if len(self._tasks) >= self.max_connections:
                self.stats.refused_overload += 1
                conn.close()
                continue
            task = asyncio.create_task(self._slow_handshake(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _slow_handshake(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(self.slow_delay)
            await loop.connect_accepted_socket(_Responder, conn, ssl=self.listen_context,
                                               ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
        except (OSError, ssl.SSLError, TimeoutError, ConnectionError):
            self.stats.failed += 1
            conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise

    async def stop(self) -> None:
        for task in (self._accept_task, self._silent_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._accept_task = self._silent_task = None
        for sock in (self._slow_sock, self._silent_sock):
            if sock is not None:
                sock.close()
        self._slow_sock = self._silent_sock = None
        for t in list(self._tasks):
            t.cancel()
        await super().stop()
        if self._dead_sock is not None:
            self._dead_sock.close()
            self._dead_sock = None


def _listening(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class _Responder(asyncio.Protocol):
    """After the handshake: answer one request with a tiny HTTP response, or close when idle."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, transport.close)

    def data_received(self, data: bytes) -> None:
        self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                             b"Connection: close\r\n\r\n")
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


def site_fingerprints(state: Path, hosts: Iterable[str]) -> dict[str, list[str]]:
    """Fingerprints of every certificate the farm may serve for each host (for checks)."""
    sites = json.loads((state / "sites.json").read_text(encoding="utf-8"))
    out = {}
    for h in hosts:
        out[h] = [fingerprint_sha1(first_cert_der((state / "certs" / f).read_bytes()))
                  for f in sites[h]["files"]]
    return out


def spec_digest(spec: Path) -> str:
    return hashlib.sha256(spec.read_bytes()).hexdigest()[:16]
