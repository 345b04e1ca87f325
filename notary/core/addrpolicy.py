"""Which addresses the notary may connect to.

Rules:

* By default only globally reachable unicast addresses are allowed: an address is refused
  when the most specific range of the notary's own special-purpose table
  (:mod:`notary.core.special`, from the IANA registries, the same on every Python version)
  that contains it is not globally reachable. Refusals name that range ("documentation,
  TEST-NET-3", "shared address space", "private-use", ...).
* IPv6 forms that embed an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64
  ``64:ff9b::/96``, 6to4 ``2002::/16``, Teredo ``2001::/32``) are judged by the embedded
  IPv4 address too.
* An operator allowlist of networks opens ranges deliberately; an address inside an allowed
  network (or whose embedded IPv4 address is) is allowed whatever its kind.
* The decision is made on the address actually connected to, never on a name.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from notary.core.special import classify, embedded_v4
from notary.core.target import IPAddress
from notary.errors import BadConfig

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(specs: Iterable[str]) -> tuple[Network, ...]:
    out: list[Network] = []
    for spec in specs:
        try:
            out.append(ipaddress.ip_network(spec.strip(), strict=False))
        except ValueError as exc:
            raise BadConfig(f"not a network (CIDR): {spec!r}") from exc
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    allow: tuple[Network, ...] = ()

    def _allowed_explicitly(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.allow)

    def refusal(self, ip: IPAddress) -> str | None:
        """``None`` if the notary may connect to ``ip``, else the reason it may not."""
        if self._allowed_explicitly(ip):
            return None
        r = classify(ip)
        if r is not None and r.embeds:
            assert isinstance(ip, ipaddress.IPv6Address)
            v4 = embedded_v4(ip)
            if v4 is not None:
                if self._allowed_explicitly(v4):
                    return None
                inner = classify(v4)
                if inner is not None and not inner.global_:
                    return f"{ip} ({r.name}) embeds {v4}, not globally reachable: {inner}"
                if r.name == "IPv4-mapped":
                    return None  # an IPv4 address written in IPv6 form: judged as IPv4
        if r is None or r.global_:
            return None
        return f"{ip} is not globally reachable: {r}"


__all__ = ["AddressPolicy", "Network", "parse_networks"]
