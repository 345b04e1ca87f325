"""Running the notary: listeners, TLS, limits, and N worker processes on one port.

With ``workers > 1`` the parent prepares the key, certificate and database once, then starts
N worker processes that each bind every listen address with ``SO_REUSEPORT`` (the kernel
spreads connections) and share the SQLite file. The parent restarts a worker that dies and
stops them all on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import errno
import logging
import multiprocessing
import os
import queue
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from notary import keys, logpolicy
from notary.ca.checker import build_checker
from notary.config import Settings, parse_listen
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.errors import BadConfig, StoreUnavailable
from notary.keys import Identity
from notary.limits import RateLimiter
from notary.metrics import Metrics, create_metrics_app
from notary.metrics_aggregate import AggregateServer
from notary.proxyproto import ProxySite, parse_trusted
from notary.relay import Relay
from notary.service import ExtSigner
from notary.store.sqlite import SQLiteStore
from notary.tlog.note import NoteError, Signer, Verifier
from notary.web import CONNS, INFO, SERVICE, build_resolver, create_app, install_fast_path

PID_FILE = "notary.pid"  # `notary reload` sends SIGHUP to the process named here
READY_KEY = "readyz.invalid:0"  # /readyz reads this (absent) record through to the store

log = logging.getLogger("notary")

PRIVATE_LOG_FORMAT = '"%r" %s %b %Tf'
FULL_LOG_FORMAT = '%a "%r" %s %b %Tf'


def server_ssl_context(identity: Identity) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(identity.cert_path, identity.key_path)
    return ctx


def check_files(settings: Settings) -> None:
    """Read every file and value a worker would read at start (hosts file, CA roots and
    trust list, witness keys), so a bad one stops the start with one line before any worker
    runs (raises :class:`BadConfig`)."""
    build_resolver(settings)
    build_checker(settings.verifier, settings.ca_roots, settings.ca_trust,
                  settings.ca_no_mozilla)
    for _, vkey in settings.log_witnesses():
        try:
            Verifier.parse(vkey)
        except NoteError as exc:
            raise BadConfig(f"--log-witness key {vkey!r}: {exc}") from exc


def prepare(settings: Settings) -> Identity:
    """Check settings, create the data directory, key, certificate and database schema."""
    settings.check()
    check_files(settings)
    try:
        keys.private_dir(settings.data_dir)
    except OSError as exc:
        raise BadConfig(f"cannot create the data directory {settings.data_dir}: "
                        f"{exc.strerror or exc}") from exc
    identity = keys.ensure(
        settings.key_path, settings.cert_path, settings.hostname, now=dt.datetime.now(dt.UTC)
    )
    keys.ensure_signing_key(settings.signing_key_path)
    if settings.transparency_log:
        keys.ensure_log_identity(settings.log_key_path, settings.hostname, settings.log_origin)
        try:
            keys.create_file(settings.log_path, 0o600)
        except OSError as exc:
            raise BadConfig(f"cannot create the transparency log {settings.log_path}: "
                            f"{exc.strerror or exc}") from exc
        for path in (settings.log_path, settings.log_path.with_name(
                settings.log_path.name + "-wal")):
            keys.check_guarded(path, "transparency log file")

    async def init_db() -> None:
        store = await SQLiteStore.open(settings.db_path)
        await store.close()

    if not settings.redis:
        db = settings.db_path
        # SQLite would create it 0666 & ~umask; its -wal and -shm files take its mode
        try:
            keys.create_file(db, 0o600)
        except OSError as exc:
            raise BadConfig(f"cannot create the database {db}: {exc.strerror or exc}") from exc
        for path in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            keys.check_guarded(path, "database file")
        try:
            asyncio.run(init_db())
        except StoreUnavailable as exc:
            raise BadConfig(exc.message) from exc
    return identity


async def serve(
    settings: Settings,
    identity: Identity,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[list[str]], None] | None = None,
    access_log: bool = False,
    on_metrics_port: Callable[[int], None] | None = None,
) -> None:
    """Serve until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None)."""
    metrics = Metrics() if settings.metrics_listen else None
    app = create_app(
        settings, identity, signing_key=keys.load_signing_key(settings.signing_key_path),
        metrics=metrics, log_signer=log_signer(settings),
    )
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        access_log_format=FULL_LOG_FORMAT if settings.log_client_addresses else PRIVATE_LOG_FORMAT,
        max_line_size=settings.max_line,
        max_field_size=settings.max_field,
        max_headers=settings.max_headers,
        keepalive_timeout=settings.keepalive_timeout,
    )
    uninstall = logpolicy.install(logpolicy.ClientPrivacyFilter(
        on_malformed=metrics.malformed_requests.inc if metrics is not None else None,
        redact=not settings.log_client_addresses,
    ))
    await runner.setup()
    if runner.server is not None:
        app[CONNS].watch(runner.server)
        install_fast_path(app, runner.server)
    ssl_ctx = server_ssl_context(identity) if settings.tls else None
    urls: list[str] = []
    metrics_runner: web.AppRunner | None = None
    relay: Relay | None = None
    try:
        if metrics is not None and settings.metrics_listen:
            backend = app[SERVICE].store.backend
            metrics_runner = web.AppRunner(
                create_metrics_app(metrics, lambda: backend.get(READY_KEY)),
                handle_signals=False, access_log=None,
            )
            await metrics_runner.setup()
            mhost, mport = parse_listen(settings.metrics_listen)
            msite = web.TCPSite(metrics_runner, mhost, mport)
            try:
                await msite.start()
            except OSError as exc:
                raise _cannot_listen("metrics", mhost, mport, exc) from exc
            if on_metrics_port is not None:
                on_metrics_port(msite._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
            for url in _site_urls(msite, False):
                log.info("metrics and health on %s/metrics", url)
        trusted = parse_trusted(settings.trusted_proxy)
        for host, port in settings.listen_addrs():
            site: web.BaseSite
            if trusted:
                site = ProxySite(runner, host, port, trusted=trusted, ssl_context=ssl_ctx,
                                 reuse_port=settings.workers > 1,
                                 handshake_timeout=settings.tls_handshake_timeout)
            else:
                site = _Site(
                    runner,
                    host,
                    port,
                    ssl_context=ssl_ctx,
                    reuse_port=settings.workers > 1,
                    backlog=2048,
                    handshake_timeout=settings.tls_handshake_timeout,
                )
            try:
                await site.start()
            except OSError as exc:
                raise _cannot_listen("the notary", host, port, exc) from exc
            urls.extend(_site_urls(site, settings.tls))
        if settings.relay_listen:
            relay_addrs = [parse_listen(spec) for spec in settings.relay_listen]
            try:
                relay = await Relay(
                    settings.relay_settings(),
                    build_resolver(settings),
                    AddressPolicy(parse_networks(settings.allow_target)),
                    relay_addrs,
                    reuse_port=settings.workers > 1,
                    trusted_proxies=trusted,
                    connect_rate=RateLimiter(settings.relay_rate_limit,
                                             settings.relay_rate_burst, settings.rate_clients,
                                             what="relay connections"),
                ).start()
            except OSError as exc:
                raise _cannot_listen("the bounce relay", *relay_addrs[0], exc) from exc
            for rhost, rport in relay.addresses:
                log.info("bounce relay on http://%s:%d (to port %d only)",
                         rhost, rport, settings.relay_port)
        if stop is None:
            # before the announcement: a supervisor may signal as soon as it reads it, and
            # a signal's default action would end the process without its cleanup (the
            # store's pending writes, the pid file) or, for SIGHUP, end it outright
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            loop.add_signal_handler(signal.SIGHUP, reload_keys, app, settings, identity,
                                    ssl_ctx)
        if on_ready is not None:
            on_ready(urls)
        await stop.wait()
    finally:
        if relay is not None:
            await relay.close()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        await runner.cleanup()
        uninstall()


def reload_keys(app: web.Application, settings: Settings, running_identity: Identity,
                ssl_ctx: ssl.SSLContext | None) -> bool:
    """Read the signing key and the TLS certificate again (SIGHUP, ``notary reload``).

    New answers are signed with the new Ed25519 key at once (signed answers kept for reuse
    are dropped) and new TLS handshakes present the new certificate; open connections go on
    untouched. A certificate whose key is not the running RSA key is refused: that key signs
    the legacy answers kept in the store, so changing it is a new notary identity (a restart
    with a new pin). Anything unreadable leaves everything as it was; one log line says what
    happened. Returns whether the reload was applied.
    """
    running = app[INFO]
    try:
        signing = keys.load_signing_key(settings.signing_key_path)
        identity = keys.load(settings.key_path, settings.cert_path)
        if settings.tls:
            fresh = server_ssl_context(identity)  # proves the pair loads before swapping
            del fresh
    except (BadConfig, OSError, ssl.SSLError) as exc:
        log.error("reload refused, still serving with the keys loaded before: %s",
                  getattr(exc, "message", None) or exc)
        return False
    service = app[SERVICE]
    old_pub = running_identity.key.public_key()  # signs the legacy answers
    if identity.key.public_key().public_numbers() != old_pub.public_numbers():
        log.error("reload refused: %s holds another RSA key than the running one (a new pin "
                  "and identity: restart the notary and publish a new bundle)",
                  settings.key_path)
        return False
    if ssl_ctx is not None:
        ssl_ctx.load_cert_chain(identity.cert_path, identity.key_path)
    ext = ExtSigner(signing)
    service._ext_signer = ext  # noqa: SLF001
    service._ext_answers.clear()  # noqa: SLF001 - answers signed with the previous key
    running["signing_key_id"] = ext.key_id
    running["pin_sha1"], running["pin_sha256"] = identity.pin_sha1, identity.pin_sha256
    log.warning("reloaded: signing key id %s, certificate pin SHA-1 %s", ext.key_id,
                identity.pin_sha1)
    return True


def pid_path(settings: Settings) -> Path:
    return settings.data_dir / PID_FILE


def log_signer(settings: Settings) -> Signer | None:
    """The transparency log's signer (None with ``--no-log``)."""
    if not settings.transparency_log:
        return None
    key, origin = keys.ensure_log_identity(
        settings.log_key_path, settings.hostname, settings.log_origin
    )
    return Signer(origin, key)


class _Site(web.TCPSite):
    """A TCP site whose clients must finish the TLS handshake within ``handshake_timeout``.

    asyncio's default is 60 s. Until the handshake completes aiohttp does not see the
    connection (neither the keep-alive timer nor the connection cap applies), yet it holds a
    socket and TLS buffers (about 50 KiB of RSS each, measured by tests/security).
    """

    def __init__(self, *args: Any, handshake_timeout: float, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._handshake_timeout = handshake_timeout

    async def start(self) -> None:
        if self._ssl_context is None:
            await super().start()
            return
        self._runner._reg_site(self)
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            server,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            ssl_handshake_timeout=self._handshake_timeout,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port


def _site_urls(site: web.BaseSite, tls: bool) -> list[str]:
    scheme = "https" if tls else "http"
    out = []
    server = site._server  # the asyncio server, for the bound port when port 0 was asked
    for sock in getattr(server, "sockets", None) or []:
        host, port = sock.getsockname()[:2]
        out.append(f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}")
    return out


def _install_uvloop() -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def _pin_line(settings: Settings, identity: Identity) -> str:
    if not settings.tls:
        return ("notary: plain HTTP (--no-tls): there is no TLS certificate here to pin; clients "
                "pin the certificate of the TLS proxy in front of this notary")
    return f"notary: clients pin SHA-1 {identity.pin_sha1}"


def _announce(settings: Settings, identity: Identity) -> Callable[[list[str]], None]:
    def ready(urls: list[str]) -> None:
        for url in urls:
            print(f"notary: serving {url}", file=sys.stderr, flush=True)
        print(_pin_line(settings, identity), file=sys.stderr, flush=True)

    return ready


def _where(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _cannot_listen(what: str, host: str, port: int, exc: OSError) -> BadConfig:
    why = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        why += " (another process, perhaps another notary, holds it)"
    elif exc.errno == errno.EACCES:
        why += " (ports below 1024 need root or CAP_NET_BIND_SERVICE)"
    return BadConfig(f"cannot listen on {_where(host, port)} for {what}: {why}")


def preflight_listen(settings: Settings) -> None:
    """Bind every listen address once and release it, so a port in use or not permitted
    stops the start with one line instead of N dying workers.

    The bind is made without ``SO_REUSEPORT`` whatever the worker count: the workers share
    their port with each other through it, and with it a second notary on a port another
    notary already serves would bind too and take half of its clients (to another pin)."""
    specs = [("the notary", a) for a in settings.listen_addrs()]
    specs += [("the bounce relay", parse_listen(s)) for s in settings.relay_listen]
    for what, (host, port) in specs:
        try:
            infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise BadConfig(f"cannot listen on {_where(host, port)} for {what}: "
                            f"{exc.strerror}") from exc
        for family, kind, proto, _, addr in infos:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(addr)
                except OSError as exc:
                    raise _cannot_listen(what, host, port, exc) from exc


def _worker_main(settings: Settings, access_log: bool, index: int = 0,
                 ports: Any = None) -> None:
    """One worker process; it reports its metrics port on ``ports`` as ``(index, port)``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    _install_uvloop()
    identity = keys.load(settings.key_path, settings.cert_path)
    report = None if ports is None else (lambda port: ports.put((index, port)))
    asyncio.run(serve(settings, identity, access_log=access_log, on_metrics_port=report))


def run(settings: Settings, *, access_log: bool = False) -> int:
    """Prepare, then serve in this process (1 worker) or supervise N worker processes."""
    identity = prepare(settings)
    preflight_listen(settings)
    with _pid_file(settings):
        if settings.workers == 1:
            _install_uvloop()
            asyncio.run(serve(settings, identity, on_ready=_announce(settings, identity),
                              access_log=access_log))
            return 0
        return _supervise(settings, identity, access_log)


@contextlib.contextmanager
def _pid_file(settings: Settings) -> Iterator[None]:
    """DATA/notary.pid names this process while it serves (for ``notary reload``)."""
    path, mine = pid_path(settings), f"{os.getpid()}\n"
    try:
        # 0644 whatever the umask (and an older file's mode): `notary reload` signals the
        # process this file names, so nobody but its owner may rewrite it
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.fchmod(fd, 0o644)
            os.write(fd, mine.encode("ascii"))
        finally:
            os.close(fd)
    except OSError as exc:
        raise BadConfig(f"cannot write {path}: {exc.strerror or exc}") from exc
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if path.read_text(encoding="ascii") == mine:
                path.unlink()


def _supervise(settings: Settings, identity: Identity, access_log: bool) -> int:
    ctx = multiprocessing.get_context("spawn")
    stopping = failed = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    def on_hup(signum: int, frame: object) -> None:
        for p in workers:
            if p.is_alive() and p.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(p.pid, signal.SIGHUP)
        log.warning("SIGHUP passed on to %d workers", len(workers))

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, on_hup)

    # One metrics endpoint for the instance: the workers serve theirs on ephemeral loopback
    # ports, report them here, and this process merges them (notary/metrics_aggregate.py).
    aggregate: AggregateServer | None = None
    ports: Any = None
    workers: list[multiprocessing.process.BaseProcess] = []
    if settings.metrics_listen:
        mhost, mport = parse_listen(settings.metrics_listen)
        try:
            aggregate = AggregateServer(mhost, mport, settings.workers,
                                        lambda i: i < len(workers) and workers[i].is_alive())
        except OSError as exc:
            raise _cannot_listen("metrics", mhost, mport, exc) from exc
        ports = ctx.Queue()
        aggregate.start()
        log.info("metrics and health of all %d workers on http://%s/metrics",
                 settings.workers, _where(mhost, aggregate.port))

    def start(index: int) -> multiprocessing.process.BaseProcess:
        mine = settings
        if settings.metrics_listen:
            mine = dataclasses.replace(settings, metrics_listen="127.0.0.1:0")
        p = ctx.Process(target=_worker_main, args=(mine, access_log, index, ports),
                        daemon=False)
        p.start()
        return p

    workers.extend(start(i) for i in range(settings.workers))
    for url in settings.listen:
        scheme = "https" if settings.tls else "http"
        print(f"notary: serving {scheme}://{url} with {settings.workers} workers",
              file=sys.stderr, flush=True)
    print(_pin_line(settings, identity), file=sys.stderr, flush=True)
    restarts: list[float] = []
    while not stopping:
        time.sleep(0.2)
        while aggregate is not None:
            try:
                aggregate.worker_port(*ports.get_nowait())
            except queue.Empty:
                break
        for i, p in enumerate(workers):
            if p.is_alive() or stopping:
                continue
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < 60] + [now]
            if len(restarts) > 10 * settings.workers:
                log.error("workers keep dying (%d restarts in 60 s); stopping", len(restarts))
                stopping = failed = True
                break
            log.warning("worker %d exited with code %s; restarting", p.pid, p.exitcode)
            workers[i] = start(i)
    for p in workers:
        if p.is_alive() and p.pid is not None:
            p.terminate()
    for p in workers:
        p.join(10)
        if p.is_alive():
            p.kill()
    if aggregate is not None:
        aggregate.close()
    return 1 if failed else 0


__all__ = ["prepare", "run", "serve", "server_ssl_context"]
