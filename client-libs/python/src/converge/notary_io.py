"""Asking notaries over the network (IO): one TLS connection per physical host, pinned to
the bundle's certificate, one legacy request, the response read until the server closes.

* The notary's certificate is pinned: the SHA-1 of its DER leaf must equal the bundle's; no
  CA or host name check. The request is not sent when the pin does not match.
* A direct connection offers the TLS session of the last connection to the same host, port
  and pin whose certificate matched and whose response was read (TLS resumption). The pin is
  checked on every connection, resumed or not, and before every request.
* A direct connection in the extended format is kept open for the next query to the same
  host, port and pin when the notary offers it (the request asks ``Connection: keep-alive``
  instead of the legacy add-on's ``close``; the answer says ``Connection: keep-alive`` and
  has a ``Content-Length``): the next check skips the TCP and TLS handshakes. At most
  :data:`MAX_IDLE_PER_HOST` idle connections per host on each thread's loop, each for
  :data:`IDLE_SECONDS` (under the notary's own keep-alive timeout), only on the event loop
  that opened it (and closed on its thread) and only on the client's own per-thread loops
  (``check()``), which close them when they end
  (``acheck()`` on the caller's loop uses one connection per query). A kept connection the
  notary closed meanwhile is replaced by a new one once, transparently. Queries through a
  relay keep one request per connection.
* All physical hosts of one logical notary are raced; the first definitive answer (a 200 or
  409 that reduced to a success or failure vote) wins and the others are cancelled. When no
  host answers definitively, the notary's vote is the most telling failure seen: a pin
  mismatch or a bad body counts as ``failure`` (never silently dropped), anything else as
  ``unreachable``.
* Bounce (optional): the queries for one logical notary go through a relay notary's
  ``http_port`` as ``CONNECT <host>:<bounce_port>`` with one ``X-Convergence-Notary`` header
  per further physical host; the relay races them and names the one it reached, whose
  certificate is then pinned through the tunnel. A refused tunnel is ``unreachable``.
* Extended format (``converge-answer/1``, :mod:`converge.extended`): for a notary whose
  bundle offers it (and unless configured off), the request is ``POST /v2/answer`` over the
  same pinned TLS; the answer is verified against the bundle's signing keys, the target, the
  fingerprint asked about, the nonce sent and the local clock (``max_skew``). With
  ``fallback`` a host that answers 400/404/405/501 without a signed answer is asked again in
  the legacy format; a verification failure never falls back. When the bundle names a
  transparency log the request asks for a proof (``"transparency": true``) and a ``match``
  without a valid one is a failure of a ``log-*`` kind (:mod:`converge.transparency`).
* Every wait is bounded: ``connect_timeout`` for TCP + TLS, ``notary_timeout`` for the whole
  notary, ``max_bytes`` for the response.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ssl
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from OpenSSL import SSL

from . import extended, notary_tls
from .bundle import NotaryBundle, NotaryHost
from .errors import BadInput, NotaryUnreachable, PinMismatch, ResponseError
from .fingerprint import Fingerprint
from .legacy import (
    LEGACY_FORMAT,
    Outcome,
    Vote,
    outcome_from_http,
    request_bytes,
)
from .notary_tls import TLSStream, UnexpectedEOF
from .transparency import LOG_KINDS, LogPolicy

ResultVote = Vote | Literal["skipped"]


@dataclass(frozen=True, slots=True)
class NotaryResult:
    """What one logical notary said (``vote`` is ``skipped`` when the verdict was settled
    before it answered)."""

    name: str
    vote: ResultVote
    kind: str
    status: int | None = None
    host: str | None = None
    detail: str = ""
    elapsed: float = 0.0
    cache_status: str | None = None
    protocol: str | None = None  # convergence-v1 or converge-answer/1; None if not asked
    answer: bytes | None = field(default=None, repr=False)  # the verified extended answer

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.vote,
            "kind": self.kind,
            "status": self.status,
            "host": self.host,
            "detail": self.detail,
            "elapsed_ms": round(self.elapsed * 1000, 3),
            "cache_status": self.cache_status,
            "protocol": self.protocol,
        }


def notary_ssl_context() -> ssl.SSLContext:
    """An ``ssl`` module context with the notary connections' settings: no CA or host name
    check (the pin replaces them), TLS 1.2 at least. The client's own connections run their
    TLS in :mod:`converge.notary_tls`; this is for callers on the ``ssl`` module."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


_RELAY_CTX: SSL.Context | None = None


def _relay_ctx() -> SSL.Context:
    """The context of connections through a relay's tunnel (never resumed nor kept)."""
    global _RELAY_CTX
    if _RELAY_CTX is None:
        _RELAY_CTX = notary_tls.client_context()
    return _RELAY_CTX


@dataclass(frozen=True, slots=True)
class _HostAnswer:
    outcome: Outcome
    host: str
    cache_status: str | None


@dataclass(frozen=True, slots=True)
class ExtendedQuery:
    """How to ask one notary in the extended format."""

    keys: tuple[extended.SigningKey, ...]
    nonce: bool = True
    log: LogPolicy | None = None  # the bundle names a transparency log: require its proofs
    max_skew: int = extended.DEFAULT_MAX_SKEW
    fallback: bool = False
    clock: Callable[[], float] = time.time
    keep_alive: bool = True  # keep a direct connection open when the notary offers it


Opened = tuple[asyncio.StreamReader, TLSStream, NotaryHost]
MAX_RELAY_HEAD = 8192


class _Pinned:
    """The TLS state of one pinned notary host: its context, and the TLS session of the last
    connection to it whose certificate matched the pin and whose answer was read, which the
    next connection offers (a resumed handshake skips the certificate and its signature, the
    notary's largest cost per connection). A session is secret to the two ends of the
    handshake that made it, so only the pinned notary can resume it; the pin is still checked
    on every connection (a resumed session carries the certificate of its first handshake)."""

    def __init__(self) -> None:
        self.ctx = notary_tls.client_context()
        self.session: SSL.Session | None = None
        # connections whose last answer was read in full, most recent last
        self.idle: list[_Idle] = []


@dataclass(slots=True)
class _Idle:
    loop: asyncio.AbstractEventLoop
    reader: asyncio.StreamReader
    writer: TLSStream
    since: float


_PINNED: dict[tuple[str, int, bytes], _Pinned] = {}
MAX_PINNED_CONTEXTS = 256
MAX_IDLE_PER_HOST = 4
IDLE_SECONDS = 10.0  # a notary's keep-alive timeout is 15 s by default


def _pinned_ctx(nh: NotaryHost) -> _Pinned:
    """The TLS state of ``nh`` (one per host, port and pin; a bounded table)."""
    key = (nh.host.lower(), nh.ssl_port, nh.pin.digest)
    ctx = _PINNED.get(key)
    if ctx is None:
        if len(_PINNED) >= MAX_PINNED_CONTEXTS:
            # this loop's kept connections are closed with their contexts; a context that
            # holds another thread's stays until that thread's loop closes them
            loop = asyncio.get_running_loop()
            for k, full in list(_PINNED.items()):
                _close_kept(full, loop)
                if not full.idle:
                    _PINNED.pop(k, None)
        new = _Pinned()
        # one context per key even when threads ask at once (a connection made with a context
        # that lost the race could neither be resumed nor kept)
        ctx = _PINNED.setdefault(key, new)
    return ctx


def _remember_session(writer: TLSStream, nh: NotaryHost) -> None:
    """Keep the session of a pinned connection whose answer was read, for the next one (its
    TLS 1.3 tickets arrive before the answer, so it is resumable by then)."""
    pinned = _PINNED.get((nh.host.lower(), nh.ssl_port, nh.pin.digest))
    if pinned is None or writer.context is not pinned.ctx:
        return
    if pinned.session is not None and writer.session_reused():
        return  # the kept session still works
    session = writer.session()
    if session is not None:
        pinned.session = session


def _take_idle(ctx: _Pinned) -> _Idle | None:
    """The most recent usable idle connection of ``ctx`` opened on this event loop; this
    loop's stale ones are closed on the way, other loops' are left alone."""
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    for idle in reversed(list(ctx.idle)):
        if idle.loop is not loop and not idle.loop.is_closed():
            continue  # another thread's loop: not ours to use or to close
        with contextlib.suppress(ValueError):  # (another thread may have taken it)
            ctx.idle.remove(idle)
        if idle.loop is not loop:
            # its loop is closed (asyncio.run returned): close what is left of it here
            with contextlib.suppress(Exception):
                idle.writer.transport.abort()
            continue
        # bytes that arrived unasked while it was idle make it suspect (an answer is read to
        # its exact length; the next request's nonce would refuse a stale one anyway)
        if (now - idle.since < IDLE_SECONDS and not idle.writer.is_closing()
                and not idle.reader.at_eof() and not getattr(idle.reader, "_buffer", None)):
            return idle
        idle.writer.transport.abort()
    return None


def _close_kept(ctx: _Pinned, loop: asyncio.AbstractEventLoop) -> None:
    """Close the kept connections of ``ctx`` opened on ``loop`` (on that loop's thread)."""
    for idle in [i for i in ctx.idle if i.loop is loop]:
        with contextlib.suppress(ValueError):
            ctx.idle.remove(idle)
        idle.writer.transport.abort()


def _keep(nh: NotaryHost, reader: asyncio.StreamReader, writer: TLSStream) -> bool:
    """Keep a connection whose answer was read in full for the next query to ``nh``."""
    ctx = _PINNED.get((nh.host.lower(), nh.ssl_port, nh.pin.digest))
    if ctx is None or writer.context is not ctx.ctx:
        return False
    if asyncio.get_running_loop() not in _KEEPING_LOOPS:
        return False
    loop = asyncio.get_running_loop()
    mine = [i for i in ctx.idle if i.loop is loop]
    for oldest in mine[: max(0, len(mine) + 1 - MAX_IDLE_PER_HOST)]:
        with contextlib.suppress(ValueError):
            ctx.idle.remove(oldest)
        oldest.writer.transport.abort()
    ctx.idle.append(_Idle(loop, reader, writer, time.monotonic()))
    return True


_KEEPING_LOOPS: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def keep_connections_on(loop: asyncio.AbstractEventLoop) -> None:
    """Let extended queries on ``loop`` keep their connections: for a loop whose owner calls
    :func:`close_idle` before closing it (the client's per-thread loop). On any other loop
    (``acheck()`` on the caller's own) a query uses one connection, since nothing would close
    a kept one when that loop ends."""
    _KEEPING_LOOPS.add(loop)


def close_idle(loop: asyncio.AbstractEventLoop) -> None:
    """Close the kept connections of ``loop`` (called on its thread before it closes)."""
    for ctx in list(_PINNED.values()):
        _close_kept(ctx, loop)


async def _open_direct(nh: NotaryHost, max_bytes: int) -> Opened:
    pinned = _pinned_ctx(nh)
    reader, writer = await notary_tls.open_tls(
        nh.host, nh.ssl_port, pinned.ctx, server_hostname=nh.host, session=pinned.session,
        limit=max_bytes + 1)
    return reader, writer, nh


def connect_head(dests: Sequence[NotaryHost], port: int) -> bytes:
    """The CONNECT head sent to a bounce relay for one logical notary's hosts (pure)."""
    first = dests[0].host
    lines = [f"CONNECT {first}:{port} HTTP/1.1", f"Host: {first}"]
    lines += [f"X-Convergence-Notary: {d.host}+{port}" for d in dests[1:]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def parse_connect_reply(head: bytes, dests: Sequence[NotaryHost]) -> NotaryHost:
    """Which destination a relay connected to, from its reply head (pure). A status other
    than 200 or an unknown destination raises :class:`NotaryUnreachable`."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or parts[1] != "200":
        raise NotaryUnreachable(f"relay refused the tunnel: {lines[0][:80]!r}")
    connected = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "x-convergence-notary":
            connected = value.strip().lower()
    if connected is None:
        return dests[0] if len(dests) == 1 else _unknown(connected)
    host = connected.split("+")[0]
    for d in dests:
        if d.host.lower() in (host, connected):
            return d
    return _unknown(connected)


def _unknown(connected: str | None) -> NotaryHost:
    raise NotaryUnreachable(f"relay connected to an unknown notary host {connected!r}")


async def _open_via_relay(
    relay: NotaryBundle, dests: Sequence[NotaryHost], port: int, max_bytes: int
) -> Opened:
    last: Exception | None = None
    for rh in relay.hosts:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(
                rh.host, rh.http_port, limit=max(max_bytes + 1, MAX_RELAY_HEAD)
            )
            writer.write(connect_head(dests, port))
            await writer.drain()
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError as e:
                raise NotaryUnreachable("relay reply head too large") from e
            except asyncio.IncompleteReadError as e:
                raise NotaryUnreachable("relay closed the connection") from e
            if len(head) > MAX_RELAY_HEAD:
                raise NotaryUnreachable("relay reply head too large")
            nh = parse_connect_reply(head, dests)
            if getattr(reader, "_buffer", None):
                # the notary speaks second in TLS: bytes before its hello are the relay's
                raise NotaryUnreachable("relay sent bytes after its reply head")
            tls_reader, tls_writer = await notary_tls.start_tls(
                writer, _relay_ctx(), server_hostname=nh.host, limit=max_bytes + 1)
            return tls_reader, tls_writer, nh
        except OSError as e:
            if writer is not None:
                writer.transport.abort()
            last = e
    raise NotaryUnreachable(f"no host of relay {relay.name!r} worked: {last}")


async def query_host(
    nh: NotaryHost,
    target_host: str,
    target_port: int,
    wanted: Sequence[Fingerprint],
    *,
    connect_timeout: float,
    max_bytes: int,
    relay: NotaryBundle | None = None,
    relay_dests: Sequence[NotaryHost] = (),
    bounce_port: int = 4242,
    ext: ExtendedQuery | None = None,
    ip: str | None = None,
) -> _HostAnswer:
    """Ask one physical host (or, through ``relay``, whichever of ``relay_dests`` the relay
    connects to). IO failures are reported as outcomes, never raised. With ``ext`` the
    extended format is used (and, with ``ext.fallback``, the legacy one if the host does not
    offer it)."""
    kw: dict[str, Any] = {
        "connect_timeout": connect_timeout,
        "max_bytes": max_bytes,
        "relay": relay,
        "relay_dests": relay_dests,
        "bounce_port": bounce_port,
        "ip": ip,
    }
    if ext is None:
        return await _query_host(nh, target_host, target_port, wanted, None, **kw)
    answer = await _query_host(nh, target_host, target_port, wanted, ext, **kw)
    o = answer.outcome
    if ext.fallback and o.kind == "status" and o.status in extended.NOT_OFFERED:
        return await _query_host(nh, target_host, target_port, wanted, None, **kw)
    return answer


async def _query_host(
    nh: NotaryHost,
    target_host: str,
    target_port: int,
    wanted: Sequence[Fingerprint],
    ext: ExtendedQuery | None,
    *,
    connect_timeout: float,
    max_bytes: int,
    relay: NotaryBundle | None,
    relay_dests: Sequence[NotaryHost],
    bounce_port: int,
    ip: str | None,
) -> _HostAnswer:
    label = f"{nh.host}:{nh.ssl_port}"
    if relay is not None:
        label = f"{nh.host}:{bounce_port} via {relay.name}"
    nonce: str | None = None
    asked = wanted[0]
    proto = LEGACY_FORMAT if ext is None else extended.FORMAT
    # the extended format keeps a direct connection open when the notary offers it (the
    # legacy request stays the add-on's exact bytes, one per connection)
    keep_alive = relay is None and ext is not None and ext.keep_alive
    if ext is None:
        request = request_bytes(target_host, target_port, wanted[0], ip)
    else:
        asked = extended.request_fingerprint(wanted)
        nonce = extended.new_nonce() if ext.nonce else None
        request = extended.request_bytes(
            target_host, target_port, asked, nonce=nonce, ip=ip,
            transparency=ext.log is not None, keep_alive=keep_alive,
        )
    writer: TLSStream | None = None
    kept = False
    try:
        try:
            idle = _take_idle(_pinned_ctx(nh)) if keep_alive else None
            raw: bytes | None = None
            reusable = False
            if idle is not None:
                reader, writer = idle.reader, idle.writer
                raw, reusable = await _exchange(reader, writer, nh, label, request, max_bytes,
                                                framed=True, kept=True)
                if raw is None:
                    # the notary closed the kept connection meanwhile: a new one, once
                    writer.transport.abort()
                    writer = None
            if raw is None:
                async with asyncio.timeout(connect_timeout):
                    if relay is None:
                        reader, writer, nh = await _open_direct(nh, max_bytes)
                    else:
                        reader, writer, nh = await _open_via_relay(
                            relay, relay_dests or (nh,), bounce_port, max_bytes
                        )
                        label = f"{nh.host}:{bounce_port} via {relay.name}"
                raw, reusable = await _exchange(reader, writer, nh, label, request, max_bytes,
                                                framed=keep_alive)
                if relay is None:
                    _remember_session(writer, nh)
            if raw is None:  # (only a kept connection's exchange gives None)
                raise NotaryUnreachable(f"{label}: closed the connection without an answer")
            if keep_alive and reusable and writer is not None:
                kept = _keep(nh, reader, writer)
        except TimeoutError as e:
            raise NotaryUnreachable(f"{label}: timed out") from e
        except (OSError, EOFError) as e:
            if isinstance(e, NotaryUnreachable | PinMismatch):
                raise
            raise NotaryUnreachable(f"{label}: {type(e).__name__}: {e}") from e
        if ext is None:
            outcome, response = outcome_from_http(
                raw, wanted, nh.public_key(), max_bytes=max_bytes
            )
        else:
            now = int(ext.clock())
            ext_out, response = extended.outcome_from_http(
                raw,
                extended.trusted_keys(ext.keys, now),
                host=target_host,
                port=target_port,
                fingerprint=asked,
                nonce=nonce,
                now=now,
                max_skew=ext.max_skew,
                max_bytes=max_bytes,
                ip=ip,
                log=ext.log,
            )
            outcome = Outcome(
                ext_out.vote,
                ext_out.kind,
                ext_out.status,
                ext_out.detail,
                answer=ext_out.answer,
                protocol=extended.FORMAT,
            )
        cache_status = response.headers.get("cache-status") if response else None
        return _HostAnswer(outcome, label, cache_status)
    except PinMismatch as e:
        return _HostAnswer(Outcome("failure", e.kind, None, str(e), protocol=proto), label, None)
    except NotaryUnreachable as e:
        outcome = Outcome("unreachable", e.kind, None, str(e), protocol=proto)
        return _HostAnswer(outcome, label, None)
    except BadInput as e:
        return _HostAnswer(Outcome("failure", e.kind, None, str(e), protocol=proto), label, None)
    finally:
        if writer is not None and not kept:
            writer.transport.abort()


async def _exchange(
    reader: asyncio.StreamReader,
    writer: TLSStream,
    nh: NotaryHost,
    label: str,
    request: bytes,
    max_bytes: int,
    framed: bool = False,
    kept: bool = False,
) -> tuple[bytes | None, bool]:
    """Check the pin, send ``request`` and read the answer: ``(raw, reusable)``. ``framed``
    (a keep-alive request): an answer the notary keeps open is read to its Content-Length,
    anything else to the end of the connection, as every one-request connection is. On a
    ``kept`` connection raw is None when it ended before the first byte of an answer (the
    notary closed it meanwhile); on a new one that is an empty answer or the error itself,
    as for any one-request connection."""
    der = writer.peer_certificate()
    if not der or hashlib.sha1(der).digest() != nh.pin.digest:
        raise PinMismatch(f"{label} presented a certificate other than the pinned one")
    if not framed:
        writer.write(request)
        await writer.drain()
        return await _read_to_eof(reader, max_bytes), False
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return (None if kept else b""), False
        return e.partial, False  # a truncated head: the parser names it
    except asyncio.LimitOverrunError as e:
        raise ResponseError(f"response larger than {max_bytes} bytes") from e
    except (ConnectionResetError, BrokenPipeError):
        if kept:
            return None, False
        raise
    except UnexpectedEOF:
        if kept:
            return None, False
        raise
    length, keep_alive = _framing(head)
    if length is None or not keep_alive:
        return head + await _read_to_eof(reader, max_bytes - len(head)), False
    if len(head) + length > max_bytes:
        raise ResponseError(f"response larger than {max_bytes} bytes")
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as e:
        return head + e.partial, False  # a truncated body: the parser names it
    return head + body, True


def _framing(head: bytes) -> tuple[int | None, bool]:
    """``(Content-Length or None, the notary keeps the connection open)`` of a response
    head; any doubt (two lengths, a transfer coding, no keep-alive) means read to the end."""
    length: int | None = None
    keep_alive = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            v = value.strip()
            if length is not None or not v.isdigit() or len(v) > 12:
                return None, False
            length = int(v)
        elif name == b"connection":
            keep_alive = value.strip().lower() == b"keep-alive"
        elif name == b"transfer-encoding":
            return None, False
    return length, keep_alive


async def _read_to_eof(reader: asyncio.StreamReader, max_bytes: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while True:
        try:
            chunk = await reader.read(65536)
        except UnexpectedEOF:
            # Servers that close without close_notify: keep what was read.
            if chunks:
                break
            raise
        if not chunk:
            break
        total += len(chunk)
        if total > max_bytes:
            raise ResponseError(f"response larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


_DEFINITIVE_KINDS = frozenset({"listed", "status-only", "mismatch", "not-listed", "match"})
_SEVERITY = {
    "signature": 3,
    "response": 3,
    "pin": 2,
    **dict.fromkeys(extended.FAILURE_KINDS, 3),
    **dict.fromkeys(LOG_KINDS, 3),
}


async def ask_notary(
    bundle: NotaryBundle,
    target_host: str,
    target_port: int,
    wanted: Sequence[Fingerprint],
    *,
    connect_timeout: float,
    notary_timeout: float,
    max_bytes: int,
    relay: NotaryBundle | None = None,
    bounce_port: int = 4242,
    ext: ExtendedQuery | None = None,
    ip: str | None = None,
) -> NotaryResult:
    """Race every physical host of ``bundle``; see the module docstring for the rules."""
    t0 = time.perf_counter()
    if relay is None:
        asks = [
            query_host(
                h,
                target_host,
                target_port,
                wanted,
                connect_timeout=connect_timeout,
                max_bytes=max_bytes,
                ext=ext,
                ip=ip,
            )
            for h in bundle.hosts
        ]
    else:
        # the relay races the physical hosts itself (X-Convergence-Notary headers)
        asks = [
            query_host(
                bundle.hosts[0],
                target_host,
                target_port,
                wanted,
                connect_timeout=connect_timeout,
                max_bytes=max_bytes,
                relay=relay,
                relay_dests=bundle.hosts,
                bounce_port=bounce_port,
                ext=ext,
                ip=ip,
            )
        ]
    answers: list[_HostAnswer] = []
    winner: _HostAnswer | None = None
    if len(asks) == 1:
        # one host: nothing to race, so no task (about 20 us a check)
        try:
            async with asyncio.timeout(notary_timeout):
                answers.append(await asks[0])
        except TimeoutError:
            pass
        if answers and answers[0].outcome.kind in _DEFINITIVE_KINDS:
            winner = answers[0]
    else:
        tasks = [asyncio.create_task(a) for a in asks]
        try:
            async with asyncio.timeout(notary_timeout):
                for fut in asyncio.as_completed(tasks):
                    ans = await fut
                    answers.append(ans)
                    if ans.outcome.kind in _DEFINITIVE_KINDS:
                        winner = ans
                        break
        except TimeoutError:
            pass
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    elapsed = time.perf_counter() - t0
    if winner is None and answers:
        winner = max(answers, key=lambda a: _SEVERITY.get(a.outcome.kind, 0))
    if winner is None:
        return NotaryResult(
            bundle.name,
            "unreachable",
            "timeout",
            None,
            None,
            f"no answer within {notary_timeout} s",
            elapsed,
        )
    o = winner.outcome
    return NotaryResult(
        bundle.name,
        o.vote,
        o.kind,
        o.status,
        winner.host,
        o.detail,
        elapsed,
        winner.cache_status,
        o.protocol,
        o.answer,
    )
