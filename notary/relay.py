"""The bounce relay: a CONNECT-only tunnel to other notaries' TLS port (convergence-v1.md).

So that no single notary learns both who asks and what is asked, a client may tunnel its
notary queries through a relay notary. The relay sees who connects and which notary they
reach, never what they ask: the client runs TLS to the destination notary through the tunnel.

Rules:

* The relay listens on plain HTTP and accepts only ``CONNECT <host>:<port> HTTP/1.x`` whose
  port is ``relay_port`` (4242, the legacy notaries' TLS port; configurable so tests can use
  free ports). ``X-Convergence-Notary: <otherhost>+<port>`` headers name further physical
  hosts of the same logical notary; a destination without a port means ``relay_port``.
* Answers are the legacy ones, byte for byte where the legacy relay fixed them:
  ``HTTP/1.0 200 Connection Established`` with ``Proxy-Agent: Convergence`` and
  ``X-Convergence-Notary: <connected host>``; ``403 Access Denied`` for another port, another
  method or a destination refused by the address policy; ``404 Unable to connect`` when no
  destination could be reached. Ours adds ``400 Bad Request`` for a malformed head and
  ``503 Service Unavailable`` (with ``Retry-After``) when every tunnel slot is busy.
* Destinations pass the same address policy and resolver as probes: every resolved address
  is checked and the relay connects to an address literal that passed.
* All destinations (at most :data:`MAX_DESTINATIONS`, each at most
  :data:`~notary.probe.MAX_ADDRESSES` addresses) are dialled in parallel within the connect
  timeout, at most :data:`MAX_DIALS` connections per CONNECT in all; the first to connect is
  kept and the others are closed.
* Each client address may start at most ``connect_rate`` CONNECTs per second (token bucket
  of ``connect_burst``; the answer beyond is ``503`` with ``Retry-After``), so one client
  cannot make the relay dial other hosts at the rate of its own requests.
* Bounds: open relay connections (``max_tunnels``, counting those still sending their head;
  one client address may hold at most ``max_tunnels_per_client`` of them, from
  ``client_share``, and one network, an IPv4 /24 or IPv6 /48, at most
  ``max_tunnels_per_group``, from ``group_share``, as for probe slots),
  head bytes (``max_head``) and head time (``head_timeout``), connect time, idle time of a
  tunnel (no byte in either direction for ``idle_timeout``) and total bytes per tunnel in both
  directions (``max_bytes``). The relay does not vote and keeps no log of destinations.

:func:`parse_connect` is pure; :class:`Relay` is the IO around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from notary.core.addrpolicy import AddressPolicy
from notary.core.target import IPAddress, normalise_host, parse_ip, parse_port
from notary.errors import (
    BadConfig,
    BadInput,
    BadTarget,
    RateLimited,
    TargetRefused,
    TargetUnreachable,
)
from notary.limits import CLIENT, RateLimiter, client_key, group_key, share
from notary.probe import MAX_ADDRESSES
from notary.proxyproto import Network, ProxyHeaderError, is_trusted, read_header_stream
from notary.resolve import Resolver

LEGACY_PORT = 4242
MAX_DESTINATIONS = 8
MAX_DIALS = 8  # connections one CONNECT may open, over all its destinations and addresses
MAX_HEADER_LINES = 32
CHUNK = 64 * 1024

OK_HEAD = "HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\n"
DENIED = b"HTTP/1.0 403 Access Denied\r\nProxy-Agent: Convergence\r\n\r\n"
UNABLE = b"HTTP/1.0 404 Unable to connect\r\nProxy-Agent: Convergence\r\n\r\n"
BAD = b"HTTP/1.0 400 Bad Request\r\nProxy-Agent: Convergence\r\n\r\n"
BUSY = b"HTTP/1.0 503 Service Unavailable\r\nProxy-Agent: Convergence\r\nRetry-After: 1\r\n\r\n"


class RelayDenied(TargetRefused):
    """The CONNECT asks for something the relay never does (403 Access Denied)."""


@dataclass(frozen=True, slots=True)
class Destination:
    host: str  # normalised name or IP literal
    port: int


@dataclass(frozen=True, slots=True)
class RelaySettings:
    relay_port: int = LEGACY_PORT
    max_tunnels: int = 256
    head_timeout: float = 10.0
    connect_timeout: float = 5.0
    idle_timeout: float = 60.0
    max_bytes: int = 16 * 1024 * 1024
    max_head: int = 8192
    max_tunnels_per_client: int = 0  # open relay connections of one client address (0: off)
    max_tunnels_per_group: int = 0  # open relay connections of one /24 or /48 (0: off)


def _destination(text: str, sep: str, relay_port: int) -> Destination:
    text = text.strip()
    if not text:
        raise BadTarget("empty relay destination")
    host, port_text = text, ""
    if text.startswith("["):  # [IPv6]:port
        close = text.find("]")
        if close < 0:
            raise BadTarget("unterminated IPv6 literal in relay destination")
        host, rest = text[: close + 1], text[close + 1 :]
        if rest:
            if not rest.startswith(sep):
                raise BadTarget("junk after IPv6 literal in relay destination")
            port_text = rest[1:]
    elif sep in text and parse_ip(text) is None:
        host, _, port_text = text.rpartition(sep)
    port = relay_port
    if port_text or text.endswith(sep):
        try:
            port = parse_port(port_text)
        except BadInput as exc:
            raise RelayDenied(f"relay destination port {port_text!r} is not allowed") from exc
    if port != relay_port:
        raise RelayDenied(f"the relay connects only to port {relay_port}")
    return Destination(normalise_host(host), port)


def parse_connect(head: bytes, relay_port: int = LEGACY_PORT) -> list[Destination]:
    """The destinations of a CONNECT request head (ending at the blank line).

    Raises :class:`RelayDenied` (403) for another method, another port or too many
    destinations, and :class:`BadInput` (400) for a malformed head.
    """
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError as exc:
        raise BadInput("relay request head must be ASCII") from exc
    lines = text.split("\r\n")
    while lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise BadInput("empty relay request")
    if len(lines) > MAX_HEADER_LINES + 1:
        raise BadInput("too many header lines in relay request")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadInput("malformed relay request line")
    method, target, _version = parts
    if method != "CONNECT":
        raise RelayDenied("the relay accepts only CONNECT")
    out = [_destination(target, ":", relay_port)]
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadInput("malformed header line in relay request")
        if name.strip().lower() != "x-convergence-notary":
            continue
        for item in value.split(","):
            dest = _destination(item, "+", relay_port)
            if dest not in out:
                out.append(dest)
            if len(out) > MAX_DESTINATIONS:
                raise RelayDenied(f"more than {MAX_DESTINATIONS} relay destinations")
    return out


@dataclass
class RelayStats:
    open: int = 0  # relay connections open now (head or tunnel)
    tunnels: int = 0  # tunnels established, ever
    denied: int = 0
    unable: int = 0
    busy: int = 0
    bad: int = 0
    idle_closed: int = 0
    bytes_closed: int = 0
    statuses: list[int] = field(default_factory=list)  # last answers, bounded

    def note(self, status: int) -> None:
        self.statuses.append(status)
        del self.statuses[:-100]


def _hold(counts: dict[str, int], key: str) -> int:
    """Count one more connection of ``key``: the new count."""
    n = counts[key] = counts.get(key, 0) + 1
    return n


def _release(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


class Relay:
    """The relay's listeners and tunnels. ``await start()``, then ``await close()``."""

    def __init__(
        self,
        settings: RelaySettings,
        resolver: Resolver,
        policy: AddressPolicy,
        listen: list[tuple[str, int]],
        *,
        reuse_port: bool = False,
        trusted_proxies: Sequence[Network] = (),
        connect_rate: RateLimiter | None = None,
    ) -> None:
        self.settings = settings
        self._trusted = list(trusted_proxies)
        self._rate = connect_rate
        self._resolver = resolver
        self._policy = policy
        self._listen = listen
        self._reuse_port = reuse_port
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._per_client: dict[str, int] = {}  # open relay connections by client address
        self._per_group: dict[str, int] = {}  # open relay connections by client network
        self.stats = RelayStats()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        out = []
        for server in self._servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                out.append((host, port))
        return out

    async def start(self) -> Relay:
        for host, port in self._listen:
            server = await asyncio.start_server(
                self._accept, host, port, limit=self.settings.max_head,
                reuse_port=self._reuse_port or None, backlog=1024,
            )
            self._servers.append(server)
        return self

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.stats.open += 1
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if self._trusted and is_trusted(address, self._trusted):
            try:
                async with asyncio.timeout(self.settings.head_timeout):
                    announced = await read_header_stream(reader)
            except (ProxyHeaderError, OSError, TimeoutError):
                self._tasks.discard(task)
                self.stats.open -= 1
                self.stats.bad += 1
                writer.close()
                return
            if announced is not None:
                address = announced[0]
        client = client_key(address)
        CLIENT.set(client)  # name lookups this tunnel starts are charged to it (notary/resolve.py)
        group = group_key(client)
        mine = _hold(self._per_client, client)
        ours = _hold(self._per_group, group)
        try:
            s = self.settings
            if (self.stats.open > s.max_tunnels or 0 < s.max_tunnels_per_client < mine
                    or 0 < s.max_tunnels_per_group < ours):
                self.stats.busy += 1
                self.stats.note(503)
                writer.write(BUSY)
                return
            if self._rate is not None:
                try:
                    self._rate.check(client, time.monotonic())
                except RateLimited:
                    self.stats.busy += 1
                    self.stats.note(503)
                    writer.write(BUSY)
                    return
            await self._serve(reader, writer)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away, was too slow, or sent an over-long head
        finally:
            self.stats.open -= 1
            _release(self._per_client, client)
            _release(self._per_group, group)
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        s = self.settings
        try:
            async with asyncio.timeout(s.head_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.LimitOverrunError, ValueError):
            await self._answer(writer, BAD, 400)
            return
        try:
            dests = parse_connect(head, s.relay_port)
        except RelayDenied:
            await self._answer(writer, DENIED, 403)
            return
        except BadInput:
            await self._answer(writer, BAD, 400)
            return
        try:
            dest, up_reader, up_writer = await self._dial(dests)
        except TargetRefused:
            await self._answer(writer, DENIED, 403)
            return
        except TargetUnreachable:
            await self._answer(writer, UNABLE, 404)
            return
        try:
            ok = f"{OK_HEAD}X-Convergence-Notary: {dest.host}\r\n\r\n".encode("ascii")
            self.stats.tunnels += 1
            self.stats.note(200)
            writer.write(ok)
            await writer.drain()
            await self._pump(reader, writer, up_reader, up_writer)
        finally:
            up_writer.transport.abort()

    async def _answer(self, writer: asyncio.StreamWriter, raw: bytes, status: int) -> None:
        self.stats.note(status)
        if status == 403:
            self.stats.denied += 1
        elif status == 404:
            self.stats.unable += 1
        else:
            self.stats.bad += 1
        writer.write(raw)
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(1.0):
                await writer.drain()

    async def _addresses(self, dest: Destination) -> tuple[list[IPAddress], list[str]]:
        try:
            addrs = await self._resolver.resolve(dest.host)
        except TargetUnreachable:
            return [], []
        allowed, refused = [], []
        for addr in addrs:
            why = self._policy.refusal(addr)
            if why is None:
                allowed.append(addr)
            else:
                refused.append(why)
        return allowed[:MAX_ADDRESSES], refused

    async def _dial(
        self, dests: list[Destination]
    ) -> tuple[Destination, asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to the first reachable destination; see the module rules."""
        s = self.settings
        pending: set[asyncio.Task[tuple[Destination, asyncio.StreamReader, asyncio.StreamWriter]]]
        pending = set()
        any_refused = False
        any_allowed = False
        try:
            async with asyncio.timeout(s.connect_timeout):
                resolved = await asyncio.gather(*(self._addresses(d) for d in dests))
                for dest, (allowed, refused) in zip(dests, resolved, strict=True):
                    any_refused = any_refused or bool(refused)
                    for addr in allowed:
                        any_allowed = True
                        if len(pending) < MAX_DIALS:
                            pending.add(asyncio.create_task(self._connect(dest, addr)))
                if not any_allowed:
                    if any_refused:
                        raise TargetRefused("every relay destination is refused by policy")
                    raise TargetUnreachable("no relay destination resolves")
                while pending:
                    done, pending = await asyncio.wait(
                        pending, return_when=asyncio.FIRST_COMPLETED
                    )
                    won = [t.result() for t in done if t.exception() is None]
                    for extra in won[1:]:
                        extra[2].transport.abort()
                    if won:
                        return won[0]
        except TimeoutError:
            pass
        finally:
            for task in pending:
                task.cancel()
            for late in await asyncio.gather(*pending, return_exceptions=True):
                if isinstance(late, tuple):
                    late[2].transport.abort()
        raise TargetUnreachable("no relay destination connected")

    async def _connect(
        self, dest: Destination, addr: IPAddress
    ) -> tuple[Destination, asyncio.StreamReader, asyncio.StreamWriter]:
        try:
            reader, writer = await asyncio.open_connection(
                addr.compressed, dest.port, limit=CHUNK
            )
        except OSError as exc:
            raise TargetUnreachable(f"cannot connect to {addr}") from exc
        return dest, reader, writer

    async def _pump(
        self,
        c_reader: asyncio.StreamReader,
        c_writer: asyncio.StreamWriter,
        u_reader: asyncio.StreamReader,
        u_writer: asyncio.StreamWriter,
    ) -> None:
        """Copy bytes both ways until EOF, idle timeout or the byte bound."""
        s = self.settings
        state = {"last": time.monotonic(), "bytes": 0}

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> str:
            while True:
                wait = state["last"] + s.idle_timeout - time.monotonic()
                if wait <= 0:
                    return "idle"
                try:
                    async with asyncio.timeout(wait):
                        data = await src.read(CHUNK)
                except TimeoutError:
                    continue  # re-check: the other direction may have been active
                if not data:
                    with contextlib.suppress(OSError):
                        if dst.can_write_eof():
                            dst.write_eof()
                    return "eof"
                state["bytes"] += len(data)
                if state["bytes"] > s.max_bytes:
                    return "bytes"
                state["last"] = time.monotonic()
                dst.write(data)
                async with asyncio.timeout(s.idle_timeout):
                    await dst.drain()
                state["last"] = time.monotonic()

        up = asyncio.create_task(copy(c_reader, u_writer))
        down = asyncio.create_task(copy(u_reader, c_writer))
        tasks = {up, down}
        try:
            while tasks:
                done, tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    why = "error" if task.exception() is not None else task.result()
                    if why == "eof":
                        continue  # half close: keep the other direction
                    if why == "idle":
                        self.stats.idle_closed += 1
                    elif why == "bytes":
                        self.stats.bytes_closed += 1
                    return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def relay_settings_from(
    relay_port: int,
    max_tunnels: int,
    idle_timeout: float,
    max_bytes: int,
    connect_timeout: float,
    head_timeout: float = 10.0,
    client_share: float = 0.0,
    group_share: float = 0.0,
) -> RelaySettings:
    """Validated :class:`RelaySettings` (raises :class:`~notary.errors.BadConfig`)."""
    if not 1 <= relay_port <= 65535:
        raise BadConfig("relay_port must be from 1 to 65535")
    for name, value in (
        ("max_tunnels", max_tunnels),
        ("tunnel_idle_timeout", idle_timeout),
        ("tunnel_max_bytes", max_bytes),
        ("relay connect timeout", connect_timeout),
        ("relay_head_timeout", head_timeout),
    ):
        if value <= 0:
            raise BadConfig(f"{name} must be positive, got {value}")
    return RelaySettings(
        relay_port=relay_port,
        max_tunnels=max_tunnels,
        head_timeout=head_timeout,
        connect_timeout=connect_timeout,
        idle_timeout=idle_timeout,
        max_bytes=max_bytes,
        max_tunnels_per_client=share(max_tunnels, client_share),
        max_tunnels_per_group=share(max_tunnels, group_share),
    )


__all__ = [
    "DENIED",
    "LEGACY_PORT",
    "UNABLE",
    "Destination",
    "Relay",
    "RelayDenied",
    "RelaySettings",
    "parse_connect",
    "relay_settings_from",
]
