"""The notary's key and certificate files (in-process; the CLI has its own subprocess tests)."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from notary import keys
from notary.errors import BadConfig
from notary.keys import Identity

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def test_generated_identity_loads_back(tmp_path: Path, identity: Identity) -> None:
    loaded = keys.load(identity.key_path, identity.cert_path)
    assert loaded.pin_sha1 == identity.pin_sha1
    assert len(loaded.pin_sha1) == 59 and len(loaded.pin_sha256) == 95
    assert stat.S_IMODE(identity.key_path.stat().st_mode) == 0o600


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o644, 0o666])
def test_key_readable_or_writable_by_others_is_refused(
    tmp_path: Path, identity: Identity, mode: int
) -> None:
    key = tmp_path / "k.pem"
    key.write_bytes(identity.key_path.read_bytes())
    os.chmod(key, mode)
    with pytest.raises(BadConfig) as info:
        keys.load(key, identity.cert_path)
    assert "accessible by other users" in info.value.message
    assert f"chmod 600 {key}" in info.value.message
    os.chmod(key, 0o600)  # twin
    assert keys.load(key, identity.cert_path).pin_sha1 == identity.pin_sha1


def test_stale_world_readable_temporary_file_does_not_leak_the_mode(tmp_path: Path) -> None:
    key, cert = tmp_path / "notary.key", tmp_path / "notary.pem"
    stale = tmp_path / "notary.key.tmp"
    stale.write_bytes(b"old")
    os.chmod(stale, 0o644)
    keys.generate(key, cert, "localhost", now=NOW)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not stale.exists()


def test_certificate_of_another_key_is_refused(
    tmp_path: Path, identity: Identity, other_identity: Identity
) -> None:
    with pytest.raises(BadConfig, match="does not belong"):
        keys.load(identity.key_path, other_identity.cert_path)


def test_non_rsa_or_small_keys_are_refused(tmp_path: Path, identity: Identity) -> None:
    for name, key in (
        ("ec.pem", ec.generate_private_key(ec.SECP256R1())),
        ("small.pem", rsa.generate_private_key(public_exponent=65537, key_size=1024)),
    ):
        path = tmp_path / name
        path.write_bytes(_pem(key))
        os.chmod(path, 0o600)
        with pytest.raises(BadConfig, match="RSA key of 2048 bits"):
            keys.load(path, identity.cert_path)


def test_garbage_files_are_refused(tmp_path: Path, identity: Identity) -> None:
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a pem")
    os.chmod(junk, 0o600)
    with pytest.raises(BadConfig, match="not an unencrypted PEM private key"):
        keys.load(junk, identity.cert_path)
    with pytest.raises(BadConfig, match="not a PEM certificate"):
        keys.load(identity.key_path, junk)
    with pytest.raises(BadConfig, match="cannot read"):
        keys.load(tmp_path / "missing", identity.cert_path)


def test_ensure_generates_once(tmp_path: Path) -> None:
    key, cert = tmp_path / "d" / "notary.key", tmp_path / "d" / "notary.pem"
    first = keys.ensure(key, cert, "notary.test", now=NOW)
    again = keys.ensure(key, cert, "notary.test", now=NOW)
    assert first.pin_sha1 == again.pin_sha1
    assert first.cert.not_valid_before_utc <= NOW <= first.cert.not_valid_after_utc
