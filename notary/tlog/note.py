"""Signed notes (c2sp.org/signed-note), checkpoints (c2sp.org/tlog-checkpoint) and Ed25519
cosignatures (c2sp.org/tlog-cosignature), pure.

A note is text ending in a newline, a blank line, then signature lines
``— <name> base64(key id (4 bytes, big-endian) || signature)``. Key ids are
``SHA-256(name || 0x0A || type || public key)[:4]`` with type 0x01 for a log's Ed25519 key
and 0x04 for a witness's timestamped Ed25519 cosignature key; verifier keys are
``<name>+<hex key id>+base64(type || public key)``. A cosignature signs
``cosignature/v1\\ntime <t>\\n`` followed by the checkpoint's note text, and its signature
bytes are the 8-byte big-endian time then the Ed25519 signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from nacl.bindings import crypto_core_ed25519_is_valid_point

from .merkle import HASH_SIZE

ED25519 = 0x01
COSIGNATURE = 0x04
DASH = "\u2014"
MAX_NOTE = 64 * 1024
MAX_SIGNATURES = 64


class NoteError(ValueError):
    """A note, checkpoint, key or signature that is malformed or does not verify."""


def _raw(pub: Ed25519PublicKey) -> bytes:
    return pub.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(name: str, kind: int, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name) or not name.isprintable():
        raise NoteError(f"bad key name {name!r}")


@dataclass(frozen=True)
class Verifier:
    """A verifier key: ``name``, its signature ``kind`` (0x01 or 0x04) and Ed25519 key."""

    name: str
    kind: int
    public: Ed25519PublicKey = field(compare=False)
    raw: bytes = b""

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.kind, self.raw)

    def vkey(self) -> str:
        blob = base64.b64encode(bytes([self.kind]) + self.raw).decode()
        return f"{self.name}+{self.id.hex()}+{blob}"

    @classmethod
    def of(cls, name: str, kind: int, public: Ed25519PublicKey) -> Verifier:
        _check_name(name)
        return cls(name, kind, public, _raw(public))

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        name, sep1, rest = vkey.strip().partition("+")
        hex_id, sep2, blob = rest.partition("+")
        if not sep1 or not sep2:
            raise NoteError("a verifier key is <name>+<hex id>+<base64 key>")
        _check_name(name)
        try:
            data = base64.b64decode(blob, validate=True)
            want = bytes.fromhex(hex_id)
        except (binascii.Error, ValueError) as e:
            raise NoteError("verifier key is not hex and base64") from e
        if len(data) != 33 or data[0] not in (ED25519, COSIGNATURE) or len(want) != 4:
            raise NoteError("only Ed25519 verifier keys (type 0x01 or 0x04) are supported")
        if not crypto_core_ed25519_is_valid_point(data[1:]):
            # Under a key of small order some libraries (OpenSSL among them) accept a made-up
            # signature of any text; the clients refuse such keys in bundles too.
            raise NoteError("verifier key is not a sound Ed25519 key (of small order, not "
                            "in canonical form or not a point of the curve)")
        v = cls(name, data[0], Ed25519PublicKey.from_public_bytes(data[1:]), data[1:])
        if v.id != want:
            raise NoteError(f"verifier key id {hex_id} does not match the key")
        return v


@dataclass(frozen=True)
class Signer:
    """A log's note signer (type 0x01) or a witness's cosigner (type 0x04)."""

    name: str
    key: Ed25519PrivateKey
    kind: int = ED25519

    @property
    def verifier(self) -> Verifier:
        return Verifier.of(self.name, self.kind, self.key.public_key())

    def sign_line(self, text: str, now: int = 0) -> str:
        """The signature line for note ``text``; ``now`` is the cosignature time (0x04)."""
        if self.kind == COSIGNATURE:
            msg = f"cosignature/v1\ntime {now}\n{text}".encode()
            sig = struct.pack(">Q", now) + self.key.sign(msg)
        else:
            sig = self.key.sign(text.encode())
        blob = base64.b64encode(self.verifier.id + sig).decode()
        return f"{DASH} {self.name} {blob}\n"

    def sign(self, text: str, now: int = 0) -> str:
        return text + "\n" + self.sign_line(text, now)


@dataclass(frozen=True)
class Signature:
    name: str
    id: bytes
    sig: bytes
    line: str


@dataclass(frozen=True)
class Note:
    text: str
    signatures: tuple[Signature, ...]


def parse_note(data: bytes) -> Note:
    """Split a signed note into its text and signature lines (nothing is verified)."""
    if len(data) > MAX_NOTE:
        raise NoteError(f"note larger than {MAX_NOTE} bytes")
    try:
        s = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NoteError("note is not UTF-8") from e
    if any(ord(c) < 0x20 and c != "\n" for c in s):
        raise NoteError("note holds control characters")
    cut = s.rfind("\n\n")
    if cut < 0 or not s.endswith("\n"):
        raise NoteError("note has no blank line before its signatures")
    text, sig_block = s[: cut + 1], s[cut + 2 :]
    sigs = []
    for line in sig_block.split("\n")[:-1]:
        if not line.startswith(DASH + " "):
            raise NoteError("malformed signature line")
        name, _, blob = line[2:].rpartition(" ")
        _check_name(name)
        try:
            raw = base64.b64decode(blob, validate=True)
        except binascii.Error as e:
            raise NoteError("signature is not base64") from e
        if len(raw) < 5:
            raise NoteError("signature too short")
        sigs.append(Signature(name, raw[:4], raw[4:], line + "\n"))
    if not sigs:
        raise NoteError("note has no signatures")
    if len(sigs) > MAX_SIGNATURES:
        raise NoteError(f"more than {MAX_SIGNATURES} signatures")
    return Note(text, tuple(sigs))


def _verify_one(v: Verifier, text: str, s: Signature) -> int:
    """Verify one signature by a known key; return the cosignature time (0 for type 0x01)."""
    try:
        if v.kind == COSIGNATURE:
            if len(s.sig) != 72:
                raise NoteError(f"cosignature by {v.name} has the wrong length")
            (t,) = struct.unpack(">Q", s.sig[:8])
            v.public.verify(s.sig[8:], f"cosignature/v1\ntime {t}\n{text}".encode())
            return int(t)
        if len(s.sig) != 64:
            raise NoteError(f"signature by {v.name} has the wrong length")
        v.public.verify(s.sig, text.encode())
        return 0
    except InvalidSignature as e:
        raise NoteError(f"signature by {v.name} does not verify") from e


def verify_note(note: Note, known: list[Verifier]) -> dict[str, int]:
    """Verify every signature by a known key (name and id); unknown ones are ignored.

    Returns ``{key name: cosignature time or 0}`` of the keys that signed. Raises
    :class:`NoteError` when a known key's signature fails, or when no known key signed."""
    by_key = {(v.name, v.id): v for v in known}
    signed: dict[str, int] = {}
    for s in note.signatures:
        v = by_key.get((s.name, s.id))
        if v is not None:
            signed[v.name] = _verify_one(v, note.text, s)
    if not signed:
        raise NoteError("no signature by a known key")
    return signed


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode()]
        return "\n".join([*lines, *self.extensions]) + "\n"


MAX_SIZE = 2**64 - 1  # a tree size is an unsigned 64-bit number (C2SP tlog-checkpoint)


def parse_size(text: str) -> int | None:
    """A tree size as a checkpoint and a witness request write it: ASCII digits, no leading
    zero, at most :data:`MAX_SIZE`; None for anything else (other scripts' digits, which
    ``int()`` would read, and numbers past ``int()``'s digit limit, which it raises on)."""
    if not (0 < len(text) <= 20 and text.isascii() and text.isdigit()) or (
            text != "0" and text.startswith("0")):
        return None
    n = int(text)
    return n if n <= MAX_SIZE else None


def parse_checkpoint(text: str) -> Checkpoint:
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "" or any(not x for x in lines[:-1]):
        raise NoteError("a checkpoint has at least three non-empty lines")
    origin, size_text, root_text = lines[:3]
    size = parse_size(size_text)
    if size is None:
        raise NoteError("checkpoint size is not a decimal number of at most 64 bits")
    try:
        root = base64.b64decode(root_text, validate=True)
    except binascii.Error as e:
        raise NoteError("checkpoint root hash is not base64") from e
    if len(root) != HASH_SIZE:
        raise NoteError("checkpoint root hash is not 32 bytes")
    return Checkpoint(origin, size, root, tuple(lines[3:-1]))


def open_checkpoint(data: bytes, log: Verifier) -> tuple[Checkpoint, Note]:
    """Parse a signed checkpoint and verify the log's signature on it."""
    note = parse_note(data)
    ck = parse_checkpoint(note.text)
    if ck.origin != log.name:
        raise NoteError(f"checkpoint of {ck.origin!r}, expected {log.name!r}")
    if log.name not in verify_note(note, [log]):
        raise NoteError("checkpoint is not signed by the log")
    return ck, note


def parse_witnesses(specs: Sequence[str], log: Verifier | None = None) -> list[Verifier]:
    """Witnesses' cosignature keys as configured (``--witness``). One key may not be named
    twice (nor be the log's): a cosignature does not sign the witness's name, so one key
    would count as two witnesses (or the log would cosign itself)."""
    out = []
    seen = {log.raw} if log is not None else set()
    for spec in specs:
        try:
            v = Verifier.parse(spec)
        except NoteError as exc:
            raise NoteError(f"--witness {spec!r}: {exc}") from exc
        if v.kind != COSIGNATURE:
            raise NoteError(f"--witness {spec!r}: not a cosignature key (type 0x04)")
        if v.raw in seen:
            raise NoteError(f"--witness {spec!r}: its key is already named (by another "
                            "witness or the log)")
        seen.add(v.raw)
        out.append(v)
    return out
