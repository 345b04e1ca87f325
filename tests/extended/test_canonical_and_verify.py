"""The pure extended-format core: canonical JSON, request parsing and signing. Signed answers
are checked with the client's verifier (``converge.extended.verify_answer``), the one
verifier the project has."""

from __future__ import annotations

import json
from ipaddress import ip_address

import pytest
from converge.extended import AnswerRejected, split_answer, verify_answer
from converge.fingerprint import parse_fingerprint as cparse_fingerprint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given
from hypothesis import strategies as st

from notary.core import extended
from notary.core.canonical import canonical_json, is_canonical
from notary.core.fingerprint import parse_fingerprint
from notary.core.history import Observation
from notary.core.target import Target
from notary.errors import BadData, BadInput

SHA256 = "AB" * 32
SEED = bytes(range(32))


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(SEED)


def make_answer(signing: Ed25519PrivateKey, **over: object) -> bytes:
    args: dict[str, object] = dict(
        target=Target("example.org", 443),
        fingerprint=parse_fingerprint(SHA256),
        nonce="AAAAAAAAAAA",
        verdict="match",
        history=(Observation(b"\x01" * 20, b"\xab" * 32, 100, 200),),
        answered_at=1000,
        key=extended.key_id(signing.public_key()),
        address="192.0.2.1",
        cache="miss",
    )
    args.update(over)
    return extended.sign_answer(extended.statement(**args), signing)  # type: ignore[arg-type]


# -- canonical JSON ---------------------------------------------------------------------------


def test_canonical_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"b": 1, "a": [True, None, "x"]}) == b'{"a":[true,null,"x"],"b":1}'


def test_canonical_string_escapes_follow_rfc8785() -> None:
    # RFC 8785 3.2.2.2: short escapes, lower-case \u00xx for other controls, rest literal UTF-8
    assert canonical_json("\n\t\x1f\"\\€\u2028") == '"\\n\\t\\u001f\\"\\\\€\u2028"'.encode()


@pytest.mark.parametrize("bad", [1.5, 2**53, {"k": float("nan")}, {1: "x"}, {"é": 1}, b"x"])
def test_canonical_refuses_what_the_format_does_not_have(bad: object) -> None:
    with pytest.raises(BadData):
        canonical_json(bad)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.text(st.characters(max_codepoint=127), max_size=6), inner,
                          max_size=4),
        max_leaves=12,
    )
)
def test_canonical_round_trips_and_is_recognised(value: object) -> None:
    raw = canonical_json(value)
    assert json.loads(raw) == value
    assert is_canonical(raw)
    assert not is_canonical(raw + b" ")  # twin: any extra byte is not canonical


# -- requests -----------------------------------------------------------------------------------


def test_parse_request_full() -> None:
    req = extended.parse_request(
        json.dumps({"host": "Example.ORG.", "port": 8443, "fingerprint": SHA256.lower(),
                    "alg": "sha256", "ip": "192.0.2.7", "nonce": "AAAAAAAAAAA"}).encode()
    )
    assert req.target == Target("example.org", 8443, ip_address("192.0.2.7"))
    assert extended.parse_request(json.dumps({
        "host": "192.0.2.8", "port": 443, "fingerprint": SHA256, "ip": "192.0.2.7"}).encode()
    ).target == Target("192.0.2.8", 443, ip_address("192.0.2.7"))
    assert req.fingerprint.algorithm == "sha256"
    assert req.nonce == "AAAAAAAAAAA"


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"host": "a.example", "port": 0, "fingerprint": SHA256},
        {"host": "a.example", "port": True, "fingerprint": SHA256},
        {"host": "a.example", "port": 443},
        {"host": "a.example", "port": 443, "fingerprint": SHA256, "alg": "sha1"},
        {"host": "a.example", "port": 443, "fingerprint": SHA256, "ip": "not-an-ip"},
        {"host": "a.example", "port": 443, "fingerprint": SHA256, "nonce": "AAAA"},
        {"host": "a.example", "port": 443, "fingerprint": SHA256, "nonce": "AAAA===="},
        {"host": "a.example", "port": 443, "fingerprint": SHA256, "extra": 1},
        {"host": "bad host", "port": 443, "fingerprint": SHA256},
        # the host itself as ip: the target without ip, spelled so that no statement about
        # it can match its logged entry (the twin, another address, is in the test above)
        {"host": "192.0.2.7", "port": 443, "fingerprint": SHA256, "ip": "192.0.2.7"},
        {"host": "[2001:db8::1]", "port": 443, "fingerprint": SHA256, "ip": "2001:db8:0::1"},
        [1, 2],
    ],
)
def test_parse_request_rejects(doc: object) -> None:
    with pytest.raises(BadInput):
        extended.parse_request(json.dumps(doc).encode())


def test_parse_request_rejects_oversize_and_non_json() -> None:
    with pytest.raises(BadInput):
        extended.parse_request(b"{" + b" " * extended.MAX_REQUEST + b"}")
    with pytest.raises(BadInput):
        extended.parse_request(b"\xff\xfe")


# -- signing (verified with the client's verifier, converge.extended) -------------------------


def _keys(key: Ed25519PrivateKey) -> dict[str, Ed25519PublicKey]:
    return {extended.key_id(key.public_key()): key.public_key()}


def test_valid_answer_verifies_with_every_binding(key: Ed25519PrivateKey) -> None:
    raw = make_answer(key)
    ok = verify_answer(raw, _keys(key), host="example.org", port=443,
                       fingerprint=cparse_fingerprint(SHA256), nonce="AAAAAAAAAAA", now=1100,
                       ip=None, bind_ip=True)
    assert ok.verdict == "match"
    assert ok.statement["observations"][0]["sha256"] == ":".join(["AB"] * 32)


def test_signed_bytes_are_the_canonical_statement_after_the_fixed_prefix(
    key: Ed25519PrivateKey,
) -> None:
    raw = make_answer(key)
    kid, value, signed = split_answer(raw)
    assert signed == canonical_json(json.loads(raw)["statement"])
    key.public_key().verify(extended.unb64url(value), signed)
    assert kid == extended.key_id(key.public_key())


def _reject(raw: bytes, key: Ed25519PrivateKey, kind: str, **expect: object) -> None:
    args: dict[str, object] = dict(host="example.org", port=443, nonce="AAAAAAAAAAA", now=1100)
    args.update(expect)
    with pytest.raises(AnswerRejected) as info:
        verify_answer(raw, _keys(key), **args)  # type: ignore[arg-type]
    assert info.value.kind == kind


def test_tampered_field_fails(key: Ed25519PrivateKey) -> None:
    # the same statement value, other bytes: not what was signed
    raw = make_answer(key).replace(b'"verdict":"match"', b'"verdict":"m\\u0061tch"')
    _reject(raw, key, "bad-signature")
    doc = json.loads(make_answer(key))
    doc["statement"]["verdict"] = "mismatch"
    _reject(canonical_json(doc), key, "bad-signature")


def test_wrong_key_fails(key: Ed25519PrivateKey) -> None:
    other = Ed25519PrivateKey.from_private_bytes(bytes(32))
    raw = make_answer(other, key=extended.key_id(key.public_key()))  # claims our key id
    _reject(raw, key, "bad-signature")


def test_unknown_key_fails(key: Ed25519PrivateKey) -> None:
    other = Ed25519PrivateKey.from_private_bytes(bytes(32))
    _reject(make_answer(other), key, "unknown-key")


def test_wrong_target_fails(key: Ed25519PrivateKey) -> None:
    _reject(make_answer(key), key, "wrong-target", host="example.com")
    _reject(make_answer(key), key, "wrong-target", port=8443)


def test_stale_and_future_answers_fail(key: Ed25519PrivateKey) -> None:
    _reject(make_answer(key), key, "stale", now=1000 + 301)
    _reject(make_answer(key), key, "stale", now=1000 - 301)


def test_nonce_mismatch_fails(key: Ed25519PrivateKey) -> None:
    _reject(make_answer(key), key, "nonce-mismatch", nonce="BBBBBBBBBBB")
    _reject(make_answer(key, nonce=None), key, "nonce-mismatch")


def test_malformed_answers_fail(key: Ed25519PrivateKey) -> None:
    _reject(b"not json", key, "malformed")
    _reject(b'{"statement":{}}', key, "malformed")
    doc = json.loads(make_answer(key))
    doc["signature"]["alg"] = "rsa"
    _reject(canonical_json(doc), key, "malformed")
