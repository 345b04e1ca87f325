"""Live probes: connect to a target from the notary's own network path and take its leaf.

* One timeout covers resolution, connect and the TLS handshake.
* The address policy is applied to every resolved address; the probe connects to an
  address literal that passed it, so a DNS answer cannot change between check and connect.
* SNI is sent for names, never for IP literals. TLS 1.2 and 1.3. No certificate validation
  here: the notary reports what it sees, it does not judge it.
* The handshake runs in pyOpenSSL (PyCA's binding to the OpenSSL that ``cryptography``
  ships, 4.0 here) over memory buffers on the event loop's own TCP transport, not in the
  ``ssl`` module (the system's OpenSSL, 3.0 here): measured on 2026-11-27, 600 probes of a
  local ``openssl s_server`` with an RSA-2048 certificate, 3 rounds, CPU per probe
  706-790 us against 996-1,206 us through uvloop's TLS transport, most of the difference
  OpenSSL 3.0's decoding of the server's key. The cipher list, the key-exchange groups and
  the minimum version are the ones the ``ssl`` module's client context used, less finite-field
  Diffie-Hellman (below), with the post-quantum hybrid groups OpenSSL 4.0 knows added last.
* Elliptic-curve key exchange only: no DHE suites for TLS 1.2, no ffdhe groups for TLS 1.3.
  The target picks the group, and with ffdhe8192 (either version) a probe cost 20-21 ms of
  the notary's CPU, most of it in one call on the event loop's thread, against 1.0-1.1 ms for
  an ordinary target and at most 1.8 ms for the dearest curve the probe offers (P-521, X448);
  measured on 2026-11-27 against local ``openssl s_server`` targets, 20 probes each. So a
  client naming targets of its own could spend 20 times the CPU per probe and stall every
  other client's answers; a target that speaks only finite-field DH is now unreachable
  (its handshake fails), as one that speaks only RSA key exchange already was.
* A refusal names the address and its special-purpose range only when the client named the
  address (an IP-literal host or the ``ip`` segment); for a name the notary resolved, it
  says only that the name resolves to no address it may probe (the details go to the debug
  log), so a public notary does not reveal its operator's internal DNS answers.
* A failed connection or handshake says what kind of failure it was (the legacy 503 text and
  the signed v2 ``detail``); the address only when the client named it, the TLS library's
  reason never (both go to the debug log).
* Foreign exceptions (``OSError``, ``OpenSSL.SSL.Error``, ``TimeoutError``) become
  :class:`~notary.errors.TargetUnreachable` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol, cast

from OpenSSL import SSL, crypto

from notary.core.addrpolicy import AddressPolicy
from notary.core.fingerprint import CertDigests
from notary.core.target import IPAddress, Target
from notary.errors import TargetRefused, TargetUnreachable
from notary.resolve import Resolver, ResolverBusy

log = logging.getLogger("notary.probe")

MAX_ADDRESSES = 4  # addresses tried per probe, in resolver order
MAX_CHAIN_CERTS = 10  # certificates kept from the presented chain
MAX_CHAIN_BYTES = 64 * 1024  # DER bytes kept from the presented chain


@dataclass(frozen=True, slots=True)
class ProbeResult:
    leaf: bytes  # DER
    address: str  # the address connected to
    digests: CertDigests
    chain: tuple[bytes, ...] = ()  # DER, as presented (leaf first), bounded


def bounded_chain(certs: list[crypto.X509] | None) -> tuple[bytes, ...]:
    """The chain the peer presented, leaf first, as DER, bounded in count and bytes."""
    out: list[bytes] = []
    total = 0
    for cert in (certs or [])[:MAX_CHAIN_CERTS]:
        der = crypto.dump_certificate(crypto.FILETYPE_ASN1, cert)
        total += len(der)
        if total > MAX_CHAIN_BYTES:
            break
        out.append(der)
    return tuple(out)


class Prober(Protocol):
    async def probe(self, target: Target) -> ProbeResult: ...


# The ``ssl`` module's client cipher list (Python 3.11-3.13) for TLS 1.2 without its DHE
# suites (see the module's docstring); TLS 1.3 suites are OpenSSL's defaults in both.
_TLS12_CIPHERS = b"@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM"


# The elliptic-curve groups the ``ssl`` module's client offered (OpenSSL 3.0's defaults less
# ffdhe2048-8192, see the module's docstring; one key share: X25519), then the hybrid
# post-quantum groups, offered without a key share (a server that prefers one asks for it).
# OpenSSL 3.5+ defaults to sending an X25519MLKEM768 share as well: 1.2 KB more in every
# ClientHello and 70-90 us more CPU per probe (measured on 2026-11-27, 600 probes of a local
# s_server, 2 runs of 3 rounds each way).
_GROUPS = b"X25519:P-256:X448:P-521:P-384:?X25519MLKEM768:?SecP256r1MLKEM768"


def _set_groups(ctx: SSL.Context) -> bool:
    """Set :data:`_GROUPS`; pyOpenSSL has no call for it, so this goes through the OpenSSL
    binding it is built on. False (OpenSSL's defaults stay) if that is not possible."""
    try:
        from cryptography.hazmat.bindings.openssl.binding import Binding

        return bool(Binding.lib.SSL_CTX_set1_curves_list(ctx._context, _GROUPS) == 1)
    except (ImportError, AttributeError, TypeError) as exc:  # pragma: no cover - other builds
        log.debug("the probe keeps OpenSSL's default groups (%r)", exc)
        return False


def client_context() -> SSL.Context:
    """A TLS client context that completes handshakes with any certificate."""
    ctx = SSL.Context(SSL.TLS_CLIENT_METHOD)
    ctx.set_verify(SSL.VERIFY_NONE)
    ctx.set_min_proto_version(SSL.TLS1_2_VERSION)
    ctx.set_cipher_list(_TLS12_CIPHERS)
    ctx.set_options(SSL.OP_ALL | SSL.OP_NO_COMPRESSION)
    _set_groups(ctx)
    return ctx


def _no_address(target: Target) -> TargetRefused:
    """A name that resolves to no address this notary may probe, or does not resolve: one
    status (403) and one text for both (see docs/THREAT_MODEL.md)."""
    return TargetRefused(
        f"{target.location}: refused by the notary's address policy (the name does not "
        "resolve to an address this notary may probe)"
    )


def _failed(target: Target, addr: IPAddress, kind: str, internal: str) -> TargetUnreachable:
    """A failed connection or handshake. Its text (the legacy 503 and the signed v2
    ``detail``) names the kind of failure only; the address is named only when the client
    named it, the TLS library's reason never. The full text goes to the debug log."""
    log.debug("%s: %s", target.location, internal)
    if target.ip is not None or target.host_is_ip:
        return TargetUnreachable(f"{target.location}: {kind} (at {addr})")
    return TargetUnreachable(f"{target.location}: {kind}")


_FLIGHT = 16384  # bytes read from the connection's buffer at a time (pyOpenSSL zeroes them)


class _HandshakeLost(Exception):
    """The target closed the connection before the handshake was done."""


class _Handshake(asyncio.Protocol):
    """Drives one client handshake of a pyOpenSSL connection over a TCP transport: what
    arrives goes into the connection's memory buffer, what it has to send goes out. ``done``
    gets ``None`` when the handshake is complete, or the error that ended it."""

    __slots__ = ("_conn", "_done", "_transport")

    def __init__(self, conn: SSL.Connection, done: asyncio.Future[None]) -> None:
        self._conn = conn
        self._done = done
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._advance()

    def data_received(self, data: bytes) -> None:
        if self._done.done():
            return  # handshake over: what follows (session tickets, data) is not read
        self._conn.bio_write(data)
        self._advance()

    def eof_received(self) -> bool:
        self._fail(_HandshakeLost("the target closed the connection during the handshake"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or _HandshakeLost("the connection was lost during the handshake"))

    def _fail(self, exc: BaseException) -> None:
        if not self._done.done():
            self._done.set_exception(exc)

    def _advance(self) -> None:
        try:
            self._conn.do_handshake()
        except SSL.WantReadError:
            self._send()
            return
        except SSL.Error as exc:
            self._send()  # the alert, if any
            self._fail(exc)
            return
        self._send()  # the client's last flight (its Finished)
        if not self._done.done():
            self._done.set_result(None)

    def _send(self) -> None:
        assert self._transport is not None
        while True:
            try:
                out = self._conn.bio_read(_FLIGHT)
            except SSL.WantReadError:
                return
            if not out:
                return
            self._transport.write(out)


class TLSProber:
    def __init__(
        self,
        resolver: Resolver,
        policy: AddressPolicy,
        timeout: float,
        ctx: SSL.Context | None = None,
        *,
        want_chain: bool = False,
    ) -> None:
        self._want_chain = want_chain
        self._resolver = resolver
        self._policy = policy
        self._timeout = timeout
        self._ctx = ctx or client_context()

    async def probe(self, target: Target) -> ProbeResult:
        resolved: list[bool] = []  # set once the name has its addresses
        try:
            async with asyncio.timeout(self._timeout):
                return await self._probe(target, resolved)
        except TimeoutError as exc:
            if not resolved:
                # nothing was tried: the notary's resolver is slow, which says nothing about
                # the target (so it is not remembered as unreachable)
                raise ResolverBusy(
                    f"{target.location}: the name did not resolve within {self._timeout:g} s"
                ) from exc
            raise TargetUnreachable(
                f"{target.location}: no TLS handshake within {self._timeout:g} s"
            ) from exc

    async def _probe(self, target: Target, resolved: list[bool]) -> ProbeResult:
        client_named = target.ip is not None or target.host_is_ip
        try:
            addrs = [target.ip] if target.ip is not None else await self._resolver.resolve(
                target.host
            )
            resolved.append(True)
        except ResolverBusy:
            raise
        except TargetUnreachable as exc:
            # A name that does not resolve gets the same answer as one resolving only to
            # refused addresses: otherwise 403 against 503 tells which internal names exist.
            log.debug("%s: %s", target.location, exc.message)
            raise _no_address(target) from exc
        allowed: list[IPAddress] = []
        refusals: list[str] = []
        for addr in addrs:
            why = self._policy.refusal(addr)
            if why is None:
                allowed.append(addr)
            else:
                refusals.append(why)
        if not allowed:
            if not client_named:
                # The addresses came from the notary's own resolver: naming them (or their
                # kind) would map the operator's internal DNS for anyone who asks.
                log.debug("%s refused: %s", target.location, "; ".join(refusals))
                raise _no_address(target)
            raise TargetRefused(
                f"{target.location}: refused by the notary's address policy ({refusals[0]})"
            )
        last: TargetUnreachable | None = None
        for addr in allowed[:MAX_ADDRESSES]:
            try:
                return await self._handshake(target, addr)
            except TargetUnreachable as exc:
                last = exc
        assert last is not None
        raise last

    async def _handshake(self, target: Target, addr: IPAddress) -> ProbeResult:
        loop = asyncio.get_running_loop()
        conn = SSL.Connection(self._ctx, None)  # memory buffers: the transport carries bytes
        if not target.host_is_ip:  # SNI for names only
            conn.set_tlsext_host_name(target.host.encode("ascii"))
        conn.set_connect_state()
        done: asyncio.Future[None] = loop.create_future()
        try:
            transport, _ = await loop.create_connection(
                lambda: _Handshake(conn, done), host=addr.compressed, port=target.port
            )
        except ConnectionRefusedError as exc:
            raise _failed(target, addr, "the target refused the connection",
                          f"{addr} refused the connection") from exc
        except OSError as exc:
            raise _failed(target, addr, "cannot connect to the target",
                          f"cannot connect to {addr} ({exc.strerror or exc})") from exc
        try:
            await done
            cert = conn.get_peer_certificate()
            leaf = crypto.dump_certificate(crypto.FILETYPE_ASN1, cert) if cert else b""
            chain = bounded_chain(conn.get_peer_cert_chain()) if leaf and self._want_chain else ()
        except SSL.Error as exc:
            raise _failed(target, addr, "the TLS handshake failed",
                          f"TLS handshake with {addr} failed ({_reason(exc)})") from exc
        except (_HandshakeLost, OSError) as exc:
            raise _failed(target, addr, "cannot connect to the target",
                          f"connection to {addr} lost during the handshake ({exc})") from exc
        finally:
            transport.abort()
        if not leaf:
            raise TargetUnreachable(f"{target.location}: the target presented no certificate")
        return ProbeResult(leaf, addr.compressed, CertDigests.of(leaf), chain)


def _reason(exc: SSL.Error) -> str:
    """OpenSSL's reason for a failed handshake, for the debug log."""
    errors = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
    reasons = [str(e[2]) for e in errors if isinstance(e, tuple) and len(e) == 3]
    return "; ".join(reasons) or repr(exc)


__all__ = ["ProbeResult", "Prober", "TLSProber", "client_context"]
