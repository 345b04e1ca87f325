"""The special-purpose address ranges the notary knows, as data, on every Python version.

The notary refuses to probe addresses that are not globally reachable unicast. Python's
``ipaddress`` properties (``is_global``, ``is_private``) changed between patch releases
(CVE-2024-4032: 3.11.7 treats 192.0.0.0/24 and 3fff::/20 as global), so the decision must
not depend on them. This table is ours:

* Source: the IANA "IPv4 Special-Purpose Address Registry" and "IPv6 Special-Purpose Address
  Registry" (RFC 6890 and the RFCs that updated them, through RFC 9637 for 3fff::/20 and
  RFC 9602 for 5f00::/16), plus the multicast blocks 224.0.0.0/4 and ff00::/8, and for IPv6
  everything outside the global unicast block 2000::/3. Compiled :data:`SOURCE_DATE`.
* Each entry has the registry's "globally reachable" flag. The most specific entry that
  contains an address decides; an address in no entry is global unicast.
* IPv6 forms that embed an IPv4 address (IPv4-mapped, NAT64 64:ff9b::/96, 6to4, Teredo) are
  marked ``embeds``; :mod:`notary.core.addrpolicy` judges them by the embedded address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from notary.core.target import IPAddress

SOURCE = "IANA IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890 and updates)"
SOURCE_DATE = "2026-11-25"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class Range:
    network: Network
    name: str  # what the range is, as the registry names it
    rfc: str
    global_: bool = False  # "globally reachable" in the registry
    embeds: bool = False  # an IPv6 form carrying an IPv4 address

    def __str__(self) -> str:
        return f"{self.name} ({self.network}, {self.rfc})"


def _r(net: str, name: str, rfc: str, *, global_: bool = False, embeds: bool = False) -> Range:
    return Range(ipaddress.ip_network(net), name, rfc, global_, embeds)


RANGES: tuple[Range, ...] = (
    # IPv4
    _r("0.0.0.0/8", "'this network'", "RFC 791"),
    _r("0.0.0.0/32", "unspecified, 'this host on this network'", "RFC 1122"),
    _r("10.0.0.0/8", "private-use", "RFC 1918"),
    _r("100.64.0.0/10", "shared address space, carrier-grade NAT", "RFC 6598"),
    _r("127.0.0.0/8", "loopback", "RFC 1122"),
    _r("169.254.0.0/16", "link-local", "RFC 3927"),
    _r("172.16.0.0/12", "private-use", "RFC 1918"),
    _r("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    _r("192.0.0.0/29", "IPv4 service continuity prefix, DS-Lite", "RFC 7335"),
    _r("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    _r("192.0.0.9/32", "port control protocol anycast", "RFC 7723", global_=True),
    _r("192.0.0.10/32", "traversal using relays around NAT anycast", "RFC 8155", global_=True),
    _r("192.0.0.170/31", "NAT64/DNS64 discovery", "RFC 7050"),
    _r("192.0.2.0/24", "documentation, TEST-NET-1", "RFC 5737"),
    _r("192.31.196.0/24", "AS112-v4", "RFC 7535", global_=True),
    _r("192.52.193.0/24", "automatic multicast tunneling", "RFC 7450", global_=True),
    _r("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    _r("192.168.0.0/16", "private-use", "RFC 1918"),
    _r("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534", global_=True),
    _r("198.18.0.0/15", "benchmarking", "RFC 2544"),
    _r("198.51.100.0/24", "documentation, TEST-NET-2", "RFC 5737"),
    _r("203.0.113.0/24", "documentation, TEST-NET-3", "RFC 5737"),
    _r("224.0.0.0/4", "multicast", "RFC 5771"),
    _r("240.0.0.0/4", "reserved for future use", "RFC 1112"),
    _r("255.255.255.255/32", "limited broadcast", "RFC 919"),
    # IPv6
    _r("::/128", "unspecified", "RFC 4291"),
    _r("::1/128", "loopback", "RFC 4291"),
    _r("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", embeds=True),
    _r("64:ff9b::/96", "IPv4/IPv6 translation, NAT64", "RFC 6052", global_=True, embeds=True),
    _r("64:ff9b:1::/48", "local-use IPv4/IPv6 translation", "RFC 8215"),
    _r("100::/64", "discard-only", "RFC 6666"),
    _r("2001::/23", "IETF protocol assignments", "RFC 2928"),
    _r("2001::/32", "Teredo", "RFC 4380", embeds=True),
    _r("2001:1::1/128", "port control protocol anycast", "RFC 7723", global_=True),
    _r("2001:1::2/128", "traversal using relays around NAT anycast", "RFC 8155", global_=True),
    _r("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665",
       global_=True),
    _r("2001:2::/48", "benchmarking", "RFC 5180"),
    _r("2001:3::/32", "automatic multicast tunneling", "RFC 7450", global_=True),
    _r("2001:4:112::/48", "AS112-v6", "RFC 7535", global_=True),
    _r("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    _r("2001:20::/28", "ORCHIDv2", "RFC 7343", global_=True),
    _r("2001:30::/28", "drone remote ID protocol entity tags", "RFC 9374", global_=True),
    _r("2001:db8::/32", "documentation", "RFC 3849"),
    _r("2002::/16", "6to4", "RFC 3056", global_=True, embeds=True),
    _r("3fff::/20", "documentation", "RFC 9637"),
    _r("5f00::/16", "segment routing SIDs, SRv6", "RFC 9602"),
    _r("fc00::/7", "unique-local", "RFC 4193"),
    _r("fe80::/10", "link-local unicast", "RFC 4291"),
    _r("fec0::/10", "deprecated site-local", "RFC 3879"),
    _r("ff00::/8", "multicast", "RFC 4291"),
)

_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_OUTSIDE_V6 = Range(_GLOBAL_UNICAST_V6, "outside the global unicast block", "RFC 4291")

# Most specific first, so the first containing entry decides.
_BY_SPECIFICITY = tuple(sorted(RANGES, key=lambda r: -r.network.prefixlen))


def classify(ip: IPAddress) -> Range | None:
    """The most specific special-purpose range containing ``ip``, or ``None`` (ordinary
    global unicast). IPv6 outside 2000::/3 and in no entry is reported as such."""
    for r in _BY_SPECIFICITY:
        if r.network.version == ip.version and ip in r.network:
            return r
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _GLOBAL_UNICAST_V6:
        return _OUTSIDE_V6
    return None


def embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64 /96, 6to4, Teredo)."""
    r = classify(ip)
    if r is None or not r.embeds:
        return None
    if r.name == "IPv4-mapped":
        return ip.ipv4_mapped
    if r.name == "6to4":
        return ip.sixtofour
    if r.name == "Teredo":
        teredo = ip.teredo
        return teredo[1] if teredo is not None else None
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)  # NAT64 well-known prefix /96


__all__ = ["RANGES", "SOURCE", "SOURCE_DATE", "Range", "classify", "embedded_v4"]
