"""The notary's signer against the shared vectors and the client's verifier.

The notary signs (``notary.core.extended`` / ``notary.core.canonical``) and never verifies;
the client (``converge.extended``) verifies. Here:

* ``canonical-json.json`` (the notary-only file) through the notary's encoder;
* every valid answer of ``extended-answers.json`` whose statement is canonical is exactly
  what the notary's signer writes for that statement with the vector's key;
* whatever statement the notary's ``statement()`` builds, its signed answer verifies with the
  client under the contract (fixed prefix, Ed25519 over the statement bytes as received, the
  bounds scan and a strict parse), and gives back the same statement; one changed byte of
  the statement bytes is refused.
"""

from __future__ import annotations

import json
from ipaddress import ip_address
from pathlib import Path
from typing import Any

import pytest
from converge import extended as cext
from converge.fingerprint import parse_fingerprint as cparse_fingerprint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from notary.core import extended
from notary.core.canonical import canonical_json
from notary.core.fingerprint import parse_fingerprint
from notary.core.history import Observation
from notary.core.target import Target
from notary.errors import BadData

VECTORS = Path(__file__).resolve().parents[2] / "client-libs" / "vectors"
DOC = json.loads((VECTORS / "extended-answers.json").read_text())
CASES = DOC["tests"]
CANONICAL = json.loads((VECTORS / "canonical-json.json").read_text())
SEEDS = {name: bytes.fromhex(seed) for name, seed in DOC["test_key_seeds"].items()}


def _answer(case: dict[str, Any]) -> bytes:
    if "answer_hex" in case:
        return bytes.fromhex(case["answer_hex"])
    return str(case["answer"]).encode("ascii")


def _private(key_id: str) -> Ed25519PrivateKey:
    for seed in SEEDS.values():
        key = Ed25519PrivateKey.from_private_bytes(seed)
        if extended.key_id(key.public_key()) == key_id:
            return key
    raise LookupError(key_id)


@pytest.mark.parametrize("case", CANONICAL["tests"], ids=[str(c["id"]) for c in
                                                          CANONICAL["tests"]])
def test_canonical_vectors_through_the_notary_encoder(case: dict[str, Any]) -> None:
    try:
        got = {"result": "valid", "canonical": canonical_json(json.loads(case["input"])).decode()}
    except BadData:
        got = {"result": "invalid", "kind": "canonical"}
    assert got == {k: case[k] for k in ("result", "canonical", "kind") if k in case}


def _signer_cases() -> list[dict[str, Any]]:
    out = []
    for case in CASES:
        if case["type"] != "answer" or case["result"] != "valid":
            continue
        stmt = json.loads(_answer(case))["statement"]
        try:
            if canonical_json(stmt) == cext.split_answer(_answer(case))[2]:
                out.append(case)
        except BadData:  # a hostile statement outside the signer's subset
            continue
    return out


SIGNER_CASES = _signer_cases()


# the notary signs through libsodium (AnswerKey); OpenSSL's signer, the key itself, must give
# the same bytes (Ed25519 is deterministic), so both are held to the vectors
SIGNERS = {"libsodium": extended.AnswerKey, "openssl": lambda key: key}


@pytest.mark.parametrize("signer", list(SIGNERS))
@pytest.mark.parametrize("case", SIGNER_CASES, ids=[str(c["id"]) for c in SIGNER_CASES])
def test_valid_vector_answers_are_the_notary_signer_output(case: dict[str, Any],
                                                           signer: str) -> None:
    raw = _answer(case)
    stmt = json.loads(raw)["statement"]
    assert extended.sign_answer(stmt, SIGNERS[signer](_private(stmt["key_id"]))) == raw


@pytest.mark.parametrize("signer", list(SIGNERS))
def test_the_signer_cases_cover_every_verdict_and_the_twins_are_not_signer_output(
        signer: str) -> None:
    assert {c["verdict"] for c in SIGNER_CASES} == set(extended.VERDICTS)
    # twin: a rejected answer is never what the signer writes for its statement
    tampered = next(c for c in CASES if c.get("kind") == "bad-signature")
    stmt = json.loads(_answer(tampered))["statement"]
    key = SIGNERS[signer](_private(stmt["key_id"]))
    assert extended.sign_answer(stmt, key) != _answer(tampered)


KEY = Ed25519PrivateKey.from_private_bytes(SEEDS["current"])
KID = extended.key_id(KEY.public_key())
TRUSTED = {KID: KEY.public_key()}
_text = st.text(max_size=24)
_digest = st.binary(min_size=32, max_size=32)


@st.composite
def statements(draw: st.DrawFn) -> dict[str, Any]:
    fp = draw(_digest)
    alg = draw(st.sampled_from(["sha256", "sha1"]))
    history = tuple(
        Observation(draw(st.binary(min_size=20, max_size=20)), draw(_digest),
                    draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)))
        for _ in range(draw(st.integers(0, 3)))
    )
    ip = draw(st.none() | st.just(ip_address("192.0.2.7")) | st.just(ip_address("2001:db8::1")))
    return extended.statement(
        target=Target(draw(st.sampled_from(["example.org", "xn--bcher-kva.test", "192.0.2.1"])),
                      draw(st.integers(1, 65535)), ip),
        fingerprint=parse_fingerprint((fp if alg == "sha256" else fp[:20]).hex()),
        nonce=draw(st.none() | st.just("q83vEjRWeJASNFZ4kBI0Vg")),
        verdict=draw(st.sampled_from(extended.VERDICTS)),  # type: ignore[arg-type]
        history=history,
        answered_at=draw(st.integers(0, 2**40)),
        key=KID,
        address=draw(st.none() | st.just("192.0.2.1")),
        cache=draw(st.sampled_from(["hit", "miss", "stale"])),
        detail=draw(st.none() | _text),
        ca=draw(st.none() | st.fixed_dictionaries({"verdict": st.none() | _text,
                                                   "reason": _text, "store": _text,
                                                   "root_sha256": st.none() | _text})),
    )


@settings(max_examples=150, deadline=None)
@given(statements(), st.data())
def test_signer_output_verifies_with_the_client(stmt: dict[str, Any], data: st.DataObject) -> None:
    raw = extended.sign_answer(stmt, KEY)
    target, request = stmt["target"], stmt["request"]
    v = cext.verify_answer(
        raw, TRUSTED, host=target["host"], port=target["port"],
        fingerprint=cparse_fingerprint(request["fingerprint"]), nonce=request["nonce"],
        now=stmt["answered_at"], ip=target["ip"], bind_ip=True,
    )
    assert v.statement == stmt and v.verdict == stmt["verdict"]
    # twin: one byte of the statement bytes changed is never accepted (signature first)
    _, _, signed = cext.split_answer(raw)
    start = len(raw) - 1 - len(signed)
    i = data.draw(st.integers(start, len(raw) - 2))
    flipped = raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1 :]
    with pytest.raises(cext.AnswerRejected) as info:
        cext.verify_answer(flipped, TRUSTED)
    assert info.value.kind == "bad-signature"


def test_every_kind_and_type_is_covered() -> None:
    kinds = {c.get("kind") for c in CASES}
    assert set(cext.FAILURE_KINDS) <= kinds
    assert {c["type"] for c in CASES} == {"answer", "bundle"}
    verdicts = {c.get("verdict") for c in CASES}
    assert set(extended.VERDICTS) <= verdicts


def test_the_vectors_valid_answers_have_the_notary_statement_shape() -> None:
    """A valid vector answer has exactly the members the notary's statement() produces."""
    valid = json.loads(_answer(next(c for c in CASES if c.get("verdict") == "match")))
    request = extended.parse_request(json.dumps(
        {"host": "a.test", "port": 1, "fingerprint": "00" * 32}).encode())
    produced = extended.statement(
        target=request.target, fingerprint=request.fingerprint,
        nonce=None, verdict="match", history=(), answered_at=1, key="00" * 8,
    )
    assert set(valid["statement"]) == set(produced)
    assert set(valid["statement"]["request"]) == set(produced["request"])
    assert set(valid["statement"]["target"]) == set(produced["target"])
