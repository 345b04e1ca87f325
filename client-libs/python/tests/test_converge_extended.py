"""The extended format's pure parts: configuration, bundles, requests, and the reduction of
an HTTP response to a vote. Signature and parsing rules are covered case by case by
``client-libs/vectors/extended-answers.json`` (test_converge_vectors.py)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from converge import extended
from converge.bundle import parse_bundle
from converge.config import add_notary, list_notaries, parse_config
from converge.errors import BundleError, ConfigError
from converge.fingerprint import Fingerprint, parse_fingerprint
from converge.legacy import HttpResponse
from converge.notary_io import NotaryResult
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
DOC = json.loads((VECTORS / "extended-answers.json").read_text())
KEY = Ed25519PrivateKey.from_private_bytes(bytes(32))
RAW = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
KID = hashlib.sha256(RAW).digest()[:8].hex()
FP = parse_fingerprint("AB" * 32)
NONCE = "AAAAAAAAAAAAAAAAAAAAAA"


def _cert() -> str:
    doc = json.loads((VECTORS / "bundles.json").read_text())
    bundle = json.loads(next(c["bundle"] for c in doc["tests"] if c["result"] == "valid"
                             and '"version": 1' in c["bundle"]))
    return str(bundle["hosts"][0]["certificate"])


def bundle_doc(**extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "name": "Org X",
        "hosts": [{"host": "127.0.0.1", "ssl_port": 4242, "http_port": 80,
                   "certificate": _cert()}],
        **extra,
    }


def key_entry() -> dict[str, Any]:
    return {"alg": "ed25519", "key_id": KID,
            "public_key": base64.urlsafe_b64encode(RAW).rstrip(b"=").decode(),
            "status": "current"}


def answer(verdict: str = "match", **over: Any) -> bytes:
    stmt: dict[str, Any] = {
        "type": extended.FORMAT, "target": {"host": "site.test", "port": 443, "ip": None},
        "address": None, "request": {"alg": "sha256", "fingerprint": FP.colon_hex(),
                                     "nonce": NONCE},
        "verdict": verdict, "detail": None, "observations": [], "answered_at": 1000,
        "cache": "hit", "key_id": KID,
    }
    stmt.update(over)
    sig = extended.b64url(KEY.sign(jcs(stmt)))
    return jcs({"statement": stmt, "signature": {"alg": "ed25519", "key_id": KID, "value": sig}})


def jcs(value: Any) -> bytes:
    """RFC 8785 bytes of the ASCII, integer-only values these tests sign."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("ascii")


def evaluate(status: int, body: bytes, ctype: str = extended.MEDIA_TYPE,
             **kw: Any) -> extended.ExtOutcome:
    args: dict[str, Any] = {"host": "site.test", "port": 443, "fingerprint": FP,
                            "nonce": NONCE, "now": 1000, "max_skew": 300}
    args.update(kw)
    return extended.evaluate(HttpResponse(status, {"content-type": ctype}, body),
                             {KID: KEY.public_key()}, **args)


# ---------------------------------------------------------------------- configuration


def test_config_defaults_and_values(tmp_path: Path) -> None:
    cfg = parse_config(tmp_path, {})
    assert (cfg.extended, cfg.extended_nonce, cfg.max_skew) == ("prefer", True, 300)
    cfg = parse_config(tmp_path, {"extended": "require", "extended-nonce": False,
                                  "max-skew": 0})
    assert (cfg.extended, cfg.extended_nonce, cfg.max_skew) == ("require", False, 0)
    assert parse_config(tmp_path, {"max-skew": 86400}).max_skew == 86400


@pytest.mark.parametrize("raw", [{"extended": "on"}, {"extended": True}, {"max-skew": -1},
                                 {"max-skew": 86401}, {"max-skew": 1.5},
                                 {"extended-nonce": "yes"}])
def test_config_refuses_bad_extended_values(tmp_path: Path, raw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        parse_config(tmp_path, raw)


# ---------------------------------------------------------------------- bundles


def test_bundle_with_signing_keys_survives_add_and_list(tmp_path: Path) -> None:
    doc = bundle_doc(protocols=["convergence-v1", extended.FORMAT], signing_keys=[key_entry()])
    bundle, path = add_notary(tmp_path, json.dumps(doc).encode())
    assert bundle.offers_extended
    (stored, enabled, _), = list_notaries(tmp_path)
    assert enabled and stored.offers_extended and stored == bundle
    assert json.loads(path.read_text())["signing_keys"] == [key_entry()]
    # twin: a legacy bundle stays legacy, and its stored form has no extended fields
    legacy, lpath = add_notary(tmp_path, json.dumps({**bundle_doc(), "name": "Org L"}).encode())
    assert not legacy.offers_extended
    assert "signing_keys" not in json.loads(lpath.read_text())


def test_bundle_refuses_a_key_id_of_another_key() -> None:
    bad = {**key_entry(), "key_id": "00" * 8}
    with pytest.raises(BundleError, match="does not match"):
        parse_bundle(bundle_doc(protocols=[extended.FORMAT], signing_keys=[bad]))
    assert parse_bundle(bundle_doc(protocols=[extended.FORMAT],
                                   signing_keys=[key_entry()])).offers_extended


def test_retired_keys_are_trusted_until_valid_until() -> None:
    retired = extended.SigningKey(KID, KEY.public_key(), "", "retired", 100)
    assert extended.trusted_keys([retired], 100) == {KID: retired.public_key}
    assert extended.trusted_keys([retired], 101) == {}


# ---------------------------------------------------------------------- requests


def test_request_names_target_fingerprint_alg_and_nonce() -> None:
    raw = extended.request_bytes("Site.Test", 443, FP, nonce=NONCE)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v2/answer HTTP/1.0\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body) == {"host": "Site.Test", "port": 443,
                                "fingerprint": FP.colon_hex(), "alg": "sha256",
                                "nonce": NONCE}
    assert "nonce" not in json.loads(extended.request_body("a.test", 1, FP, nonce=None))


def test_nonces_are_fresh_and_within_bounds() -> None:
    a, b = extended.new_nonce(), extended.new_nonce()
    assert a != b and len(extended.unb64url(a)) == 16
    with pytest.raises(ValueError):
        extended.new_nonce(7)


def test_sha256_is_asked_when_known() -> None:
    sha1 = Fingerprint("sha1", b"\x01" * 20)
    assert extended.request_fingerprint([sha1, FP]) == FP
    assert extended.request_fingerprint([sha1]) == sha1


def test_expected_host_is_the_notary_form() -> None:
    assert extended.expected_host("WWW.Example.ORG.") == "www.example.org"
    assert extended.expected_host("[2001:db8::0:1]") == "2001:db8::1"


# ---------------------------------------------------------------------- votes


@pytest.mark.parametrize(
    "verdict,status,vote,kind",
    [("match", 200, "success", "match"), ("mismatch", 409, "failure", "mismatch"),
     ("unreachable", 503, "unreachable", "target-unreachable"),
     ("refused", 403, "unreachable", "refused")],
)
def test_verified_verdicts_become_votes(verdict: str, status: int, vote: str, kind: str) -> None:
    out = evaluate(status, answer(verdict))
    assert (out.vote, out.kind, out.status) == (vote, kind, status)
    assert out.answer == answer(verdict)


def test_a_status_that_does_not_fit_the_signed_verdict_is_a_failure() -> None:
    out = evaluate(200, answer("mismatch"))
    assert (out.vote, out.kind, out.answer) == ("failure", "response", None)


def test_a_check_that_fails_is_a_failure_vote() -> None:
    assert evaluate(200, answer(), nonce="B" * 22).kind == "nonce-mismatch"
    assert evaluate(200, answer(), now=1301).kind == "stale"
    assert evaluate(200, answer(), host="other.test").kind == "wrong-target"
    out = evaluate(200, answer(), fingerprint=parse_fingerprint("CD" * 32))
    assert (out.vote, out.kind) == ("failure", "wrong-target")
    assert evaluate(200, answer()).vote == "success"  # twin


def test_no_signed_answer_is_unreachable() -> None:
    for status in (400, 404, 503):
        out = evaluate(status, b"no\n", ctype="text/plain")
        assert (out.vote, out.kind, out.status) == ("unreachable", "status", status)
    # a 200 that is not the answer media type is not read as one
    assert evaluate(200, answer(), ctype="application/json").kind == "status"


def test_framing_errors_are_failures() -> None:
    out, resp = extended.outcome_from_http(
        b"garbage", {KID: KEY.public_key()}, host="site.test", port=443, fingerprint=FP,
        nonce=None, now=1000, max_skew=300, max_bytes=1024)
    assert resp is None and (out.vote, out.kind) == ("failure", "response")


def test_result_json_names_the_protocol() -> None:
    r = NotaryResult("Org X", "success", "match", 200, protocol=extended.FORMAT, answer=b"{}")
    assert r.to_json()["protocol"] == extended.FORMAT and "answer" not in r.to_json()


def test_vector_file_keys_are_valid_bundle_entries() -> None:
    keys = extended.parse_signing_keys(
        [DOC["signing_keys"]["current"], DOC["signing_keys"]["retired"]])
    assert [k.status for k in keys] == ["current", "retired"]


# ---------------------------------------------------------------------- verify-answer


def _case(pred: Any) -> dict[str, Any]:
    return next(c for c in DOC["tests"] if c["type"] == "answer" and pred(c))


def test_verify_answer_offline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from converge.cli import main

    valid = _case(lambda c: c.get("verdict") == "match" and c["expect"]["host"] is None)
    f = tmp_path / "a.answer"
    f.write_text(valid["answer"])
    bundle = tmp_path / "b.notary"
    keys = [DOC["signing_keys"][n] for n in ("current", "retired")]
    bundle.write_text(json.dumps(bundle_doc(protocols=[extended.FORMAT], signing_keys=keys)))
    assert main(["verify-answer", str(f), "--bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "VALID: signed by notary 'Org X'" in out and "verdict      match" in out
    now = str(valid["expect"]["now"])
    assert main(["verify-answer", str(f), "--bundle", str(bundle), "--json", "--now", now,
                 "--host", "www.example.org", "--port", "443"]) == 0
    proven = json.loads(capsys.readouterr().out)
    assert proven["result"] == "valid" and proven["key_status"] == "current"
    assert proven["checked"][-1].startswith("time within 300 s")
    # twins: a tampered answer is rejected (1), a bundle without signing keys is an error (2)
    tampered = _case(lambda c: c.get("kind") == "bad-signature")
    f.write_text(tampered["answer"])
    assert main(["verify-answer", str(f), "--bundle", str(bundle), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["kind"] == "bad-signature"
    bundle.write_text(json.dumps(bundle_doc()))
    assert main(["verify-answer", str(f), "--bundle", str(bundle)]) == 2


def test_verify_answer_retired_key_depends_on_now(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from converge.cli import main

    case = _case(lambda c: c["bundle_keys"] == ["current", "retired"]
                 and c.get("verdict") == "match")
    f = tmp_path / "a.answer"
    f.write_text(case["answer"])
    bundle = tmp_path / "b.notary"
    keys = [DOC["signing_keys"][n] for n in ("current", "retired")]
    bundle.write_text(json.dumps(bundle_doc(protocols=[extended.FORMAT], signing_keys=keys)))
    until = DOC["signing_keys"]["retired"]["valid_until"]
    args = ["verify-answer", str(f), "--bundle", str(bundle), "--max-skew", "86400"]
    assert main([*args, "--now", str(until)]) == 0
    assert "(retired)" in capsys.readouterr().out
    assert main([*args, "--now", str(until + 1)]) == 1
    assert "unknown-key" in capsys.readouterr().out


# ---------------------------------------------------------------------- hostile input


@pytest.mark.parametrize("value", [b"1\xb3", b"\xb2", "\u0661".encode(), b"1" * 13, b"-1"])
def test_content_length_must_be_ascii_digits(value: bytes) -> None:
    from converge.errors import ResponseError
    from converge.legacy import parse_http_response

    raw = b"HTTP/1.0 200 OK\r\nContent-Length: " + value + b"\r\n\r\nbody"
    with pytest.raises(ResponseError, match="Content-Length"):
        parse_http_response(raw)
    # twin: ASCII digits frame the body
    assert parse_http_response(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nxy").body == b"x"


def test_deeply_nested_config_file_is_a_config_error(tmp_path: Path) -> None:
    from converge.config import load_config

    (tmp_path / "converge.config").write_text("[" * 30_000 + "]" * 30_000)  # under 64 KiB
    with pytest.raises(ConfigError, match="not JSON"):
        load_config(tmp_path)
    (tmp_path / "converge.config").write_text("{}")  # twin
    assert load_config(tmp_path).extended == "prefer"


# ------------------------------------------------------------- the signature check itself

# The identity point: a public key of small order. Under it "R = identity, S = 0" satisfies
# the cofactorless equation [S]B = R + [k]A for every message, and OpenSSL 3.0 accepts it.
SMALL_ORDER = bytes([1]) + bytes(31)
FORGED = SMALL_ORDER + bytes(32)
ORDER_L = 2**252 + 27742317777372353535851937790883648493


def _forged_answer() -> tuple[bytes, str]:
    """An answer under the small-order key, 'signed' with FORGED, no private key used."""
    kid = hashlib.sha256(SMALL_ORDER).digest()[:8].hex()
    stmt: dict[str, Any] = json.loads(answer())["statement"]
    stmt["key_id"] = kid
    sig = extended.b64url(FORGED)
    return jcs({"statement": stmt, "signature": {"alg": "ed25519", "key_id": kid,
                                                 "value": sig}}), kid


def test_a_forged_signature_under_a_small_order_key_is_refused() -> None:
    from converge import ed25519
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    weak = Ed25519PublicKey.from_public_bytes(SMALL_ORDER)
    weak.verify(FORGED, b"any message")  # OpenSSL's check takes it: why ours is libsodium's
    with pytest.raises(InvalidSignature):
        ed25519.verify(weak, FORGED, b"any message")
    raw, kid = _forged_answer()
    with pytest.raises(extended.AnswerRejected) as e:
        extended.verify_answer(raw, {kid: weak}, host="site.test", port=443, fingerprint=FP,
                               nonce=NONCE, now=1000)
    assert e.value.kind == "bad-signature"
    # twin: the same statement genuinely signed by a real key verifies
    v = extended.verify_answer(answer(), {KID: KEY.public_key()}, host="site.test", port=443,
                               fingerprint=FP, nonce=NONCE, now=1000)
    assert v.verdict == "match"


P = 2**255 - 19
Y8 = 0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826


@pytest.mark.parametrize(("raw", "why"), [
    (SMALL_ORDER, "small order"),
    (bytes([1]) + bytes(30) + b"\x80", "small order"),  # the identity, sign bit set
    (bytes(32), "small order"),  # y = 0, order 4
    ((P - 1).to_bytes(32, "little"), "small order"),  # order 2
    (Y8.to_bytes(32, "little"), "small order"),  # order 8
    ((P - Y8 + (1 << 255)).to_bytes(32, "little"), "small order"),
    (P.to_bytes(32, "little"), "canonical"),
    ((P + 3).to_bytes(32, "little"), "canonical"),
    (bytes([0xFF] * 31) + b"\x7f", "canonical"),
    (bytes([0xFF] * 32), "canonical"),  # y = 2^255 - 1 with the sign bit
])
def test_a_bundle_naming_a_weak_key_is_refused(raw: bytes, why: str) -> None:
    from converge import ed25519

    reason = ed25519.weak_key(raw)
    assert reason is not None and why in reason
    entry = {"alg": "ed25519", "key_id": hashlib.sha256(raw).digest()[:8].hex(),
             "public_key": extended.b64url(raw), "status": "current"}
    with pytest.raises(BundleError, match=why):
        extended.parse_signing_key(entry)


def test_a_sound_key_is_not_weak() -> None:
    """The twin: real keys (and the largest canonical y, p - 2, with either sign) pass the
    rule; the largest canonical y is not even a point, which the rule leaves to the check."""
    from converge import ed25519

    for _ in range(64):
        raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw,
                                                                     PublicFormat.Raw)
        assert ed25519.weak_key(raw) is None
        entry = {"alg": "ed25519", "key_id": hashlib.sha256(raw).digest()[:8].hex(),
                 "public_key": extended.b64url(raw), "status": "current"}
        assert extended.parse_signing_key(entry).key_id == entry["key_id"]
    assert ed25519.weak_key((P - 2).to_bytes(32, "little")) is None
    assert ed25519.weak_key((P - 2 + (1 << 255)).to_bytes(32, "little")) is None
    assert ed25519.weak_key(bytes(31)) is not None  # the length is checked too


def test_the_check_refuses_what_is_not_the_keys_signature_of_the_message() -> None:
    from converge import ed25519
    from cryptography.exceptions import InvalidSignature

    pub, msg = KEY.public_key(), b"a statement"
    sig = KEY.sign(msg)
    ed25519.verify(pub, sig, msg)  # twin of every refusal below
    s_plus_l = sig[:32] + (int.from_bytes(sig[32:], "little") + ORDER_L).to_bytes(32, "little")
    other = Ed25519PrivateKey.from_private_bytes(bytes([7]) * 32).public_key()
    for bad_key, bad_sig, bad_msg in (
        (pub, sig, msg + b"."),                          # another message
        (pub, sig[:-1] + bytes([sig[-1] ^ 1]), msg),     # one bit of S
        (pub, bytes([sig[0] ^ 1]) + sig[1:], msg),       # one bit of R
        (pub, s_plus_l, msg),                            # the same S plus the group order
        (other, sig, msg),                               # another key
        (pub, sig[:63], msg), (pub, sig + b"\0", msg),   # lengths
    ):
        with pytest.raises(InvalidSignature):
            ed25519.verify(bad_key, bad_sig, bad_msg)
    with pytest.raises(InvalidSignature):
        ed25519.verify(pub, bytearray(sig), msg)  # type: ignore[arg-type]
