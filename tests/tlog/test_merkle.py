"""Merkle hashing and proofs against a brute-force restatement of RFC 6962, with tampered
twins for every verifier."""

from __future__ import annotations

import hashlib

import pytest

from notary.tlog.merkle import (
    EMPTY_ROOT,
    Frontier,
    ProofError,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    tree_hash,
    verify_consistency,
    verify_inclusion,
)

LEAVES = [f"entry {i}".encode() for i in range(80)]
HASHES = [leaf_hash(e) for e in LEAVES]


def mth(hs: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, literally."""
    if not hs:
        return hashlib.sha256(b"").digest()
    if len(hs) == 1:
        return hs[0]
    k = 1
    while k * 2 < len(hs):
        k *= 2
    return node_hash(mth(hs[:k]), mth(hs[k:]))


def subtree(level: int, index: int) -> bytes:
    return mth(HASHES[index << level : (index + 1) << level])


def test_tree_hash_equals_the_rfc_definition() -> None:
    assert tree_hash(0, subtree) == EMPTY_ROOT
    for n in range(1, 80):
        assert tree_hash(n, subtree) == mth(HASHES[:n])


def test_frontier_root_after_every_append() -> None:
    fr = Frontier()
    for n, h in enumerate(HASHES, 1):
        completed = fr.append(h)
        assert fr.root() == mth(HASHES[:n])
        for level, index, got in completed:
            assert got == subtree(level, index)


def test_every_inclusion_proof_verifies_and_a_changed_one_does_not() -> None:
    for n in range(1, 70):
        root = mth(HASHES[:n])
        for i in range(n):
            proof = inclusion_proof(i, n, subtree)
            verify_inclusion(HASHES[i], i, n, proof, root)
            with pytest.raises(ProofError):
                verify_inclusion(HASHES[(i + 1) % 80], i, n, proof, root)
            if proof:
                bad = [*proof]
                bad[0] = bytes(32)
                with pytest.raises(ProofError):
                    verify_inclusion(HASHES[i], i, n, bad, root)
                with pytest.raises(ProofError):
                    verify_inclusion(HASHES[i], i, n, proof[:-1], root)
            with pytest.raises(ProofError):
                verify_inclusion(HASHES[i], i, n, [*proof, bytes(32)], root)


def test_every_consistency_proof_verifies_and_a_changed_one_does_not() -> None:
    for new in range(1, 50):
        new_root = mth(HASHES[:new])
        for old in range(0, new + 1):
            old_root = mth(HASHES[:old])
            proof = consistency_proof(old, new, subtree)
            verify_consistency(old, new, old_root, new_root, proof)
            if 0 < old < new:
                with pytest.raises(ProofError):
                    verify_consistency(old, new, bytes(32), new_root, proof)
                with pytest.raises(ProofError):
                    verify_consistency(old, new, old_root, bytes(32), proof)
                with pytest.raises(ProofError):
                    verify_consistency(old, new, old_root, new_root, proof[1:])
                # a fork: a tree whose first `old` leaves differ
                forked = mth([leaf_hash(b"forked"), *HASHES[1:new]])
                with pytest.raises(ProofError):
                    verify_consistency(old, new, old_root, forked, proof)


def test_equal_sizes_need_equal_roots() -> None:
    verify_consistency(5, 5, mth(HASHES[:5]), mth(HASHES[:5]), [])
    with pytest.raises(ProofError):
        verify_consistency(5, 5, mth(HASHES[:5]), mth(HASHES[1:6]), [])


@pytest.mark.parametrize("bad", [[b"short"], [bytes(33)]])
def test_proof_hashes_of_the_wrong_length(bad: list[bytes]) -> None:
    with pytest.raises(ProofError, match="wrong length"):
        verify_inclusion(HASHES[0], 0, 2, bad, mth(HASHES[:2]))
    with pytest.raises(ProofError, match="wrong length"):
        verify_consistency(1, 2, HASHES[0], mth(HASHES[:2]), bad)
