"""Every case of ``client-libs/vectors/extended-answers.json`` through the notary's reference
implementation (``notary.core.extended`` / ``notary.core.canonical``) and the client
(``converge.extended``): both must agree with the vector and so with each other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from converge.vectors import compare, run_case
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from notary.core import extended
from notary.core.canonical import canonical_json
from notary.core.target import normalise_host
from notary.errors import BadData

VECTORS = Path(__file__).resolve().parents[2] / "client-libs" / "vectors"
DOC = json.loads((VECTORS / "extended-answers.json").read_text())
CASES = DOC["tests"]


def _reference_keys(case: dict[str, Any]) -> dict[str, Ed25519PublicKey]:
    now = case["expect"]["now"]
    out = {}
    for name in case["bundle_keys"]:
        k = DOC["signing_keys"][name]
        if k["status"] == "retired" and now > k["valid_until"]:
            continue
        pub = Ed25519PublicKey.from_public_bytes(extended.unb64url(k["public_key"]))
        assert extended.key_id(pub) == k["key_id"]
        out[k["key_id"]] = pub
    return out


def _answer(case: dict[str, Any]) -> bytes:
    if "answer_hex" in case:
        return bytes.fromhex(case["answer_hex"])
    return str(case["answer"]).encode("ascii")


def reference(case: dict[str, Any]) -> dict[str, Any]:
    """The notary reference implementation's output for one case (fingerprint not bound)."""
    if case["type"] == "canonical":
        try:
            return {"result": "valid",
                    "canonical": canonical_json(json.loads(case["input"])).decode("utf-8")}
        except BadData:
            return {"result": "invalid", "kind": "canonical"}
    exp = case["expect"]
    try:
        v = extended.verify_answer(
            _answer(case), _reference_keys(case),
            host=None if exp["host"] is None else normalise_host(exp["host"]),
            port=exp["port"], nonce=exp["nonce"], now=exp["now"], max_skew=exp["max_skew"],
        )
    except extended.AnswerRejected as exc:
        return {"result": "rejected", "kind": exc.kind}
    return {"result": "valid", "verdict": v.verdict}


CHECKED = [c for c in CASES if c["type"] in ("answer", "canonical")]


@pytest.mark.parametrize("case", CHECKED, ids=[f"{c['id']}-{c['type']}" for c in CHECKED])
def test_reference_and_client_agree(case: dict[str, Any]) -> None:
    client = run_case(DOC, case)
    assert compare(case, client) == []
    ref = reference(case)
    if "fingerprint-binding" in case["flags"] or (
        "ip-binding" in case["flags"] and client["result"] == "rejected"
    ):
        # the reference verifier takes no fingerprint or address: it accepts what the
        # client rejects
        assert ref["result"] == "valid" and client["result"] == "rejected"
        return
    assert compare(case, ref) == [], ref
    assert {k: ref.get(k) for k in ("result", "kind", "verdict", "canonical")} == {
        k: client.get(k) for k in ("result", "kind", "verdict", "canonical")
    }


def test_every_kind_and_type_is_covered() -> None:
    kinds = {c.get("kind") for c in CASES}
    assert {"malformed", "non-canonical", "unknown-key", "bad-signature", "wrong-target",
            "nonce-mismatch", "stale"} <= kinds
    assert {c["type"] for c in CASES} == {"answer", "canonical", "bundle"}
    verdicts = {c.get("verdict") for c in CASES}
    assert {"match", "mismatch", "unreachable", "refused"} <= verdicts


def test_the_vectors_valid_answers_have_the_notary_statement_shape() -> None:
    """A valid vector answer has exactly the members the notary's statement() produces."""
    valid = json.loads(_answer(next(c for c in CASES if c.get("verdict") == "match")))
    produced = extended.statement(
        target=extended.parse_request(json.dumps(
            {"host": "a.test", "port": 1, "fingerprint": "00" * 32}).encode()).target,
        fingerprint=extended.parse_request(json.dumps(
            {"host": "a.test", "port": 1, "fingerprint": "00" * 32}).encode()).fingerprint,
        nonce=None, verdict="match", history=(), answered_at=1, key="00" * 8,
    )
    assert set(valid["statement"]) == set(produced)
    assert set(valid["statement"]["request"]) == set(produced["request"])
    assert set(valid["statement"]["target"]) == set(produced["target"])
