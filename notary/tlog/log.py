"""The notary's transparency log on SQLite: pending entries, sequencing in batches, tiles,
signed checkpoints and proofs (synchronous; the service runs it on the log's own thread).

One file (``transparency.sqlite3`` in the data directory) holds the whole log, apart from the
cache store so that no cache budget or eviction can ever touch it. Tables:

* ``pending``: entries waiting for the next batch, each with a dedupe ``key`` (what was
  probed and the certificate's SHA-256): any worker inserts;
* ``entries``/``tiles``/``checkpoints``/``logged``/``meta``: written only by the sequencer,
  in one transaction per batch: the entries, the growing rightmost tile of every level (a
  tile's bytes only ever grow, so every partial tile once served stays a prefix of the
  full one), the signed checkpoint, key -> index, and the tree's size and right edge;
* ``lease``: which process sequences. Workers and processes sharing the file take turns by
  lease, so there is one log per notary identity and never a fork: the sequence is extended
  only inside ``BEGIN IMMEDIATE`` from the size the database holds.

A batch is durable (committed, WAL, ``synchronous=FULL``) before any answer cites it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .merkle import HASH_SIZE, Frontier, consistency_proof, inclusion_proof, leaf_hash, node_hash
from .note import Checkpoint, Signer
from .tiles import ENTRIES, TILE_HEIGHT, TILE_WIDTH, TilePath, encode_bundle

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS pending (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS entries (idx INTEGER PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS logged (key TEXT PRIMARY KEY, idx INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tiles (
    level INTEGER NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (level, n));
CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, note TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cosignatures (
    size INTEGER NOT NULL, name TEXT NOT NULL, line TEXT NOT NULL, PRIMARY KEY (size, name));
CREATE TABLE IF NOT EXISTS witnesses (url TEXT PRIMARY KEY, size INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1), holder TEXT NOT NULL, until REAL NOT NULL);
"""

# queue an entry unless its key is logged already (or queued: the UNIQUE key ignores it)
_ENQUEUE = ("INSERT OR IGNORE INTO pending (key, data) SELECT ?1, ?2"
            " WHERE NOT EXISTS (SELECT 1 FROM logged WHERE key = ?1)")
MAX_PENDING = 100_000  # entries waiting; beyond it new observations are not queued (counted)


class LogFull(Exception):
    """The pending queue is at its bound; the observation is answered but not logged yet."""


@dataclass(frozen=True)
class Batch:
    size: int  # tree size after the batch
    added: int  # entries added
    checkpoint: bytes  # the signed checkpoint note


def tile_appends(fr: Frontier, data: bytes) -> list[tuple[tuple[int, int], bytes]]:
    """Append one entry to the tree's right edge; return the (tile level, tile index) and hash
    of every tile hash it completes (the leaf itself at level 0, a full tile's root above)."""
    out = []
    for level, index, h in fr.append(leaf_hash(data)):
        if level % TILE_HEIGHT == 0:
            out.append(((level // TILE_HEIGHT, index // TILE_WIDTH), h))
    return out


class TileReader:
    """Tiles, bundles and proofs from any store of tile hashes and entries (the SQLite and the
    Redis log share this)."""

    _tile_cache: dict[tuple[int, int], bytes]

    def _stored_tile(self, level: int, n: int) -> bytes:
        raise NotImplementedError

    def entries(self, start: int, end: int) -> Sequence[bytes]:
        raise NotImplementedError

    def _tile_hashes(self, level: int, n: int) -> bytes:
        key = (level, n)
        got = self._tile_cache.get(key)
        if got is not None:
            return got
        data = self._stored_tile(level, n)
        if len(data) == TILE_WIDTH * HASH_SIZE:  # full tiles never change: keep them
            if len(self._tile_cache) > 4096:
                self._tile_cache.clear()
            self._tile_cache[key] = data
        return data

    def read(self, tp: TilePath, tree_size: int) -> bytes | None:
        """The bytes of a tile or entry bundle, or None when it is not implied by
        ``tree_size`` (a size the log has signed)."""
        level = max(tp.level, 0)  # entry bundles follow level 0
        if tp.index * TILE_WIDTH + tp.width > tree_size // TILE_WIDTH**level:
            return None
        start = tp.index * TILE_WIDTH
        if tp.level == ENTRIES:
            rows = self.entries(start, start + tp.width)
            return encode_bundle(rows) if len(rows) == tp.width else None
        data = self._tile_hashes(tp.level, tp.index)
        need = tp.width * HASH_SIZE
        return data[:need] if len(data) >= need else None

    def subtree(self, level: int, index: int) -> bytes:
        """Hash of leaves [index * 2**level, (index + 1) * 2**level), from the tiles."""
        tl, r = divmod(level, TILE_HEIGHT)
        first = index << r  # position of its first hash within tile level tl
        data = self._tile_hashes(tl, first // TILE_WIDTH)
        pos = first % TILE_WIDTH
        hashes = [data[i * HASH_SIZE : (i + 1) * HASH_SIZE] for i in range(pos, pos + (1 << r))]
        if any(len(h) != HASH_SIZE for h in hashes):
            raise LookupError(f"subtree {level}/{index} is not in the log")
        while len(hashes) > 1:
            hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    def inclusion(self, index: int, size: int) -> list[bytes]:
        return inclusion_proof(index, size, self.subtree)

    def consistency(self, old: int, new: int) -> list[bytes]:
        return consistency_proof(old, new, self.subtree)


class TileLog(TileReader):
    """The log in one SQLite file; safe to share between threads (one lock per instance)
    and between processes (SQLite's locks and the sequencing lease)."""

    def __init__(self, path: Path, origin: str) -> None:
        self.path = path
        self.origin = origin
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                   timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        # queued entries survive a killed process (WAL) but need no fsync each: nothing is
        # promised about them; a batch is fsynced (FULL) before anything cites it
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        row = self._db.execute("SELECT v FROM meta WHERE k = 'origin'").fetchone()
        if row is None:
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('origin', ?)",
                             (origin.encode(),))
        elif bytes(row[0]).decode() != origin:
            raise ValueError(f"{path} holds the log {bytes(row[0]).decode()!r}, not {origin!r}")
        self._tile_cache: dict[tuple[int, int], bytes] = {}

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _tx(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if durable:
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                if durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")
                raise
            self._db.execute("COMMIT")
            if durable:
                self._db.execute("PRAGMA synchronous=NORMAL")

    # ------------------------------------------------------------------ writers (any worker)

    def enqueue(self, key: str, entry: bytes) -> bool:
        """Queue ``entry`` under ``key`` unless that key is logged or queued already.
        Returns whether it was queued. Raises :class:`LogFull` at the bound."""
        return self.enqueue_many([(key, entry)]) == 1

    def enqueue_many(self, items: Sequence[tuple[str, bytes]]) -> int:
        """Queue several entries in one transaction; returns how many were new."""
        with self._tx() as db:
            # ids are handed out in order and the sequencer takes them from the lowest, so
            # the span of ids is the count (an upper bound at worst), read from the ends of
            # the index instead of counting every waiting row
            (n,) = db.execute("SELECT coalesce(max(id) - min(id) + 1, 0) FROM pending"
                              ).fetchone()
            if n + len(items) > MAX_PENDING:
                raise LogFull(f"{n} entries are waiting for the sequencer")
            before = db.total_changes
            db.executemany(_ENQUEUE, items)  # one statement per entry, one Python call
            return db.total_changes - before

    # ------------------------------------------------------------------ the sequencer

    def take_lease(self, holder: str, now: float, ttl: float) -> bool:
        with self._tx() as db:
            row = db.execute("SELECT holder, until FROM lease WHERE id = 1").fetchone()
            if row is not None and row[0] != holder and row[1] > now:
                return False
            db.execute("INSERT OR REPLACE INTO lease VALUES (1, ?, ?)", (holder, now + ttl))
            return True

    def release_lease(self, holder: str) -> None:
        """Give the lease up (a clean stop), so a restarted sequencer need not wait it out."""
        with self._tx() as db:
            db.execute("DELETE FROM lease WHERE id = 1 AND holder = ?", (holder,))

    def _state(self, db: sqlite3.Connection) -> Frontier:
        size = db.execute("SELECT v FROM meta WHERE k = 'size'").fetchone()
        nodes = db.execute("SELECT v FROM meta WHERE k = 'frontier'").fetchone()
        if size is None:
            return Frontier()
        blob = bytes(nodes[0]) if nodes else b""
        return Frontier(int(bytes(size[0])),
                        [blob[i : i + HASH_SIZE] for i in range(0, len(blob), HASH_SIZE)])

    def sequence(self, signer: Signer, max_batch: int = 4096, force: bool = False) -> Batch | None:
        """Append up to ``max_batch`` pending entries and sign a checkpoint, in one
        transaction. With nothing pending, signs a checkpoint only when ``force`` (or when
        the log has none yet)."""
        if signer.name != self.origin:
            raise ValueError("the log key's name must be the log's origin")
        with self._tx(durable=True) as db:
            rows = db.execute("SELECT id, key, data FROM pending ORDER BY id LIMIT ?",
                              (max_batch,)).fetchall()
            have_ck = db.execute("SELECT 1 FROM checkpoints LIMIT 1").fetchone()
            if not rows and have_ck and not force:
                return None
            fr = self._state(db)
            tiles: dict[tuple[int, int], bytearray] = {}
            added = 0
            logged = {k for (k,) in db.execute(
                "SELECT key FROM logged WHERE key IN (SELECT key FROM pending WHERE id <= ?)",
                (rows[-1][0],))} if rows else set()
            new_entries: list[tuple[int, bytes]] = []
            new_keys: list[tuple[str, int]] = []
            for _id, key, data in rows:
                if key in logged:
                    continue
                logged.add(key)
                idx = fr.size
                new_entries.append((idx, data))
                new_keys.append((key, idx))
                for tk, h in tile_appends(fr, bytes(data)):
                    if tk not in tiles:
                        row = db.execute("SELECT data FROM tiles WHERE level = ? AND n = ?",
                                         tk).fetchone()
                        tiles[tk] = bytearray(row[0] if row else b"")
                    tiles[tk] += h
                added += 1
            db.executemany("INSERT INTO entries VALUES (?, ?)", new_entries)
            db.executemany("INSERT INTO logged VALUES (?, ?)", new_keys)
            for (tl, n), blob in tiles.items():
                db.execute("INSERT OR REPLACE INTO tiles VALUES (?, ?, ?)", (tl, n, bytes(blob)))
            if rows:
                db.execute("DELETE FROM pending WHERE id <= ?", (rows[-1][0],))
            text = Checkpoint(self.origin, fr.size, fr.root()).text()
            note = signer.sign(text)
            db.execute("INSERT OR REPLACE INTO checkpoints VALUES (?, ?)", (fr.size, note))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('size', ?)", (str(fr.size).encode(),))
            db.execute("INSERT OR REPLACE INTO meta VALUES ('frontier', ?)",
                       (b"".join(fr.nodes),))
            return Batch(fr.size, added, note.encode())

    # ------------------------------------------------------------------ readers

    def size(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT v FROM meta WHERE k = 'size'").fetchone()
        return int(bytes(row[0])) if row else 0

    def checkpoint(self, size: int | None = None) -> bytes | None:
        with self._lock:
            if size is None:
                row = self._db.execute(
                    "SELECT note FROM checkpoints ORDER BY size DESC LIMIT 1").fetchone()
            else:
                row = self._db.execute("SELECT note FROM checkpoints WHERE size = ?",
                                       (size,)).fetchone()
        return row[0].encode() if row else None

    def index_of(self, key: str) -> int | None:
        with self._lock:
            row = self._db.execute("SELECT idx FROM logged WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def pending(self) -> int:
        with self._lock:
            (n,) = self._db.execute("SELECT count(*) FROM pending").fetchone()
        return int(n)

    def _stored_tile(self, level: int, n: int) -> bytes:
        with self._lock:
            row = self._db.execute("SELECT data FROM tiles WHERE level = ? AND n = ?",
                                   (level, n)).fetchone()
        return bytes(row[0]) if row else b""

    # ------------------------------------------------------------------ witnesses

    def witness_size(self, url: str) -> int:
        """The size of the last checkpoint ``url`` cosigned (0: none yet)."""
        with self._lock:
            row = self._db.execute("SELECT size FROM witnesses WHERE url = ?", (url,)).fetchone()
        return int(row[0]) if row else 0

    def set_witness_size(self, url: str, size: int) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO witnesses VALUES (?, ?)", (url, size))

    def add_cosignature(self, size: int, name: str, line: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO cosignatures VALUES (?, ?, ?)", (size, name, line))

    def cosignatures(self, size: int) -> bytes:
        with self._lock:
            rows = self._db.execute(
                "SELECT line FROM cosignatures WHERE size = ? ORDER BY name", (size,)).fetchall()
        return "".join(r[0] for r in rows).encode()

    def entries(self, start: int, end: int) -> Sequence[bytes]:
        with self._lock:
            rows = self._db.execute(
                "SELECT data FROM entries WHERE idx >= ? AND idx < ? ORDER BY idx",
                (start, end)).fetchall()
        return [bytes(r[0]) for r in rows]
