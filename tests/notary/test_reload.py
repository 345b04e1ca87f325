"""Live key changes: ``notary keygen --rotate-signing-key`` then ``notary reload`` (SIGHUP).

A real ``notary serve`` (one and two workers): a keep-alive connection opened before the
reload keeps working after it (the same socket), answers after it are signed with the new
Ed25519 key and verify with it, and new TLS handshakes present the renewed certificate. The
twin: rotated on disk but not reloaded, answers still carry the old key and the old
certificate. A certificate for another RSA key is refused and the old one kept.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from loopback import free_port

from notary import keys
from notary.core import extended
from notary.core.canonical import canonical_json

BIN = Path(sys.executable).parent
NOTARY = str(BIN / "notary")
REQUEST = json.dumps({"host": "127.0.0.1", "port": 443, "fingerprint": "00" * 20}).encode()


def _ctx() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


@pytest.fixture(params=["1", "2"])
def notary(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, int]]:
    data, port = tmp_path / "d", free_port()
    with open(tmp_path / "notary.log", "wb") as err:
        proc = subprocess.Popen([NOTARY, "serve", "--data-dir", str(data), "--no-log",
                                 "--listen", f"127.0.0.1:{port}", "--workers", request.param],
                                stderr=err)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                answer(http.client.HTTPSConnection("127.0.0.1", port, timeout=5,
                                                   context=_ctx()))
                break
            except OSError:
                time.sleep(0.2)
        yield data, port
    finally:
        proc.terminate()
        proc.wait(20)


def answer(conn: http.client.HTTPSConnection, close: bool = True) -> dict[str, object]:
    """POST /v2/answer about a refused address: a signed 403 answer, no probe."""
    try:
        conn.request("POST", "/v2/answer", body=REQUEST,
                     headers={"Content-Type": extended.MEDIA_TYPE})
        resp = conn.getresponse()
        assert resp.status == 403
        doc: dict[str, object] = json.loads(resp.read())
        return doc
    finally:
        if close:
            conn.close()


def signed_by(doc: dict[str, object], data: Path) -> str:
    """The key id of ``doc``'s signature, after checking it with the key on disk (current
    or retired)."""
    sig = doc["signature"]
    assert isinstance(sig, dict)
    pubs = {e["key_id"]: e["public_key"]
            for e in keys.bundle_signing_keys(data / "signing.key", now=int(time.time()))}
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    pub = Ed25519PublicKey.from_public_bytes(extended.unb64url(pubs[sig["key_id"]]))
    pub.verify(extended.unb64url(sig["value"]), canonical_json(doc["statement"]))
    return str(sig["key_id"])


def current_id(data: Path) -> str:
    return extended.key_id(keys.load_signing_key(data / "signing.key").public_key())


def served_cert(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            _ctx().wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def renew_cert(data: Path, key: rsa.RSAPrivateKey | None = None) -> bytes:
    """A new self-signed certificate for the notary's key (or ``key``); its DER."""
    if key is None:
        loaded = serialization.load_pem_private_key((data / "notary.key").read_bytes(), None)
        assert isinstance(loaded, rsa.RSAPrivateKey)
        key = loaded
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "renewed.localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=30)).sign(key, hashes.SHA256()))
    (data / "notary.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert.public_bytes(serialization.Encoding.DER)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NOTARY, *args], capture_output=True, text=True, timeout=60)


def fresh_answers(port: int, n: int) -> list[dict[str, object]]:
    return [answer(http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=_ctx()))
            for _ in range(n)]


def test_rotate_and_reload(notary: tuple[Path, int]) -> None:
    data, port = notary
    old_id, old_cert = current_id(data), served_cert(port)
    kept = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=_ctx())
    assert signed_by(answer(kept, close=False), data) == old_id
    sock = kept.sock

    assert run("keygen", "--data-dir", str(data), "--rotate-signing-key").returncode == 0
    new_cert = renew_cert(data)
    new_id = current_id(data)
    assert new_id != old_id
    # twin: rotated on disk, not reloaded: the old key signs, the old certificate is served
    assert {signed_by(d, data) for d in fresh_answers(port, 6)} == {old_id}
    assert served_cert(port) == old_cert

    done = run("reload", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # every worker has had its SIGHUP
        if {signed_by(d, data) for d in fresh_answers(port, 6)} == {new_id}:
            break
        time.sleep(0.2)
    assert {signed_by(d, data) for d in fresh_answers(port, 6)} == {new_id}
    assert hashlib.sha256(served_cert(port)).digest() == hashlib.sha256(new_cert).digest()
    # the connection opened before the reload still answers, on the same socket
    assert signed_by(answer(kept, close=False), data) in (old_id, new_id)
    assert kept.sock is sock
    kept.close()


def test_certificate_for_another_key_is_refused(notary: tuple[Path, int]) -> None:
    data, port = notary
    old_cert = served_cert(port)
    renew_cert(data, rsa.generate_private_key(public_exponent=65537, key_size=2048))
    assert run("reload", "--data-dir", str(data)).returncode == 0
    time.sleep(1.5)
    assert served_cert(port) == old_cert
    assert {signed_by(d, data) for d in fresh_answers(port, 3)} == {current_id(data)}


def test_reload_without_a_running_notary(tmp_path: Path) -> None:
    done = run("reload", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith("notary: cannot read") and len(done.stderr.splitlines()) == 1
