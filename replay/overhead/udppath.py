"""A UDP path emulator (toxiproxy carries TCP only): an asyncio datagram relay on loopback
that gives QUIC the same network as the TCP paths, from the same profiles (profiles.py).

Each relay listens on 127.0.0.1:``listen`` and forwards to 127.0.0.1:``upstream``; every
client address is a session with a socket of its own towards the upstream and one link per
direction. A link is a token bucket of one datagram (a serialisation queue): a datagram
leaves the bucket ``len * 8 / rate`` after the one before it, then arrives the direction's
one-way delay later (upstream ``rtt // 2``, downstream the rest, as toxiproxy's split) plus
uniform jitter of the direction's share, never before the datagram ahead of it (no
reordering, as toxiproxy's latency on a TCP stream). Loss: each datagram is dropped with the
path's probability, drawn from a seeded RNG. Bounded: at most ``QUEUE`` datagrams waiting
per link (more are dropped and counted) and ``SESSIONS`` sessions per relay (beyond, the
least recently used is closed and counted). The rate is per
session (per connection, as toxiproxy's bandwidth toxic) and counts UDP payload bytes.

Run as ``python -m replay.overhead.udppath --profile thesis --map LISTEN:UPSTREAM ...``:
one line ``ready`` on stdout once every port is bound, the counters as JSON in ``--stats``
at SIGTERM; a port in use or an unknown profile is one line on stderr and exit 2.
:class:`UdpPath` runs it as a process (a context manager).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

from replay.errors import ReplayInputError, ReplayIOError
from replay.overhead.profiles import PathProfile, get_profiles
from replay.overhead.toxi import stop_process

QUEUE = 512  # datagrams waiting per link (direction of a session) before drops
SESSIONS = 1024  # client addresses per relay (a load opens one per connection)
RCVBUF = 4 << 20  # bytes asked for each relay socket's receive buffer


@dataclass
class Counters:
    forwarded: int = 0
    lost: int = 0  # dropped by the loss probability
    overflow: int = 0  # dropped: the link's queue full
    sessions: int = 0
    sessions_evicted: int = 0  # the least recently used, for a new one beyond SESSIONS


class Link:
    """One direction of one session: serialisation (rate), delay and jitter, loss."""

    def __init__(self, loop: asyncio.AbstractEventLoop, one_way_ms: int, jitter_ms: int,
                 kbit: int, loss: float, rng: random.Random, counters: Counters,
                 send: Any) -> None:
        self.loop, self.rng, self.counters, self.send = loop, rng, counters, send
        self.delay = one_way_ms / 1000
        self.jitter = jitter_ms / 1000
        self.byte_s = kbit * 1000 / 8 if kbit else 0.0
        self.loss = loss
        self.busy_until = 0.0  # when the bucket has sent the last datagram given to it
        self.last_arrival = 0.0
        self.queue: deque[tuple[float, bytes]] = deque()  # (arrival time, datagram)

    def push(self, data: bytes) -> None:
        if self.loss and self.rng.random() < self.loss:
            self.counters.lost += 1
            return
        if len(self.queue) >= QUEUE:
            self.counters.overflow += 1
            return
        now = self.loop.time()
        self.busy_until = max(now, self.busy_until) + (
            len(data) / self.byte_s if self.byte_s else 0.0)
        j = self.rng.uniform(-self.jitter, self.jitter) if self.jitter else 0.0
        at = max(self.last_arrival, self.busy_until + max(0.0, self.delay + j))
        self.last_arrival = at
        self.queue.append((at, data))
        if len(self.queue) == 1:
            self.loop.call_at(at, self._arrive)

    def _arrive(self) -> None:
        """Sends every datagram due, in the order pushed (one timer per link at a time: the
        event loop's timers of equal times may fire in any order, which would reorder
        datagrams whose jitter put them at the same instant)."""
        now = self.loop.time()
        while self.queue and self.queue[0][0] <= now:
            _, data = self.queue.popleft()
            self.counters.forwarded += 1
            with contextlib.suppress(OSError):
                self.send(data)
        if self.queue:
            self.loop.call_at(self.queue[0][0], self._arrive)


def _big_buffer(t: asyncio.BaseTransport) -> None:
    """A receive buffer for a burst (the kernel's default, ~200 KB of buffer space, holds
    about 90 datagrams of 1,200 bytes): 4 MB, or what the kernel allows."""
    sock = t.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)


class _Back(asyncio.DatagramProtocol):
    """A session's socket towards the upstream: what it receives goes down the path."""

    def __init__(self, session: _Session) -> None:
        self.session = session

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.session.down.push(data)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable: nothing to do
        pass


class _Session:
    def __init__(self, relay: _Front, client: tuple[str, int]) -> None:
        self.relay = relay
        self.client = client
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: list[bytes] = []
        p, loop, rng, c = relay.profile, relay.loop, relay.rng, relay.counters
        self.up = Link(loop, p.up_ms, p.up_jitter, p.up_kbit, p.loss, rng, c, self._to_up)
        self.down = Link(loop, p.down_ms, p.down_jitter, p.down_kbit, p.loss, rng, c,
                         self._to_client)

    def _to_up(self, data: bytes) -> None:
        if self.transport is None:
            self.pending.append(data)
        else:
            self.transport.sendto(data)

    def _to_client(self, data: bytes) -> None:
        if self.relay.transport is not None:
            self.relay.transport.sendto(data, self.client)

    async def open(self) -> None:
        t, _ = await self.relay.loop.create_datagram_endpoint(
            lambda: _Back(self), remote_addr=("127.0.0.1", self.relay.upstream))
        _big_buffer(t)
        self.transport = t
        for d in self.pending:
            t.sendto(d)
        self.pending.clear()


class _Front(asyncio.DatagramProtocol):
    """The listening side of one relay."""

    def __init__(self, loop: asyncio.AbstractEventLoop, upstream: int, profile: PathProfile,
                 rng: random.Random, counters: Counters, max_sessions: int = SESSIONS) -> None:
        self.loop, self.upstream, self.profile = loop, upstream, profile
        self.max_sessions = max_sessions
        self.rng, self.counters = rng, counters
        self.transport: asyncio.DatagramTransport | None = None
        self.sessions: dict[tuple[str, int], _Session] = {}
        self.tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)
        _big_buffer(self.transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        key = (str(addr[0]), int(addr[1]))
        s = self.sessions.pop(key, None)
        if s is not None:
            self.sessions[key] = s  # the most recently used last
        else:
            if len(self.sessions) >= self.max_sessions:  # the least recently used goes
                old = self.sessions.pop(next(iter(self.sessions)))
                if old.transport is not None:
                    old.transport.close()
                self.counters.sessions_evicted += 1
            s = self.sessions[key] = _Session(self, key)
            self.counters.sessions += 1
            task = self.loop.create_task(s.open())
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        s.up.push(data)

    def error_received(self, exc: Exception) -> None:
        pass

    def close(self) -> None:
        for s in self.sessions.values():
            if s.transport is not None:
                s.transport.close()
        if self.transport is not None:
            self.transport.close()


def udp_port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_map(text: str) -> tuple[int, int]:
    """``LISTEN:UPSTREAM`` -> two ports; anything else is a ``ReplayInputError``."""
    a, sep, b = text.partition(":")
    try:
        ports = int(a), int(b)
    except ValueError:
        ports = (-1, -1)
    if not sep or not all(0 < p <= 65535 for p in ports):
        raise ReplayInputError(f"--map {text!r}: expected LISTEN:UPSTREAM, two ports")
    return ports


async def relay(profile: PathProfile, maps: list[tuple[int, int]], seed: int,
                stop: asyncio.Event, ready: Any = None, max_sessions: int = SESSIONS) -> Counters:
    """Relays ``maps`` (listen, upstream) with ``profile`` until ``stop`` is set; their
    counters. ``ready()`` is called once every port is bound."""
    loop = asyncio.get_running_loop()
    counters = Counters()
    rng = random.Random(seed)
    fronts: list[_Front] = []
    try:
        for listen, upstream in maps:
            try:
                front = _Front(loop, upstream, profile, rng, counters, max_sessions)
                await loop.create_datagram_endpoint(lambda: front,  # noqa: B023 (awaited here)
                                                    local_addr=("127.0.0.1", listen))
            except OSError as exc:
                raise ReplayInputError(f"UDP port {listen} on 127.0.0.1 is in use "
                                       f"({exc.strerror})") from exc
            fronts.append(front)
        if ready is not None:
            ready()
        await stop.wait()
    finally:
        for f in fronts:
            f.close()
    return counters


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m replay.overhead.udppath",
                                description="UDP path emulator (delay, jitter, rate, loss)")
    p.add_argument("--profile", default=None,
                   help="a path profile (profiles.py); the options below override it")
    p.add_argument("--map", action="append", required=True, metavar="LISTEN:UPSTREAM")
    for opt in ("--rtt-ms", "--jitter-ms", "--down-kbit", "--up-kbit"):
        p.add_argument(opt, type=int, default=None)
    p.add_argument("--loss", type=float, default=None, help="loss probability per datagram")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-sessions", type=int, default=SESSIONS,
                   help="client addresses per port (default: %(default)s)")
    p.add_argument("--stats", type=Path, default=None, help="counters as JSON at exit")
    p.add_argument("--seconds", type=float, default=3600.0, help="stop after (default 1 h)")
    a = p.parse_args(argv)
    try:
        base = get_profiles(a.profile)[0] if a.profile else PathProfile("custom", 0, 0, 0, 0, "")
        profile = PathProfile(
            base.name, base.rtt_ms if a.rtt_ms is None else a.rtt_ms,
            base.jitter_ms if a.jitter_ms is None else a.jitter_ms,
            base.down_kbit if a.down_kbit is None else a.down_kbit,
            base.up_kbit if a.up_kbit is None else a.up_kbit, base.source,
            base.loss if a.loss is None else a.loss)
        if min(profile.rtt_ms, profile.jitter_ms, profile.down_kbit, profile.up_kbit) < 0:
            raise ReplayInputError("RTT, jitter and rates must not be negative")
        if not 0.0 <= profile.loss < 1.0:
            raise ReplayInputError(f"--loss {profile.loss} is not a probability in [0, 1)")
        maps = [parse_map(m) for m in a.map]
        if not 1 <= a.max_sessions <= 100_000:
            raise ReplayInputError("--max-sessions must be in [1, 100000]")
        counters = asyncio.run(_serve(profile, maps, a.seed, a.seconds, a.max_sessions))
    except ReplayInputError as exc:
        print(f"udppath: error: {exc}", file=sys.stderr)
        return 2
    if a.stats is not None:
        a.stats.write_text(json.dumps(asdict(counters)) + "\n")
    return 0


async def _serve(profile: PathProfile, maps: list[tuple[int, int]], seed: int,
                 seconds: float, max_sessions: int) -> Counters:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(seconds, stop.set)

    def ready() -> None:
        print("ready", flush=True)

    return await relay(profile, maps, seed, stop, ready, max_sessions)


class UdpPath:
    """The emulator as a process relaying ``maps`` {listen: upstream} with ``profile`` (a
    context manager; stopped on exit, its counters then in :attr:`counters`)."""

    def __init__(self, profile: PathProfile, maps: dict[int, int], log: Path,
                 seed: int = 1, max_sessions: int = SESSIONS) -> None:
        for listen in maps:
            if not udp_port_free(listen):
                raise ReplayInputError(f"UDP port {listen} on 127.0.0.1 is in use (the UDP "
                                       "path emulator's)")
        self.stats = log.with_suffix(".stats.json")
        self.counters: dict[str, int] = {}
        args = [sys.executable, "-m", "replay.overhead.udppath", "--seed", str(seed),
                "--stats", str(self.stats), "--rtt-ms", str(profile.rtt_ms),
                "--jitter-ms", str(profile.jitter_ms), "--down-kbit", str(profile.down_kbit),
                "--up-kbit", str(profile.up_kbit), "--loss", str(profile.loss),
                "--max-sessions", str(max_sessions)]
        for listen, up in maps.items():
            args += ["--map", f"{listen}:{up}"]
        self._log = log.open("wb")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log,
                                     start_new_session=True)
        assert self.proc.stdout is not None
        line = b""
        deadline = time.monotonic() + 30
        with contextlib.suppress(OSError):
            import selectors

            sel = selectors.DefaultSelector()
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline and sel.select(deadline - time.monotonic()):
                line = self.proc.stdout.readline()
                break
            sel.close()
        if line.strip() != b"ready":
            self.close()
            err = log.read_text(errors="replace").strip().splitlines()
            msg = err[-1] if err else "no output"
            if msg.startswith("udppath: error: "):
                raise ReplayInputError(msg.removeprefix("udppath: error: "))
            raise ReplayIOError(f"the UDP path emulator did not start: {msg} (see {log})")

    def __enter__(self) -> UdpPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        stop_process(self.proc)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        with contextlib.suppress(OSError, ValueError):
            self.counters = json.loads(self.stats.read_text())


if __name__ == "__main__":
    raise SystemExit(main())
