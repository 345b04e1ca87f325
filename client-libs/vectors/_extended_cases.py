"""Vector cases for the extended format ``converge-answer/1``: RFC 8785 canonical JSON and
signed answers (valid, tampered, wrong key, wrong target, stale, nonce mismatch, unknown key,
retired keys, malformed, spliced, hostile JSON inside validly signed statements), and the
notary-only canonical-json.json file.

The Ed25519 keys are TEST-ONLY and derived from fixed seeds (SHA-256 of a label), so the
signatures are byte-identical on every run (Ed25519 signing is deterministic, RFC 8032).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from _common import CERTS, Case, fp, numbered
from _transparency_cases import LOG, WITNESSES
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from notary.core.canonical import canonical_json
from notary.tlog.note import Verifier

SEEDS = {
    "current": "converge test signing key: current",
    "retired": "converge test signing key: retired",
    "other": "converge test signing key: other (not in any bundle)",
}
T = 1795324044  # answered_at of the answers
VALID_UNTIL = T + 1000  # the retired key's end of overlap
HOST, PORT = "www.example.org", 443
NONCE = "q83vEjRWeJASNFZ4kBI0Vg"  # 16 bytes
FP256 = fp("extended-site", 32)
FP1 = fp("extended-site")
OLD256, OLD1 = fp("extended-site-old", 32), fp("extended-site-old")


def _key(name: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(SEEDS[name].encode()).digest())


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _raw(name: str) -> bytes:
    return _key(name).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _kid(name: str) -> str:
    return hashlib.sha256(_raw(name)).digest()[:8].hex()


def _bundle_entry(name: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "alg": "ed25519",
        "key_id": _kid(name),
        "public_key": _b64url(_raw(name)),
        "status": "retired" if name == "retired" else "current",
    }
    if name == "retired":
        entry["valid_until"] = VALID_UNTIL
    return entry


def _statement(**over: Any) -> dict[str, Any]:
    stmt: dict[str, Any] = {
        "type": "converge-answer/1",
        "target": {"host": HOST, "port": PORT, "ip": None},
        "address": "93.184.216.34",
        "request": {"alg": "sha256", "fingerprint": FP256, "nonce": NONCE},
        "verdict": "match",
        "detail": None,
        "observations": [
            {"sha256": FP256, "sha1": FP1, "first_seen": T - 86400 * 30, "last_seen": T},
            {
                "sha256": OLD256,
                "sha1": OLD1,
                "first_seen": T - 86400 * 400,
                "last_seen": T - 86400 * 31,
            },
        ],
        "answered_at": T,
        "cache": "miss",
        "key_id": _kid("current"),
    }
    stmt.update(over)
    return stmt


def _sign(stmt: dict[str, Any], key: str = "current", sig_kid: str | None = None) -> bytes:
    sig = _key(key).sign(canonical_json(stmt))
    doc = {
        "statement": stmt,
        "signature": {"alg": "ed25519", "key_id": sig_kid or stmt["key_id"], "value": _b64url(sig)},
    }
    return canonical_json(doc)


def _sign_raw(statement: bytes, key: str = "current", kid: str | None = None) -> bytes:
    """An answer whose signed bytes are exactly ``statement``, whatever they hold."""
    sig = _b64url(_key(key).sign(statement))
    prefix = '{"signature":{"alg":"ed25519","key_id":"' + (kid or _kid(key))
    prefix += '","value":"' + sig + '"},"statement":'
    return prefix.encode() + statement + b"}"


def _resign_doc(raw: bytes, mutate: Any) -> bytes:
    """Parse a signed answer, change it (without re-signing), serialise canonically."""
    doc = json.loads(raw)
    mutate(doc)
    return canonical_json(doc)


def _answer_text(raw: bytes) -> dict[str, str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"answer_hex": raw.hex()}
    if text.isascii():
        return {"answer": text}
    return {"answer_hex": raw.hex()}


_P = 2**255 - 19
_Y8 = 0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826
# 32-byte Ed25519 public keys no bundle may name: the eight points of small order (some with
# the sign bit set) and encodings of y at or above the field prime.
WEAK_KEYS = {
    "the identity (order 1)": (1).to_bytes(32, "little"),
    "the identity with the sign bit set": ((1 << 255) | 1).to_bytes(32, "little"),
    "of order 2 (y = -1)": (_P - 1).to_bytes(32, "little"),
    "of order 4 (y = 0)": bytes(32),
    "of order 8": _Y8.to_bytes(32, "little"),
    "of order 8 (-y8, sign bit set)": ((1 << 255) | (_P - _Y8)).to_bytes(32, "little"),
    "not canonical (y = p, i.e. 0)": _P.to_bytes(32, "little"),
    "not canonical (y = p + 1, i.e. the identity)": (_P + 1).to_bytes(32, "little"),
    "not canonical (y = p + 3)": (_P + 3).to_bytes(32, "little"),
    "not canonical (y = 2^255 - 1)": ((1 << 255) - 1).to_bytes(32, "little"),
}


def _vkey_with(name: str, kind: int, raw: bytes) -> str:
    return Verifier(name, kind, Ed25519PublicKey.from_public_bytes(raw), raw).vkey()


def weak_key_bundles(bundle: Any, protocols: list[str], cur: dict[str, Any]) -> list[Case]:
    """Bundles naming a weak Ed25519 key (as a signing key, the log's key or a witness's):
    invalid in every client, whatever its Ed25519 library would make of the key later. The
    key ids match the keys, so the weak key is the only fault; the twins are valid. Also
    transparency members naming one key twice (as two witnesses, or as the log and a
    witness): one key would count as two witnesses' cosignatures (a cosignature does not
    sign the witness's name), or the log would cosign itself."""
    log_key = LOG.verifier
    log_vkey = log_key.vkey()
    w1, w2 = WITNESSES["witness-1"].verifier, WITNESSES["witness-2"].verifier
    witness = {"name": w1.name, "vkey": w1.vkey()}
    witness_2 = {"name": w2.name, "vkey": w2.vkey()}

    def signing(raw: bytes) -> dict[str, Any]:
        return {"alg": "ed25519", "key_id": hashlib.sha256(raw).digest()[:8].hex(),
                "public_key": _b64url(raw), "status": "retired", "valid_until": VALID_UNTIL}

    def log(vkey: str, witnesses: list[dict[str, str]]) -> dict[str, Any]:
        return {"protocols": protocols, "signing_keys": [cur],
                "transparency": {"log": vkey, "witnesses": witnesses,
                                 "min_cosignatures": len(witnesses)}}

    out = [bundle(f"weak key: a retired signing key {what}",
                  {"protocols": protocols, "signing_keys": [cur, signing(raw)]}, None)
           for what, raw in WEAK_KEYS.items()]
    out += [
        bundle("weak key: the transparency log's key is the identity",
               log(_vkey_with(LOG.name, 1,
                              WEAK_KEYS["the identity (order 1)"]), [witness]), None),
        bundle("weak key: the transparency log's key is not canonical",
               log(_vkey_with(LOG.name, 1,
                              WEAK_KEYS["not canonical (y = p + 3)"]), [witness]), None),
        bundle("weak key: a witness's key of order 8",
               log(log_vkey, [witness, {
                   "name": "witness.test/weak",
                   "vkey": _vkey_with("witness.test/weak", 4, WEAK_KEYS["of order 8"])}]),
               None),
        bundle("weak key twin: the same transparency member with sound keys",
               log(log_vkey, [witness]), True),
        bundle("weak key twin: a sound retired signing key beside the current one",
               {"protocols": protocols, "signing_keys": [cur, _bundle_entry("retired")]}, True),
        bundle("one key, two witnesses: witness-1's key again under another name",
               log(log_vkey, [witness, {"name": "witness.test/alias",
                                        "vkey": _vkey_with("witness.test/alias", 4, w1.raw)}]),
               None),
        bundle("one key, log and witness: the log's key as a witness's",
               log(log_vkey, [witness, {"name": "witness.test/log-alias",
                                        "vkey": _vkey_with("witness.test/log-alias", 4,
                                                           log_key.raw)}]), None),
        bundle("one key each: two witnesses with their own keys, both required",
               log(log_vkey, [witness, witness_2]), True),
    ]
    return out


def extended_answers() -> dict[str, Any]:
    good = _sign(_statement())

    def answer(
        comment: str,
        raw: bytes,
        *,
        result: str,
        kind: str | None = None,
        verdict: str | None = None,
        keys: tuple[str, ...] = ("current",),
        now: int = T + 5,
        flags: list[str] | None = None,
        **expect: Any,
    ) -> Case:
        exp = {
            "host": HOST,
            "port": PORT,
            "fingerprint": FP256,
            "nonce": NONCE,
            "now": now,
            "max_skew": 300,
        }
        exp.update(expect)
        case: Case = {
            "comment": comment,
            "flags": flags or [],
            "type": "answer",
            **_answer_text(raw),
            "bundle_keys": list(keys),
            "expect": exp,
            "result": result,
        }
        if kind is not None:
            case["kind"] = kind
        if verdict is not None:
            case["verdict"] = verdict
        return case

    def ok(comment: str, raw: bytes, verdict: str, **kw: Any) -> Case:
        return answer(comment, raw, result="valid", verdict=verdict, **kw)

    def bad(comment: str, raw: bytes, kind: str, **kw: Any) -> Case:
        return answer(comment, raw, result="rejected", kind=kind, **kw)

    no_nonce = _sign(
        _statement(
            request={"alg": "sha256", "fingerprint": FP256, "nonce": None},
            cache="hit",
            address=None,
        )
    )
    sha1_req = _sign(_statement(request={"alg": "sha1", "fingerprint": FP1, "nonce": NONCE}))
    ip_target = _sign(_statement(target={"host": "93.184.216.34", "port": PORT, "ip": None}))
    with_ip = _sign(_statement(target={"host": HOST, "port": PORT, "ip": "93.184.216.34"}))
    mismatch = _sign(_statement(verdict="mismatch"))
    unreachable = _sign(
        _statement(
            verdict="unreachable", detail="connection refused", observations=[], address=None
        )
    )
    refused = _sign(
        _statement(
            verdict="refused",
            detail="target address 10.0.0.1 is private",
            observations=[],
            address=None,
        )
    )
    with_ca = _sign(
        _statement(ca={"verdict": "valid", "reason": None, "store": "mozilla", "root_sha256": None})
    )
    retired = _sign(_statement(key_id=_kid("retired")), key="retired")
    other_own = _sign(_statement(key_id=_kid("other")), key="other")
    other_claims_current = _sign(_statement(), key="other")
    unknown_kid = _sign(_statement(key_id="0011223344556677"), key="current")

    def set_path(*path: str, value: Any) -> Any:
        def mutate(doc: dict[str, Any]) -> None:
            node = doc
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = value

        return mutate

    good_doc = json.loads(good)
    pretty = json.dumps(good_doc, indent=1).encode()
    reordered = json.dumps(
        {"statement": good_doc["statement"], "signature": good_doc["signature"]},
        separators=(",", ":"),
    ).encode()
    escaped = good.replace(b'"match"', b'"m\\u0061tch"')
    sig_value = good_doc["signature"]["value"]
    sig_raw = base64.urlsafe_b64decode(sig_value + "==")

    legacy_bundle = {
        "version": 1,
        "name": "Test Org",
        "hosts": [
            {
                "host": "notary-a.test",
                "ssl_port": 443,
                "http_port": 80,
                "certificate": CERTS["test-notary"],
            }
        ],
    }
    protocols = ["convergence-v1", "converge-answer/1"]

    def bundle(comment: str, extra: dict[str, Any], extended: bool | None) -> Case:
        case: Case = {
            "comment": comment,
            "flags": [],
            "type": "bundle",
            "bundle": json.dumps({**legacy_bundle, **extra}),
        }
        if extended is None:
            case.update(result="invalid", kind="bundle")
        else:
            case.update(result="valid", extended=extended)
        return case

    cur, ret = _bundle_entry("current"), _bundle_entry("retired")
    bundle_cases = [
        bundle("legacy bundle: no extended fields", {}, False),
        bundle(
            "protocols and signing_keys: offers the extended format",
            {"protocols": protocols, "signing_keys": [cur]},
            True,
        ),
        bundle(
            "current and retired keys", {"protocols": protocols, "signing_keys": [cur, ret]}, True
        ),
        bundle("signing_keys without protocols: not advertised", {"signing_keys": [cur]}, False),
        bundle("protocols without the extended format", {"protocols": ["convergence-v1"]}, False),
        bundle("protocols lists the format but no signing_keys", {"protocols": protocols}, None),
        bundle(
            "alg is not ed25519",
            {"protocols": protocols, "signing_keys": [{**cur, "alg": "rsa"}]},
            None,
        ),
        bundle(
            "key_id does not match the key",
            {"protocols": protocols, "signing_keys": [{**cur, "key_id": _kid("other")}]},
            None,
        ),
        bundle(
            "public key of 31 bytes",
            {
                "protocols": protocols,
                "signing_keys": [{**cur, "public_key": _b64url(_raw("current")[:31])}],
            },
            None,
        ),
        bundle(
            "public key padded base64",
            {
                "protocols": protocols,
                "signing_keys": [{**cur, "public_key": cur["public_key"] + "="}],
            },
            None,
        ),
        bundle(
            "unknown status",
            {"protocols": protocols, "signing_keys": [{**cur, "status": "revoked"}]},
            None,
        ),
        bundle(
            "retired key without valid_until",
            {
                "protocols": protocols,
                "signing_keys": [cur, {k: v for k, v in ret.items() if k != "valid_until"}],
            },
            None,
        ),
        bundle("no current key", {"protocols": protocols, "signing_keys": [ret]}, None),
        bundle(
            "two current keys",
            {"protocols": protocols, "signing_keys": [cur, {**_bundle_entry("other")}]},
            None,
        ),
        bundle("the same key twice", {"protocols": protocols, "signing_keys": [cur, cur]}, None),
        bundle("signing_keys is empty", {"protocols": protocols, "signing_keys": []}, None),
    ]

    cases: list[Case] = [
        *bundle_cases,
        ok("valid match, nonce echoed", good, "match"),
        ok("valid: host compared case-insensitively", good, "match", host="WWW.Example.ORG."),
        ok(
            "valid offline: no target, fingerprint or nonce to bind",
            good,
            "match",
            host=None,
            port=None,
            fingerprint=None,
            nonce=None,
        ),
        ok("valid mismatch (signed 409)", mismatch, "mismatch"),
        ok("valid unreachable (signed 503), no observations", unreachable, "unreachable"),
        ok("valid refused (signed 403)", refused, "refused"),
        ok("valid cached answer without nonce", no_nonce, "match", nonce=None),
        ok("valid SHA-1 request", sha1_req, "match", fingerprint=FP1),
        ok("valid IP-literal target", ip_target, "match", host="93.184.216.34"),
        ok("valid with the optional ca member", with_ca, "match"),
        ok(
            "time: exactly max_skew after answered_at",
            good,
            "match",
            now=T + 300,
            flags=["boundary"],
        ),
        ok(
            "time: exactly max_skew before answered_at",
            good,
            "match",
            now=T - 300,
            flags=["boundary"],
        ),
        bad("stale: max_skew + 1 after", good, "stale", now=T + 301, flags=["boundary"]),
        bad("stale: answer from the future", good, "stale", now=T - 301),
        bad("stale with a small configured skew", good, "stale", now=T + 5, max_skew=4),
        bad(
            "tampered verdict (match -> mismatch)",
            _resign_doc(good, set_path("statement", "verdict", value="mismatch")),
            "bad-signature",
        ),
        bad(
            "tampered last_seen",
            _resign_doc(
                good,
                set_path(
                    "statement",
                    "observations",
                    value=[
                        {**good_doc["statement"]["observations"][0], "last_seen": T + 1},
                        good_doc["statement"]["observations"][1],
                    ],
                ),
            ),
            "bad-signature",
        ),
        bad(
            "tampered answered_at (replayed later)",
            _resign_doc(good, set_path("statement", "answered_at", value=T + 3600)),
            "bad-signature",
            now=T + 3600,
        ),
        bad(
            "tampered target port",
            _resign_doc(good, set_path("statement", "target", "port", value=8443)),
            "bad-signature",
            port=8443,
        ),
        bad(
            "wrong key: signed by a key outside the bundle, claiming the current key's id",
            other_claims_current,
            "bad-signature",
        ),
        bad(
            "unknown key: signed by a key outside the bundle, with its own id",
            other_own,
            "unknown-key",
        ),
        bad("unknown key id", unknown_kid, "unknown-key"),
        bad(
            "signature of 63 bytes",
            _resign_doc(good, set_path("signature", "value", value=_b64url(sig_raw[:63]))),
            "bad-signature",
        ),
        bad(
            "signature not base64url",
            _resign_doc(good, set_path("signature", "value", value="!" * 86)),
            "bad-signature",
        ),
        bad("wrong target host", good, "wrong-target", host="www.example.com"),
        bad("wrong target port", good, "wrong-target", port=8443),
        bad(
            "answer about another certificate fingerprint",
            good,
            "wrong-target",
            fingerprint=OLD256,
            flags=["fingerprint-binding"],
        ),
        bad(
            "answer about the same digest under another algorithm",
            sha1_req,
            "wrong-target",
            fingerprint=FP256,
            flags=["fingerprint-binding"],
        ),
        ok(
            "address named by the client and echoed in target.ip",
            with_ip,
            "match",
            ip="93.184.216.34",
            flags=["ip-binding"],
        ),
        ok("no address named, none in the answer", good, "match", ip=None, flags=["ip-binding"]),
        bad(
            "an address the client did not name (a relay asked the notary to probe it)",
            with_ip,
            "wrong-target",
            ip=None,
            flags=["ip-binding"],
        ),
        bad(
            "another address than the one named",
            with_ip,
            "wrong-target",
            ip="192.0.2.1",
            flags=["ip-binding"],
        ),
        bad("nonce mismatch", good, "nonce-mismatch", nonce="AAAAAAAAAAAAAAAAAAAAAA"),
        bad("nonce sent, answer has none (a cached answer replayed)", no_nonce, "nonce-mismatch"),
        ok("retired key within its overlap", retired, "match", keys=("current", "retired")),
        ok(
            "retired key at valid_until",
            retired,
            "match",
            keys=("current", "retired"),
            now=VALID_UNTIL,
            max_skew=2000,
            flags=["boundary"],
        ),
        bad(
            "retired key after its overlap",
            retired,
            "unknown-key",
            keys=("current", "retired"),
            now=VALID_UNTIL + 1,
            max_skew=2000,
            flags=["boundary"],
        ),
        bad("not the fixed shape: pretty-printed", pretty, "malformed"),
        bad("not the fixed shape: members out of order", reordered, "malformed"),
        bad("not the fixed shape: trailing newline", good + b"\n", "malformed"),
        bad(
            "a needless \\u escape in the statement: not the signed bytes", escaped, "bad-signature"
        ),
        bad("the last brace cut off: not the signed bytes", good[:-1], "bad-signature"),
        bad("malformed: not JSON", b"<html>hello</html>", "malformed"),
        bad("malformed: a JSON array", b"[]", "malformed"),
        bad(
            "malformed: no signature member",
            canonical_json({"statement": good_doc["statement"]}),
            "malformed",
        ),
        bad(
            "an extra top-level member after the statement: not the signed bytes",
            canonical_json({**good_doc, "x": 1}),
            "bad-signature",
            flags=["splice"],
        ),
        bad(
            "malformed: signature is a string",
            canonical_json({**good_doc, "signature": sig_value}),
            "malformed",
        ),
        bad("malformed: another type", _sign(_statement(type="converge-answer/2")), "malformed"),
        bad(
            "malformed: another signature alg",
            _resign_doc(good, set_path("signature", "alg", value="rsa")),
            "malformed",
        ),
        bad(
            "the signature names another trusted key than the one that signed",
            _sign(_statement(), sig_kid=_kid("retired")),
            "bad-signature",
            keys=("current", "retired"),
        ),
        bad(
            "a float written into the statement after signing",
            good.replace(f'"answered_at":{T}'.encode(), f'"answered_at":{T}.0'.encode()),
            "bad-signature",
        ),
        bad(
            "a lone surrogate written into the statement after signing",
            good.replace(b'"cache":"miss"', b'"cache":"\\ud800"'),
            "bad-signature",
        ),
        bad("malformed: unknown verdict (signed)", _sign(_statement(verdict="maybe")), "malformed"),
        bad(
            "malformed: answered_at is a string (signed)",
            _sign(_statement(answered_at=str(T))),
            "malformed",
        ),
        bad(
            "malformed: larger than 64 KiB",
            b'{"statement":{"x":"' + b"a" * 65536 + b'"}}',
            "malformed",
        ),
        *hostile_answers(good, answer),
        *weak_key_bundles(bundle, protocols, cur),
    ]
    return {
        "schema": "converge-vectors/extended-answers/1",
        "description": (
            "The extended format converge-answer/1 (docs/wire-format.md, 'Verifying'): signed "
            "answers (type answer: the fixed prefix, Ed25519 over the statement bytes as "
            "received, the bounds scan and a stock parse of those bytes; verify with the "
            "bundle's signing_keys named in bundle_keys, the "
            "expectations in expect -- null = not checked, except ip, which is checked when "
            "present -- and the documented order of "
            "checks; output result valid + verdict, or rejected + kind). Keys are trusted at "
            "expect.now (a retired key while now <= valid_until); freshness is "
            "|now - answered_at| <= max_skew. Type bundle: a v1 bundle with the optional "
            "protocols, signing_keys and transparency fields -> valid + extended (whether it "
            "offers the format), or invalid; a bundle naming a weak Ed25519 key (of small "
            "order, or y encoded at or above 2^255 - 19, the sign bit ignored) is invalid, "
            "and so is a transparency member naming one key twice (two witnesses, or a "
            "witness and the log, compared as the 32 key bytes)."
        ),
        "notes": {
            "splice": "bytes outside the signed statement: refused whatever they say",
            "hostile": "hostile JSON inside a validly signed statement: refused as malformed or "
            "answered cleanly, the same in every language",
            "bounds": "the bounds scan: at most 32 open levels, integers of at most 15 digits",
            "boundary": "exactly at a limit, or one past it",
            "fingerprint-binding": "the verifier knows which fingerprint it asked about",
            "ip-binding": "expect has an ip member: target.ip must be exactly it (null: the "
            "client named no address)",
        },
        "signing_keys": {name: _bundle_entry(name) for name in ("current", "retired", "other")},
        "test_key_seeds": {
            name: hashlib.sha256(s.encode()).hexdigest() for name, s in SEEDS.items()
        },
        "tests": numbered(cases),
    }


def hostile_answers(good: bytes, answer: Any) -> list[Case]:
    """Validly signed statements holding hostile JSON, and bytes spliced around them."""
    stmt = canonical_json(_statement())
    mism = canonical_json(_statement(verdict="mismatch"))

    def extra(member: str) -> bytes:
        """The statement with ``member`` inserted as its first member, signed."""
        return _sign_raw(b"{" + member.encode() + b"," + stmt[1:])

    def ok(comment: str, raw: bytes, verdict: str = "match", **kw: Any) -> Case:
        kw.setdefault("flags", ["hostile"])
        return answer(comment, raw, result="valid", verdict=verdict, **kw)

    def bad(comment: str, raw: bytes, kind: str = "malformed", **kw: Any) -> Case:
        kw.setdefault("flags", ["hostile"])
        return answer(comment, raw, result="rejected", kind=kind, **kw)

    verdict_first = stmt.replace(b'"verdict":"match"', b'"verdict":"mismatch","verdict":"match"')
    verdict_last = stmt.replace(b'"verdict":"match"', b'"verdict":"match","verdict":"mismatch"')
    deep = 31  # "x" sits at level 2: 31 arrays reach level 32
    return [
        bad(
            "splice: a second statement after the signed one",
            good[:-1] + b',"statement":' + mism + b"}",
            "bad-signature",
            flags=["splice"],
        ),
        bad("a byte after the closing brace", good + b"x", flags=["splice"]),
        bad("a second closing brace", good + b"}", "bad-signature", flags=["splice"]),
        bad("white space after the closing brace", good + b" ", flags=["splice"]),
        bad(
            "white space inside the fixed prefix",
            good.replace(b'"statement":', b'"statement": ', 1),
            "bad-signature",
            flags=["splice"],
        ),
        ok(
            "repeated verdict inside the signed statement: the last counts (match)",
            _sign_raw(verdict_first),
        ),
        ok(
            "repeated verdict inside the signed statement: the last counts (mismatch)",
            _sign_raw(verdict_last),
            "mismatch",
        ),
        bad(
            "a 5000-digit integer inside the signed statement",
            extra('"n":' + "7" * 5000),
            flags=["hostile", "bounds"],
        ),
        ok(
            "a 15-digit integer inside the signed statement",
            extra('"n":' + "9" * 15),
            flags=["hostile", "bounds", "boundary"],
        ),
        bad(
            "a 16-digit integer inside the signed statement",
            extra('"n":1' + "0" * 15),
            flags=["hostile", "bounds", "boundary"],
        ),
        bad(
            "answered_at as a float, signed",
            _sign_raw(stmt.replace(f'"answered_at":{T}'.encode(), f'"answered_at":{T}.0'.encode())),
            flags=["hostile", "bounds"],
        ),
        bad(
            "answered_at in exponent form, signed",
            _sign_raw(stmt.replace(f'"answered_at":{T}'.encode(), b'"answered_at":1795324044e0')),
            flags=["hostile", "bounds"],
        ),
        bad("a number as a member name inside the signed statement", extra("1.5:1")),
        ok("twin: the same name as a string", extra('"1.5":1')),
        ok(
            "nesting: 32 levels open at once inside the signed statement",
            extra('"x":' + "[" * deep + "]" * deep),
            flags=["hostile", "bounds", "boundary"],
        ),
        bad(
            "nesting: 33 levels open at once inside the signed statement",
            extra('"x":' + "[" * (deep + 1) + "]" * (deep + 1)),
            flags=["hostile", "bounds", "boundary"],
        ),
        bad(
            "nesting: 5000 levels inside the signed statement",
            extra('"x":' + "[" * 5000 + "]" * 5000),
            flags=["hostile", "bounds"],
        ),
        ok(
            "brackets and an escaped quote inside strings do not count",
            extra('"x":"' + "[{" * 100 + '\\"]"'),
            flags=["hostile", "bounds"],
        ),
        bad(
            "a lone surrogate as the signed verdict",
            _sign_raw(stmt.replace(b'"verdict":"match"', b'"verdict":"\\ud800"')),
        ),
        ok(
            "twin: an escaped ordinary character in the signed verdict (parsed: match)",
            _sign_raw(stmt.replace(b'"verdict":"match"', b'"verdict":"m\\u0061tch"')),
        ),
        bad("NaN inside the signed statement", extra('"n":NaN')),
        ok("twin: null inside the signed statement", extra('"n":null')),
        bad("a comment inside the signed statement", extra('"n":1/* c */')),
        bad("a trailing comma inside the signed statement", _sign_raw(stmt[:-1] + b",}")),
        bad("a raw control character in a signed string", extra('"x":"a\tb"')),
        bad("the signed statement is an array", _sign_raw(b"[" + stmt + b"]")),
        bad("the signed statement is not JSON", _sign_raw(stmt[:-1])),
        bad(
            "the signed statement's key_id is another key of the bundle",
            _sign_raw(canonical_json(_statement(key_id=_kid("retired")))),
            keys=("current", "retired"),
        ),
        bad(
            "the signature's key id is not a key id at all",
            _sign_raw(stmt, kid="zz"),
            "unknown-key",
        ),
        bad(
            "a quote inside the signature value",
            good.replace(b'"},"statement"', b'x"y"},"statement"', 1),
            flags=["splice"],
        ),
    ]


def canon(comment: str, text: str, out: str | None, flags: list[str] | None = None) -> Case:
    case: Case = {"comment": comment, "flags": flags or [], "type": "canonical", "input": text}
    if out is None:
        case.update(result="invalid", kind="canonical")
    else:
        case.update(result="valid", canonical=out)
    return case


def canonical_cases() -> dict[str, Any]:
    """RFC 8785 serialisation as the notary's signer does it (clients need none of it)."""
    cases = [
        canon(
            "keys sorted, no white space",
            '{"b": 1, "a": [true, false, null], "c": {"z": "x", "y": 2}}',
            '{"a":[true,false,null],"b":1,"c":{"y":2,"z":"x"}}',
        ),
        canon("empty containers", '{"x": {}, "y": []}', '{"x":{},"y":[]}'),
        canon(
            "short escapes and \\u00xx lower case for other controls",
            '["\\u0007\\b\\t\\n\\f\\r\\"\\\\/"]',
            '["\\u0007\\b\\t\\n\\f\\r\\"\\\\/"]',
        ),
        canon(
            "non-ASCII characters are written as UTF-8, not escaped",
            '["\\u00e9\\u2028\\ud83d\\ude00"]',
            '["\u00e9\u2028\U0001f600"]',
        ),
        canon(
            "integers in shortest form; -0 is 0",
            "[0, -0, 10, -12, 9007199254740991]",
            "[0,0,10,-12,9007199254740991]",
        ),
        canon(
            "integers beyond 2**53-1 are outside the format", "[9007199254740992]", None, ["subset"]
        ),
        canon("the format has no floats", "[1.5]", None, ["subset"]),
        canon("exponent notation is a float", "[1e2]", None, ["subset"]),
        canon("keys are ASCII in this format", '{"\\u00e9": 1}', None, ["subset"]),
        canon("a lone surrogate cannot be UTF-8", '["\\ud800"]', None),
        canon(
            "nesting: 17 levels (the innermost at depth 16) is the limit",
            "[" * 17 + "]" * 17,
            "[" * 17 + "]" * 17,
            ["boundary"],
        ),
        canon("nesting: 18 levels is too deep", "[" * 18 + "]" * 18, None, ["boundary"]),
    ]
    return {
        "schema": "converge-vectors/canonical-json/1",
        "description": "RFC 8785 canonical JSON of the subset the notary signs (objects with "
        "ASCII keys, arrays, strings, booleans, null, integers below 2**53): input text -> "
        "canonical text, or invalid. For implementers of a notary's signer; clients verify "
        "the statement bytes as received and never re-serialise (docs/wire-format.md).",
        "notes": {
            "subset": "valid JSON outside the format's canonical subset (floats, integers "
            "beyond 2**53-1, non-ASCII keys): invalid",
            "boundary": "exactly at a limit, or one past it",
        },
        "tests": numbered(cases),
    }
