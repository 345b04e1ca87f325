"""``converge()``: the verdict for one (host, port, fingerprint) (IO orchestration).

1. Parse the fingerprint (SHA-1 or SHA-256, any accepted form).
2. Local cache: an exact (``host:port``, fingerprint) entry that
   :func:`~converge.cachepolicy.cache_decision` calls a ``hit`` is trusted without asking.
3. Otherwise pick up to ``quorum`` distinct logical notaries at random, ask them in parallel
   (:func:`~converge.notary_io.ask_notary`) and stop as soon as
   :func:`~converge.policy.settled` says no further answer can change the verdict. A notary
   whose bundle offers ``converge-answer/1`` is asked in that format (configuration key
   ``extended``; :mod:`converge.extended`); the others in the legacy one. With
   ``extended: require`` only the former are candidates.
4. Write the cache only after a trusted verdict.

The synchronous :func:`converge` answers a cache hit without starting an event loop; a
query runs on an event loop kept per thread (uvloop's when installed), not a new one per call.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import random
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from .bundle import NotaryBundle
from .cache import LocalCache
from .cachepolicy import cache_decision
from .config import (
    CONFIG_FILE,
    Config,
    discover_config_dir,
    load_config,
    where_notaries_are_read,
)
from .errors import CacheIOError, ConfigError, FingerprintError
from .fingerprint import Fingerprint, as_fingerprint, fingerprint_of
from .legacy import Vote, check_ip, check_target, location
from .notary_io import (
    ExtendedQuery,
    NotaryResult,
    ask_notary,
    close_idle,
    keep_connections_on,
)
from .policy import Policy, decide, settled


@dataclass(frozen=True)
class Verdict:
    """The decision. Truthy when trusted."""

    trusted: bool
    host: str
    port: int
    fingerprint: str
    policy: Policy
    stand_aside: bool
    from_cache: bool
    results: tuple[NotaryResult, ...]
    reason: str
    elapsed: float = 0.0
    relay: str | None = None  # the bounce relay the queries went through

    def __bool__(self) -> bool:
        return self.trusted

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.trusted,
            "host": self.host,
            "port": self.port,
            "fingerprint": self.fingerprint,
            "policy": self.policy.value,
            "stand_aside": self.stand_aside,
            "cache": self.from_cache,
            "reason": self.reason,
            "elapsed_ms": round(self.elapsed * 1000, 3),
            "relay": self.relay,
            "notaries": [r.to_json() for r in self.results],
        }


ConfigArg = Config | str | os.PathLike[str] | None


class Client:
    """A configuration plus its open cache connections. Thread-safe; reuse it, and close it
    when done (``with Client(dir) as c:``, ``async with``, or :meth:`close`)."""

    def __init__(
        self,
        config: ConfigArg = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config if isinstance(config, Config) else load_config(config)
        self._rng = rng or random.SystemRandom()
        self._clock = clock
        self._caches: list[LocalCache] | None = None
        self._writer: LocalCache | None = None
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # ------------------------------------------------------------------ cache

    def _open_caches(self) -> list[LocalCache]:
        if self._pid != os.getpid():
            # A forked child must not use its parent's SQLite connections: open its own.
            self._caches, self._writer, self._pid = None, None, os.getpid()
        if self._caches is None:
            with self._lock:
                if self._caches is None:
                    caches: list[LocalCache] = []
                    cfg = self.config
                    if cfg.userdb is not None:
                        self._writer = LocalCache(cfg.userdb)
                        caches.append(self._writer)
                    if cfg.db is not None:
                        if self._writer is None:
                            self._writer = LocalCache(cfg.db)
                            caches.append(self._writer)
                        elif cfg.db.exists():
                            # an unreadable shared cache only costs notary queries
                            with contextlib.suppress(CacheIOError):
                                caches.append(LocalCache(cfg.db, readonly=True))
                    self._caches = caches
        return self._caches

    def _cached(self, loc: str, forms: Sequence[Fingerprint], now: float) -> bool:
        for cache in self._open_caches():
            for fp in forms:
                ts = cache.lookup(loc, fp.colon_hex())
                if cache_decision(ts, now, self.config.cache_lifetime) == "hit":
                    return True
        return False

    def _remember(self, loc: str, forms: Sequence[Fingerprint], now: float) -> None:
        self._open_caches()
        if self._writer is not None:
            for fp in forms:
                self._writer.store(loc, fp.colon_hex(), int(now))

    def close(self) -> None:
        """Close the cache connections (a later check opens them again)."""
        with self._lock:
            caches, self._caches, self._writer = self._caches or [], None, None
        for c in caches:
            c.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ checks

    def _forms(
        self, fingerprint: str | Fingerprint, certificate: bytes | None
    ) -> list[Fingerprint]:
        fp = as_fingerprint(fingerprint)
        forms = [fp]
        if certificate is not None:
            for alg in ("sha1", "sha256"):
                alt = fingerprint_of(certificate, alg)
                if alt.algorithm == fp.algorithm and alt != fp:
                    raise FingerprintError("the certificate does not match the fingerprint")
                if alt not in forms:
                    forms.append(alt)
        return forms

    def _cache_verdict(self, host: str, port: int, forms: list[Fingerprint], t0: float) -> Verdict:
        cfg = self.config
        return Verdict(
            True,
            host,
            port,
            forms[0].colon_hex(),
            cfg.agreement,
            cfg.stand_aside,
            True,
            (),
            "local cache hit",
            time.perf_counter() - t0,
        )

    def check(
        self,
        host: str,
        port: int,
        fingerprint: str | Fingerprint,
        *,
        certificate: bytes | None = None,
        ip: str | None = None,
    ) -> Verdict:
        """Synchronous check. A cache hit costs one indexed SQLite lookup, no event loop.
        ``ip``: ask the notaries to connect to this address (sending ``host`` as SNI)."""
        t0 = time.perf_counter()
        check_target(host, port)
        if ip is not None:
            check_ip(ip)
        forms = self._forms(fingerprint, certificate)
        loc = location(host, port)
        if self._cached(loc, forms, self._clock()):
            return self._cache_verdict(host, port, forms, t0)
        coro = self._ask(host, port, forms, t0, ip)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _run_on_thread_loop(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, coro).result()

    async def acheck(
        self,
        host: str,
        port: int,
        fingerprint: str | Fingerprint,
        *,
        certificate: bytes | None = None,
        ip: str | None = None,
    ) -> Verdict:
        t0 = time.perf_counter()
        check_target(host, port)
        if ip is not None:
            check_ip(ip)
        forms = self._forms(fingerprint, certificate)
        if self._cached(location(host, port), forms, self._clock()):
            return self._cache_verdict(host, port, forms, t0)
        return await self._ask(host, port, forms, t0, ip)

    @staticmethod
    def _timed_out(name: str, t0: float, seconds: float) -> NotaryResult:
        """The result of a notary that had not answered when the check's ``seconds`` ran out."""
        return NotaryResult(
            name,
            "unreachable",
            "timeout",
            None,
            None,
            f"no answer within {seconds} s",
            time.perf_counter() - t0,
        )

    def _extended_query(self, bundle: NotaryBundle) -> ExtendedQuery | None:
        """How to ask ``bundle`` in the extended format, or ``None`` for the legacy one."""
        cfg = self.config
        if cfg.extended == "off" or not bundle.offers_extended:
            return None
        return ExtendedQuery(
            bundle.signing_keys,
            nonce=cfg.extended_nonce,
            log=bundle.transparency,
            max_skew=cfg.max_skew,
            fallback=cfg.extended == "fallback" and bundle.transparency is None,
            clock=self._clock,
            keep_alive=cfg.keep_alive,
        )

    async def _ask(
        self, host: str, port: int, forms: list[Fingerprint], t0: float, ip: str | None = None
    ) -> Verdict:
        cfg = self.config
        notaries = cfg.notaries()
        if not notaries:
            raise ConfigError(
                f"no notaries enabled (looked in {where_notaries_are_read(cfg.notaries_dir)})"
            )
        if cfg.extended == "require":
            notaries = [b for b in notaries if b.offers_extended]
            if not notaries:
                raise ConfigError(
                    "extended is require but no enabled notary's bundle offers converge-answer/1"
                )
        relay = None
        if cfg.bounce:
            if len(notaries) < 2:
                raise ConfigError("bounce needs two enabled notaries: one relays, one votes")
            relay = notaries.pop(self._rng.randrange(len(notaries)))
        if cfg.quorum >= len(notaries):
            chosen = list(notaries)  # all of them: no draw (a system call to the OS's RNG)
        else:
            picked = self._rng.sample(range(len(notaries)), cfg.quorum)
            chosen = [notaries[i] for i in sorted(picked)]  # results in configuration order

        def ask(b: NotaryBundle) -> Coroutine[Any, Any, NotaryResult]:
            return ask_notary(
                b,
                host,
                port,
                forms,
                connect_timeout=cfg.connect_timeout,
                notary_timeout=cfg.notary_timeout,
                max_bytes=cfg.max_response_bytes,
                relay=relay,
                bounce_port=cfg.bounce_port,
                ext=self._extended_query(b),
                ip=ip,
            )

        results: dict[str, NotaryResult] = {}
        verdict: bool | None = None
        tasks: dict[asyncio.Task[NotaryResult], str] = {}
        pending: set[asyncio.Task[NotaryResult]] = set()
        if len(chosen) == 1:
            # one notary: nothing to race or settle early, so no task (about 20 us a check)
            only = chosen[0]
            try:
                async with asyncio.timeout(cfg.total_timeout):
                    r = await ask(only)
                results[r.name] = r
            except TimeoutError:
                results[only.name] = self._timed_out(only.name, t0, cfg.total_timeout)
        else:
            tasks = {asyncio.create_task(ask(b)): b.name for b in chosen}
            pending = set(tasks)
            try:
                async with asyncio.timeout(cfg.total_timeout):
                    while pending:
                        done, pending = await asyncio.wait(
                            pending, return_when=asyncio.FIRST_COMPLETED
                        )
                        for t in done:
                            r = t.result()
                            results[r.name] = r
                        if cfg.early_return:
                            votes: list[Vote] = [
                                r.vote for r in results.values() if r.vote != "skipped"
                            ]
                            verdict = settled(
                                cfg.agreement, votes, len(pending), stand_aside=cfg.stand_aside
                            )
                            if verdict is not None:
                                break
            except TimeoutError:
                for t in pending:
                    results[tasks[t]] = self._timed_out(tasks[t], t0, cfg.total_timeout)
                pending = set()
            finally:
                unfinished = [t for t in tasks if not t.done()]
                for t in unfinished:
                    t.cancel()
                await asyncio.gather(*unfinished, return_exceptions=True)
        for t in pending:
            name = tasks[t]
            results[name] = NotaryResult(
                name,
                "skipped",
                "settled",
                None,
                None,
                "verdict settled before this notary answered",
            )
        ordered = tuple(results[b.name] for b in chosen)
        votes = [r.vote for r in ordered if r.vote != "skipped"]
        if verdict is None:
            verdict = decide(cfg.agreement, votes, stand_aside=cfg.stand_aside)
        s = votes.count("success")
        reason = (
            f"{s} of {len(chosen)} notaries confirm ({cfg.agreement.value}, "
            f"{'unreachable stand aside' if cfg.stand_aside else 'unreachable count as failure'})"
        )
        if verdict:
            self._remember(location(host, port), forms, self._clock())
        return Verdict(
            verdict,
            host,
            port,
            forms[0].colon_hex(),
            cfg.agreement,
            cfg.stand_aside,
            False,
            ordered,
            reason,
            time.perf_counter() - t0,
            relay.name if relay else None,
        )


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed, else asyncio's. Notary TLS no longer uses the
    loop's TLS transport (:mod:`converge.notary_tls`); measured again on 2026-11-27 (2-CPU
    AMD EPYC, paired against a bare TLS request), the check on a new connection was still
    cheaper on uvloop's loop: 1.22-1.29x against 1.30-1.38x quiet, 1.34 against 1.53x busy."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class _LoopHolder:
    """A thread's event loop for synchronous checks, kept between them (a new loop per check,
    ``asyncio.run``, cost about as much CPU as parsing and verifying the answer). Closed when
    its thread ends (the thread-local holder is dropped) or, for the main thread, at exit."""

    def __init__(self) -> None:
        self.loop = _new_loop()
        self.pid = os.getpid()
        keep_connections_on(self.loop)  # close() closes them

    def close(self) -> None:
        loop = self.loop
        if loop.is_closed():
            return
        if self.pid == os.getpid():
            with contextlib.suppress(Exception):
                close_idle(loop)  # the connections kept open for the next check
                pending = asyncio.all_tasks(loop)
                for t in pending:
                    t.cancel()
                if pending:
                    loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
        with contextlib.suppress(Exception):
            loop.close()  # after a fork: this process's copies of the parent's descriptors

    def __del__(self) -> None:
        self.close()


_THREAD_LOOP = threading.local()


def _close_thread_loop() -> None:
    holder: _LoopHolder | None = getattr(_THREAD_LOOP, "holder", None)
    _THREAD_LOOP.holder = None
    if holder is not None:
        holder.close()


atexit.register(_close_thread_loop)  # the main thread's loop


async def _settled(coro: Coroutine[Any, Any, Verdict]) -> Verdict:
    """``coro``'s result after one more turn of the loop, in which the callbacks that the
    transports it aborted scheduled run (asyncio's TLS transport delivers ``connection_lost``
    only then).
    One run of the loop instead of a second ``run_forever`` (about 17 us less per check:
    uvloop sets up its signal wake-up at every run)."""
    result = await coro
    await asyncio.sleep(0)
    return result


def _run_on_thread_loop(coro: Coroutine[Any, Any, Verdict]) -> Verdict:
    """Run ``coro`` to completion on this thread's loop (a new one after a fork). A check
    leaves no task behind; the connections it aborted are closed before this returns. Should
    the loop be left in any other state (an exception, ``KeyboardInterrupt``), it is closed
    and the next check starts a new one, so nothing of this check runs later."""
    holder: _LoopHolder | None = getattr(_THREAD_LOOP, "holder", None)
    if holder is None or holder.loop.is_closed() or holder.pid != os.getpid():
        holder = _THREAD_LOOP.holder = _LoopHolder()
    loop = holder.loop
    try:
        result = loop.run_until_complete(_settled(coro))
    except BaseException:
        _close_thread_loop()
        raise
    return result


RELOAD_CHECK_INTERVAL = 1.0  # seconds between looks at a shared client's configuration


def _config_stamp(config: str | os.PathLike[str] | None) -> object:
    """What identifies the configuration a shared client was loaded from: the directory
    discovery finds now and its ``converge.config`` (modification time and size). The enabled
    notaries are read at every query, so they need no stamp."""
    try:
        d = discover_config_dir(config)
    except ConfigError:
        return None
    try:
        st = (d / CONFIG_FILE).stat()
    except OSError:
        return (str(d), None)
    return (str(d), st.st_mtime_ns, st.st_size)


@dataclass
class _Shared:
    client: Client
    stamp: object
    checked: float


_CLIENTS: dict[object, _Shared] = {}
_CLIENTS_LOCK = threading.Lock()


def get_client(config: ConfigArg | Client = None) -> Client:
    """The shared :class:`Client` for a configuration (kept open across calls); a
    :class:`Client` is returned as is. A shared client of a configuration directory (or of the
    discovered one) is replaced, at most one second after the fact, when discovery would now
    find another directory or ``converge.config`` changed (the replaced one is dropped, not
    closed under a thread that may still use it; its connections close when it is collected).
    :func:`close_clients` closes them all (it also runs at exit)."""
    if isinstance(config, Client):
        return config
    if isinstance(config, Config):
        key: object = config
    elif config is None:
        key = ("env", os.environ.get("CONVERGE_CONFIG_DIR"))
    else:
        key = os.fspath(config)
    now = time.monotonic()
    shared = _CLIENTS.get(key)
    if shared is not None and (
        isinstance(config, Config) or now - shared.checked < RELOAD_CHECK_INTERVAL
    ):
        return shared.client
    with _CLIENTS_LOCK:
        shared = _CLIENTS.get(key)
        if isinstance(config, Config):
            if shared is None:
                shared = _CLIENTS[key] = _Shared(Client(config), None, now)
            return shared.client
        stamp = _config_stamp(config)
        if shared is not None and shared.stamp == stamp:
            shared.checked = now
            return shared.client
        fresh = Client(config)  # raises ConfigError for a bad configuration
        _CLIENTS[key] = _Shared(fresh, stamp, now)
        return fresh


def close_clients() -> None:
    """Close and forget every shared client (:func:`get_client`)."""
    with _CLIENTS_LOCK:
        shared = list(_CLIENTS.values())
        _CLIENTS.clear()
    for s in shared:
        s.client.close()


atexit.register(close_clients)


def converge(
    host: str,
    port: int,
    fingerprint: str | Fingerprint,
    *,
    config: ConfigArg | Client = None,
    certificate: bytes | None = None,
    ip: str | None = None,
) -> Verdict:
    """Is ``fingerprint`` the certificate the notaries see for ``host:port``?

    ``config`` is a :class:`Client`, a :class:`Config`, a configuration directory, or
    ``None`` (discover).
    ``certificate`` (DER), when given, lets the cache and the notaries' lists be matched by
    both SHA-1 and SHA-256. ``ip`` asks the notaries to connect to that address (the one
    the caller connected to) with ``host`` as SNI; extended answers must name it. Raises
    :class:`~converge.errors.BadInput` for bad arguments or configuration; notary failures
    are votes in the verdict, not exceptions.
    """
    return get_client(config).check(host, port, fingerprint, certificate=certificate, ip=ip)


async def aconverge(
    host: str,
    port: int,
    fingerprint: str | Fingerprint,
    *,
    config: ConfigArg | Client = None,
    certificate: bytes | None = None,
    ip: str | None = None,
) -> Verdict:
    """The asynchronous :func:`converge`."""
    return await get_client(config).acheck(
        host, port, fingerprint, certificate=certificate, ip=ip
    )
