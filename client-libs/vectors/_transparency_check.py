"""The transparency checks of docs/transparency.md restated on the notary's log primitives, so
that ``generate.py`` refuses to write a transparency case whose stated result they do not
give. (Each client library implements the same checks on its own; this is the reference.)"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from notary.tlog.merkle import (
    HASH_SIZE,
    ProofError,
    leaf_hash,
    node_hash,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)
from notary.tlog.note import (
    NoteError,
    Verifier,
    parse_checkpoint,
    parse_note,
    verify_note,
)

MAX_PROOF = 63


class Rejected(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _b64(text: object, size: int | None = None) -> bytes:
    if not isinstance(text, str):
        raise ValueError("not a string")
    data = base64.b64decode(text, validate=True)
    if size is not None and len(data) != size:
        raise ValueError("wrong length")
    return data


def open_checkpoint(note: object, log: str, witnesses: list[str], need: int) -> tuple[int, bytes]:
    """Return (size, root) or raise Rejected(log-checkpoint | log-witness)."""
    try:
        if not isinstance(note, str):
            raise NoteError("not text")
        parsed = parse_note(note.encode())
        ck = parse_checkpoint(parsed.text)
        lv = Verifier.parse(log)
        if ck.origin != lv.name or lv.name not in verify_note(parsed, [lv]):
            raise NoteError("not signed by the log")
    except NoteError as e:
        raise Rejected("log-checkpoint") from e
    ws = [Verifier.parse(w) for w in witnesses]
    try:
        signed = verify_note(parsed, ws) if ws else {}
    except NoteError as e:
        if "no signature by a known key" not in str(e):
            raise Rejected("log-witness") from e
        signed = {}
    if len(signed) < need:
        raise Rejected("log-witness")
    return ck.size, ck.root


def check_answer(case: dict[str, Any]) -> dict[str, Any]:
    tr, exp, bundle = case["transparency"], case["expect"], case["bundle"]
    try:
        if tr is None:
            raise Rejected("log-missing")
        if not isinstance(tr, dict) or not isinstance(tr.get("index"), int) or isinstance(
                tr.get("index"), bool) or tr["index"] < 0 or not isinstance(
                tr.get("proof"), list) or len(tr["proof"]) > MAX_PROOF or not isinstance(
                tr.get("entry"), str) or not isinstance(tr.get("checkpoint"), str):
            raise Rejected("log-proof")
        size, root = open_checkpoint(tr["checkpoint"], bundle["log"],
                                     [w["vkey"] for w in bundle["witnesses"]],
                                     bundle["min_cosignatures"])
        try:
            entry_bytes = _b64(tr["entry"])
            entry = json.loads(entry_bytes)
        except (ValueError, binascii.Error) as e:
            raise Rejected("log-entry") from e
        if not isinstance(entry, dict) or entry.get("type") != "converge-observation/1":
            raise Rejected("log-entry")
        want = exp.get("sha256")
        digest_ok = (entry.get("sha256") == want) if want is not None else (
            entry.get("sha1") == exp.get("sha1"))
        if (entry.get("host") != exp["host"] or entry.get("port") != exp["port"]
                or entry.get("ip") != exp.get("ip") or not digest_ok):
            raise Rejected("log-entry")
        try:
            proof = [_b64(h, HASH_SIZE) for h in tr["proof"]]
            verify_inclusion(leaf_hash(entry_bytes), tr["index"], size, proof, root)
        except (ValueError, binascii.Error, ProofError) as e:
            raise Rejected("log-proof") from e
    except Rejected as r:
        return {"result": "rejected", "kind": r.kind}
    return {"result": "valid"}


def check_case(doc: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    t = case["type"]
    if t == "tree":
        leaves = [leaf_hash(base64.b64decode(e)) for e in doc["entries"]]

        def mth(hs: list[bytes]) -> bytes:  # RFC 6962, 2.1, literally
            if len(hs) <= 1:
                return hs[0] if hs else tree_hash(0, lambda _l, _i: b"")
            k = 1
            while k * 2 < len(hs):
                k *= 2
            return node_hash(mth(hs[:k]), mth(hs[k:]))

        root = mth(leaves[: case["size"]])
        return {"result": "valid", "root": base64.b64encode(root).decode()}
    try:
        if t == "inclusion":
            verify_inclusion(_b64(case["leaf"], HASH_SIZE), case["index"], case["size"],
                             [_b64(h) for h in case["proof"]], _b64(case["root"], HASH_SIZE))
        elif t == "consistency":
            verify_consistency(case["old_size"], case["new_size"], _b64(case["old_root"]),
                               _b64(case["new_root"]), [_b64(h) for h in case["proof"]])
        elif t == "checkpoint":
            try:
                size, root = open_checkpoint(case["checkpoint"], case["log"], case["witnesses"],
                                             case["min_cosignatures"])
            except Rejected as r:
                return {"result": "invalid", "kind": r.kind}
            return {"result": "valid", "size": size, "root": base64.b64encode(root).decode()}
        elif t == "answer":
            return check_answer(case)
    except (ProofError, ValueError, binascii.Error):
        return {"result": "invalid"}
    return {"result": "valid"}
