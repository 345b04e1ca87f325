"""Tile paths and entry bundles of c2sp.org/tlog-tiles, pure.

A tile at level ``L`` holds up to 256 hashes of subtrees of height ``8 * L``; tile ``N`` of
level ``L`` covers leaves ``[N * 256**(L+1), (N+1) * 256**(L+1))``. Paths are
``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]`` with ``N`` written in 3-digit
groups, all but the last prefixed by ``x`` (1234067 -> ``x001/x234/067``). An entry bundle is
the entries, each prefixed by its big-endian 16-bit length.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .merkle import HASH_SIZE, node_hash

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
MAX_ENTRY = 0xFFFF
ENTRIES = -1  # the "level" of entry bundles in a TilePath


class TileError(ValueError):
    """A tile path, tile or entry bundle that is malformed."""


@dataclass(frozen=True)
class TilePath:
    level: int  # ENTRIES for an entry bundle
    index: int
    width: int  # 1..256; 256 = full

    def path(self) -> str:
        parts = []
        n = self.index
        while True:
            parts.append(f"{n % 1000:03d}")
            n //= 1000
            if n == 0:
                break
        groups = "/".join(["x" + p for p in reversed(parts[1:])] + [parts[0]])
        level = "entries" if self.level == ENTRIES else str(self.level)
        suffix = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"tile/{level}/{groups}{suffix}"


_PATH = re.compile(
    r"tile/(entries|0|[1-9][0-9]?)/((?:x[0-9]{3}/)*[0-9]{3})(?:\.p/([1-9][0-9]{0,2}))?"
)


def parse_path(path: str) -> TilePath:
    m = _PATH.fullmatch(path)
    if m is None:
        raise TileError(f"not a tile path: {path[:80]!r}")
    level = ENTRIES if m.group(1) == "entries" else int(m.group(1))
    if level > 63:
        raise TileError("tile level above 63")
    index = int(m.group(2).replace("x", "").replace("/", ""))
    width = int(m.group(3)) if m.group(3) else TILE_WIDTH
    if m.group(3) and width >= TILE_WIDTH:
        raise TileError("a partial tile has 1 to 255 hashes")
    return TilePath(level, index, width)


def tiles_for_size(size: int) -> Iterator[TilePath]:
    """Every tile (hash tiles and entry bundles, full and the rightmost partial ones) that a
    tree of ``size`` leaves is served as."""
    level = 0
    n = size
    while n > 0:
        full, rest = divmod(n, TILE_WIDTH)
        for i in range(full):
            yield TilePath(level, i, TILE_WIDTH)
            if level == 0:
                yield TilePath(ENTRIES, i, TILE_WIDTH)
        if rest:
            yield TilePath(level, full, rest)
            if level == 0:
                yield TilePath(ENTRIES, full, rest)
        n = full
        level += 1


def partial_tiles(size: int) -> list[TilePath]:
    """The rightmost tile of each level for a tree of ``size`` leaves (full or partial)."""
    out = []
    level, n = 0, size
    while n > 0:
        full, rest = divmod(n, TILE_WIDTH)
        if rest:
            out.append(TilePath(level, full, rest))
            if level == 0:
                out.append(TilePath(ENTRIES, full, rest))
        n = full
        level += 1
    return out


def tile_root(hashes: Sequence[bytes]) -> bytes:
    """The hash of the height-8 subtree whose 256 leaves are a full tile's hashes."""
    if len(hashes) != TILE_WIDTH:
        raise ValueError("only a full tile has a root in the level above")
    level = list(hashes)
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def split_hashes(data: bytes, width: int) -> list[bytes]:
    if len(data) != width * HASH_SIZE:
        raise TileError(f"tile of {len(data)} bytes, expected {width * HASH_SIZE}")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def encode_bundle(entries: Sequence[bytes]) -> bytes:
    out = bytearray()
    for e in entries:
        if len(e) > MAX_ENTRY:
            raise ValueError("an entry is at most 65535 bytes")
        out += struct.pack(">H", len(e)) + e
    return bytes(out)


def decode_bundle(data: bytes, width: int) -> list[bytes]:
    entries = []
    pos = 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise TileError("entry bundle truncated in a length prefix")
        (n,) = struct.unpack_from(">H", data, pos)
        pos += 2
        if pos + n > len(data):
            raise TileError("entry bundle truncated in an entry")
        entries.append(data[pos : pos + n])
        pos += n
    if len(entries) != width:
        raise TileError(f"entry bundle holds {len(entries)} entries, expected {width}")
    return entries
