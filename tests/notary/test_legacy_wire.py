"""The legacy v1 wire format against the real 2011 responses, and our own bodies."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from notary_support import public_key_of_pem, verifies_recipe_a, verifies_recipe_b

from notary.core import legacy
from notary.core.fingerprint import parse_fingerprint
from notary.core.history import History, Observation, ordered
from notary.core.signing import LegacySigner, verify_legacy
from notary.errors import BadData
from notary.keys import Identity


def history_of(body: bytes) -> History:
    """The history a legacy body describes (SHA-256 is not on the wire: made up, unique)."""
    entries = json.loads(body)["fingerprintList"]
    out = []
    for e in entries:
        sha1 = parse_fingerprint(e["fingerprint"]).digest
        out.append(
            Observation(
                sha1,
                hashlib.sha256(sha1).digest(),
                int(e["timestamp"]["start"]),
                int(e["timestamp"]["finish"]),
            )
        )
    return tuple(out)


@pytest.fixture
def good(legacy_dir: Path) -> bytes:
    return (legacy_dir / "response-good.json").read_bytes()


@pytest.fixture
def corrupted(legacy_dir: Path) -> bytes:
    return (legacy_dir / "response-corrupted.json").read_bytes()


@pytest.fixture
def bundle_key(legacy_dir: Path) -> rsa.RSAPublicKey:
    bundle = json.loads((legacy_dir / "thoughtcrime.notary").read_text())
    return public_key_of_pem(bundle["hosts"][0]["certificate"])


def test_our_payload_reproduces_the_real_signed_bytes(good: bytes) -> None:
    signed, _ = legacy.split_body(good)
    history = history_of(good)
    assert ordered(history) == history  # the real notary listed newest first, like ours
    assert legacy.signed_payload(history) == signed


def test_recipes_a_and_b_agree_on_the_real_response(good: bytes) -> None:
    signed_b, _ = legacy.split_body(good)
    assert legacy.reserialise_without_signature(good) == signed_b


def test_real_good_response_verifies_with_the_bundle_certificate(
    good: bytes, bundle_key: rsa.RSAPublicKey
) -> None:
    assert verifies_recipe_a(good, bundle_key)
    assert verifies_recipe_b(good, bundle_key)


def test_real_corrupted_response_fails(corrupted: bytes, bundle_key: rsa.RSAPublicKey) -> None:
    assert not verifies_recipe_a(corrupted, bundle_key)
    assert not verifies_recipe_b(corrupted, bundle_key)


def test_real_response_fails_against_another_key(good: bytes, identity: Identity) -> None:
    key = identity.cert.public_key()
    assert isinstance(key, rsa.RSAPublicKey)
    assert not verifies_recipe_b(good, key)


def test_our_body_of_the_real_history_equals_the_real_body_but_for_the_signature(
    good: bytes, identity: Identity
) -> None:
    payload = legacy.signed_payload(history_of(good))
    ours = legacy.body(payload, LegacySigner(identity.key).sign(payload))
    assert ours[: ours.rindex(b'"signature"')] == good[: good.rindex(b'"signature"')]
    assert verifies_recipe_a(ours, identity.key.public_key())
    assert verifies_recipe_b(ours, identity.key.public_key())


def test_empty_history_payload() -> None:
    assert legacy.signed_payload(()) == b'{"fingerprintList": []}'


def test_body_layout() -> None:
    assert legacy.body(b'{"fingerprintList": []}', b"\x01\x02") == (
        b'{"fingerprintList": [], "signature": "AQI="}'
    )
    with pytest.raises(BadData):
        legacy.body(b'{"fingerprintList": []', b"x")


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{}",
        b'{"fingerprintList": []}',
        b'{"fingerprintList": [], "signature": "not base64!"}',
        b'{"fingerprintList": [], "signature": "AQI="',
    ],
)
def test_split_body_rejects_unsigned_or_broken(raw: bytes) -> None:
    with pytest.raises(BadData):
        legacy.split_body(raw)


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"fingerprintList": []}', b"\xff"])
def test_reserialise_rejects_unsigned_or_broken(raw: bytes) -> None:
    with pytest.raises(BadData):
        legacy.reserialise_without_signature(raw)


observations = st.lists(
    st.tuples(
        st.binary(min_size=20, max_size=20),
        st.integers(0, 2**31),
        st.integers(0, 2**31),
    ),
    max_size=8,
    unique_by=lambda t: t[0],
)


@settings(max_examples=40, deadline=None)
@given(observations)
def test_our_bodies_verify_by_both_recipes(
    identity: Identity, obs: list[tuple[bytes, int, int]]
) -> None:
    history = ordered(
        Observation(sha1, hashlib.sha256(sha1).digest(), min(a, b), max(a, b))
        for sha1, a, b in obs
    )
    payload = legacy.signed_payload(history)
    body = legacy.body(payload, LegacySigner(identity.key).sign(payload))
    key = identity.key.public_key()
    assert legacy.reserialise_without_signature(body) == payload
    assert legacy.split_body(body)[0] == payload
    assert verifies_recipe_a(body, key) and verifies_recipe_b(body, key)
    doc = json.loads(body)
    assert list(doc) == ["fingerprintList", "signature"]
    assert [e["fingerprint"] for e in doc["fingerprintList"]] == [
        o.sha1.hex(":").upper() for o in history
    ]
    # twin: the signature does not cover a different payload
    sig = base64.b64decode(doc["signature"])
    assert not verify_legacy(key, payload + b" ", sig)


def test_compact_or_sorted_serialisations_do_not_verify(
    good: bytes, bundle_key: rsa.RSAPublicKey
) -> None:
    """The documented pitfall: only the default-separator form reproduces the bytes."""
    _, sig = legacy.split_body(good)
    doc = json.loads(good)
    del doc["signature"]
    assert not verify_legacy(bundle_key, json.dumps(doc, separators=(",", ":")).encode(), sig)
    assert not verify_legacy(bundle_key, json.dumps(doc, sort_keys=True).encode(), sig)
    assert verify_legacy(bundle_key, json.dumps(doc).encode(), sig)
