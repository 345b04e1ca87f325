"""Name resolution: a static name map (like a hosts file) in front of the system resolver.

The static map lets tests and split-horizon operators point names at chosen addresses.
Resolution never decides policy: the prober checks every address it is about to connect to.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Mapping
from pathlib import Path

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


class Resolver:
    """Static map first, then the system resolver (``getaddrinfo``)."""

    def __init__(
        self,
        static: Mapping[str, Iterable[IPAddress]] | None = None,
        *,
        use_system: bool = True,
    ) -> None:
        self._static = {k: list(v) for k, v in (static or {}).items()}
        self._use_system = use_system

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
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
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


__all__ = [
    "Resolver", "ResolverBusy", "load_hosts_file", "parse_hosts_text", "parse_resolve_option",
]
