"""replay overhead over HTTP/3: the UDP path emulator (replay/overhead/udppath.py) checked
against its settings (RTT, rate each way, loss, bounded queues; a wrong setting fails the
same check), bad input as one line, and an HTTP/3 page load (aioquic) whose round trips are
the model's: one per QUIC handshake (what the http load's TCP handshake costs) plus one per
request wave, and none for the handshake with 0-RTT early data."""

from __future__ import annotations

import json
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from replay.errors import ReplayInputError
from replay.overhead.client import Browser, Mode
from replay.overhead.experiment import h3_rtts, http_persistent_rtts, slow_start_rounds
from replay.overhead.pages import Page, PageShape, make_page
from replay.overhead.profiles import PROFILES, PathProfile
from replay.overhead.serving import serve_page
from replay.overhead.udppath import QUEUE, UdpPath, free_udp_port

THESIS = PROFILES["thesis"]
DGRAM = 1200  # bytes per datagram in the rate measurements, QUIC's size


def within(measured: float, target: float, tol: float = 0.10) -> bool:
    return abs(measured - target) <= tol * target


class UdpEcho:
    """A loopback UDP server: ``p...`` -> echoed; ``d<n>`` -> n datagrams of DGRAM bytes
    back at once; ``u...`` counted with arrival times; ``r`` -> the count, first and last
    arrival of the ``u`` datagrams (JSON), then forgets them."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        ups: list[float] = []
        while not self.stop.is_set():
            try:
                data, anc, _, addr = self.sock.recvmsg(65535, 64)
            except TimeoutError:
                continue
            now = time.time()
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMP:
                    sec, usec = struct.unpack("qq", raw[:16])
                    now = sec + usec / 1e6
            op = data[:1]
            if op == b"p":
                self.sock.sendto(data, addr)
            elif op == b"d":
                for _ in range(int(data[1:])):
                    self.sock.sendto(b"\0" * DGRAM, addr)
            elif op == b"u":
                ups.append(now)
            elif op == b"r":
                self.sock.sendto(json.dumps([len(ups), ups[0] if ups else 0,
                                             ups[-1] if ups else 0]).encode(), addr)
                ups = []

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


@pytest.fixture(scope="module")
def echo() -> Iterator[UdpEcho]:
    e = UdpEcho()
    yield e
    e.close()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("udppath")


# the kernel's receive time of each datagram (Linux SO_TIMESTAMP, a struct timeval of
# CLOCK_REALTIME): what the path did, not when this process, on a loaded machine, got to it
SO_TIMESTAMP = 29


def _timestamped(s: socket.socket) -> None:
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)


def _recv(s: socket.socket) -> tuple[bytes, float]:
    """A datagram and the kernel's time of its arrival (time.time()'s clock)."""
    data, anc, _, _ = s.recvmsg(65535, 64)
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMP:
            sec, usec = struct.unpack("qq", raw[:16])
            return data, sec + usec / 1e6
    return data, time.time()


def _client(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # room for a burst's echoes
    _timestamped(s)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s


def _ping_ms(port: int, n: int = 9) -> float:
    with _client(port) as s:
        out = []
        for i in range(n):
            t0 = time.time()
            s.send(b"p%d" % i)
            while True:
                data, t1 = _recv(s)
                if data == b"p%d" % i:
                    break
            out.append((t1 - t0) * 1000)
    # the lower quartile: the path's jitter is symmetric and +-6 ms at most (the quartile of
    # the thesis profile's is 2 ms below its RTT), while this shared machine's load only
    # adds (the relay and the echo server are processes waiting for a core: at load average
    # 15 the median of 15 pings was seen 30 ms above the setting)
    return statistics.quantiles(out, n=4)[0]


def _down_kbit(port: int, n: int = 120) -> float:
    """n datagrams sent back at once: their rate from the first's arrival to the last's."""
    with _client(port) as s:
        s.send(b"d%d" % n)
        arrivals = [_recv(s)[1] for _ in range(n)]
    return (n - 1) * DGRAM * 8 / (arrivals[-1] - arrivals[0]) / 1000


def _up_kbit(port: int, n: int = 40) -> float:
    with _client(port) as s:
        for _ in range(n):
            s.send(b"u" + b"\0" * (DGRAM - 1))
        time.sleep(n * DGRAM * 8 / THESIS.up_kbit / 1000 + THESIS.rtt_ms / 1000 + 0.3)
        s.send(b"r")
        count, first, last = json.loads(s.recv(1000))
    assert count == n, count
    return float((n - 1) * DGRAM * 8 / (last - first) / 1000)


def _check(port: int, profile: PathProfile) -> list[str]:
    """What of RTT, down and up rate is not within 10% of ``profile``'s settings."""
    # medians of three: the relay is a process on this shared machine, and a load spike
    # that stalls it for tens of ms is its error, but a sporadic one
    rtt = _ping_ms(port, 15)
    down = statistics.median(_down_kbit(port) for _ in range(3))
    up = statistics.median(_up_kbit(port) for _ in range(3))
    print(f"measured: RTT {rtt:.1f} ms, {down:.0f} / {up:.0f} kbit/s")
    return [name for name, m, target in (("rtt", rtt, profile.rtt_ms),
                                         ("down", down, profile.down_kbit),
                                         ("up", up, profile.up_kbit))
            if not within(m, target)]


def test_thesis_profile_rtt_and_rates_through_the_udp_path(echo: UdpEcho, logs: Path) -> None:
    port = free_udp_port()
    with UdpPath(THESIS, {port: echo.port}, logs / "thesis.log") as path:
        assert _check(port, THESIS) == []
    assert path.counters["lost"] == path.counters["overflow"] == 0
    assert path.counters["forwarded"] > 3 * (120 + 40)


def test_wrong_settings_fail_the_same_check(echo: UdpEcho, logs: Path) -> None:
    """The twin: a path set to half the RTT and twice the rates is caught on all three."""
    wrong = replace(THESIS, rtt_ms=45, down_kbit=10_000, up_kbit=2_000)
    port = free_udp_port()
    with UdpPath(wrong, {port: echo.port}, logs / "wrong.log"):
        assert _check(port, THESIS) == ["rtt", "down", "up"]


def _burst_received(port: int, n: int, gap: float = 0.0) -> int:
    """Send n pings (``gap`` s apart); how many echoes come back within 2 s of the last."""
    with _client(port) as s:
        for i in range(n):
            s.send(b"p%d" % i)
            if gap:
                time.sleep(gap)
        s.settimeout(2)
        got = 0
        try:
            while True:
                s.recv(100)
                got += 1
        except TimeoutError:
            return got


def test_loss_drops_datagrams_with_the_set_probability(echo: UdpEcho, logs: Path) -> None:
    fast = PathProfile("lossy", 2, 0, 100_000, 100_000, "test", loss=0.3)
    port = free_udp_port()
    with UdpPath(fast, {port: echo.port}, logs / "lossy.log", seed=7) as path:
        got = _burst_received(port, 400, gap=0.001)
    # both directions: 0.7 * 0.7 = 49% come back
    assert 0.40 * 400 <= got <= 0.58 * 400, got
    assert 0.24 <= path.counters["lost"] / (400 + 0.7 * 400) <= 0.36, path.counters
    port = free_udp_port()
    with UdpPath(replace(fast, loss=0.0), {port: echo.port}, logs / "lossless.log") as path:
        assert _burst_received(port, 400, gap=0.001) == 400  # the twin: no loss set, none
    assert path.counters["lost"] == 0


def test_queue_is_bounded_and_overflow_counted(echo: UdpEcho, logs: Path) -> None:
    slow = PathProfile("slow", 2, 0, 100, 100, "test")  # 100 kbit/s: ~10 datagrams/s
    port = free_udp_port()
    with UdpPath(slow, {port: echo.port}, logs / "slow.log") as path, _client(port) as s:
        for _ in range(QUEUE + 200):
            s.send(b"u" + b"\0" * (DGRAM - 1))
        time.sleep(1.0)  # the relay reads them all
    # at most QUEUE wait, plus the few sent on meanwhile (100 kbit/s: ~10 a second)
    assert path.counters["overflow"] >= 150, path.counters
    assert path.counters["forwarded"] <= 30, path.counters


def test_sessions_are_bounded_least_recently_used_first(echo: UdpEcho, logs: Path) -> None:
    port = free_udp_port()
    with UdpPath(PROFILES["lan"], {port: echo.port}, logs / "few.log", max_sessions=2) as path:
        clients = [_client(port) for _ in range(3)]
        try:
            for c in clients:  # the third evicts the first
                c.send(b"p0")
                assert _recv(c)[0] == b"p0"
            clients[0].send(b"p1")  # a new session again, evicting the second
            assert _recv(clients[0])[0] == b"p1"
        finally:
            for c in clients:
                c.close()
    assert path.counters["sessions"] == 4 and path.counters["sessions_evicted"] == 2, \
        path.counters


def _inversions(seq: list[int]) -> int:
    """Adjacent pairs out of order."""
    return sum(a > b for a, b in zip(seq, seq[1:], strict=False))


def test_jitter_keeps_the_order(echo: UdpEcho, logs: Path) -> None:
    """+-10 ms of jitter each way on datagrams sent 0.2 ms apart: many arrive at the same
    instant (no earlier than the one before), and the event loop's timers of equal times
    may fire in any order, so the relay sends them from one queue per direction."""
    jittery = PathProfile("jittery", 40, 40, 100_000, 100_000, "test")
    port = free_udp_port()
    with UdpPath(jittery, {port: echo.port}, logs / "jittery.log"), _client(port) as s:
        for i in range(300):
            s.send(b"p%d" % i)
            time.sleep(0.0002)
        got = [int(s.recv(100)[1:]) for _ in range(300)]
    assert sorted(got) == list(range(300))
    assert _inversions(got) == 0, got
    assert _inversions([0, 2, 1, 3]) == 1  # the twin: the check sees a swapped pair


def _one_line(argv: list[str]) -> str:
    r = subprocess.run([sys.executable, "-m", "replay.overhead.udppath", *argv],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == "", r.stderr
    return lines[0]


def test_bad_input_is_one_line(logs: Path) -> None:
    assert "unknown path profile 'nope'" in _one_line(["--profile", "nope", "--map", "1:2"])
    assert "LISTEN:UPSTREAM" in _one_line(["--profile", "lan", "--map", "80"])
    assert "probability" in _one_line(["--profile", "lan", "--map", "1:2", "--loss", "1.5"])
    assert "--max-sessions" in _one_line(["--profile", "lan", "--map", "1:2",
                                          "--max-sessions", "0"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        line = _one_line(["--profile", "lan", "--map", f"{port}:9"])
        assert f"UDP port {port} on 127.0.0.1 is in use" in line, line
        with pytest.raises(ReplayInputError, match=f"UDP port {port} .* in use"):
            UdpPath(THESIS, {port: 9}, logs / "busy.log")


def test_good_input_starts(echo: UdpEcho, logs: Path) -> None:
    """The twin of the bad input: the same options well formed relay."""
    port = free_udp_port()
    with UdpPath(PROFILES["lan"], {port: echo.port}, logs / "lan.log"):
        assert _ping_ms(port, 3) < 50


# --- an HTTP/3 page load: its round trips against the model ---------------------------

RTT = 150  # ms: long beside this machine's noise; no jitter, rates far above the page's
PATH = PathProfile("test-150", RTT, 0, 100_000, 100_000, "test")
BARE = PathProfile("bare", 0, 0, 0, 0, "no delay, no rate limit")
# a redirect hop, then the HTML and one object on the page's own host
SHAPE = PageShape(objects=1, hosts=0, html_bytes=2_000, median_bytes=1_000, sigma=0.1,
                  cap_bytes=2_000, redirects=1)
# the model: per connection its handshake (QUIC: 1 RTT, the same as the http load's TCP
# handshake) and one request (the redirect's; the HTML's); then the object's request on the
# page's connection. 0-RTT: the requests go with the handshake, which costs no round trip.
CONNECTIONS, REQUEST_RTTS = 2, 3


def test_the_round_trip_models_of_the_test_page() -> None:
    """The report's models (experiment.py) for this page: 5 RTT over HTTP/3 as over http
    (TCP handshake and GET per connection, GET of the object); 3 with 0-RTT."""
    page = make_page(SHAPE, 1)
    assert http_persistent_rtts(page) == h3_rtts(page, False) == CONNECTIONS + REQUEST_RTTS
    assert h3_rtts(page, True) == REQUEST_RTTS
    assert slow_start_rounds(12_000) == (1, 24_000)
    assert slow_start_rounds(12_001) == (2, 48_000)
SLACK_MS = 60  # per connection: CPU time of aioquic's handshake left after the bare load


@dataclass
class H3Setup:
    page: Page
    shaped: Browser
    bare: Browser


@pytest.fixture(scope="module")
def h3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[H3Setup]:
    out = tmp_path_factory.mktemp("h3")
    page = make_page(SHAPE, 1)
    with serve_page(out, page, h2=False, h3=True) as served:
        a = {h: free_udp_port() for h in page.hosts}
        b = {h: free_udp_port() for h in page.hosts}
        with UdpPath(PATH, {p: served.h3_port for p in a.values()}, out / "a.log"), \
                UdpPath(BARE, {p: served.h3_port for p in b.values()}, out / "b.log"):
            yield H3Setup(page, Browser({("h3", h): p for h, p in a.items()}, PATH,
                                        str(served.cafile), 1),
                          Browser({("h3", h): p for h, p in b.items()}, BARE,
                                  str(served.cafile), 1))


def _handshake_rtts(s: H3Setup, mode: Mode) -> tuple[float, float]:
    """(round trips per connection spent on the handshake, the load's round trips): the
    fastest of five shaped loads minus the fastest of five bare ones, interleaved, less the
    requests' round trips, per connection. The fastest, not the median: the path has no
    jitter, so its delay is a floor, and this shared machine's load only adds CPU time
    (aioquic's handshake is Python: tens of ms, several times that at load average 10)."""
    s.shaped.load(s.page, mode)  # warm-up (fills the ticket cache for 0-RTT)
    s.bare.load(s.page, mode)
    before = s.shaped.counters.connections
    shaped, bare = [], []
    for _ in range(5):
        shaped.append(s.shaped.load(s.page, mode) * 1000)
        bare.append(s.bare.load(s.page, mode) * 1000)
    assert (s.shaped.counters.connections - before) == 5 * CONNECTIONS
    rtts = (min(shaped) - min(bare)) / RTT
    print(f"{mode.label}: {rtts:.2f} RTT ({shaped} shaped, {bare} bare)")
    return (rtts - REQUEST_RTTS) / CONNECTIONS, rtts


def _one_rtt_handshake(per: float) -> bool:
    return 0.75 <= per <= 1 + SLACK_MS / RTT


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_h3_handshake_costs_one_round_trip_as_tcps(h3: H3Setup) -> None:
    per, total = _handshake_rtts(h3, Mode("https", True, "1.3", h3=True))
    # 2 x (QUIC handshake + request) + the object = 5 RTT: the http load's model too (2 x
    # (TCP handshake + GET) + GET); TLS 1.3 over TCP would be 7
    assert _one_rtt_handshake(per), (per, total)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_h3_0rtt_handshake_costs_no_round_trip(h3: H3Setup) -> None:
    """The twin: with the last visit's ticket the same check fails (3 RTT in all)."""
    resumed = h3.shaped.counters.resumed
    per, total = _handshake_rtts(h3, Mode("https", True, "1.3", resume=True, h3=True))
    assert h3.shaped.counters.resumed - resumed >= 5 * CONNECTIONS  # 0-RTT was used
    assert not _one_rtt_handshake(per), (per, total)
    assert -0.25 <= per <= SLACK_MS / RTT, (per, total)
