"""Whole-page download as a browser does it, on the standard library's http.client and ssl
(OpenSSL): the page's redirect hops first (each a new connection to its host, as a browser
follows ``page.test`` -> ``www.page.test``), then the HTML, then every embedded object, at
most six parallel connections per host (HTTP/1.1); non-persistent (a new TCP and TLS
connection per object, ``Connection: close``) or persistent (keep-alive, the page's
connection reused); TLS 1.2 or 1.3, full handshakes or resumed sessions (a session cache per
host kept across page loads, as a browser's is between visits). Certificates are verified
against the page's CA.
"""

from __future__ import annotations

import http.client
import queue
import random
import socket
import ssl
import threading
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from replay.errors import ReplayIOError
from replay.overhead.pages import MAX_REDIRECTS, Page, embedded
from replay.overhead.profiles import PathProfile
from replay.overhead.toxi import handshake_delay

PARALLEL = 6  # a browser's connections per host over HTTP/1.1
TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Mode:
    scheme: str  # "http" or "https"
    persistent: bool
    tls: str = ""  # "1.2" or "1.3" (https)
    resume: bool = False
    h2: bool = False  # HTTP/2 (TLS 1.3, one multiplexed connection per host)
    h3: bool = False  # HTTP/3 (QUIC over the UDP path; ``resume``: 0-RTT with a ticket)

    @property
    def label(self) -> str:
        if self.scheme == "http":
            return "http"
        if self.h2:
            return f"h2+tls{self.tls}"
        if self.h3:
            return "h3+0rtt" if self.resume else "h3"
        return f"tls{self.tls}" + ("+resume" if self.resume else "")

    @property
    def connections(self) -> str:
        return "persistent" if self.persistent else "non-persistent"


@dataclass
class Counters:
    connections: int = 0
    resumed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, resumed: bool) -> None:
        with self.lock:
            self.connections += 1
            self.resumed += int(resumed)


class Browser:
    """Loads pages through the emulated paths: ``ports[(scheme, host)]`` is the loopback
    port of the toxiproxy proxy in front of that host's server (scheme ``h3``: the UDP port
    of the host's path in the UDP emulator)."""

    def __init__(self, ports: dict[tuple[str, str], int], profile: PathProfile, cafile: str,
                 seed: int, handshake_rtt: bool = True) -> None:
        self.ports = ports
        self.profile = profile
        self.handshake_rtt = handshake_rtt
        self.cafile = cafile
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.ctx: dict[str, ssl.SSLContext] = {}
        for v, tv in (("1.2", ssl.TLSVersion.TLSv1_2), ("1.3", ssl.TLSVersion.TLSv1_3)):
            c = ssl.create_default_context(cafile=cafile)
            c.minimum_version = c.maximum_version = tv
            self.ctx[v] = c
        self.sessions: dict[tuple[str, str], ssl.SSLSession] = {}
        self.tickets: dict[str, Any] = {}  # HTTP/3: host -> session ticket (0-RTT)
        self.counters = Counters()

    def connect(self, mode: Mode, host: str) -> http.client.HTTPConnection:
        port = self.ports[(mode.scheme, host)]
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        time.sleep(self._delay())
        if mode.scheme == "https":
            session = self.sessions.get((mode.tls, host)) if mode.resume else None
            tls = self.ctx[mode.tls].wrap_socket(sock, server_hostname=host, session=session)
            self.counters.add(bool(tls.session_reused))
            sock = tls
        else:
            self.counters.add(False)
        conn = http.client.HTTPConnection(host, port, timeout=TIMEOUT)
        conn.sock = sock
        return conn

    def get(self, conn: http.client.HTTPConnection, mode: Mode, host: str,
            path: str) -> bytes:
        status, _, body = self.fetch(conn, mode, host, path)
        if status != 200:
            raise ReplayIOError(f"GET {mode.scheme}://{host}{path}: HTTP {status}")
        return body

    def fetch(self, conn: http.client.HTTPConnection, mode: Mode, host: str,
              path: str) -> tuple[int, str, bytes]:
        """(status, Location, body) of one GET on ``conn``."""
        sock = conn.sock  # http.client drops it once a "Connection: close" response is read
        conn.request("GET", path, headers={
            "Host": host, "Connection": "keep-alive" if mode.persistent else "close"})
        r = conn.getresponse()
        # the session (with TLS 1.3's ticket, which comes before the response) while the
        # socket is open: reading a "Connection: close" body to its end closes it
        if mode.resume and isinstance(sock, ssl.SSLSocket) and sock.session:
            self.sessions[(mode.tls, host)] = sock.session
        body = r.read()
        return r.status, r.getheader("Location") or "", body

    def follow(self, page: Page, mode: Mode,
               opened: list[http.client.HTTPConnection]) -> http.client.HTTPConnection:
        """The page's redirect hops from ``page.first_host`` to ``page.host``, each on a new
        connection (another host); the connection to ``page.host``, not yet used."""
        host = page.first_host
        for _ in range(MAX_REDIRECTS):
            if host == page.host:
                break
            conn = self.connect(mode, host)
            status, location, _ = self.fetch(conn, mode, host, "/")
            if mode.persistent:
                opened.append(conn)  # kept open (unused) to the load's end, as a browser's
            else:
                conn.close()
            nxt = urllib.parse.urlsplit(location)
            if status not in (301, 302, 303, 307, 308) or nxt.scheme != mode.scheme \
                    or not nxt.hostname:
                raise ReplayIOError(f"GET {mode.scheme}://{host}/: HTTP {status}, "
                                    f"Location {location!r}: not a redirect in the page")
            host = nxt.hostname
        if host != page.host:
            raise ReplayIOError(f"more than {MAX_REDIRECTS} redirects")
        return self.connect(mode, page.host)

    def _delay(self) -> float:
        if not self.handshake_rtt:
            return 0.0
        with self.rng_lock:
            return handshake_delay(self.profile, self.rng)

    def load(self, page: Page, mode: Mode) -> float:
        """Seconds from the page's request to the last byte of its last object."""
        if mode.h2:
            from replay.overhead.client_h2 import load_h2

            ports = {h: p for (s, h), p in self.ports.items() if s == "h2"}
            ctx = ssl.create_default_context(cafile=self.cafile)
            ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
            return load_h2(page, ports, ctx, self._delay, lambda: self.counters.add(False))
        if mode.h3:
            from replay.overhead.client_h3 import load_h3

            h3_ports = {h: p for (s, h), p in self.ports.items() if s == "h3"}
            return load_h3(page, h3_ports, self.cafile, self.tickets if mode.resume else None,
                           self.counters.add)
        t0 = time.perf_counter()
        opened: list[http.client.HTTPConnection] = []
        try:
            conn = self.follow(page, mode, opened)
            doc = self.get(conn, mode, page.host, "/")
            idle: dict[str, list[http.client.HTTPConnection]] = defaultdict(list)
            if mode.persistent:
                idle[page.host].append(conn)
                opened.append(conn)
            else:
                conn.close()
            by_host: dict[str, queue.SimpleQueue[str]] = defaultdict(queue.SimpleQueue)
            counts: dict[str, int] = defaultdict(int)
            for host, path in embedded(doc):
                by_host[host].put(path)
                counts[host] += 1
            errors: list[BaseException] = []
            idle_lock = threading.Lock()

            def worker(host: str) -> None:
                q = by_host[host]
                with idle_lock:
                    c = idle[host].pop() if idle[host] else None
                try:
                    while True:
                        try:
                            path = q.get_nowait()
                        except queue.Empty:
                            return
                        if c is None:
                            c = self.connect(mode, host)
                            opened.append(c)
                        self.get(c, mode, host, path)
                        if not mode.persistent:
                            c.close()
                            c = None
                except (OSError, http.client.HTTPException, ReplayIOError) as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=worker, args=(h,), daemon=True)
                       for h in counts for _ in range(min(PARALLEL, counts[h]))]
            for t in threads:
                t.start()
            for t in threads:
                t.join(TIMEOUT * 4)
            elapsed = time.perf_counter() - t0
        except (OSError, http.client.HTTPException) as exc:
            raise ReplayIOError(f"page load over {mode.scheme} failed: {exc}") from exc
        finally:
            for c in opened:
                c.close()
        if errors:
            raise ReplayIOError(f"page load over {mode.scheme} failed: {errors[0]}")
        if any(t.is_alive() for t in threads):
            raise ReplayIOError("page load timed out")
        return elapsed
