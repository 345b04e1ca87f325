"""Vector cases for the transparency log (docs/transparency.md): RFC 6962 tree hashes,
inclusion and consistency proofs, signed checkpoints with cosignatures, and the check a client
makes of the ``transparency`` member of an extended answer.

Built with the notary's own log code (``notary.tlog``) from TEST-ONLY Ed25519 keys derived
from fixed seeds, so every byte is the same on every run. The Go reader in tests/tlog/goreader
cross-checks the tree, inclusion, consistency and checkpoint cases with
golang.org/x/mod/sumdb/tlog and note (``goreader vectors``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from _common import Case, numbered
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from notary.core.canonical import canonical_json
from notary.tlog.merkle import (
    Frontier,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
)
from notary.tlog.note import COSIGNATURE, Checkpoint, Signer

SEEDS = {
    "log": "converge test log key",
    "other-log": "converge test log key: another log",
    "witness-1": "converge test witness 1",
    "witness-2": "converge test witness 2",
    "witness-3": "converge test witness 3 (not in any bundle)",
}
ORIGIN = "notary.test/converge-log/0a0b0c0d"
T0 = 1795324044
HOST, PORT = "www.example.org", 443


def _key(name: str) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(hashlib.sha256(SEEDS[name].encode()).digest())


LOG = Signer(ORIGIN, _key("log"))
OTHER_LOG = Signer(ORIGIN, _key("other-log"))
WITNESSES = {
    name: Signer(f"witness.test/{name}", _key(name), COSIGNATURE)
    for name in ("witness-1", "witness-2", "witness-3")
}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _colon(d: bytes) -> str:
    return ":".join(f"{b:02X}" for b in d)


def _entry(i: int, host: str = HOST, port: int = PORT, ip: str | None = None) -> bytes:
    der = f"certificate {i}".encode()
    return canonical_json({
        "type": "converge-observation/1", "host": host, "port": port, "ip": ip,
        "sha256": _colon(hashlib.sha256(der).digest()),
        "sha1": _colon(hashlib.sha1(der).digest()), "observed_at": T0 - 1000 + i,
    })


ENTRIES = [_entry(i, port=PORT + (i % 3)) for i in range(13)]
LEAVES = [leaf_hash(e) for e in ENTRIES]


def _mth(hs: list[bytes]) -> bytes:
    if not hs:
        return hashlib.sha256(b"").digest()
    if len(hs) == 1:
        return hs[0]
    k = 1
    while k * 2 < len(hs):
        k *= 2
    return node_hash(_mth(hs[:k]), _mth(hs[k:]))


def _subtree(level: int, index: int) -> bytes:
    return _mth(LEAVES[index << level : (index + 1) << level])


def _root(n: int) -> bytes:
    fr = Frontier()
    for h in LEAVES[:n]:
        fr.append(h)
    return fr.root()


def _checkpoint(n: int, signer: Signer = LOG, cosigners: tuple[str, ...] = (),
                root: bytes | None = None) -> str:
    text = Checkpoint(ORIGIN, n, root if root is not None else _root(n)).text()
    note = signer.sign(text)
    for w in cosigners:
        note += WITNESSES[w].sign_line(text, T0)
    return note


def _vkey(s: Signer) -> str:
    return s.verifier.vkey()


def tree_cases() -> list[Case]:
    cases: list[Case] = []
    for n in (0, 1, 2, 3, 7, 8, 13):
        cases.append({"comment": f"root of the first {n} entries", "type": "tree", "size": n,
                      "root": _b64(_root(n)), "result": "valid"})
    for n, i in ((1, 0), (2, 1), (7, 3), (8, 7), (13, 0), (13, 12), (13, 9)):
        proof = inclusion_proof(i, n, _subtree)
        cases.append({"comment": f"inclusion of entry {i} in a tree of {n}",
                      "type": "inclusion", "size": n, "index": i, "root": _b64(_root(n)),
                      "leaf": _b64(LEAVES[i]), "proof": [_b64(h) for h in proof],
                      "result": "valid"})
    good = inclusion_proof(5, 13, _subtree)
    for comment, kw in (
        ("a proof hash changed", {"proof": [_b64(bytes(32)), *[_b64(h) for h in good[1:]]]}),
        ("one hash short", {"proof": [_b64(h) for h in good[:-1]]}),
        ("one hash too many", {"proof": [_b64(h) for h in good] + [_b64(bytes(32))]}),
        ("another leaf", {"leaf": _b64(LEAVES[6])}),
        ("index past the tree", {"index": 13}),
        ("another root", {"root": _b64(_root(12))}),
        ("a proof hash of 31 bytes", {"proof": [_b64(bytes(31)), *[_b64(h) for h in good[1:]]]}),
    ):
        case = {"comment": f"inclusion: {comment}", "type": "inclusion", "size": 13, "index": 5,
                "root": _b64(_root(13)), "leaf": _b64(LEAVES[5]),
                "proof": [_b64(h) for h in good], "result": "invalid"}
        case.update(kw)
        cases.append(case)
    for old, new in ((0, 13), (1, 2), (3, 7), (4, 8), (7, 13), (8, 13), (13, 13)):
        proof = consistency_proof(old, new, _subtree)
        cases.append({"comment": f"consistency from {old} to {new}", "type": "consistency",
                      "old_size": old, "new_size": new, "old_root": _b64(_root(old)),
                      "new_root": _b64(_root(new)), "proof": [_b64(h) for h in proof],
                      "result": "valid"})
    forked = _mth([leaf_hash(b"forked"), *LEAVES[1:13]])
    good_c = consistency_proof(7, 13, _subtree)
    cases.append({"comment": "consistency: a forked new tree", "type": "consistency",
                  "old_size": 7, "new_size": 13, "old_root": _b64(_root(7)),
                  "new_root": _b64(forked), "proof": [_b64(h) for h in good_c],
                  "result": "invalid"})
    cases.append({"comment": "consistency: same size, another root", "type": "consistency",
                  "old_size": 13, "new_size": 13, "old_root": _b64(_root(13)),
                  "new_root": _b64(forked), "proof": [], "result": "invalid"})
    return cases


def checkpoint_cases() -> list[Case]:
    def ck(comment: str, note: str, result: str, kind: str | None = None,
           cosigners: int = 0, witnesses: tuple[str, ...] = ("witness-1", "witness-2")) -> Case:
        case: Case = {"comment": comment, "type": "checkpoint", "checkpoint": note,
                      "log": _vkey(LOG),
                      "witnesses": [_vkey(WITNESSES[w]) for w in witnesses],
                      "min_cosignatures": cosigners, "result": result}
        if kind:
            case["kind"] = kind
        else:
            case.update(size=13, root=_b64(_root(13)))
        return case

    plain = _checkpoint(13)
    text_end = plain.index("\n\n") + 1
    return [
        ck("signed by the log", plain, "valid"),
        ck("signed by the log and two witnesses, two required",
           _checkpoint(13, cosigners=("witness-1", "witness-2")), "valid", cosigners=2),
        ck("a witness outside the bundle does not count",
           _checkpoint(13, cosigners=("witness-1", "witness-3")), "invalid", "log-witness",
           cosigners=2),
        ck("one cosignature when two are required",
           _checkpoint(13, cosigners=("witness-2",)), "invalid", "log-witness", cosigners=2),
        ck("the same witness twice counts once",
           _checkpoint(13, cosigners=("witness-1", "witness-1")), "invalid", "log-witness",
           cosigners=2),
        ck("a cosignature over another size",
           _checkpoint(13) + WITNESSES["witness-1"].sign_line(Checkpoint(
               ORIGIN, 12, _root(12)).text(), T0), "invalid", "log-witness", cosigners=1),
        ck("signed by another key under the log's name", _checkpoint(13, OTHER_LOG), "invalid",
           "log-checkpoint"),
        ck("size changed after signing", plain.replace("\n13\n", "\n14\n", 1), "invalid",
           "log-checkpoint"),
        ck("no signature lines", plain[:text_end] + "\n", "invalid", "log-checkpoint"),
        ck("not a note at all", "hello", "invalid", "log-checkpoint"),
        ck("root hash of 31 bytes", LOG.sign(f"{ORIGIN}\n13\n{_b64(bytes(31))}\n"), "invalid",
           "log-checkpoint"),
        ck("another origin, signed by a key of that name",
           Signer("other.test/log", _key("log")).sign(
               Checkpoint("other.test/log", 13, _root(13)).text()), "invalid",
           "log-checkpoint"),
        ck("size with a leading zero", LOG.sign(f"{ORIGIN}\n013\n{_b64(_root(13))}\n"),
           "invalid", "log-checkpoint"),
        ck("an unknown signature beside the log's is ignored",
           plain + _checkpoint(13, OTHER_LOG)[text_end + 1:].replace(ORIGIN, "x.test/y", 1),
           "valid"),
    ]


def answer_cases() -> list[Case]:
    """The ``transparency`` member of a ``match`` answer about ``HOST:PORT`` with the
    certificate of entry ``i``, checked against the bundle's ``transparency``."""
    size = 13

    def member(i: int, **over: Any) -> dict[str, Any]:
        proof = inclusion_proof(i, size, _subtree)
        doc = {"checkpoint": _checkpoint(size, cosigners=("witness-1",)),
               "entry": _b64(ENTRIES[i]), "index": i, "proof": [_b64(h) for h in proof]}
        doc.update(over)
        return doc

    def expect_for(i: int) -> dict[str, Any]:
        e = json.loads(ENTRIES[i])
        return {"host": e["host"], "port": e["port"], "ip": None, "sha256": e["sha256"]}

    bundle = {"log": _vkey(LOG), "witnesses": [{"name": "witness.test/witness-1",
                                                 "vkey": _vkey(WITNESSES["witness-1"])}],
              "min_cosignatures": 1}

    def ans(comment: str, tr: Any, result: str, kind: str | None = None, i: int = 3,
            flags: list[str] | None = None, **exp: Any) -> Case:
        case: Case = {"comment": comment, "flags": flags or [], "type": "answer",
                      "transparency": tr, "expect": {**expect_for(i), **exp},
                      "bundle": bundle, "result": result}
        if kind:
            case["kind"] = kind
        return case

    good = member(3)
    other_entry = _entry(99, port=PORT)
    return [
        ans("a valid proof of the answer's observation", good, "valid"),
        ans("entry 0 of 13", member(0), "valid", i=0),
        ans("entry 12 of 13 (the rightmost)", member(12), "valid", i=12),
        ans("asked by SHA-1: the entry's sha1 must match", good, "valid",
            sha256=None, sha1=json.loads(ENTRIES[3])["sha1"]),
        ans("no transparency member", None, "rejected", "log-missing"),
        ans("the entry is about another port", good, "rejected", "log-entry", port=PORT + 1),
        ans("the entry is about another host", good, "rejected", "log-entry",
            host="www.example.com"),
        ans("the entry is about another certificate", good, "rejected", "log-entry",
            sha256=_colon(bytes(32))),
        ans("the entry names an address the answer does not", good, "rejected", "log-entry",
            ip="192.0.2.1"),
        ans("an entry that is not in the log (its own index and proof reused)",
            {**good, "entry": _b64(other_entry)}, "rejected", "log-proof",
            **{k: v for k, v in json.loads(other_entry).items() if k in ("sha256",)}),
        ans("a proof hash changed", {**good, "proof": [_b64(bytes(32)), *good["proof"][1:]]},
            "rejected", "log-proof"),
        ans("the proof one hash short", {**good, "proof": good["proof"][:-1]}, "rejected",
            "log-proof"),
        ans("index past the checkpoint", {**good, "index": 13}, "rejected", "log-proof"),
        ans("a negative index", {**good, "index": -1}, "rejected", "log-proof"),
        ans("the proof is not base64", {**good, "proof": ["!" * 44, *good["proof"][1:]]},
            "rejected", "log-proof"),
        ans("the entry is not base64", {**good, "entry": "***"}, "rejected", "log-entry"),
        ans("the entry is not JSON", {**good, "entry": _b64(b"{")}, "rejected", "log-entry"),
        ans("the member is not an object", [1, 2], "rejected", "log-proof"),
        ans("the index is a string", {**good, "index": "3"}, "rejected", "log-proof"),
        ans("the checkpoint is signed by another key",
            {**good, "checkpoint": _checkpoint(size, OTHER_LOG, ("witness-1",))}, "rejected",
            "log-checkpoint"),
        ans("the checkpoint lacks the required cosignature",
            {**good, "checkpoint": _checkpoint(size)}, "rejected", "log-witness"),
        ans("the checkpoint's witness is not the bundle's",
            {**good, "checkpoint": _checkpoint(size, cosigners=("witness-3",))}, "rejected",
            "log-witness"),
        ans("the checkpoint of a smaller tree (the proof is for 13)",
            {**good, "checkpoint": _checkpoint(12, cosigners=("witness-1",))}, "rejected",
            "log-proof"),
        ans("a checkpoint with a forged root, validly signed (a lying log)",
            {**good, "checkpoint": _checkpoint(size, cosigners=("witness-1",),
                                               root=_root(12))}, "rejected", "log-proof"),
    ]


def transparency() -> dict[str, Any]:
    cases = tree_cases() + checkpoint_cases() + answer_cases()
    for c in cases:
        c.setdefault("flags", [])
    return {
        "schema": "converge-vectors/transparency/1",
        "description": (
            "The transparency log (docs/transparency.md). type tree: RFC 6962 root of the "
            "first `size` entries of `entries`; type inclusion / consistency: RFC 9162 "
            "verification of a proof (valid or invalid); type checkpoint: a signed note "
            "(c2sp.org/tlog-checkpoint) checked against the log's verifier key `log` and "
            "the bundle's `witnesses` with at least `min_cosignatures` valid cosignatures "
            "(c2sp.org/tlog-cosignature, Ed25519, type 0x04) -> valid + size + root, or "
            "invalid + kind; type answer: the `transparency` member of a verified `match` "
            "answer (null: absent) checked against `bundle` (its transparency member) and "
            "`expect` (the answer's target host, port, ip, and the asked fingerprint as sha256 "
            "or sha1, colon hex) -> valid, or rejected + kind. Hashes and signatures are "
            "standard base64."
        ),
        "notes": {},
        "entries": [_b64(e) for e in ENTRIES],
        "keys": {"log": _vkey(LOG), "other-log": _vkey(OTHER_LOG),
                 **{n: _vkey(w) for n, w in WITNESSES.items()}},
        "test_key_seeds": {n: hashlib.sha256(s.encode()).hexdigest() for n, s in SEEDS.items()},
        "tests": numbered(cases),
    }
