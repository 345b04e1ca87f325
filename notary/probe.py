"""Live probes: connect to a target from the notary's own network path and take its leaf.

* One timeout covers resolution, connect and the TLS handshake.
* The address policy is applied to every resolved address; the probe connects to an
  address literal that passed it, so a DNS answer cannot change between check and connect.
* SNI is sent for names, never for IP literals. TLS 1.2 and 1.3. No certificate validation
  here: the notary reports what it sees, it does not judge it.
* A refusal names the address and its special-purpose range only when the client named the
  address (an IP-literal host or the ``ip`` segment); for a name the notary resolved, it
  says only that the name resolves to no address it may probe (the details go to the debug
  log), so a public notary does not reveal its operator's internal DNS answers.
* A failed connection or handshake says what kind of failure it was (the legacy 503 text and
  the signed v2 ``detail``); the address only when the client named it, the TLS library's
  reason never (both go to the debug log).
* Foreign exceptions (``OSError``, ``ssl.SSLError``, ``TimeoutError``) become
  :class:`~notary.errors.TargetUnreachable` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import dataclass
from typing import Protocol

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


def presented_chain(ssl_obj: ssl.SSLObject) -> tuple[bytes, ...]:
    """The chain the peer presented, leaf first, bounded in count and bytes.

    Python 3.13 exposes ``get_unverified_chain``; 3.11 and 3.12 have it on the underlying
    ``_ssl`` object. Where neither exists the chain is empty (the leaf is still known).
    """
    getter = getattr(ssl_obj, "get_unverified_chain", None)
    if getter is None:
        getter = getattr(getattr(ssl_obj, "_sslobj", None), "get_unverified_chain", None)
    if getter is None:
        return ()
    certs = getter() or []
    out: list[bytes] = []
    total = 0
    for cert in certs[:MAX_CHAIN_CERTS]:
        der = cert if isinstance(cert, bytes) else cert.public_bytes(ssl._ssl.ENCODING_DER)  # type: ignore[attr-defined]
        total += len(der)
        if total > MAX_CHAIN_BYTES:
            break
        out.append(der)
    return tuple(out)


class Prober(Protocol):
    async def probe(self, target: Target) -> ProbeResult: ...


def client_context() -> ssl.SSLContext:
    """A TLS client context that completes handshakes with any certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
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


class _Quiet(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:  # pragma: no cover - we send nothing
        pass


class TLSProber:
    def __init__(
        self,
        resolver: Resolver,
        policy: AddressPolicy,
        timeout: float,
        ctx: ssl.SSLContext | None = None,
        *,
        want_chain: bool = False,
    ) -> None:
        self._want_chain = want_chain
        self._resolver = resolver
        self._policy = policy
        self._timeout = timeout
        self._ctx = ctx or client_context()

    async def probe(self, target: Target) -> ProbeResult:
        try:
            async with asyncio.timeout(self._timeout):
                return await self._probe(target)
        except TimeoutError as exc:
            raise TargetUnreachable(
                f"{target.location}: no TLS handshake within {self._timeout:g} s"
            ) from exc

    async def _probe(self, target: Target) -> ProbeResult:
        client_named = target.ip is not None or target.host_is_ip
        try:
            addrs = [target.ip] if target.ip is not None else await self._resolver.resolve(
                target.host
            )
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
        # An IP literal as server_hostname makes the ssl module send no SNI.
        sni = addr.compressed if target.host_is_ip else target.host
        try:
            transport, _ = await loop.create_connection(
                _Quiet,
                host=addr.compressed,
                port=target.port,
                ssl=self._ctx,
                server_hostname=sni,
                ssl_handshake_timeout=self._timeout,
                ssl_shutdown_timeout=1.0,
            )
        except ssl.SSLError as exc:
            raise _failed(target, addr, "the TLS handshake failed",
                          f"TLS handshake with {addr} failed ({exc.reason or exc})") from exc
        except ConnectionRefusedError as exc:
            raise _failed(target, addr, "the target refused the connection",
                          f"{addr} refused the connection") from exc
        except OSError as exc:
            raise _failed(target, addr, "cannot connect to the target",
                          f"cannot connect to {addr} ({exc.strerror or exc})") from exc
        chain: tuple[bytes, ...] = ()
        try:
            ssl_obj = transport.get_extra_info("ssl_object")
            leaf = ssl_obj.getpeercert(binary_form=True) if ssl_obj is not None else None
            if leaf and self._want_chain:
                chain = presented_chain(ssl_obj)
        finally:
            transport.abort()
        if not leaf:
            raise TargetUnreachable(f"{target.location}: the target presented no certificate")
        return ProbeResult(leaf, addr.compressed, CertDigests.of(leaf), chain)


__all__ = ["ProbeResult", "Prober", "TLSProber", "client_context"]
