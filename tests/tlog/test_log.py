"""The SQLite tile log: sequencing, tiles across levels, proofs, leases, notes (real SQLite
files; every success with its failing twin)."""

from __future__ import annotations

import base64
import random
import sqlite3
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from notary.tlog import log as tlog_log
from notary.tlog.log import TileLog
from notary.tlog.merkle import (
    Frontier,
    ProofError,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from notary.tlog.note import (
    COSIGNATURE,
    ED25519,
    NoteError,
    Signer,
    Verifier,
    key_id,
    open_checkpoint,
    parse_note,
    verify_note,
)
from notary.tlog.tiles import (
    ENTRIES,
    TileError,
    TilePath,
    decode_bundle,
    parse_path,
    split_hashes,
    tile_root,
    tiles_for_size,
)

ORIGIN = "example.test/converge-log/0001"
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
SIGNER = Signer(ORIGIN, KEY)


def entry(i: int) -> bytes:
    return f'{{"n":{i}}}'.encode()


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[TileLog, list[bytes]]:
    """A log of 65,800 entries (two hash-tile levels above the leaves), sequenced in
    batches of uneven sizes, with the checkpoint of every batch kept."""
    log = TileLog(tmp_path_factory.mktemp("tlog") / "t.sqlite3", ORIGIN)
    leaves = []
    n = 0
    for batch in (1, 255, 1, 300, 4096, 61147):
        items = []
        for _ in range(batch):
            items.append((f"k{n}", entry(n)))
            leaves.append(leaf_hash(entry(n)))
            n += 1
        assert log.enqueue_many(items) == batch
        got = log.sequence(SIGNER, max_batch=100_000)
        assert got is not None and got.size == n and got.added == batch
    return log, leaves


def test_tile_paths_round_trip_and_refuse_malformed() -> None:
    assert TilePath(0, 1234067, 256).path() == "tile/0/x001/x234/067"
    assert TilePath(ENTRIES, 5, 17).path() == "tile/entries/005.p/17"
    for tp in (TilePath(3, 0, 1), TilePath(0, 999, 255), TilePath(ENTRIES, 1000, 256)):
        assert parse_path(tp.path()) == tp
    for bad in ("tile/0/1", "tile/0/x1/001", "tile/64/000", "tile/0/000.p/256", "tile/0/000.p/0",
                "tile/entries/000.p/01", "tile/00/000", "tile/0/000/", "../tile/0/000"):
        with pytest.raises(TileError):
            parse_path(bad)


def test_tiles_for_a_size_as_the_spec_counts_them() -> None:
    hash_tiles = [t for t in tiles_for_size(70_000) if t.level != ENTRIES]
    # 273 full level-0 tiles, one of width 112, one full level-1 tile, one of width 17, one
    # level-2 tile of width 1 (the tlog-tiles example)
    assert sum(t.level == 0 and t.width == 256 for t in hash_tiles) == 273
    assert TilePath(0, 273, 112) in hash_tiles and TilePath(1, 1, 17) in hash_tiles
    assert TilePath(2, 0, 1) in hash_tiles and TilePath(1, 0, 256) in hash_tiles


def test_every_tile_hash_matches_the_leaves(big: tuple[TileLog, list[bytes]]) -> None:
    log, leaves = big
    size = len(leaves)
    level0 = b"".join(log.read(TilePath(0, n, 256), size) or b"" for n in range(size // 256))
    assert level0 == b"".join(leaves[: size // 256 * 256])
    level1 = split_hashes(log.read(TilePath(1, 0, 256), size) or b"", 256)
    for i in (0, 1, 100, 255):
        assert level1[i] == tile_root(leaves[i * 256 : (i + 1) * 256])
    top = log.read(TilePath(2, 0, 1), size)
    assert top is not None and top == tile_root(
        [tile_root(leaves[j * 256 : (j + 1) * 256]) for j in range(i * 0, 256)])
    # twin: nothing beyond the tree, and no width a smaller signed tree cannot have
    assert log.read(TilePath(2, 0, 2), size) is None
    assert log.read(TilePath(0, size // 256, 256), size) is None
    assert log.read(TilePath(1, 1, 1), 65_535) is None


def test_entry_bundles_hold_the_entries(big: tuple[TileLog, list[bytes]]) -> None:
    log, leaves = big
    size = len(leaves)
    bundle = log.read(TilePath(ENTRIES, 1, 256), size)
    assert bundle is not None and decode_bundle(bundle, 256) == [entry(i) for i in
                                                                   range(256, 512)]
    last = size // 256
    partial = log.read(TilePath(ENTRIES, last, size % 256), size)
    assert partial is not None and len(decode_bundle(partial, size % 256)) == size % 256
    with pytest.raises(TileError):
        decode_bundle(bundle[:-1], 256)  # truncated
    with pytest.raises(TileError):
        decode_bundle(bundle, 255)  # one entry too many


def test_proofs_from_the_tiles(big: tuple[TileLog, list[bytes]]) -> None:
    log, leaves = big
    rng = random.Random(7)
    roots = {}
    fr = Frontier()
    sizes = {1, 256, 257, 557, 4653, 65_535, 65_536, 65_537, len(leaves)}
    for n, h in enumerate(leaves, 1):
        fr.append(h)
        if n in sizes:
            roots[n] = fr.root()
    for size in sorted(sizes):
        for i in {0, size - 1, rng.randrange(size)}:
            proof = log.inclusion(i, size)
            verify_inclusion(leaves[i], i, size, proof, roots[size])
            with pytest.raises(ProofError):
                verify_inclusion(leaves[i], i, size, proof, roots[max(sizes)] if size != max(
                    sizes) else roots[1])
    ordered = sorted(sizes)
    for old, new in zip(ordered, ordered[1:], strict=False):
        proof = log.consistency(old, new)
        verify_consistency(old, new, roots[old], roots[new], proof)
        with pytest.raises(ProofError):
            verify_consistency(old, new, roots[new], roots[new], proof)


def test_checkpoints_are_signed_notes_of_the_root(big: tuple[TileLog, list[bytes]]) -> None:
    log, leaves = big
    note = log.checkpoint()
    assert note is not None
    ck, _ = open_checkpoint(note, SIGNER.verifier)
    assert ck.size == len(leaves) and ck.origin == ORIGIN
    other = Signer(ORIGIN, Ed25519PrivateKey.generate()).verifier
    with pytest.raises(NoteError):
        open_checkpoint(note, other)  # same name, another key: unknown, so nothing verifies
    forged = note.replace(str(len(leaves)).encode(), str(len(leaves) + 1).encode(), 1)
    with pytest.raises(NoteError):
        open_checkpoint(forged, SIGNER.verifier)


def test_dedupe_and_the_pending_queue(tmp_path: Path) -> None:
    log = TileLog(tmp_path / "d.sqlite3", ORIGIN)
    assert log.enqueue("a", b"1") and not log.enqueue("a", b"1")  # queued once
    log.sequence(SIGNER)
    assert not log.enqueue("a", b"1")  # logged already
    assert log.index_of("a") == 0 and log.index_of("b") is None
    assert log.sequence(SIGNER) is None  # nothing new: no new checkpoint
    assert log.sequence(SIGNER, force=True) is not None


def test_the_pending_queue_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At MAX_PENDING waiting entries a new one is refused (LogFull); twin: once the
    sequencer has taken them, there is room again."""
    monkeypatch.setattr(tlog_log, "MAX_PENDING", 3)
    log = TileLog(tmp_path / "b.sqlite3", ORIGIN)
    assert log.enqueue_many([("a", b"1"), ("b", b"2")]) == 2
    assert not log.enqueue("a", b"1")  # queued already
    assert log.enqueue("c", b"3")
    with pytest.raises(tlog_log.LogFull):
        log.enqueue("d", b"4")
    assert log.sequence(SIGNER) is not None and log.size() == 3
    assert log.enqueue_many([("d", b"4"), ("a", b"1"), ("e", b"5")]) == 2  # a: logged
    assert log.sequence(SIGNER) is not None and log.size() == 5


def test_another_origin_is_refused(tmp_path: Path) -> None:
    TileLog(tmp_path / "o.sqlite3", ORIGIN).close()
    with pytest.raises(ValueError, match="holds the log"):
        TileLog(tmp_path / "o.sqlite3", "other.test/log")


def test_one_sequencer_at_a_time(tmp_path: Path) -> None:
    a = TileLog(tmp_path / "l.sqlite3", ORIGIN)
    b = TileLog(tmp_path / "l.sqlite3", ORIGIN)
    assert a.take_lease("a", now=100.0, ttl=5)
    assert not b.take_lease("b", now=102.0, ttl=5)
    assert b.take_lease("b", now=106.0, ttl=5)  # a's lease ran out
    assert not a.take_lease("a", now=107.0, ttl=5)


def test_a_batch_is_all_or_nothing(tmp_path: Path) -> None:
    log = TileLog(tmp_path / "x.sqlite3", ORIGIN)
    log.enqueue("a", b"1")
    log.sequence(SIGNER)
    log.enqueue("b", b"2")
    bad = Signer("another.origin/x", KEY)
    with pytest.raises(ValueError):
        log.sequence(bad)
    assert log.size() == 1 and log.pending() == 1  # nothing half-written
    db = sqlite3.connect(tmp_path / "x.sqlite3")
    assert db.execute("SELECT count(*) FROM entries").fetchone() == (1,)


def test_cosignatures_verify_and_tampering_is_caught() -> None:
    witness = Signer("witness.test/w1", Ed25519PrivateKey.generate(), COSIGNATURE)
    text = "example.test/log\n3\n" + "A" * 43 + "=\n"
    note = SIGNER.sign(text) + witness.sign_line(text, 1_700_000_000)
    parsed = parse_note(note.encode())
    got = verify_note(parsed, [witness.verifier, Verifier.parse(SIGNER.verifier.vkey())])
    assert got == {"witness.test/w1": 1_700_000_000, ORIGIN: 0}
    bad = note.replace("\n3\n", "\n4\n")
    with pytest.raises(NoteError):
        verify_note(parse_note(bad.encode()), [witness.verifier])
    assert Verifier.parse(witness.verifier.vkey()).kind == COSIGNATURE
    with pytest.raises(NoteError):
        Verifier.parse(witness.verifier.vkey().replace("+", "+0", 1))


@pytest.mark.parametrize("raw", [b"no blank line\n", b"text\n\n", b"text\n\nnot a line\n",
                                 "text\n\n\u2014 a b\n".encode(), b"t\x01\n\n",
                                 b"\xff\n\n", b"x" * 70_000])
def test_malformed_notes_are_refused(raw: bytes) -> None:
    with pytest.raises(NoteError):
        parse_note(raw)


_P = 2**255 - 19
_WEAK_VERIFIER_KEYS = {
    "identity": (1).to_bytes(32, "little"),
    "order 8": (0x05FC536D880238B13933C6D305ACDFD5F098EFF289F4C345B027B2C28F95E826).to_bytes(
        32, "little"),
    "not canonical": (_P + 3).to_bytes(32, "little"),
    "not a point": (2).to_bytes(32, "little"),
}


def _vkey_of(name: str, kind: int, raw: bytes) -> str:
    blob = base64.b64encode(bytes([kind]) + raw).decode()
    return f"{name}+{key_id(name, kind, raw).hex()}+{blob}"


@pytest.mark.parametrize("what", sorted(_WEAK_VERIFIER_KEYS))
@pytest.mark.parametrize("kind", [ED25519, COSIGNATURE])
def test_weak_verifier_keys_are_refused(what: str, kind: int) -> None:
    """A configured log or witness key of small order (or not a sound encoding) is refused
    when it is read: under the identity, OpenSSL's check (which verify_note uses) accepts
    R = identity, S = 0 as a signature of any text."""
    raw = _WEAK_VERIFIER_KEYS[what]
    with pytest.raises(NoteError, match="not a sound Ed25519 key"):
        Verifier.parse(_vkey_of("weak.test/k", kind, raw))


def test_a_weak_key_would_let_anyone_sign_and_a_sound_one_parses() -> None:
    """Why the refusal matters (a Verifier made without parsing accepts a forgery), and its
    twin: a sound key of either kind, written in the same form, parses and verifies."""
    identity = _WEAK_VERIFIER_KEYS["identity"]
    forged_sig = identity + bytes(32)  # R = identity, S = 0
    text = "example.test/log\n3\n" + "A" * 43 + "=\n"
    weak = Verifier("example.test/log", ED25519, Ed25519PublicKey.from_public_bytes(identity),
                    identity)
    line = f"\u2014 example.test/log {base64.b64encode(weak.id + forged_sig).decode()}\n"
    note = parse_note((text + "\n" + line).encode())
    assert verify_note(note, [weak]) == {"example.test/log": 0}
    for kind in (ED25519, COSIGNATURE):
        sound = Signer("example.test/log", Ed25519PrivateKey.generate(), kind).verifier
        parsed = Verifier.parse(_vkey_of("example.test/log", kind, sound.raw))
        assert parsed == sound and parsed.raw == sound.raw
    assert verify_note(parse_note(SIGNER.sign(text).encode()),
                       [Verifier.parse(SIGNER.verifier.vkey())]) == {ORIGIN: 0}
