"""Chain certificates deduplicated in the SQLite store (schema 6), on real SQLite files.

A CA's intermediate appears in the chain of every site it issued for: stored once, with the
number of chains that refer to it, and deleted in the statement that drops its last
reference. The budget still charges every chain its whole DER (so the accounting bounds the
file from above). Twins: a certificate shared by a chain's old and new versions is kept
while the one only the old version had goes; an old file's whole-blob chains are converted
on first open.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from notary_support import record_statements

from notary.core.fingerprint import CertDigests
from notary.errors import StoreUnavailable
from notary.store.budget import Budget
from notary.store.chain import encode_chain
from notary.store.sqlite import SQLiteStore

NOW = 1_800_000_000
INTERMEDIATE = b"\x30\x82" + b"intermediate CA certificate" * 50
ROOTISH = b"\x30\x82" + b"cross-signed root" * 40


def leaf(n: int) -> bytes:
    return b"\x30\x82" + f"leaf certificate of site {n} ".encode() * 30


def chain(n: int) -> tuple[bytes, ...]:
    return (leaf(n), INTERMEDIATE, ROOTISH)


def file_certs(path: Path) -> dict[bytes, int]:
    with sqlite3.connect(path) as db:
        return {bytes(d): int(r) for d, r in db.execute("SELECT sha256, refs FROM certs")}


async def test_shared_certificates_are_stored_once(tmp_path: Path) -> None:
    store = await SQLiteStore.open(tmp_path / "s.sqlite3")
    try:
        n = 200
        for i in range(n):
            loc = f"site{i}.test:443"
            await store.save_chain(loc, hashlib.sha256(leaf(i)).digest(), chain(i), NOW)
            await store.observe(loc, CertDigests.of(leaf(i)), NOW)
        count, der = await store.stored_certificates()
        whole = sum(len(c) for i in range(n) for c in chain(i))
        print(f"\n{n} chains: {count} certificates, {der} DER bytes stored; {whole} without "
              f"deduplication ({whole / der:.2f}x)")
        assert count == n + 2  # every leaf, and the two shared certificates once
        assert der == sum(map(len, (INTERMEDIATE, ROOTISH))) + sum(len(leaf(i)) for i in range(n))
        refs = file_certs(tmp_path / "s.sqlite3")
        assert refs[hashlib.sha256(INTERMEDIATE).digest()] == n
        for i in (0, 57, n - 1):  # read back whole, in order
            assert await store.get_chain(f"site{i}.test:443",
                                         hashlib.sha256(leaf(i)).digest()) == chain(i)
        # the budget still charges each chain its whole DER
        _, accounted = (await store.usage())[False]
        assert accounted >= whole
    finally:
        await store.close()


async def test_an_evicted_chains_certificates_go_with_it(tmp_path: Path) -> None:
    path = tmp_path / "evict.sqlite3"
    store = await SQLiteStore.open(path, budget=Budget(max_records=1, max_bytes=0))
    try:
        for i in range(3):  # a cap of one record: each new one evicts the one before
            loc = f"site{i}.test:443"
            await store.save_chain(loc, hashlib.sha256(leaf(i)).digest(), chain(i), NOW)
            await store.observe(loc, CertDigests.of(leaf(i)), NOW)
        # in the same statement as the eviction: nothing unreferenced waits for a sweep (a
        # flood of chains of distinct certificates stays within the budget)
        left = file_certs(path)
        assert set(left) == {hashlib.sha256(c).digest() for c in chain(2)}
        assert set(left.values()) == {1}
        assert await store.get_chain("site2.test:443", hashlib.sha256(leaf(2)).digest()) == \
            chain(2)
    finally:
        await store.close()


async def test_saving_a_chain_is_one_statement(tmp_path: Path) -> None:
    """Certificates and chain together: no state in between where a certificate is stored
    without the chain that refers to it (twin of the eviction above: nothing is left)."""
    store = await SQLiteStore.open(tmp_path / "one.sqlite3")
    statements = record_statements(store)
    try:
        await store.save_chain("a.test:443", b"\x01" * 32, chain(1), NOW)
        assert len(statements) == 1, statements
        assert set(file_certs(tmp_path / "one.sqlite3").values()) == {1}
    finally:
        await store.close()


async def test_replacing_and_pruning_chains_keep_the_counts(tmp_path: Path) -> None:
    path = tmp_path / "counts.sqlite3"
    store = await SQLiteStore.open(path)
    try:
        key = hashlib.sha256(leaf(1)).digest()
        await store.save_chain("a.test:443", key, chain(1), NOW)
        await store.save_chain("a.test:443", key, (leaf(1), INTERMEDIATE), NOW + 1)  # replaced
        refs = file_certs(path)
        assert hashlib.sha256(ROOTISH).digest() not in refs  # its last reference went
        assert refs[hashlib.sha256(INTERMEDIATE).digest()] == 1  # kept through the change
        await store.save_chain("b.test:443", key, (leaf(1), leaf(1), INTERMEDIATE), NOW)
        refs = file_certs(path)
        assert refs[key] == 2 and refs[hashlib.sha256(INTERMEDIATE).digest()] == 2
        assert await store.get_chain("b.test:443", key) == (leaf(1), leaf(1), INTERMEDIATE)
    finally:
        await store.close()


async def test_a_chain_naming_a_missing_certificate_is_a_store_failure(tmp_path: Path) -> None:
    path = tmp_path / "missing.sqlite3"
    store = await SQLiteStore.open(path)
    try:
        await store.save_chain("a.test:443", b"\x01" * 32, chain(1), NOW)
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM certs WHERE sha256 = ?",
                       (hashlib.sha256(INTERMEDIATE).digest(),))
        with pytest.raises(StoreUnavailable, match="names 3 certificates, 2 are stored"):
            await store.get_chain("a.test:443", b"\x01" * 32)
    finally:
        await store.close()


async def test_a_schema_5_file_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite3"
    store = await SQLiteStore.open(path)
    await store.observe("a.test:443", CertDigests.of(leaf(1)), NOW)
    await store.close()
    with sqlite3.connect(path) as db:  # as schema 5 stored chains: one whole blob each
        db.execute("DROP TABLE certs")
        db.execute("DROP TABLE chains")
        db.execute("CREATE TABLE chains (location TEXT NOT NULL, sha256 BLOB NOT NULL, "
                   "chain BLOB NOT NULL, seen INTEGER NOT NULL, PRIMARY KEY (location, sha256))"
                   " WITHOUT ROWID")
        for i in (1, 2):
            db.execute("INSERT INTO chains VALUES (?, ?, ?, ?)",
                       (f"site{i}.test:443", bytes([i]) * 32, encode_chain(chain(i)), NOW))
        db.execute("INSERT INTO chains VALUES ('bad.test:443', ?, x'00', 1)", (b"\x09" * 32,))
        db.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    store = await SQLiteStore.open(path)
    try:
        assert await store.get_chain("site1.test:443", b"\x01" * 32) == chain(1)
        assert await store.get_chain("site2.test:443", b"\x02" * 32) == chain(2)
        assert await store.get_chain("bad.test:443", b"\x09" * 32) is None  # dropped
        assert file_certs(path)[hashlib.sha256(INTERMEDIATE).digest()] == 2
        assert (await store.get("a.test:443")) is not None
    finally:
        await store.close()
