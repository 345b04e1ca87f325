"""Which addresses the notary may connect to.

Rules:

* By default only globally routable unicast addresses are allowed. Refused: unspecified,
  loopback, link-local, multicast, private (RFC 1918, ULA, shared 100.64/10, ...), reserved
  and every other non-global range (IPv4 and IPv6).
* IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64
  ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo) are judged by the embedded IPv4 address too.
* An operator allowlist of networks opens ranges deliberately; an address inside an allowed
  network (or whose embedded IPv4 address is) is allowed whatever its kind.
* The decision is made on the address actually connected to, never on a name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from notary.core.target import IPAddress
from notary.errors import BadConfig

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def parse_networks(specs: Iterable[str]) -> tuple[Network, ...]:
    out: list[Network] = []
    for spec in specs:
        try:
            out.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError as exc:
            raise BadConfig(f"not a network (CIDR): {spec!r}") from exc
    return tuple(out)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def _kind(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address, or None if it is."""
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "site-local"  # fec0::/10: deprecated, but still routed inside some sites
    if ip.is_multicast:
        return "multicast"
    if ip.is_private:
        return "private"
    if ip.is_reserved:
        return "reserved"
    if not ip.is_global:
        return "non-global"
    return None


def _a(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow: tuple[Network, ...] = ()

    def _allowed_explicitly(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow)

    def refusal(self, ip: IPAddress) -> str | None:
        """``None`` if the notary may connect to ``ip``, else the reason it may not."""
        if self._allowed_explicitly(ip):
            return None
        if isinstance(ip, ipaddress.IPv6Address):
            v4 = _embedded_v4(ip)
            if v4 is not None:
                if self._allowed_explicitly(v4):
                    return None
                kind = _kind(v4)
                if kind is not None:
                    return f"{ip} embeds the {kind} IPv4 address {v4}"
                if ip.ipv4_mapped is not None:
                    return None
        kind = _kind(ip)
        return None if kind is None else f"{ip} is {_a(kind)} {kind} address"


__all__ = ["AddressPolicy", "Network", "parse_networks"]
