"""``notary monitor``: follow a notary's transparency log through its tiles and report what
it finds, as a person and as a machine expect.

One pass:

1. fetch ``/checkpoint``; verify the log's signature and the cosignatures required
   (``--witness``, ``--min-cosignatures``);
2. fetch the rightmost tile of every level, compute the root from them and compare it with the
   checkpoint's; every full tile read later is checked against the hash one level up, so every
   hash the monitor uses is authenticated by the signed root;
3. check the new checkpoint against the last one kept on disk (``--state``): a smaller size,
   or another root for the kept size computed from the new tree's tiles, is a fork or a
   rewritten log (``inconsistent``); a checkpoint from elsewhere (``--peer-checkpoint``) of
   a size the tree covers with another root is a ``split-view``;
4. read the new entries from the entry bundles, each checked against its level-0 hash; an entry
   whose host is watched (``--watch``) is probed from the monitor's own path, and a certificate
   the monitor does not see is reported (``unseen-certificate``);
5. keep the checkpoint when it passed 1-3.

Every problem is an :class:`Event` (``info``, ``warning``, ``alert``, ``error``); nothing
raises out of :meth:`Monitor.run_once`. Exit status: 1 when an alert was raised, else 3 when
the log could not be read, else 0.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from notary.core.fingerprint import CertDigests, colon_hex
from notary.core.target import Target, parse_ip
from notary.errors import NotaryError

from .entry import decode as decode_entry
from .merkle import HASH_SIZE, leaf_hash, node_hash, tree_hash
from .note import (
    MAX_NOTE,
    Checkpoint,
    NoteError,
    Verifier,
    open_checkpoint,
    verify_note,
)
from .tiles import (
    ENTRIES,
    MAX_ENTRY,
    TILE_HEIGHT,
    TILE_WIDTH,
    TileError,
    TilePath,
    decode_bundle,
    split_hashes,
    tile_root,
)

EXIT_OK, EXIT_DETECTED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
KEEP_ROOTS = 256  # sizes and roots remembered for split-view checks

# probe(target) -> the digests of the leaf certificate the monitor sees (raises NotaryError)
Probe = Callable[[Target], Awaitable[CertDigests]]


@dataclass(frozen=True)
class Event:
    severity: str  # info, warning, alert (something detected), error (log unreachable)
    kind: str
    message: str
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.severity.upper():7} {self.kind}: {self.message}"

    def json(self) -> str:
        return json.dumps({"time": int(time.time()), "severity": self.severity,
                           "kind": self.kind, "message": self.message, **self.data},
                          sort_keys=True)


class MonitorError(Exception):
    """A pass that cannot go on; ``kind`` names the event it becomes."""

    severity = "alert"

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class LogUnreachable(MonitorError):
    """The log did not answer (refused, timed out, a server error)."""

    severity = "error"

    def __init__(self, message: str) -> None:
        super().__init__("unreachable", message)


class _Need(Exception):
    def __init__(self, level: int, index: int) -> None:
        self.level, self.index = level, index


@dataclass
class State:
    """What the monitor keeps between passes (``DIR/state.json``)."""

    size: int = 0
    root: bytes = b""
    checkpoint: str = ""
    roots: dict[int, bytes] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, log: Verifier) -> State:
        if not path.exists():
            return cls()
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if doc["log"] != log.vkey():
                raise MonitorError("state", f"{path} follows another log ({doc['log']})")
            roots = {int(k): base64.b64decode(v) for k, v in doc["roots"].items()}
            return cls(int(doc["size"]), base64.b64decode(doc["root"]), doc["checkpoint"],
                       roots)
        except (OSError, ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise MonitorError("state", f"cannot read {path}: {exc}") from exc

    def save(self, path: Path, log: Verifier) -> None:
        keep = sorted(self.roots)[-KEEP_ROOTS:]
        doc = {"log": log.vkey(), "size": self.size,
               "root": base64.b64encode(self.root).decode(), "checkpoint": self.checkpoint,
               "roots": {str(k): base64.b64encode(self.roots[k]).decode() for k in keep}}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)


class Fetcher:
    """GETs under the log's URL, bounded in size and time, with typed errors."""

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base.rstrip("/")

    async def get(self, path: str, limit: int) -> bytes:
        url = f"{self.base}/{path}"
        try:
            async with self.session.get(url) as resp:
                if resp.status >= 500:
                    raise LogUnreachable(f"{url}: HTTP {resp.status}")
                if resp.status != 200:
                    kind = "bad-checkpoint" if path == "checkpoint" else "bad-tile"
                    raise MonitorError(kind, f"{url}: HTTP {resp.status} for a resource the "
                                       "checkpoint implies")
                # read to the end (a single read returns what has arrived so far, which on
                # a busy machine is a part of the body), at most one byte past the bound
                body = bytearray()
                async for chunk in resp.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > limit:
                        break
                data = bytes(body)
        except TimeoutError as exc:
            raise LogUnreachable(f"{url}: no answer in time") from exc
        except aiohttp.ClientError as exc:
            raise LogUnreachable(f"{url}: {exc.__class__.__name__}: {exc}") from exc
        if len(data) > limit:
            raise MonitorError("bad-tile", f"{url}: larger than {limit} bytes")
        return data


class TreeView:
    """The tree of a verified checkpoint, read through its tiles; every hash it returns is
    authenticated by the checkpoint's root."""

    def __init__(self, fetcher: Fetcher, ck: Checkpoint) -> None:
        self.fetcher = fetcher
        self.size = ck.size
        self.root = ck.root
        self._tiles: dict[tuple[int, int], list[bytes]] = {}
        self.fetched = 0

    def _count(self, level: int) -> int:
        return self.size >> (TILE_HEIGHT * level)

    def _width(self, level: int, index: int) -> int:
        return min(TILE_WIDTH, self._count(level) - index * TILE_WIDTH)

    def _hash(self, level: int, pos: int) -> bytes:
        t = pos // TILE_WIDTH
        tile = self._tiles.get((level, t))
        if tile is None:
            raise _Need(level, t)
        return tile[pos % TILE_WIDTH]

    def _subtree(self, level: int, index: int) -> bytes:
        tl, r = divmod(level, TILE_HEIGHT)
        hashes = [self._hash(tl, (index << r) + k) for k in range(1 << r)]
        while len(hashes) > 1:
            hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
        return hashes[0]

    async def _compute(self, fn: Callable[[], bytes]) -> bytes:
        for _ in range(100_000):
            try:
                return fn()
            except _Need as need:
                await self._load(need.level, need.index)
        raise MonitorError("bad-tile", "too many tiles for one computation")

    async def _fetch(self, level: int, index: int) -> list[bytes]:
        width = self._width(level, index)
        tp = TilePath(level, index, width)
        data = await self.fetcher.get(tp.path(), width * HASH_SIZE)
        self.fetched += 1
        try:
            return split_hashes(data, width)
        except TileError as exc:
            raise MonitorError("bad-tile", f"{tp.path()}: {exc}") from exc

    async def _load(self, level: int, index: int) -> None:
        width = self._width(level, index)
        if width <= 0:
            raise MonitorError("bad-tile", f"tile {level}/{index} is outside the tree")
        if width < TILE_WIDTH:
            # the rightmost tile of a level is authenticated by the root (authenticate())
            raise MonitorError("bad-tile", f"partial tile {level}/{index} read before the root")
        hashes = await self._fetch(level, index)
        want = await self._compute(functools.partial(self._hash, level + 1, index))
        if tile_root(hashes) != want:
            raise MonitorError("bad-tile", f"tile {TilePath(level, index, width).path()} "
                               "does not hash to its parent: corrupt tile")
        self._tiles[(level, index)] = hashes

    async def authenticate(self) -> None:
        """Fetch the rightmost partial tile of each level and check that they make the
        checkpoint's root."""
        level = 0
        while self._count(level) > 0:
            full, rest = divmod(self._count(level), TILE_WIDTH)
            if rest:
                self._tiles[(level, full)] = await self._fetch(level, full)
            level += 1
        root = await self._compute(functools.partial(tree_hash, self.size, self._subtree))
        if root != self.root:
            for key in [k for k in self._tiles if self._width(*k) < TILE_WIDTH]:
                del self._tiles[key]
            raise MonitorError("bad-tile", "the tiles do not make the checkpoint's root "
                               "(corrupt tiles, or a checkpoint the tiles do not match)")

    async def root_of(self, size: int) -> bytes:
        """The root of the tree's first ``size`` leaves (``size <= self.size``)."""
        return await self._compute(functools.partial(tree_hash, size, self._subtree))

    async def entries(self, start: int) -> list[tuple[int, bytes]]:
        """Entries ``start..size-1``, each checked against its level-0 hash."""
        out: list[tuple[int, bytes]] = []
        for t in range(start // TILE_WIDTH, (self.size + TILE_WIDTH - 1) // TILE_WIDTH):
            width = self._width(0, t)
            tp = TilePath(ENTRIES, t, width)
            data = await self.fetcher.get(tp.path(), width * (2 + MAX_ENTRY))
            self.fetched += 1
            try:
                bundle = decode_bundle(data, width)
            except TileError as exc:
                raise MonitorError("bad-entries", f"{tp.path()}: {exc}") from exc
            for i, e in enumerate(bundle):
                idx = t * TILE_WIDTH + i
                if idx < start:
                    continue
                want = await self._compute(functools.partial(self._hash, 0, idx))
                if leaf_hash(e) != want:
                    raise MonitorError("bad-entries", f"{tp.path()}: entry {idx} does not "
                                       "hash to its leaf in the tree")
                out.append((idx, e))
        return out


@dataclass
class Settings:
    url: str
    log: Verifier
    witnesses: list[Verifier] = field(default_factory=list)
    min_cosignatures: int = 0
    state_dir: Path | None = None
    watch: list[str] = field(default_factory=list)
    peer_checkpoints: list[Path] = field(default_factory=list)
    timeout: float = 10.0


class Monitor:
    def __init__(self, settings: Settings, probe: Probe | None = None) -> None:
        self.s = settings
        self.probe = probe
        self.watch = {w.lower().rstrip(".") for w in settings.watch}
        self.entries_checked = 0
        self.last_size = 0

    @property
    def state_path(self) -> Path | None:
        return None if self.s.state_dir is None else self.s.state_dir / "state.json"

    async def run_once(self) -> list[Event]:
        events: list[Event] = []
        try:
            timeout = aiohttp.ClientTimeout(total=self.s.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                await self._pass(Fetcher(session, self.s.url), events)
        except MonitorError as exc:
            events.append(Event(exc.severity, exc.kind, exc.message))
        return events

    def _open(self, data: bytes, what: str) -> tuple[Checkpoint, dict[str, int]]:
        try:
            ck, note = open_checkpoint(data, self.s.log)
        except NoteError as exc:
            raise MonitorError("bad-checkpoint", f"{what}: {exc}") from exc
        try:
            signed = verify_note(note, [self.s.log, *self.s.witnesses])
        except NoteError as exc:
            raise MonitorError("bad-cosignature", f"{what}: {exc}") from exc
        return ck, signed

    async def _pass(self, f: Fetcher, events: list[Event]) -> None:
        path = self.state_path
        state = State.load(path, self.s.log) if path is not None else State()
        data = await f.get("checkpoint", MAX_NOTE)
        ck, signed = self._open(data, "checkpoint")
        cosigners = sorted(set(signed) - {self.s.log.name})
        if len(cosigners) < self.s.min_cosignatures:
            raise MonitorError("missing-cosignatures", f"checkpoint of size {ck.size} is "
                               f"cosigned by {len(cosigners)} of the witnesses "
                               f"({', '.join(cosigners) or 'none'}), "
                               f"{self.s.min_cosignatures} required")
        view = TreeView(f, ck)
        await view.authenticate()
        self.last_size = ck.size
        events.append(Event("info", "checkpoint", f"size {ck.size}, root "
                            f"{base64.b64encode(ck.root).decode()}, signed by the log"
                            + (f", cosigned by {', '.join(cosigners)}" if cosigners else ""),
                            {"size": ck.size, "cosigners": cosigners}))
        detected = await self._consistency(view, state, events)
        for p in self.s.peer_checkpoints:
            detected |= await self._peer(view, p, state, events)
        if detected:
            return  # the kept checkpoint stays the last trusted one
        start = state.size if state.checkpoint else 0
        for idx, e in await view.entries(start):
            await self._entry(idx, e, events)
        state.roots[ck.size] = ck.root
        state.size, state.root, state.checkpoint = ck.size, ck.root, data.decode()
        if path is not None:
            state.save(path, self.s.log)

    async def _consistency(self, view: TreeView, state: State, events: list[Event]) -> bool:
        if not state.checkpoint:
            return False
        seen = state.roots.get(view.size)
        if seen is not None and seen != view.root:
            events.append(Event("alert", "inconsistent", f"checkpoint of size {view.size} "
                                "has another root than the one seen before for that size",
                                {"size": view.size}))
            return True
        if view.size < state.size:
            events.append(Event("alert", "inconsistent", f"the log shrank: size {view.size} "
                                f"after size {state.size} (a rewritten or forked log)",
                                {"size": view.size, "kept_size": state.size}))
            return True
        if await view.root_of(state.size) != state.root:
            events.append(Event("alert", "inconsistent", f"checkpoint of size {view.size} is "
                                f"not consistent with size {state.size} seen before (a "
                                "rewritten or forked log)",
                                {"size": view.size, "kept_size": state.size}))
            return True
        if view.size > state.size:
            events.append(Event("info", "consistent", f"size {view.size} extends size "
                                f"{state.size}", {"size": view.size, "kept_size": state.size}))
        return False

    async def _peer(self, view: TreeView, path: Path, state: State,
                    events: list[Event]) -> bool:
        try:
            data = path.read_bytes()[: MAX_NOTE + 1]
        except OSError as exc:
            raise MonitorError("peer-checkpoint", f"cannot read {path}: {exc}") from exc
        peer, _ = self._open(data, f"peer checkpoint {path}")
        if peer.size > view.size:
            seen = state.roots.get(peer.size)
            if seen is not None and seen != peer.root:
                events.append(Event("alert", "split-view", f"peer checkpoint {path} of size "
                                    f"{peer.size} has another root than the one seen",
                                    {"size": peer.size}))
                return True
            events.append(Event("info", "peer-ahead", f"peer checkpoint {path} is of size "
                                f"{peer.size}, beyond the log's {view.size}: checked later",
                                {"size": peer.size}))
            return False
        if await view.root_of(peer.size) != peer.root:
            events.append(Event("alert", "split-view", f"peer checkpoint {path} of size "
                                f"{peer.size} has another root than this log's tree at that "
                                "size: the log shows different views", {"size": peer.size}))
            return True
        events.append(Event("info", "peer-consistent", f"peer checkpoint {path} of size "
                            f"{peer.size} is in this log", {"size": peer.size}))
        return False

    async def _entry(self, idx: int, data: bytes, events: list[Event]) -> None:
        self.entries_checked += 1
        try:
            await self._check_entry(idx, data, events)
        except Exception as exc:  # noqa: BLE001 - one entry's bytes never end the pass
            events.append(Event("alert", "bad-entry", f"entry {idx} could not be checked: "
                                f"{type(exc).__name__}: {exc}", {"index": idx}))

    async def _check_entry(self, idx: int, data: bytes, events: list[Event]) -> None:
        try:
            doc = decode_entry(data)
        except ValueError as exc:
            # the log holds only observations as the notary encodes them; a client checks
            # only some members of an entry, so anything else may be a lie told to clients
            events.append(Event("alert", "bad-entry", f"entry {idx} is not an observation as "
                                f"the notary logs them: {exc}", {"index": idx}))
            return
        host = str(doc["host"]).lower()
        if host not in self.watch or self.probe is None:
            return
        ip = parse_ip(doc["ip"]) if doc.get("ip") else None
        target = Target(host, int(doc["port"]), ip)
        info = {"index": idx, "host": host, "port": target.port, "ip": doc.get("ip"),
                "logged_sha256": doc["sha256"]}
        if ip is not None:
            # what an address some client named presented for the name: any client can name
            # any address (its own server included), so it says nothing about the name's own
            # servers and is neither probed from here nor an alert
            events.append(Event("info", "client-named-address", f"entry {idx} "
                                f"{target.location} at {ip.compressed}: an address a client "
                                f"named presented {doc['sha256']}; not checked (it is not "
                                "the name's own resolution)", info))
            return
        try:
            digests = await self.probe(target)
        except NotaryError as exc:
            events.append(Event("warning", "probe-failed", f"entry {idx} {target.location}: "
                                f"cannot check it from here: {exc.message}", info))
            return
        seen, seen1 = colon_hex(digests.sha256), colon_hex(digests.sha1)
        if seen != doc["sha256"] or seen1 != doc["sha1"]:
            # both digests: a client asking by SHA-1 checks only the entry's sha1
            events.append(Event("alert", "unseen-certificate", f"entry {idx} says "
                                f"{target.location} presents {doc['sha256']} (SHA-1 "
                                f"{doc['sha1']}); from here it presents {seen} (SHA-1 "
                                f"{seen1})", {**info, "seen_sha256": seen,
                                              "logged_sha1": doc["sha1"], "seen_sha1": seen1}))
        else:
            events.append(Event("info", "watched-ok", f"entry {idx} {target.location}: the "
                                "logged certificate is the one seen from here", info))


def exit_status(events: Sequence[Event]) -> int:
    if any(e.severity == "alert" for e in events):
        return EXIT_DETECTED
    if any(e.severity == "error" for e in events):
        return EXIT_UNREACHABLE
    return EXIT_OK


class Metrics:
    """Prometheus metrics of a monitor (served with ``--metrics-listen``)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = CollectorRegistry()
        self.events = Counter("converge_monitor_events", "events reported, by kind and "
                              "severity", ["kind", "severity"], registry=self.registry)
        self.size = Gauge("converge_monitor_log_size", "size of the last checkpoint read",
                          registry=self.registry)
        self.entries = Gauge("converge_monitor_entries_checked", "entries read and checked "
                             "against the tree since start", registry=self.registry)
        self.last_pass = Gauge("converge_monitor_last_pass_timestamp_seconds", "when the last "
                               "pass ended", registry=self.registry)
        self.healthy = Gauge("converge_monitor_last_pass_ok", "1 when the last pass raised no "
                             "alert and read the log", registry=self.registry)

    def serve(self, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        start_http_server(port, addr=host, registry=self.registry)

    def record(self, monitor: Monitor, events: Sequence[Event]) -> None:
        for e in events:
            self.events.labels(e.kind, e.severity).inc()
        self.size.set(monitor.last_size)
        self.entries.set(monitor.entries_checked)
        self.last_pass.set(time.time())
        self.healthy.set(1 if exit_status(events) == EXIT_OK else 0)


async def run(monitor: Monitor, emit: Callable[[Event], None], *, once: bool,
              interval: float, metrics: Metrics | None = None,
              passes: int | None = None) -> int:
    """Pass after pass (one with ``once``); returns the exit status of the last pass."""
    status = EXIT_OK
    done = 0
    while True:
        events = await monitor.run_once()
        for e in events:
            emit(e)
        if metrics is not None:
            metrics.record(monitor, events)
        status = exit_status(events)
        done += 1
        if once or (passes is not None and done >= passes):
            return status
        await asyncio.sleep(interval)
