"""Hostile notaries and relays against the Python client, over real TLS on loopback.

A notary gone rogue (it holds the pinned key) or a malicious relay must never make
``converge()`` crash, hang past its timeouts or say "trusted": every bad answer becomes a
failure or unreachable vote.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from security_support import Results, ThreadServer

SUITE = "hostile notaries (client side)"
NOTARY_TIMEOUT = 3.0

LEGACY_OK = (b'{"fingerprintList": [{"timestamp": {"start": "1", "finish": "2"}, '
             b'"fingerprint": "' + ":".join(["AB"] * 20).encode() + b'"}], "signature": "AAAA"}')


def rogue(identity_dir: Path, answer: Callable[[ssl.SSLSocket], None]
          ) -> Callable[[socket.socket], None]:
    """A TLS server holding the pinned notary key, answering with ``answer``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(identity_dir / "notary.pem", identity_dir / "notary.key")

    def handle(conn: socket.socket) -> None:
        conn.settimeout(10)
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            answer(tls)

    return handle


def send(data: bytes) -> Callable[[ssl.SSLSocket], None]:
    def answer(tls: ssl.SSLSocket) -> None:
        tls.sendall(data)

    return answer


def http(status: str, body: bytes, extra: str = "") -> bytes:
    return (f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def endless(tls: ssl.SSLSocket) -> None:
    tls.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tls.sendall(b"[" * 65536)


def trickle(tls: ssl.SSLSocket) -> None:
    for b in http("200 OK", LEGACY_OK):
        tls.sendall(bytes([b]))
        time.sleep(0.5)


CASES: dict[str, Callable[[ssl.SSLSocket], None]] = {
    "garbage instead of HTTP": send(b"\x00\xff" * 500),
    "200 with a forged signature": send(http("200 OK", LEGACY_OK)),
    "200 with deeply nested JSON": send(http("200 OK", b"[" * 5000)),
    "chunked 200": send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        b"5\r\n{}{}{\r\n0\r\n\r\n"),
    "endless response body": endless,
    "response trickled one byte every 0.5 s": trickle,
    "closes without answering": send(b""),
    "Content-Length with a non-ASCII digit": send(
        b"HTTP/1.0 200 OK\r\nContent-Length: 1\xb3\r\n\r\n" + LEGACY_OK),
}
# Crashes in the client library found here and reported to its owners.
OPEN_BUGS: dict[str, type[BaseException]] = {}  # none open: every rogue answer is a vote


def client_config(identity_dir: Path, port: int, relay_port: int | None = None) -> object:
    from converge import Config, NotaryBundle, parse_bundle

    pem = (identity_dir / "notary.pem").read_text()
    voter = parse_bundle({"version": 1, "name": "Rogue", "hosts": [
        {"host": "127.0.0.1", "ssl_port": port, "http_port": 80, "certificate": pem}]})
    bundles: tuple[NotaryBundle, ...] = (voter,)
    if relay_port is not None:
        relay = parse_bundle({"version": 1, "name": "Relay", "hosts": [
            {"host": "127.0.0.1", "ssl_port": 1, "http_port": relay_port, "certificate": pem}]})
        bundles = (relay, voter)
    return Config(directory=None, db=None, quorum=1, connect_timeout=2,
                  notary_timeout=NOTARY_TIMEOUT, total_timeout=NOTARY_TIMEOUT + 2,
                  bundles=bundles, bounce=relay_port is not None, bounce_port=port)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rogue_notary_answer_is_a_failed_vote(identity_dir: Path, results: Results,
                                              case: str) -> None:
    from converge import Client, converge

    with ThreadServer(rogue(identity_dir, CASES[case])) as server:
        client = Client(client_config(identity_dir, server.port))  # type: ignore[arg-type]
        t0 = time.monotonic()
        try:
            verdict = converge("site.test", 443, "AB" * 20, config=client)
        except OPEN_BUGS.get(case, ()) as exc:
            results.add(SUITE, f"rogue notary: {case}", "failure vote, untrusted",
                        f"OPEN BUG: converge() raises {type(exc).__name__} (reported)",
                        time.monotonic() - t0)
            pytest.xfail(f"open client bug: {type(exc).__name__}")
        took = time.monotonic() - t0
    assert not verdict
    votes = [r.vote for r in verdict.results]
    assert votes and all(v in ("failure", "unreachable") for v in votes)
    assert took < NOTARY_TIMEOUT + 3
    results.add(SUITE, f"rogue notary: {case}", "failure/unreachable vote, untrusted, "
                f"within notary_timeout ({NOTARY_TIMEOUT:g} s)",
                f"untrusted; vote {votes[0]} ({verdict.results[0].kind})", took)


def test_genuine_answer_twin(identity_dir: Path) -> None:
    """Must-pass twin: the same rogue-notary harness with a properly signed answer trusts."""
    import base64

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    key = serialization.load_pem_private_key((identity_dir / "notary.key").read_bytes(), None)
    assert isinstance(key, rsa.RSAPrivateKey)
    payload = LEGACY_OK.split(b', "signature"')[0] + b"}"
    sig = base64.b64encode(key.sign(payload, padding.PKCS1v15(), hashes.SHA1()))
    body = payload[:-1] + b', "signature": "' + sig + b'"}'
    from converge import Client, converge

    with ThreadServer(rogue(identity_dir, send(http("200 OK", body)))) as server:
        client = Client(client_config(identity_dir, server.port))  # type: ignore[arg-type]
        verdict = converge("site.test", 443, "AB" * 20, config=client)
    assert verdict, verdict.reason


def test_malicious_relay_cannot_impersonate_the_notary(
    identity_dir: Path, ca: trustme.CA, results: Results,
) -> None:
    """A relay that answers 200 and then plays the notary itself (with its own certificate
    and a 'yes' answer) fails the pin: the vote is a failure, the verdict untrusted."""
    from converge import Client, converge

    impostor = ca.issue_cert("notary.test")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    impostor.configure_cert(ctx)

    def relay(conn: socket.socket) -> None:
        conn.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(4096)
        conn.sendall(b"HTTP/1.0 200 Connection Established\r\nProxy-Agent: Convergence\r\n"
                     b"X-Convergence-Notary: 127.0.0.1\r\n\r\n")
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            tls.sendall(http("200 OK", LEGACY_OK))

    with ThreadServer(relay) as evil, ThreadServer(silent_tls(identity_dir)) as voter:
        cfg = client_config(identity_dir, voter.port, relay_port=evil.port)
        client = Client(cfg, rng=_FirstIsRelay())  # type: ignore[arg-type]
        t0 = time.monotonic()
        verdict = converge("site.test", 443, "AB" * 20, config=client)
        took = time.monotonic() - t0
    assert verdict.relay == "Relay"
    assert not verdict
    assert [r.vote for r in verdict.results] == ["failure"]
    results.add(SUITE, "malicious relay answers 200 and impersonates the notary",
                "pin mismatch: failure vote, untrusted",
                f"untrusted; vote failure ({verdict.results[0].kind})", took)


def silent_tls(identity_dir: Path) -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        conn.settimeout(5)
        conn.recv(1)

    return handle


class _FirstIsRelay:
    def randrange(self, n: int) -> int:
        return 0

    def sample(self, population: range, k: int) -> list[int]:
        return list(population)[:k]
