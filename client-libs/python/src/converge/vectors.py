"""Run the shared JSON test vectors (``client-libs/vectors/*.json``) through this library.

Each vector file has a ``schema``; :func:`run_case` computes this implementation's output for
one case and :func:`compare` checks it against the case's expected fields. The conformance
CLI (``python -m converge.conformance vector FILE``) prints these outputs, one JSON line per
case, so that every language is judged by the same comparison. Byte strings are ASCII text
in a field, or hex in the same field name with a ``_hex`` suffix.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cryptography import x509

from .bundle import parse_bundle
from .cachepolicy import cache_decision
from .errors import BadInput
from .extended import AnswerRejected, parse_signing_keys, trusted_keys, verify_answer
from .fingerprint import parse_fingerprint
from .legacy import outcome_from_http, request_bytes, verify_body
from .policy import Policy, decide, settled
from .transparency import (
    HASH_SIZE,
    LogError,
    LogPolicy,
    check_member,
    leaf_hash,
    open_checkpoint,
    parse_log_policy,
    parse_vkey,
    tree_root,
    verify_consistency,
    verify_inclusion,
)

SCHEMAS = (
    "converge-vectors/fingerprints/1",
    "converge-vectors/requests/1",
    "converge-vectors/legacy-signatures/1",
    "converge-vectors/notary-responses/1",
    "converge-vectors/bundles/1",
    "converge-vectors/consensus/1",
    "converge-vectors/cache/1",
    "converge-vectors/extended-answers/1",
    "converge-vectors/config/1",
    "converge-vectors/transparency/1",
)


def _bytes(case: Mapping[str, Any], name: str) -> bytes:
    if f"{name}_hex" in case:
        return bytes.fromhex(case[f"{name}_hex"])
    return str(case[name]).encode("ascii")


def _invalid(e: BadInput) -> dict[str, Any]:
    return {"result": "invalid", "error": e.kind}


def _key(doc: Mapping[str, Any], name: str) -> object:
    pem = doc["certificates"][name]
    return x509.load_pem_x509_certificate(pem.encode("ascii")).public_key()


def run_case(doc: Mapping[str, Any], case: Mapping[str, Any]) -> dict[str, Any]:
    """This implementation's output for one case of the vector file ``doc``."""
    schema = doc["schema"]
    out: dict[str, Any] = {"id": case["id"]}
    try:
        if schema == "converge-vectors/fingerprints/1":
            fp = parse_fingerprint(case["input"])
            out.update(result="valid", algorithm=fp.algorithm, canonical=fp.colon_hex())
        elif schema == "converge-vectors/requests/1":
            fp = parse_fingerprint(case["fingerprint"])
            req = request_bytes(case["host"], case["port"], fp)
            out.update(result="valid", request=req.decode("ascii"))
        elif schema == "converge-vectors/legacy-signatures/1":
            signed = verify_body(_bytes(case, "body"), _key(doc, case["certificate"]))
            out.update(result="valid", signed_bytes=signed.signed_bytes.decode("utf-8"))
        elif schema == "converge-vectors/notary-responses/1":
            wanted = [parse_fingerprint(f) for f in case["fingerprints"]]
            outcome, _ = outcome_from_http(
                _bytes(case, "raw"), wanted, _key(doc, case["certificate"])
            )
            out.update(result=outcome.vote, kind=outcome.kind)
        elif schema == "converge-vectors/bundles/1":
            b = parse_bundle(_bytes(case, "bundle"))
            out.update(
                result="valid",
                name=b.name,
                version=b.version,
                hosts=[
                    {
                        "host": h.host,
                        "ssl_port": h.ssl_port,
                        "http_port": h.http_port,
                        "pin": h.pin.colon_hex(),
                    }
                    for h in b.hosts
                ],
            )
        elif schema == "converge-vectors/consensus/1":
            policy = Policy.parse(case["policy"])
            pending = int(case.get("pending", 0))
            if pending:
                v = settled(policy, case["votes"], pending, stand_aside=case["stand_aside"])
                out["result"] = "unsettled" if v is None else ("trusted" if v else "untrusted")
            else:
                v = decide(policy, case["votes"], stand_aside=case["stand_aside"])
                out["result"] = "trusted" if v else "untrusted"
        elif schema == "converge-vectors/cache/1":
            out["result"] = cache_decision(case["timestamp"], case["now"], case["lifetime"])
        elif schema == "converge-vectors/config/1":
            out.update(_config_case(case))
        elif schema == "converge-vectors/extended-answers/1":
            out.update(_extended_case(doc, case))
        elif schema == "converge-vectors/transparency/1":
            out.update(_transparency_case(doc, case))
        else:
            raise ValueError(f"unknown vector schema {schema!r}")
    except BadInput as e:
        out.update(_invalid(e))
    return out


def _config_case(case: Mapping[str, Any]) -> dict[str, Any]:
    """Create the case's file tree in a fresh directory and load it as the configuration."""
    from .config import load_config

    with tempfile.TemporaryDirectory(prefix="converge-vector-") as tmp:
        root = Path(tmp)
        for rel, text in (case.get("files") or {}).items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        for rel, target in (case.get("links") or {}).items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.symlink_to(target)
        names = sorted(b.name for b in load_config(root).notaries())
    return {"result": "valid", "enabled": names}


def _extended_case(doc: Mapping[str, Any], case: Mapping[str, Any]) -> dict[str, Any]:
    if case["type"] == "bundle":
        try:
            b = parse_bundle(_bytes(case, "bundle"))
        except BadInput as e:
            return {"result": "invalid", "kind": e.kind}
        return {"result": "valid", "extended": b.offers_extended}
    exp = case["expect"]
    keys = parse_signing_keys([doc["signing_keys"][name] for name in case["bundle_keys"]])
    fp = exp.get("fingerprint")
    try:
        v = verify_answer(
            _bytes(case, "answer"),
            trusted_keys(keys, exp["now"]),
            host=exp.get("host"),
            port=exp.get("port"),
            fingerprint=None if fp is None else parse_fingerprint(fp),
            nonce=exp.get("nonce"),
            now=exp["now"],
            max_skew=exp.get("max_skew", 300),
            ip=exp.get("ip"),
            bind_ip="ip" in exp,
        )
    except AnswerRejected as e:
        return {"result": "rejected", "kind": e.kind}
    return {"result": "valid", "verdict": v.verdict}


def _hashes(texts: object, size: int | None = HASH_SIZE) -> list[bytes]:
    if not isinstance(texts, list):
        raise ValueError("a list of hashes")
    out = [base64.b64decode(t, validate=True) for t in texts]
    if size is not None and any(len(h) != size for h in out):
        raise ValueError("a hash of the wrong length")
    return out


def _transparency_case(doc: Mapping[str, Any], case: Mapping[str, Any]) -> dict[str, Any]:
    """One case of ``converge-vectors/transparency/1`` (see the file's description)."""
    t = case["type"]
    if t == "tree":
        leaves = [leaf_hash(base64.b64decode(e)) for e in doc["entries"][: case["size"]]]
        return {"result": "valid", "root": base64.b64encode(tree_root(leaves)).decode()}
    if t == "checkpoint":
        try:
            policy = LogPolicy(
                parse_vkey(case["log"], 0x01),
                None,
                tuple(parse_vkey(w, 0x04) for w in case["witnesses"]),
                case["min_cosignatures"],
            )
            ck = open_checkpoint(case["checkpoint"], policy)
        except LogError as e:
            return {"result": "invalid", "kind": e.kind}
        return {"result": "valid", "size": ck.size, "root": base64.b64encode(ck.root).decode()}
    if t == "answer":
        exp = case["expect"]
        fp = parse_fingerprint(exp.get("sha256") or exp["sha1"])
        member = case["transparency"]
        raw = None if member is None else json.dumps(member, separators=(",", ":")).encode()
        target = {"host": exp["host"], "port": exp["port"], "ip": exp.get("ip")}
        try:
            check_member(raw, parse_log_policy(case["bundle"]), target=target, fingerprint=fp)
        except LogError as e:
            return {"result": "rejected", "kind": e.kind}
        return {"result": "valid"}
    try:
        if t == "inclusion":
            (leaf,) = _hashes([case["leaf"]])
            (root,) = _hashes([case["root"]])
            verify_inclusion(leaf, case["index"], case["size"], _hashes(case["proof"], None), root)
        elif t == "consistency":
            old_root, new_root = _hashes([case["old_root"], case["new_root"]])
            verify_consistency(case["old_size"], case["new_size"], old_root, new_root,
                               _hashes(case["proof"], None))
        else:
            raise ValueError(f"unknown transparency case type {t!r}")
    except ValueError:
        return {"result": "invalid"}
    return {"result": "valid"}


# the output fields of a case type beyond the common ones (converge-vectors/transparency/1:
# ``size`` and ``root`` are inputs of the other types)
_TYPE_FIELDS = {"tree": ("root",), "checkpoint": ("size", "root")}


def compare(case: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """Differences between a case's expected output fields and ``actual`` (empty = pass).

    Compared: ``result``, and each of ``error``, ``kind``, ``algorithm``, ``canonical``,
    ``request``, ``signed_bytes``, ``name``, ``version``,
    ``hosts``, ``verdict``, ``extended``, ``enabled`` that the case states, and for the
    transparency case types ``tree`` its ``root``, ``checkpoint`` its ``size`` and ``root``.
    """
    problems = []
    extra = _TYPE_FIELDS.get(case.get("type", ""), ())
    for key in (
        "result",
        "error",
        "kind",
        "algorithm",
        "canonical",
        "request",
        "signed_bytes",
        "name",
        "version",
        "hosts",
        "verdict",
        "enabled",
        "extended",
        *extra,
    ):
        if key in case and case[key] != actual.get(key):
            problems.append(f"{key}: expected {case[key]!r}, got {actual.get(key)!r}")
    return problems
