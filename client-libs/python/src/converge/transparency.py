"""The notary's transparency log, client side (pure, no IO): the bundle's ``transparency``
member and the check of an extended answer's proof of inclusion.

Rules (``docs/transparency.md``, "Clients"; formats: c2sp.org/signed-note,
c2sp.org/tlog-checkpoint, c2sp.org/tlog-cosignature; hashing: RFC 6962, verification as in
RFC 9162):

* Bundle: ``"transparency": {"log": VKEY, "url": URL, "witnesses": [{"name", "vkey"}],
  "min_cosignatures": N}``. A verifier key is ``<name>+<8 hex key id>+<base64 of type byte ||
  32-byte Ed25519 key>``, type 0x01 for the log, 0x04 for a witness's cosignatures; the key id
  is the first 4 bytes of ``SHA-256(name || "\\n" || type || key)``. Anything else in the member
  is a :class:`~converge.errors.BundleError` at load.
* Answer (``docs/wire-format.md``, "Verifying"): after the fixed prefix, the statement ``T``
  ends at the first ``,"transparency":``; the member's value runs from there to the final
  ``}`` (:func:`converge.extended.split_answer`). For a ``match`` answer of a bundle with a log,
  once every check of the statement has passed, :func:`check_member` checks, in this order,
  each failure an :class:`~converge.extended.AnswerRejected` of the kind named:

  1. the member is present, else ``log-missing``;
  2. the bounds scan and the strict parse give an object with string ``checkpoint`` and
     ``entry``, an integer ``index`` >= 0 and a ``proof`` array of at most 63 strings, else
     ``log-proof``;
  3. ``checkpoint`` is a signed note (at most 64 KiB, UTF-8, no control character but
     newline; text, a blank line, lines ``— <name> <base64 of key id || signature>``) whose
     text is a checkpoint (origin, size in decimal without leading zeros, base64 of a 32-byte
     root, optional non-empty extension lines), whose origin is the log key's name and which
     the log key signed (Ed25519 over the text), else ``log-checkpoint``; lines by unknown
     keys are ignored, a repeated line of one key counts once;
  4. at least ``min_cosignatures`` distinct witnesses of the bundle cosigned it (the
     signature is the 8-byte big-endian time then Ed25519 over ``cosignature/v1\\ntime <t>\\n``
     + the text); a listed witness's line that does not verify, or too few, is ``log-witness``;
  5. ``entry`` is base64 of a bounded strict JSON object of type ``converge-observation/1``
     whose ``host``, ``port`` and ``ip`` are the statement's target and whose ``sha256`` (or
     ``sha1``, asked by SHA-1) is the fingerprint asked about, else ``log-entry``;
  6. every proof hash is base64 of 32 bytes and the path proves ``SHA-256(0x00 || entry)`` at
     ``index`` in the checkpoint's tree (RFC 9162, 2.1.3.2), else ``log-proof``.

  Any error the bytes can cause on the way is one of these kinds, never another exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import ed25519
from .errors import BundleError
from .fingerprint import Fingerprint
from .signedjson import loads_verified

LOG_KINDS = ("log-missing", "log-proof", "log-checkpoint", "log-witness", "log-entry")
ENTRY_TYPE = "converge-observation/1"
HASH_SIZE = 32
MAX_PROOF = 63
MAX_NOTE = 64 * 1024
MAX_SIGNATURE_LINES = 100
MAX_WITNESSES = 32
ED25519_TYPE = 0x01
COSIGNATURE_TYPE = 0x04
_SIG_PREFIX = "\u2014 "  # em dash, space
_SIZE = re.compile(r"0|[1-9][0-9]{0,19}")
_HEX8 = re.compile(r"[0-9a-f]{8}")
_ASCII_NAME = re.compile("[\x21-\x2a\x2c-\x7e]+")
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # a C0 or C1 control but newline


class LogError(ValueError):
    """A transparency check failed; ``kind`` is one of :data:`LOG_KINDS`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class NoteKey:
    """A signed-note verifier key: ``name``, 4-byte ``key_id``, Ed25519 key, ``kind`` byte."""

    name: str
    key_id: bytes
    public_key: Ed25519PublicKey = field(compare=False, repr=False)
    kind: int
    vkey: str = ""


def _valid_name(name: str) -> bool:
    if name.isascii():  # the usual case, in one match: printable, no space, no "+"
        return _ASCII_NAME.fullmatch(name) is not None
    return bool(name) and "+" not in name and not any(c.isspace() for c in name) and all(
        c.isprintable() for c in name
    )


def key_id(name: str, kind: int, raw: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + raw).digest()[:4]


def parse_vkey(text: object, kind: int) -> NoteKey:
    """``<name>+<8 hex>+<base64(kind || 32-byte key)>``; :class:`ValueError` on anything else."""
    if not isinstance(text, str) or len(text) > 1024:
        raise ValueError("a verifier key is a short string")
    name, sep, rest = text.partition("+")
    hex_id, sep2, b64 = rest.partition("+")
    if not sep or not sep2 or not _valid_name(name) or not _HEX8.fullmatch(hex_id):
        raise ValueError(f"{text!r} is not <name>+<8 hex>+<base64 key>")
    raw = _b64(b64)
    if len(raw) != 33 or raw[0] != kind:
        raise ValueError(f"{text!r} is not a type 0x{kind:02x} Ed25519 key")
    weak = ed25519.weak_key(raw[1:])
    if weak is not None:
        raise ValueError(f"{text!r}: {weak}")
    if key_id(name, kind, raw[1:]).hex() != hex_id:
        raise ValueError(f"{text!r}: the key id does not match the key")
    return NoteKey(name, bytes.fromhex(hex_id), Ed25519PublicKey.from_public_bytes(raw[1:]), kind,
                   text)


@dataclass(frozen=True, slots=True)
class LogPolicy:
    """A bundle's ``transparency`` member."""

    log: NoteKey
    url: str | None
    witnesses: tuple[NoteKey, ...] = ()
    min_cosignatures: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"log": self.log.vkey}
        if self.url is not None:
            out["url"] = self.url
        out["witnesses"] = [{"name": w.name, "vkey": w.vkey} for w in self.witnesses]
        out["min_cosignatures"] = self.min_cosignatures
        return out


def parse_log_policy(obj: object) -> LogPolicy:
    """The bundle's ``transparency`` member; raises :class:`BundleError`."""
    if not isinstance(obj, dict):
        raise BundleError("transparency must be an object")
    unknown = set(obj) - {"log", "url", "witnesses", "min_cosignatures"}
    if unknown:
        raise BundleError(f"unknown transparency fields: {', '.join(sorted(unknown))}")
    try:
        log = parse_vkey(obj.get("log"), ED25519_TYPE)
    except ValueError as e:
        raise BundleError(f"transparency log key: {e}") from e
    url = obj.get("url")
    if url is not None and (not isinstance(url, str) or not url.startswith("https://")
                            or len(url) > 2048):
        raise BundleError("transparency url must be an https:// URL")
    raw_ws = obj.get("witnesses", [])
    if not isinstance(raw_ws, list) or len(raw_ws) > MAX_WITNESSES:
        raise BundleError(f"transparency witnesses must be a list of at most {MAX_WITNESSES}")
    witnesses = []
    for w in raw_ws:
        if not isinstance(w, dict) or set(w) != {"name", "vkey"}:
            raise BundleError("a witness is an object with name and vkey")
        try:
            key = parse_vkey(w["vkey"], COSIGNATURE_TYPE)
        except ValueError as e:
            raise BundleError(f"witness key: {e}") from e
        if key.name != w["name"]:
            raise BundleError(f"witness name {w['name']!r} is not its key's name")
        witnesses.append(key)
    if len({(w.name, w.key_id) for w in witnesses}) != len(witnesses):
        raise BundleError("a witness is listed twice")
    # One key under two names: a cosignature does not sign the witness's name, so one key
    # would count as two witnesses (or the log would cosign its own checkpoints).
    raws = [k.public_key.public_bytes_raw() for k in (log, *witnesses)]
    if len(set(raws)) != len(raws):
        raise BundleError("transparency names one key twice (two witnesses, or a witness "
                          "and the log)")
    need = obj.get("min_cosignatures", 0)
    if isinstance(need, bool) or not isinstance(need, int) or not 0 <= need <= len(witnesses):
        raise BundleError(f"min_cosignatures must be an integer from 0 to {len(witnesses)}")
    return LogPolicy(log, url, tuple(witnesses), need)


# ---------------------------------------------------------------------------- hashing


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962, 2.1: the root of the leaf hashes ``leaves``."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)  # the largest power of two below the size
    return node_hash(tree_root(leaves[:k]), tree_root(leaves[k:]))


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162, 2.1.3.2; :class:`ValueError` unless ``proof`` puts ``leaf`` at ``index``."""
    if not 0 <= index < size:
        raise ValueError(f"index {index} is not in a tree of {size}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ValueError("a proof hash is not 32 bytes")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ValueError("inclusion proof too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0 or r != root:
        raise ValueError("inclusion proof does not lead to the root")


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162, 2.1.4.2; :class:`ValueError` unless tree ``old`` is a prefix of ``new``."""
    if not 0 <= old <= new:
        raise ValueError(f"old size {old} is not within {new}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ValueError("a proof hash is not 32 bytes")
    if old == new or old == 0:
        if proof or (old == new and old_root != new_root):
            raise ValueError("no proof between these trees")
        return
    path = [old_root, *proof] if old & (old - 1) == 0 else list(proof)
    if not path:
        raise ValueError("consistency proof is empty")
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ValueError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != old_root or sr != new_root:
        raise ValueError("consistency proof does not lead to both roots")


# ---------------------------------------------------------------------------- notes


def _b64(text: object) -> bytes:
    """Standard padded base64; :class:`ValueError` on anything else."""
    if not isinstance(text, str) or not text.isascii():
        raise ValueError("not base64")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise ValueError(f"not base64: {e}") from e


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    cosigned_by: tuple[str, ...] = ()


def _split_note(note: str) -> tuple[str, list[tuple[str, bytes, bytes]]]:
    """The text and the ``(name, key id, signature)`` lines of a signed note."""
    if len(note.encode("utf-8")) > MAX_NOTE:
        raise ValueError(f"note larger than {MAX_NOTE} bytes")
    if _CONTROL.search(note):
        raise ValueError("control character in the note")
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise ValueError("not a signed note")
    text, lines = note[: cut + 1], note[cut + 2 : -1].split("\n")
    if len(lines) > MAX_SIGNATURE_LINES:
        raise ValueError("too many signature lines")
    sigs = []
    for line in lines:
        name, sep, b64 = line.removeprefix(_SIG_PREFIX).partition(" ")
        if not line.startswith(_SIG_PREFIX) or not sep or not _valid_name(name):
            raise ValueError("malformed signature line")
        raw = _b64(b64)
        if len(raw) < 5:
            raise ValueError("signature too short")
        sigs.append((name, raw[:4], raw[4:]))
    return text, sigs


def _parse_checkpoint_text(text: str) -> tuple[str, int, bytes]:
    lines = text[:-1].split("\n")
    if len(lines) < 3 or any(not line for line in lines):
        raise ValueError("a checkpoint has origin, size and root lines")
    if not _SIZE.fullmatch(lines[1]):
        raise ValueError("size is not a decimal without leading zeros")
    root = _b64(lines[2])
    if len(root) != HASH_SIZE:
        raise ValueError("root is not 32 bytes")
    return lines[0], int(lines[1]), root


_VERIFIED: dict[tuple[bytes, bytes, bytes], None] = {}
_VERIFIED_LOCK = threading.Lock()
MAX_VERIFIED = 64


def _verify(key: Ed25519PublicKey, signature: bytes, message: bytes) -> None:
    """:func:`ed25519.verify`, remembering the last triples (raw key, signature, message)
    that verified: a notary returns the same checkpoint, with the same signatures, in every
    answer until its log grows. Raises :class:`InvalidSignature` as that does."""
    triple = (key.public_bytes_raw(), signature, message)
    if triple in _VERIFIED:
        return
    ed25519.verify(key, signature, message)
    with _VERIFIED_LOCK:
        if len(_VERIFIED) >= MAX_VERIFIED:
            _VERIFIED.pop(next(iter(_VERIFIED)))
        _VERIFIED[triple] = None


def _signed_by(key: NoteKey, sigs: Sequence[tuple[str, bytes, bytes]], message: bytes,
               cosignature: bool) -> bool:
    """Whether ``key`` signed (its first line verifies); :class:`ValueError` if its line does
    not verify."""
    for name, kid, sig in sigs:
        if name != key.name or kid != key.key_id:
            continue
        try:
            if cosignature:
                if len(sig) != 8 + 64:
                    raise ValueError("a cosignature is 8 + 64 bytes")
                (t,) = struct.unpack(">Q", sig[:8])
                _verify(key.public_key, sig[8:], b"cosignature/v1\ntime %d\n" % t + message)
            else:
                _verify(key.public_key, sig, message)
        except InvalidSignature as e:
            raise ValueError(f"the signature line of {key.name} does not verify") from e
        return True
    return False


def open_checkpoint(note: object, policy: LogPolicy) -> Checkpoint:
    """Steps 3 and 4: the checkpoint, signed by the log and cosigned by enough of the bundle's
    witnesses; :class:`LogError` ``log-checkpoint`` or ``log-witness`` else."""
    try:
        if not isinstance(note, str):
            raise ValueError("the checkpoint is not text")
        text, sigs = _split_note(note)
        origin, size, root = _parse_checkpoint_text(text)
        if origin != policy.log.name:
            raise ValueError(f"origin {origin!r} is not the log's {policy.log.name!r}")
        message = text.encode("utf-8")
        if not _signed_by(policy.log, sigs, message, cosignature=False):
            raise ValueError("no signature by the log's key")
    except ValueError as e:
        raise LogError("log-checkpoint", f"checkpoint: {e}") from e
    cosigned = []
    for w in policy.witnesses:
        try:
            if _signed_by(w, sigs, message, cosignature=True):
                cosigned.append(w.name)
        except ValueError as e:
            raise LogError("log-witness", f"checkpoint: {e}") from e
    if len(cosigned) < policy.min_cosignatures:
        raise LogError(
            "log-witness",
            f"checkpoint cosigned by {len(cosigned)} of the bundle's witnesses, "
            f"{policy.min_cosignatures} required",
        )
    return Checkpoint(origin, size, root, tuple(cosigned))


# ---------------------------------------------------------------------------- the member


@dataclass(frozen=True, slots=True)
class Proven:
    """What a valid member proves: the entry at ``index`` of the log's tree ``checkpoint``."""

    index: int
    entry: dict[str, Any]
    checkpoint: Checkpoint

    def to_json(self) -> dict[str, Any]:
        ck = self.checkpoint
        return {
            "log": ck.origin,
            "index": self.index,
            "tree_size": ck.size,
            "root": base64.b64encode(ck.root).decode("ascii"),
            "cosigned_by": list(ck.cosigned_by),
            "observed_at": self.entry.get("observed_at"),
        }


def _shape(member: bytes) -> dict[str, Any]:
    """Step 2."""
    try:
        obj = loads_verified(member)
    except (ValueError, RecursionError) as e:
        raise LogError("log-proof", f"transparency member is not bounded strict JSON: {e}") from e
    index = obj.get("index") if isinstance(obj, dict) else None
    proof = obj.get("proof") if isinstance(obj, dict) else None
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("checkpoint"), str)
        or not isinstance(obj.get("entry"), str)
        or isinstance(index, bool)
        or not isinstance(index, int)
        or index < 0
        or not isinstance(proof, list)
        or len(proof) > MAX_PROOF
        or not all(isinstance(p, str) for p in proof)
    ):
        raise LogError("log-proof", "transparency member lacks checkpoint, entry, index or proof")
    return obj


def _entry(text: str, target: Mapping[str, Any], fingerprint: Fingerprint) -> tuple[bytes, dict[
        str, Any]]:
    """Step 5."""
    try:
        raw = _b64(text)
        entry = loads_verified(raw)
    except (ValueError, RecursionError) as e:
        raise LogError("log-entry", f"the logged entry is not base64 of JSON: {e}") from e
    if not isinstance(entry, dict) or entry.get("type") != ENTRY_TYPE:
        raise LogError("log-entry", f"the logged entry is not a {ENTRY_TYPE}")
    for name in ("host", "port", "ip"):
        got, want = entry.get(name), target.get(name)
        if got != want or type(got) is not type(want):
            raise LogError("log-entry", f"the logged entry's {name} is {got!r}, not {want!r}")
    if entry.get(fingerprint.algorithm) != fingerprint.colon_hex():
        raise LogError("log-entry", "the logged entry is about another certificate")
    return raw, entry


def check_member(
    member: bytes | None,
    policy: LogPolicy,
    *,
    target: Mapping[str, Any],
    fingerprint: Fingerprint,
) -> Proven:
    """Check an answer's ``transparency`` member (its raw bytes, ``None`` when absent) for the
    statement's ``target`` (``host``, ``port``, ``ip``) and the ``fingerprint`` asked about;
    raise :class:`LogError` (see the module rules) and nothing else."""
    if member is None:
        raise LogError("log-missing", "the answer carries no proof of inclusion in the log")
    try:
        obj = _shape(member)
        ck = open_checkpoint(obj["checkpoint"], policy)
        entry_bytes, entry = _entry(obj["entry"], target, fingerprint)
        try:
            proof = [_b64(p) for p in obj["proof"]]
            verify_inclusion(leaf_hash(entry_bytes), obj["index"], ck.size, proof, ck.root)
        except ValueError as e:
            raise LogError("log-proof", f"inclusion proof: {e}") from e
    except LogError:
        raise
    except (ValueError, RecursionError, TypeError) as e:  # pragma: no cover - defensive
        raise LogError("log-proof", f"unreadable transparency member: {e}") from e
    return Proven(obj["index"], entry, ck)


__all__ = [
    "LOG_KINDS",
    "Checkpoint",
    "LogError",
    "LogPolicy",
    "NoteKey",
    "Proven",
    "check_member",
    "leaf_hash",
    "node_hash",
    "open_checkpoint",
    "parse_log_policy",
    "parse_vkey",
    "tree_root",
    "verify_consistency",
    "verify_inclusion",
]
