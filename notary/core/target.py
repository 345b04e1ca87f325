"""Target addresses: the ``/target/<host>+<port>[/<ip>]`` path segment and host-name rules.

Rules:

* ``host`` is a DNS name (letters, digits, ``-`` and ``_`` in labels of 1-63 characters, at
  most 253 characters in all, one optional trailing dot dropped), an IPv4 literal or an IPv6
  literal (bare or in brackets). Names are folded to lower case.
* ``port`` is decimal 1-65535, at most five digits, nothing else.
* The optional ``ip`` segment (a later fork's extension) must be an IP literal; the notary
  connects there and sends ``host`` as SNI.
* Records are keyed by what was probed (:attr:`Target.key`): ``host:port`` for the notary's
  own resolution (or an ``ip`` equal to an IP-literal host), ``host:port/ip`` for an address
  the client named. So an address a client names never changes what the notary answers
  for ``host:port`` (docs/THREAT_MODEL.md, "cache poisoning through the address segment").
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import unquote

from notary.errors import BadTarget

MAX_PATH = 600
MAX_NAME = 253
_LABEL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_MAYBE_IP = re.compile(r"[0-9A-Fa-f.:%\[\]]+")  # every character an IP literal may have


@dataclass(frozen=True, slots=True)
class Target:
    """A validated target: what to ask about, and optionally where to connect."""

    host: str
    port: int
    ip: IPAddress | None = None
    # worked out once: a parsed target is remembered and asked for its key on every hit
    _key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ip is None or self.ip.compressed == self.host:  # the host is that address
            key = self.location
        else:
            key = f"{self.location}/{self.ip.compressed}"
        object.__setattr__(self, "_key", key)

    @property
    def location(self) -> str:
        """``host:port`` for messages and records; an IPv6 host in brackets
        (``[::1]:443``), so the port cannot be read as part of the address."""
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"

    @property
    def key(self) -> str:
        """The record key: ``host:port`` when the notary resolves the name itself,
        ``host:port/ip`` when the client named the address to connect to."""
        return self._key

    @property
    def host_is_ip(self) -> bool:
        return parse_ip(self.host) is not None


def parse_ip(text: str) -> IPAddress | None:
    """An IP literal (IPv6 optionally in brackets), or ``None`` if ``text`` is not one."""
    if not _MAYBE_IP.fullmatch(text):
        return None  # a character no IP literal has (a name): no ValueError to raise and catch
    bracketed = text.startswith("[") and text.endswith("]")
    if bracketed:
        text = text[1:-1]
    if "%" in text:  # zone ids are local to a machine; never a target
        return None
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    return None if bracketed and ip.version == 4 else ip  # brackets are for IPv6 only


def normalise_host(raw: str) -> str:
    """Validate and canonicalise a host: a DNS name (lower case) or an IP literal."""
    if not raw:
        raise BadTarget("You must specify a target.")
    ip = parse_ip(raw)
    if ip is not None:
        return ip.compressed
    name = raw.lower()
    if name.endswith("."):
        name = name[:-1]
    if not name or len(name) > MAX_NAME:
        raise BadTarget("target host name is empty or longer than 253 characters")
    for label in name.split("."):
        if not 1 <= len(label) <= 63:
            raise BadTarget("target host name has an empty or over-long label")
        if not set(label) <= _LABEL_CHARS:
            raise BadTarget("target host name has characters outside letters, digits, '-', '_'")
        if label.startswith("-") or label.endswith("-"):
            raise BadTarget("target host name label starts or ends with '-'")
    if name.replace(".", "").isdigit():
        raise BadTarget("target host looks numeric but is not a valid IP address")
    return name


def parse_port(raw: str) -> int:
    if not raw:
        raise BadTarget("You must specify a destination port.")
    if len(raw) > 5 or not raw.isascii() or not raw.isdigit():
        raise BadTarget("destination port must be a decimal number from 1 to 65535")
    port = int(raw)
    if not 1 <= port <= 65535:
        raise BadTarget("destination port must be a decimal number from 1 to 65535")
    return port


def parse_target_path(spec: str) -> Target:
    """Parse what follows ``/target/`` in a request path (still percent-encoded or not).

    >>> parse_target_path("Example.COM+443").location
    'example.com:443'
    """
    if len(spec) > MAX_PATH:
        raise BadTarget("target path too long")
    spec = unquote(spec)
    if not spec:
        raise BadTarget("You must specify a target.")
    ip_part: str | None = None
    if "/" in spec:
        spec, _, ip_part = spec.partition("/")
        if "/" in ip_part:
            raise BadTarget("target path has too many segments; expected host+port[/ip]")
    if "+" not in spec:
        raise BadTarget("You must specify a destination port.")
    host_raw, _, port_raw = spec.partition("+")
    if "+" in port_raw:
        raise BadTarget("target has more than one '+'; expected host+port")
    host = normalise_host(host_raw)
    port = parse_port(port_raw)
    ip: IPAddress | None = None
    if ip_part is not None:
        if not ip_part:
            raise BadTarget("empty IP segment; expected host+port/ip")
        ip = parse_ip(ip_part)
        if ip is None:
            raise BadTarget("the optional third segment must be an IP address")
    return Target(host, port, ip)


__all__ = ["IPAddress", "Target", "normalise_host", "parse_ip", "parse_port", "parse_target_path"]
