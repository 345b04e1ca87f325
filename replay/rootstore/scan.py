"""``replay rootstore scan``: fetch the chains a list of hosts presents, with bounded concurrency.

* Host list: one ``host`` or ``host:port`` (``[v6]:port``) per line, ``#`` comments, at most
  :data:`MAX_HOSTS` lines. Duplicates are scanned once.
* At most ``concurrency`` handshakes at a time (a fixed pool of workers), each bounded by the
  probe timeout; the whole scan is bounded by ``len(hosts) / concurrency * timeout``.
* Output: JSONL, one line per host in completion order::

    {"host", "port", "address", "sha256", "chain": [base64 DER, leaf first], "error"}

  ``error`` is null on success; otherwise ``chain`` is empty and ``error`` says why.
* Chain files (scan output, or ``replay rootstore export``) are read back with
  :func:`read_chains`, bounded by :data:`MAX_HOSTS` lines.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from notary.core.target import Target, normalise_host, parse_ip, parse_port
from notary.errors import BadConfig, BadData, BadInput, TargetRefused, TargetUnreachable
from notary.probe import Prober
from replay.rootstore.analysis import SiteChain

MAX_HOSTS = 1_000_000
MAX_CONCURRENCY = 1024
MAX_LINE = 1024 * 1024


def parse_host_line(line: str) -> tuple[str, int] | None:
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    if text.startswith("[") and "]:" in text:
        host, port = text[1:].split("]:", 1)
        return normalise_host(host), parse_port(port)
    if parse_ip(text) is not None:
        return normalise_host(text), 443
    host, sep, port = text.rpartition(":")
    if sep:
        return normalise_host(host), parse_port(port)
    return normalise_host(text), 443


def parse_hosts(text: str) -> list[tuple[str, int]]:
    """The scan list (see the module rules); raises :class:`BadData` naming the bad line."""
    out: dict[tuple[str, int], None] = {}
    for n, line in enumerate(text.splitlines(), 1):
        try:
            item = parse_host_line(line)
        except BadInput as exc:
            raise BadData(f"hosts line {n}: {exc.message}") from exc
        if item is not None:
            out[item] = None
            if len(out) > MAX_HOSTS:
                raise BadData(f"more than {MAX_HOSTS} hosts")
    return list(out)


async def scan(
    hosts: Iterable[tuple[str, int]],
    prober: Prober,
    concurrency: int,
    emit: Callable[[dict[str, Any]], None],
) -> dict[str, int]:
    """Probe every host with at most ``concurrency`` at once; ``emit`` each result line."""
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise BadConfig(f"concurrency must be 1..{MAX_CONCURRENCY}")
    queue: asyncio.Queue[tuple[str, int]] = asyncio.Queue()
    for item in hosts:
        queue.put_nowait(item)
    counts = {"ok": 0, "failed": 0}

    async def worker() -> None:
        while True:
            try:
                host, port = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            line: dict[str, Any] = {"host": host, "port": port, "address": None,
                                    "sha256": None, "chain": [], "error": None}
            try:
                result = await prober.probe(Target(host, port))
            except (TargetUnreachable, TargetRefused) as exc:
                line["error"] = exc.message
                counts["failed"] += 1
            else:
                chain = result.chain or (result.leaf,)
                line.update(address=result.address, sha256=result.digests.sha256.hex(),
                            chain=[base64.b64encode(c).decode("ascii") for c in chain])
                counts["ok"] += 1
            emit(line)

    workers = [asyncio.create_task(worker()) for _ in range(min(concurrency, queue.qsize()))]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
    return counts


def write_line(fh: TextIO) -> Callable[[dict[str, Any]], None]:
    def emit(line: dict[str, Any]) -> None:
        fh.write(json.dumps(line, separators=(",", ":")) + "\n")

    return emit


def parse_chain_line(line: str) -> SiteChain | None:
    """One JSONL line -> :class:`SiteChain` (``None`` for a failed scan or a blank line)."""
    if not line.strip():
        return None
    if len(line) > MAX_LINE:
        raise BadData("chain line too long")
    try:
        doc = json.loads(line)
        chain = tuple(base64.b64decode(c, validate=True) for c in doc.get("chain") or ())
        host, port = normalise_host(str(doc["host"])), int(doc.get("port", 443))
    except BadInput as exc:
        raise BadData(f"bad host: {exc.message}") from exc
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BadData(f"not a chain line ({exc})") from exc
    return SiteChain(host, port, chain) if chain else None


def read_chains(path: Path) -> tuple[list[SiteChain], int]:
    """Sites with chains from a JSONL file, and the number of lines without one."""
    sites: list[SiteChain] = []
    missing = 0
    try:
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if n > MAX_HOSTS:
                    raise BadData(f"{path}: more than {MAX_HOSTS} lines")
                try:
                    site = parse_chain_line(line)
                except BadData as exc:
                    raise BadData(f"{path}:{n}: {exc.message}") from exc
                if site is None:
                    missing += bool(line.strip())
                else:
                    sites.append(site)
    except OSError as exc:
        raise BadConfig(f"cannot read {path}: {exc.strerror or exc}") from exc
    return sites, missing


__all__ = ["MAX_CONCURRENCY", "MAX_HOSTS", "parse_chain_line", "parse_host_line",
           "parse_hosts", "read_chains", "scan", "write_line"]
