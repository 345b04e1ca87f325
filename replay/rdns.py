"""Optional reverse DNS for destination addresses: asynchronous, bounded, cached on disk.

Used only when asked for (``replay workload --rdns``), never in tests. Addresses are looked
up once each with at most ``concurrency`` lookups in flight and ``timeout`` seconds each;
at most ``max_addresses`` distinct addresses are looked up per run. Results (including "no
name") are kept in a CSV cache file (``address,name``) so a second run does no lookups.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import socket
from collections.abc import Iterable
from pathlib import Path

from replay.errors import ReplayIOError
from replay.flows import parse_hostname


def load_cache(path: Path) -> dict[str, str | None]:
    if not path.exists():
        return {}
    out: dict[str, str | None] = {}
    try:
        with path.open("r", encoding="utf-8", newline="") as fh:
            for row in csv.reader(fh):
                if len(row) == 2:
                    out[row[0]] = row[1] or None
    except OSError as exc:
        raise ReplayIOError(f"cannot read rDNS cache {path}: {exc}") from exc
    return out


def save_cache(path: Path, cache: dict[str, str | None]) -> None:
    try:
        with path.open("w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            for addr, name in cache.items():
                w.writerow([addr, name or ""])
    except OSError as exc:
        raise ReplayIOError(f"cannot write rDNS cache {path}: {exc}") from exc


async def _lookup(addr: str, timeout: float) -> str | None:
    loop = asyncio.get_running_loop()
    try:
        host, _ = await asyncio.wait_for(
            loop.getnameinfo((addr, 0), socket.NI_NAMEREQD), timeout)
    except (TimeoutError, OSError):
        return None
    with contextlib.suppress(ValueError):
        return parse_hostname(host)
    return None


async def resolve_many(addresses: Iterable[str], cache: dict[str, str | None],
                       concurrency: int = 64, timeout: float = 2.0,
                       max_addresses: int = 100_000) -> dict[str, str | None]:
    """Fill ``cache`` with PTR names for ``addresses`` not already in it; returns it."""
    todo: list[str] = []
    seen: set[str] = set()
    for a in addresses:
        if a in cache or a in seen:
            continue
        seen.add(a)
        todo.append(a)
        if len(todo) >= max_addresses:
            break
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(addr: str) -> None:
        async with sem:
            cache[addr] = await _lookup(addr, timeout)

    await asyncio.gather(*(one(a) for a in todo))
    return cache
