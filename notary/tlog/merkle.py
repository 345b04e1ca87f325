"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and their verification (pure).

Hashes: ``leaf = SHA-256(0x00 || entry)``, ``node = SHA-256(0x01 || left || right)``; the
hash of the empty tree is SHA-256 of the empty string. A tree of size ``n`` is split at the
largest power of two below ``n`` (RFC 6962, section 2.1).

Proof *generation* needs the hash of any aligned perfect subtree; callers hand in a function
``subtree(level, index)`` returning the hash of leaves ``[index * 2**level, (index + 1) *
2**level)`` (the tile store answers it from its tiles). Proof *verification* is the RFC 9162
algorithm (sections 2.1.3.2 and 2.1.4.2) and needs nothing but the proof.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

SubtreeHash = Callable[[int, int], bytes]


class ProofError(ValueError):
    """A proof that does not prove what it claims (wrong length, wrong hashes, bad sizes)."""


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def range_hash(start: int, end: int, subtree: SubtreeHash) -> bytes:
    """MTH(D[start:end]) for a range that is a node of some tree: ``start`` a multiple of the
    largest power of two not above ``end - start``, as every range in an RFC 6962 proof is."""
    if end <= start:
        raise ValueError("empty range")
    parts: list[bytes] = []
    pos = start
    while pos < end:
        size = 1 << ((end - pos).bit_length() - 1)
        while pos % size:
            size >>= 1
        parts.append(subtree(size.bit_length() - 1, pos // size))
        pos += size
    acc = parts[-1]
    for h in reversed(parts[:-1]):
        acc = node_hash(h, acc)
    return acc


def tree_hash(size: int, subtree: SubtreeHash) -> bytes:
    return EMPTY_ROOT if size == 0 else range_hash(0, size, subtree)


def inclusion_proof(index: int, size: int, subtree: SubtreeHash) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 6962, leaf-side hash first."""
    if not 0 <= index < size:
        raise ValueError(f"index {index} outside a tree of size {size}")
    proof: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            proof.append(range_hash(lo + k, hi, subtree))
            hi = lo + k
        else:
            proof.append(range_hash(lo, lo + k, subtree))
            lo += k
    proof.reverse()
    return proof


def consistency_proof(old: int, new: int, subtree: SubtreeHash) -> list[bytes]:
    """PROOF(old, D[0:new]) of RFC 6962 (empty for ``old == 0`` or ``old == new``)."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} to {new}")
    if old in (0, new):
        return []
    proof: list[bytes] = []
    lo, hi, m, complete = 0, new, old, True
    while True:
        if m == hi - lo:
            if not complete:
                proof.append(range_hash(lo, hi, subtree))
            break
        k = _split(hi - lo)
        if m <= k:
            proof.append(range_hash(lo + k, hi, subtree))
            hi = lo + k
        else:
            proof.append(range_hash(lo, lo + k, subtree))
            lo, m, complete = lo + k, m - k, False
    proof.reverse()
    return proof


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162, 2.1.3.2; raise :class:`ProofError` unless ``leaf`` is at ``index``."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} outside a tree of size {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if len(p) != HASH_SIZE:
            raise ProofError("proof hash of the wrong length")
        if sn == 0:
            raise ProofError("inclusion proof too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof too short")
    if r != root:
        raise ProofError("inclusion proof does not lead to the root")


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162, 2.1.4.2; raise :class:`ProofError` unless tree ``old`` is a prefix of ``new``."""
    if not 0 <= old <= new:
        raise ProofError(f"old size {old} is not within new size {new}")
    if any(len(p) != HASH_SIZE for p in proof):
        raise ProofError("proof hash of the wrong length")
    if old == new:
        if proof:
            raise ProofError("a proof between equal sizes must be empty")
        if old_root != new_root:
            raise ProofError("two different roots for the same size")
        return
    if old == 0:
        if proof:
            raise ProofError("a proof from the empty tree must be empty")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof too short")
    if fr != old_root or sr != new_root:
        raise ProofError("consistency proof does not lead to both roots")


class Frontier:
    """The right edge of an append-only tree: the roots of its perfect subtrees, largest
    first (one per set bit of the size). Appending is O(log n); the root is their fold."""

    __slots__ = ("size", "_nodes")

    def __init__(self, size: int = 0, nodes: Sequence[bytes] = ()) -> None:
        if len(nodes) != bin(size).count("1"):
            raise ValueError("a frontier has one node per set bit of its size")
        self.size = size
        self._nodes = list(nodes)

    @property
    def nodes(self) -> tuple[bytes, ...]:
        return tuple(self._nodes)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Add a leaf hash; return every perfect subtree it completes as (level, index, hash),
        smallest first (level 0 is the leaf itself)."""
        done = [(0, self.size, leaf)]
        h, level, n = leaf, 0, self.size
        while n & 1:
            h = node_hash(self._nodes.pop(), h)
            level += 1
            n >>= 1
            done.append((level, n, h))
        self._nodes.append(h)
        self.size += 1
        return done

    def root(self) -> bytes:
        if not self._nodes:
            return EMPTY_ROOT
        acc = self._nodes[-1]
        for h in reversed(self._nodes[:-1]):
            acc = node_hash(h, acc)
        return acc
