"""Overload and abuse limits: a token bucket per client address and a connection cap.

Rules:

* Each client address has a bucket of at most ``burst`` tokens that refills at ``rate``
  tokens per second; a request takes one token. An empty bucket means the request is refused
  (429) with ``Retry-After`` = the whole seconds until one token is back (at least 1).
  :func:`take` is pure: it receives the time, it never reads a clock.
* The table of buckets is bounded (``max_clients``): the least recently seen address is
  forgotten first. A forgotten address starts again with a full bucket, so the bound trades
  a little leniency towards very many distinct addresses for bounded memory.
* ``rate == 0`` turns rate limiting off.
* Live probes have a bucket of their own per client address (``--probe-rate-limit``): a
  request that needs a new probe is charged to the address that sent it, so one client
  cannot make the notary scan on its behalf faster than that rate, however its requests
  are spread over targets. Cache hits and requests that join a probe already running are
  not charged. The address travels from the HTTP layer to the prober in :data:`CLIENT`.
* Fair shares (``client_share``): one client address may hold at most that fraction of the
  probe slots (``max_probes``) and of the relay's tunnels (``max_tunnels``) at once, so a
  client that floods silent targets cannot take every slot from the others. Requests that
  join a probe already running are not charged.
* Client addresses are grouped by :func:`client_key`: an IPv4 address by itself, an IPv6
  address by its /64 (the smallest block a site is assigned), an IPv4-mapped or NAT64
  (64:ff9b::/96, RFC 6052) IPv6 address as its embedded IPv4 address. Rate limits, probe
  charges and shares all use the same key.
* Shares are hierarchical for probe slots (:func:`group_key`): besides the per-address share,
  one network (an IPv4 /24, an IPv6 /48) may hold at most ``group_share`` of the slots, and
  the last ``probe_reserve`` of the slots go only to clients holding none, so many attacker
  addresses (or networks) holding silent probes still leave a slot for a new client.
* The connection cap counts open connections of one process. While more than
  ``max_connections`` are open, every request is answered at once with 503, ``Retry-After``
  and ``Connection: close`` so the count falls; ``max_connections == 0`` turns the cap off.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from notary.core.target import Target, parse_ip
from notary.errors import RateLimited, TooManyConnections
from notary.probe import Prober, ProbeResult

CLIENT: ContextVar[str | None] = ContextVar("notary_client", default=None)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix


@functools.lru_cache(maxsize=4096)  # on every request: the same addresses recur
def client_key(address: str) -> str:
    """The key limits charge ``address`` to (see module rules)."""
    ip = parse_ip(address)
    if ip is None or ip.version == 4:
        return address
    mapped = ip.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    if ip in _NAT64:
        return str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return f"{ipaddress.IPv6Network((int(ip) >> 64 << 64, 64))}"


@functools.lru_cache(maxsize=4096)
def group_key(client: str) -> str:
    """The network a :func:`client_key` belongs to: its IPv4 /24 or IPv6 /48."""
    try:
        net = ipaddress.ip_network(client, strict=False)
    except ValueError:
        return client
    prefix = 24 if net.version == 4 else 48
    return str(net.supernet(new_prefix=prefix)) if net.prefixlen > prefix else str(net)


def share(total: int, fraction: float) -> int:
    """How many of ``total`` slots one client may hold (0: no per-client bound)."""
    if fraction <= 0 or fraction >= 1:
        return 0
    return max(1, math.ceil(total * fraction))


@dataclass(frozen=True, slots=True)
class Bucket:
    tokens: float
    stamp: float  # the time ``tokens`` was computed at


def take(bucket: Bucket | None, now: float, rate: float, burst: int) -> tuple[Bucket, float]:
    """Try to take one token at ``now``: (new bucket, seconds to wait; 0.0 when admitted)."""
    if bucket is None:
        tokens = float(burst)
    else:
        elapsed = max(0.0, now - bucket.stamp)
        tokens = min(float(burst), bucket.tokens + elapsed * rate)
    if tokens >= 1.0:
        return Bucket(tokens - 1.0, now), 0.0
    return Bucket(tokens, now), (1.0 - tokens) / rate


class RateLimiter:
    """Token buckets per client address in a bounded table (see module rules)."""

    def __init__(
        self, rate: float, burst: int, max_clients: int = 100_000, what: str = "requests"
    ) -> None:
        if rate < 0 or burst < 1 or max_clients < 1:
            raise ValueError("rate >= 0, burst >= 1 and max_clients >= 1 are required")
        self.what = what
        self.rate = rate
        self.burst = burst
        self._max = max_clients
        # per client [tokens, stamp], updated in place (no object per request): the same
        # arithmetic as :func:`take`
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()
        self.refused = 0

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def check(self, client: str, now: float) -> None:
        """Admit one request from ``client`` at ``now`` or raise :class:`RateLimited`."""
        rate = self.rate
        if rate <= 0:
            return
        buckets = self._buckets
        bucket = buckets.get(client)
        burst = float(self.burst)
        if bucket is None:
            bucket = buckets[client] = [burst, now]
            if len(buckets) > self._max:
                buckets.popitem(last=False)
            tokens = burst
        else:
            buckets.move_to_end(client)
            elapsed = now - bucket[1]
            tokens = bucket[0]
            if elapsed > 0.0:
                tokens = min(burst, tokens + elapsed * rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return
        bucket[0] = tokens
        self.refused += 1
        raise RateLimited(
            f"too many {self.what} from your address (limit {rate:g}/s, burst "
            f"{self.burst}); retry later",
            retry_after=max(1, math.ceil((1.0 - tokens) / rate)),
        )


class ConnectionCap:
    """Counts the open connections of one aiohttp server (see module rules)."""

    def __init__(self, max_connections: int, retry_after: int = 1) -> None:
        if max_connections < 0:
            raise ValueError("max_connections must not be negative")
        self.max_connections = max_connections
        self.retry_after = retry_after
        self.open = 0
        self.refused = 0

    def watch(self, server: web.Server) -> None:
        """Count ``server``'s connections by wrapping its connection hooks (call once)."""
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            self.open += 1
            made(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self.open -= 1
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    def check(self) -> None:
        """Raise :class:`TooManyConnections` while the cap is exceeded."""
        if 0 < self.max_connections < self.open:
            self.refused += 1
            raise TooManyConnections(
                f"this notary has more than {self.max_connections} open connections; "
                "retry shortly",
                retry_after=self.retry_after,
            )


class ProbeLimitedProber:
    """A :class:`Prober` that charges each live probe to the requesting client's bucket.

    The charge is :meth:`admit`, which the validation service calls synchronously before it
    makes the probe a flight: a refused probe never becomes a flight that other clients'
    requests could join (a check inside the flight's task ran a loop step later, and a
    request for the same target arriving in that step joined it and got the first
    client's 429). :meth:`probe` itself charges nothing.
    """

    def __init__(
        self, inner: Prober, limiter: RateLimiter, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._inner = inner
        self.limiter = limiter
        self._clock = clock

    def admit(self) -> None:
        """Charge one live probe to the client of this request (:data:`CLIENT`), or raise
        :class:`RateLimited`."""
        client = CLIENT.get()
        if client is not None:
            self.limiter.check(client, self._clock())

    async def probe(self, target: Target) -> ProbeResult:
        return await self._inner.probe(target)


__all__ = ["CLIENT", "Bucket", "ConnectionCap", "ProbeLimitedProber", "RateLimiter", "client_key",
           "group_key", "share", "take"]
