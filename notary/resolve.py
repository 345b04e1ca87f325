"""Name resolution: a static name map (like a hosts file) in front of the system resolver.

The static map lets tests and split-horizon operators point names at chosen addresses.
Resolution never decides policy: the prober checks every address it is about to connect to.

The system resolver (``getaddrinfo``) blocks a thread until it has an answer, and a name
whose nameserver never answers holds it for the resolver's own timeouts (10-20 s with
glibc's defaults), long after the probe that asked has given up. Through the event loop's
shared pool (libuv's, 4 threads) four such names stopped every other lookup, so every
uncached name timed out and was remembered as unreachable for a minute. Here each lookup
has a thread of its own (a daemon: a stuck one never delays the notary's exit), at most
``threads`` at once, and each client address and network may hold at most its share of
them (the probe slots' ``--client-share`` and ``--group-share``); beyond that a lookup fails
at once with :class:`ResolverBusy`, which is never remembered as an answer about the name.
Concurrent lookups of one name share one thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from notary.core.target import IPAddress, normalise_host, parse_ip
from notary.errors import BadConfig, BadInput, TargetUnreachable

MAX_HOSTS_FILE = 64 * 1024 * 1024


def parse_resolve_option(spec: str) -> tuple[str, IPAddress]:
    """``NAME=IP`` (the ``--resolve`` option) -> (name, address)."""
    name, sep, ip_text = spec.partition("=")
    ip = parse_ip(ip_text.strip())
    if not sep or ip is None:
        raise BadConfig(f"--resolve expects NAME=IP, got {spec!r}")
    try:
        return normalise_host(name.strip()), ip
    except BadInput as exc:
        raise BadConfig(f"--resolve {spec!r}: {exc.message}") from exc


def parse_hosts_text(text: str, source: str = "hosts file") -> dict[str, list[IPAddress]]:
    """Parse ``IP name [name ...]`` lines (``#`` starts a comment)."""
    out: dict[str, list[IPAddress]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        ip = parse_ip(fields[0])
        if ip is None or len(fields) < 2:
            raise BadConfig(f"{source}:{lineno}: expected 'IP name [name ...]'")
        for raw in fields[1:]:
            try:
                name = normalise_host(raw)
            except BadInput as exc:
                raise BadConfig(f"{source}:{lineno}: {exc.message}") from exc
            addrs = out.setdefault(name, [])
            if ip not in addrs:
                addrs.append(ip)
    return out


def load_hosts_file(path: str | Path) -> dict[str, list[IPAddress]]:
    p = Path(path)
    try:
        if p.stat().st_size > MAX_HOSTS_FILE:
            raise BadConfig(f"{p}: hosts file larger than {MAX_HOSTS_FILE} bytes")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadConfig(f"cannot read hosts file {p}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise BadConfig(f"{p}: hosts file is not UTF-8") from exc
    return parse_hosts_text(text, str(p))


class ResolverBusy(TargetUnreachable):
    """The resolver could not answer for now (``EAI_AGAIN``): a failure of the notary's own
    network, not an answer about the name, so it stays a 503 the client may retry."""


DEFAULT_THREADS = 16  # system lookups in progress at once, per process


class Resolver:
    """Static map first, then the system resolver (``getaddrinfo``), in bounded threads.

    ``owner`` says which client a lookup is for (None: nobody's, bounded by ``threads``
    alone); ``group`` maps a client to its network; ``per_client`` and ``per_group`` are the
    lookups one client and one network may have in progress (0: no bound).
    """

    def __init__(
        self,
        static: Mapping[str, Iterable[IPAddress]] | None = None,
        *,
        use_system: bool = True,
        threads: int = DEFAULT_THREADS,
        owner: Callable[[], str | None] | None = None,
        group: Callable[[str], str] | None = None,
        per_client: int = 0,
        per_group: int = 0,
    ) -> None:
        self._static = {k: list(v) for k, v in (static or {}).items()}
        self._use_system = use_system
        self.threads = threads
        self._owner = owner
        self._group = group
        self._per_client = per_client
        self._per_group = per_group
        self.busy = 0  # lookups whose thread is still running (abandoned ones included)
        self._held: dict[str, int] = {}  # by client and by network
        self._pending: dict[str, asyncio.Future[list[Any]]] = {}

    @property
    def static_names(self) -> int:
        return len(self._static)

    async def resolve(self, host: str) -> list[IPAddress]:
        """Addresses for ``host`` (an IP literal resolves to itself), in preference order."""
        ip = parse_ip(host)
        if ip is not None:
            return [ip]
        static = self._static.get(host)
        if static:
            return list(static)
        if not self._use_system:
            raise TargetUnreachable(f"{host} is not in the notary's name map")
        lookup = self._pending.get(host)
        if lookup is None or lookup.get_loop() is not asyncio.get_running_loop():
            lookup = self._start(host)
        try:
            # shielded: a probe that gives up leaves the lookup to the others sharing it
            infos = await asyncio.shield(lookup)
        except socket.gaierror as exc:
            if exc.errno == socket.EAI_AGAIN:
                raise ResolverBusy(f"{host}: name resolution failed for now") from exc
            raise TargetUnreachable(f"{host} does not resolve") from exc
        except UnicodeError as exc:
            raise TargetUnreachable(f"{host} does not resolve") from exc
        out: list[IPAddress] = []
        for info in infos:
            addr = parse_ip(str(info[4][0]))
            if addr is not None and addr not in out:
                out.append(addr)
        if not out:
            raise TargetUnreachable(f"{host} has no usable address")
        return out

    def _start(self, host: str) -> asyncio.Future[list[Any]]:
        """A system lookup of ``host`` in a thread of its own, charged to its client, or
        :class:`ResolverBusy` at once when no thread or no share of them is free."""
        client = self._owner() if self._owner is not None else None
        charged: list[str] = []
        if client is not None:
            charged.append(client)
            if self._group is not None and (net := self._group(client)) != client:
                charged.append(net)
        if self.busy >= self.threads:
            raise ResolverBusy(f"{host}: all {self.threads} name lookups are in progress; "
                               "retry shortly")
        for key, bound, who in zip(charged, (self._per_client, self._per_group),
                                   ("address", "network"), strict=False):
            if 0 < bound <= self._held.get(key, 0):
                raise ResolverBusy(f"{host}: your {who} already has {bound} name lookups in "
                                   "progress; retry shortly")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        self.busy += 1
        for key in charged:
            self._held[key] = self._held.get(key, 0) + 1
        self._pending[host] = fut

        def done(infos: list[Any] | None, exc: BaseException | None) -> None:
            self.busy -= 1
            for key in charged:
                left = self._held[key] - 1
                if left:
                    self._held[key] = left
                else:
                    del self._held[key]
            if self._pending.get(host) is fut:
                del self._pending[host]
            if not fut.done():
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.set_result(infos or [])
            if not fut.cancelled():
                fut.exception()  # retrieved: nobody may be waiting any more

        def run() -> None:
            try:
                result: tuple[list[Any] | None, BaseException | None] = (
                    socket.getaddrinfo(host, None, type=socket.SOCK_STREAM), None)
            except Exception as exc:  # noqa: BLE001 - handed to the loop, raised there
                result = (None, exc)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting
                loop.call_soon_threadsafe(done, *result)

        try:
            threading.Thread(target=run, name=f"resolve {host}"[:64], daemon=True).start()
        except RuntimeError as exc:  # no thread to be had (the process's limit): not a leak
            done(None, ResolverBusy(f"{host}: no thread for a name lookup ({exc}); retry "
                                    "shortly"))
        return fut


__all__ = [
    "DEFAULT_THREADS", "Resolver", "ResolverBusy", "load_hosts_file", "parse_hosts_text",
    "parse_resolve_option",
]
