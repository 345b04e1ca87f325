"""The bounce relay end to end: real notary processes on loopback.

The destination notary's TLS port plays the legacy port 4242: the relay is started with
``--relay-port <that port>`` (the setting exists so tests can use free ports).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from security_support import (
    NotaryProcess,
    Results,
    ThreadServer,
    client_ctx,
    copy_identity,
    free_port,
    leaf_der,
    legacy_request,
    parse_reply,
    read_to_eof,
    sha1_colon,
)

from notary.errors import BadInput
from notary.relay import Destination, RelayDenied, parse_connect

SUITE = "bounce relay"
OK_PREFIX = b"HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\n"


class Recorder:
    """A TCP forwarder in front of the relay that records every byte the relay handles."""

    def __init__(self, upstream_port: int) -> None:
        self.seen = bytearray()
        self._lock = threading.Lock()
        self.server = ThreadServer(self._handle)
        self._up = upstream_port

    def _handle(self, conn: socket.socket) -> None:
        up = socket.create_connection(("127.0.0.1", self._up), timeout=10)

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    with self._lock:
                        self.seen += data
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pipe, args=(up, conn), daemon=True)
        t.start()
        pipe(conn, up)
        t.join(10)
        up.close()

    @property
    def port(self) -> int:
        return self.server.port

    def close(self) -> None:
        self.server.close()


def connect_head(dest: str, extra: list[str] | None = None) -> bytes:
    lines = [f"CONNECT {dest} HTTP/1.1", f"Host: {dest.rsplit(':', 1)[0]}"]
    lines += [f"X-Convergence-Notary: {x}" for x in extra or []]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_head(sock: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(1)
        if not data:
            break
        buf += data
    return buf


def relay_connect(port: int, head: bytes, timeout: float = 15) -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(head)
    return sock, read_head(sock)


@pytest.fixture(scope="module")
def notaries(identity_dir: Path, tmp_path_factory: pytest.TempPathFactory,
             good_target: ThreadServer) -> Iterator[tuple[NotaryProcess, NotaryProcess, int]]:
    """(destination notary over TLS, relay notary, relay port)."""
    d = tmp_path_factory.mktemp("relay")
    dest = NotaryProcess(copy_identity(identity_dir, d / "dest"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "site.test=127.0.0.1"])
    relay_port = free_port()
    relay = NotaryProcess(copy_identity(identity_dir, d / "relay"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "notary.test=127.0.0.1",
        "--resolve", "dead.test=127.0.0.3", "--resolve", "internal.test=10.9.9.9",
        "--relay-listen", f"127.0.0.1:{relay_port}",
        "--relay-port", str(dest.port), "--probe-timeout", "2"], tls=False)
    yield dest, relay, relay_port
    relay.stop()
    dest.stop()


def test_tunnel_carries_only_ciphertext_and_the_verdict_is_unchanged(
    notaries: tuple[NotaryProcess, NotaryProcess, int], good_target: ThreadServer,
    site_cert: trustme.LeafCert, identity_dir: Path, results: Results,
) -> None:
    dest, relay, relay_port = notaries
    fp = sha1_colon(leaf_der(site_cert))
    spec = f"site.test+{good_target.port}"
    direct = dest.query(spec, fp)
    assert direct.status == 200

    rec = Recorder(relay_port)
    before = relay.rss()
    try:
        t0 = time.monotonic()
        sock, head = relay_connect(rec.port, connect_head(f"notary.test:{dest.port}"))
        assert head == OK_PREFIX + b"X-Convergence-Notary: notary.test\r\n\r\n"
        tls = client_ctx().wrap_socket(sock)
        pinned = (identity_dir / "notary.pem").read_text()
        import ssl

        assert tls.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(pinned)
        tls.sendall(legacy_request(spec, fp))
        reply = parse_reply(read_to_eof(tls), time.monotonic() - t0)
        tls.close()
    finally:
        rec.close()
    assert reply.status == direct.status == 200
    assert reply.body == direct.body  # same signed history, byte for byte
    seen = bytes(rec.seen)
    assert b"CONNECT notary.test" in seen  # the recorder saw the tunnel...
    assert b"/target/" not in seen and b"site.test" not in seen and fp.encode() not in seen
    assert b"fingerprint=" not in seen  # ...but none of the query
    results.add(SUITE, "query tunnelled through the relay (TLS to the destination notary)",
                "relay sees only ciphertext; same answer as asked directly",
                f"{reply.status}, body identical, no plaintext path/fingerprint in "
                f"{len(seen)} relayed bytes", reply.seconds, (before, relay.rss()))


def test_recorder_twin_sees_plaintext_without_tls(
    notaries: tuple[NotaryProcess, NotaryProcess, int], good_target: ThreadServer,
    site_cert: trustme.LeafCert,
) -> None:
    """Must-fail twin: the same recorder does see the path when the query is not encrypted."""
    _, relay, _ = notaries
    rec = Recorder(relay.port)  # the relay notary's own plain-HTTP API port
    try:
        fp = sha1_colon(leaf_der(site_cert))
        with socket.create_connection(("127.0.0.1", rec.port), timeout=15) as s:
            s.sendall(legacy_request(f"site.test+{good_target.port}", fp))
            read_to_eof(s)
    finally:
        rec.close()
    assert b"/target/site.test" in bytes(rec.seen)


def test_first_reachable_destination_wins(
    notaries: tuple[NotaryProcess, NotaryProcess, int], results: Results,
) -> None:
    dest, _, relay_port = notaries
    t0 = time.monotonic()
    sock, head = relay_connect(
        relay_port, connect_head(f"dead.test:{dest.port}", [f"notary.test+{dest.port}"]))
    took = time.monotonic() - t0
    sock.close()
    assert head == OK_PREFIX + b"X-Convergence-Notary: notary.test\r\n\r\n"
    results.add(SUITE, "CONNECT to a dead host plus X-Convergence-Notary alternative",
                "200, connected to the live alternative", "200 via notary.test", took)


@pytest.mark.parametrize(
    ("name", "head"),
    [
        ("another port", "CONNECT notary.test:443 HTTP/1.1\r\n\r\n"),
        ("another port in X-Convergence-Notary",
         "CONNECT notary.test:{p} HTTP/1.1\r\nX-Convergence-Notary: notary.test+22\r\n\r\n"),
        ("a method other than CONNECT", "GET http://notary.test:{p}/ HTTP/1.1\r\n\r\n"),
        ("a private address (policy)", "CONNECT 10.1.2.3:{p} HTTP/1.1\r\n\r\n"),
        ("cloud metadata address (policy)", "CONNECT 169.254.169.254:{p} HTTP/1.1\r\n\r\n"),
        ("a name resolving to a private address (policy)",
         "CONNECT internal.test:{p} HTTP/1.1\r\n\r\n"),
        ("an IPv4-mapped private address (policy)",
         "CONNECT [::ffff:10.0.0.1]:{p} HTTP/1.1\r\n\r\n"),
    ],
)
def test_refused_destinations_get_403(
    notaries: tuple[NotaryProcess, NotaryProcess, int], name: str, head: str,
    results: Results,
) -> None:
    dest, relay, relay_port = notaries
    t0 = time.monotonic()
    sock, got = relay_connect(relay_port, head.format(p=dest.port).encode())
    took = time.monotonic() - t0
    sock.close()
    assert got.startswith(b"HTTP/1.0 403 Access Denied\r\n"), got
    assert relay.alive()
    results.add(SUITE, f"CONNECT to {name}", "403 Access Denied", "403 Access Denied", took)


@pytest.mark.parametrize(
    ("name", "dest_host"),
    [("nothing listening", "dead.test"), ("a name that does not resolve", "nowhere.invalid")],
)
def test_unreachable_destinations_get_404(
    notaries: tuple[NotaryProcess, NotaryProcess, int], name: str, dest_host: str,
    results: Results,
) -> None:
    dest, _, relay_port = notaries
    t0 = time.monotonic()
    sock, got = relay_connect(relay_port, connect_head(f"{dest_host}:{dest.port}"))
    took = time.monotonic() - t0
    sock.close()
    assert got.startswith(b"HTTP/1.0 404 Unable to connect\r\n"), got
    results.add(SUITE, f"CONNECT to {name}", "404 Unable to connect",
                "404 Unable to connect", took)


# -- bounds ---------------------------------------------------------------------------------


def echo(conn: socket.socket) -> None:
    conn.settimeout(30)
    while data := conn.recv(65536):
        conn.sendall(data)


MAX_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def limited(identity_dir: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[NotaryProcess, int, int]]:
    """A relay with small bounds in front of an echo server (its 'port 4242')."""
    server = ThreadServer(echo)
    d = tmp_path_factory.mktemp("relay-limits")
    cfg = d / "notary.toml"
    cfg.write_text("relay_head_timeout = 1.0\n")
    relay_port = free_port()
    relay = NotaryProcess(copy_identity(identity_dir, d / "data"), [
        "--config", str(cfg), "--allow-target", "127.0.0.0/8",
        "--relay-listen", f"127.0.0.1:{relay_port}", "--relay-port", str(server.port),
        "--max-tunnels", "3", "--tunnel-idle-timeout", "1", "--tunnel-max-bytes",
        str(MAX_BYTES), "--client-share", "0", "--group-share", "0"],
        tls=False)  # the process-wide cap, alone
    yield relay, relay_port, server.port
    relay.stop()
    server.close()


def closed_within(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the peer closes ``sock`` (None if still open after ``limit``)."""
    sock.settimeout(limit)
    t0 = time.monotonic()
    try:
        while sock.recv(65536):
            pass
    except TimeoutError:
        return None
    except OSError:
        pass
    return time.monotonic() - t0


def test_tunnel_within_bounds_echoes(limited: tuple[NotaryProcess, int, int]) -> None:
    """Must-pass twin of the bound tests: a small exchange goes through untouched."""
    _, relay_port, echo_port = limited
    sock, head = relay_connect(relay_port, connect_head(f"127.0.0.1:{echo_port}"))
    with sock:
        assert head.startswith(OK_PREFIX)
        sock.sendall(b"ping" * 100)
        got = b""
        while len(got) < 400:
            got += sock.recv(4096)
        assert got == b"ping" * 100


def test_idle_tunnel_is_closed(limited: tuple[NotaryProcess, int, int],
                               results: Results) -> None:
    relay, relay_port, echo_port = limited
    before = relay.rss()
    sock, head = relay_connect(relay_port, connect_head(f"127.0.0.1:{echo_port}"))
    with sock:
        assert head.startswith(OK_PREFIX)
        took = closed_within(sock, 10)
    assert took is not None and took < 8
    results.add(SUITE, "idle tunnel (idle timeout 1 s)", "closed by the relay",
                "closed", took, (before, relay.rss()))


def test_tunnel_byte_bound(limited: tuple[NotaryProcess, int, int], results: Results) -> None:
    relay, relay_port, echo_port = limited
    before = relay.rss()
    sock, head = relay_connect(relay_port, connect_head(f"127.0.0.1:{echo_port}"))
    received = 0
    t0 = time.monotonic()
    with sock:
        assert head.startswith(OK_PREFIX)
        sock.settimeout(5)
        try:
            for _ in range(64):
                sock.sendall(b"x" * 8192)
                received += len(sock.recv(65536))
        except OSError:
            pass
        rest = closed_within(sock, 5)
    assert rest is not None, "the relay kept a tunnel open past its byte bound"
    # bytes counted both ways: at most MAX_BYTES relayed in all, about half of it echoed
    assert received <= MAX_BYTES
    results.add(SUITE, f"tunnel pushing 512 KiB (bound {MAX_BYTES} bytes)",
                "closed at the bound", f"closed after {received} bytes echoed",
                time.monotonic() - t0, (before, relay.rss()))


def test_tunnel_count_bound(limited: tuple[NotaryProcess, int, int], results: Results) -> None:
    """--max-tunnels 3: two idle connections plus a third that tunnels (at the limit), then a
    fourth is refused at once (one past it)."""
    relay, relay_port, echo_port = limited
    time.sleep(0.3)  # let earlier tests' connections go
    # all within well under the 1 s head and idle timeouts of this relay
    held = [socket.create_connection(("127.0.0.1", relay_port), timeout=5) for _ in range(2)]
    try:
        third, third_head = relay_connect(relay_port, connect_head(f"127.0.0.1:{echo_port}"))
        held.append(third)
        t0 = time.monotonic()
        sock, head = relay_connect(relay_port, b"")
        took = time.monotonic() - t0
        sock.close()
    finally:
        for s in held:
            s.close()
    assert third_head.startswith(OK_PREFIX), third_head
    assert head.startswith(b"HTTP/1.0 503 Service Unavailable\r\n"), head
    results.add(SUITE, "4th relay connection with --max-tunnels 3", "fast 503",
                "503 Service Unavailable", took)


def test_slow_and_oversized_heads(limited: tuple[NotaryProcess, int, int],
                                  results: Results) -> None:
    relay, relay_port, _ = limited
    time.sleep(0.3)  # let the previous test's connections go
    with socket.create_connection(("127.0.0.1", relay_port), timeout=10) as s:
        s.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n")  # never finishes the head
        took = closed_within(s, 8)
    assert took is not None and took < 6
    results.add(SUITE, "CONNECT head never finished (head timeout 1 s)", "closed",
                "closed", took)
    with socket.create_connection(("127.0.0.1", relay_port), timeout=10) as s:
        t0 = time.monotonic()
        with contextlib.suppress(OSError):
            s.sendall(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\nX-Pad: " + b"a" * 20000)
        got = read_head(s)
        took = time.monotonic() - t0
    assert got == b"" or got.startswith(b"HTTP/1.0 400 Bad Request"), got
    assert relay.alive()
    results.add(SUITE, "20 KB CONNECT head (bound 8 KiB)", "400 or close",
                got.split(b"\r\n")[0].decode() or "closed", took)


# -- the pure head parser -------------------------------------------------------------------


def test_parse_connect_examples() -> None:
    head = (b"CONNECT notary.example:4242 HTTP/1.1\r\nHost: notary.example\r\n"
            b"X-Convergence-Notary: other.example+4242\r\n\r\n")
    assert parse_connect(head) == [Destination("notary.example", 4242),
                                   Destination("other.example", 4242)]
    assert parse_connect(b"CONNECT [::1]:4242 HTTP/1.0\r\n\r\n") == [Destination("::1", 4242)]
    assert parse_connect(b"CONNECT n.example HTTP/1.0\r\n\r\n") == [Destination("n.example", 4242)]
    with pytest.raises(RelayDenied):
        parse_connect(b"CONNECT n.example:443 HTTP/1.1\r\n\r\n")
    with pytest.raises(RelayDenied):
        parse_connect(b"CONNECT n.example:04242x HTTP/1.1\r\n\r\n")
    with pytest.raises(RelayDenied):
        parse_connect(b"POST /target/x+1 HTTP/1.1\r\n\r\n")
    with pytest.raises(BadInput):
        parse_connect(b"CONNECT n.example:4242\r\n\r\n")
    many = b"".join(b"X-Convergence-Notary: h%d.example+4242\r\n" % i for i in range(9))
    with pytest.raises(RelayDenied):
        parse_connect(b"CONNECT n.example:4242 HTTP/1.1\r\n" + many + b"\r\n")


# -- the Python client through the relay ----------------------------------------------------


class _RelayFirst:
    """An rng for converge.Client that picks the first enabled notary as the relay."""

    def __init__(self) -> None:
        import random

        self._r = random.Random(0)

    def randrange(self, n: int) -> int:
        return 0

    def sample(self, population: range, k: int) -> list[int]:
        return self._r.sample(population, k)


def _bundle(name: str, ssl_port: int, http_port: int, identity_dir: Path) -> dict[str, object]:
    return {"version": 1, "name": name, "hosts": [
        {"host": "127.0.0.1", "ssl_port": ssl_port, "http_port": http_port,
         "certificate": (identity_dir / "notary.pem").read_text()}]}


@pytest.mark.parametrize("matching", [True, False], ids=["genuine", "wrong-fingerprint"])
def test_converge_through_the_relay(
    notaries: tuple[NotaryProcess, NotaryProcess, int], good_target: ThreadServer,
    site_cert: trustme.LeafCert, identity_dir: Path, results: Results, matching: bool,
) -> None:
    from converge import Client, Config, converge, parse_bundle

    dest, relay, relay_port = notaries
    rec = Recorder(relay_port)
    fp = sha1_colon(leaf_der(site_cert)) if matching else "AB" * 20
    try:
        voter = parse_bundle(_bundle("Voter", dest.port, 80, identity_dir))
        cfg = Config(directory=None, db=None, quorum=1, bounce=True, bounce_port=dest.port,
                     connect_timeout=5, notary_timeout=10, total_timeout=20, bundles=(
                         parse_bundle(_bundle("Relay", relay.port, rec.port, identity_dir)),
                         voter))
        client = Client(cfg, rng=_RelayFirst())  # type: ignore[arg-type]
        t0 = time.monotonic()
        bounced = converge("site.test", good_target.port, fp, config=client)
        took = time.monotonic() - t0
        direct = converge("site.test", good_target.port, fp, config=Client(
            Config(directory=None, db=None, quorum=1, bundles=(voter,))))
    finally:
        rec.close()
    assert bounced.relay == "Relay"
    assert [r.name for r in bounced.results] == ["Voter"]  # the relay does not vote
    assert bool(bounced) is bool(direct) is matching
    seen = bytes(rec.seen)
    assert b"CONNECT 127.0.0.1:" in seen
    assert b"site.test" not in seen and fp.encode() not in seen
    results.add(SUITE, f"converge() with bounce=True ({'genuine' if matching else 'wrong'} "
                "fingerprint)", "same verdict as without the relay; relay does not vote",
                f"{'trusted' if bounced else 'untrusted'} via relay = direct; relay saw "
                f"{len(seen)} bytes, no target name", took)


def test_relay_with_two_workers(identity_dir: Path, tmp_path: Path,
                                notaries: tuple[NotaryProcess, NotaryProcess, int]) -> None:
    """With --workers 2 every worker binds the relay port (SO_REUSEPORT) and relays."""
    dest, _, _ = notaries
    relay_port = free_port()
    api_port = free_port()
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "d"), [
        "--workers", "2", "--listen", f"127.0.0.1:{api_port}", "--allow-target",
        "127.0.0.0/8", "--relay-listen", f"127.0.0.1:{relay_port}", "--relay-port",
        str(dest.port)], tls=False)
    try:
        heads: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(heads) < 6 and time.monotonic() < deadline:
            try:
                sock, head = relay_connect(relay_port, connect_head(f"127.0.0.1:{dest.port}"))
            except OSError:
                time.sleep(0.2)  # workers still starting
                continue
            sock.close()
            heads.append(head)
    finally:
        n.stop()
    assert len(heads) == 6
    assert all(h == OK_PREFIX + b"X-Convergence-Notary: 127.0.0.1\r\n\r\n" for h in heads)
