"""The transparency log inside a running notary: queueing observations, the sequencer,
witness cosignatures, proofs for answers, and the read-only ``/log/`` resources.

Rules:

* The log never blocks or fails an answer. Queueing is fire-and-forget on the log's own
  thread; a database or witness failure is counted and reported once per minute at WARNING
  (with a recovery line), and the notary keeps answering. Only a client that asks for a proof
  waits, at most ``proof_wait`` seconds, for its entry to be sequenced.
* One sequencer per log file: every worker runs the loop, and the one holding the lease in
  the database sequences (``log.TileLog``); the others follow the checkpoints it commits.
* A batch is committed before its checkpoint is served, cited or sent to witnesses. Each
  witness gets every new checkpoint with a consistency proof from the last size it
  cosigned (c2sp.org/tlog-witness); its cosignature line is kept with that checkpoint and
  served with it. A batch waits at most ``cosign_wait`` for its witnesses before its
  checkpoint is served; cosignatures that come later (within ``witness_timeout``) are added
  to it then. A witness that is down or slow is skipped for that checkpoint, and one whose
  previous submission is still in flight is not sent another until it answers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import redis

from .entry import Entry
from .log import LogFull, TileLog
from .note import Signer, Verifier, parse_note, verify_note
from .redislog import RedisTileLog
from .tiles import TilePath

log = logging.getLogger("notary.tlog")

REPORT_PERIOD = 60.0
RECORD_DELAY = 0.02  # seconds observations gather before one write to the log's store
# what the log's store can raise: SQLite or Redis errors, a full or gone disk, a missing tile,
# a Redis batch that lost its race (WatchError is a RedisError)
DB_ERRORS = (sqlite3.Error, redis.RedisError, OSError, LookupError, RuntimeError)


@dataclass(frozen=True)
class Witness:
    url: str  # submission prefix; POST <url>/add-checkpoint
    verifier: Verifier  # its cosignature key (type 0x04)


@dataclass
class LogSettings:
    interval: float = 1.0  # seconds between batches
    max_batch: int = 4096
    proof_wait: float = 3.0  # seconds an answer waits for its entry to be sequenced
    witnesses: list[Witness] = field(default_factory=list)
    witness_timeout: float = 5.0
    cosign_wait: float = 1.0  # seconds a batch waits for cosignatures before it is served
    coalesce: float = 0.05  # seconds answers waiting for proofs gather before a batch
    lease_ttl: float = 5.0


class _Reporter:
    """First error text at WARNING, then at most one line per period with the count, and a
    recovery line when it works again."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.count = 0
        self._failing = False
        self._next = float("-inf")
        self._clock = clock

    def failed(self, exc: BaseException) -> None:
        self.count += 1
        now = self._clock()
        if not self._failing or now >= self._next:
            log.warning("%s failed (%d so far): %s", self.what, self.count, exc)
            self._next = now + REPORT_PERIOD
        self._failing = True

    def ok(self) -> None:
        if self._failing:
            log.warning("%s works again", self.what)
        self._failing = False


class TransparencyLog:
    def __init__(self, opener: Callable[[], TileLog | RedisTileLog], signer: Signer,
                 settings: LogSettings) -> None:
        """``opener`` makes the backend on the log's thread: ``TileLog`` (SQLite, one host)
        or ``RedisTileLog`` (every node sharing Redis)."""
        self._opener = opener
        self.signer = signer
        self.settings = settings
        self.origin = signer.name
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tlog")
        self._log: TileLog | RedisTileLog | None = None
        self._task: asyncio.Task[None] | None = None
        self._holder = f"{os.getpid()}-{id(self):x}"
        self._sequenced = asyncio.Event()
        self._kick = asyncio.Event()  # an answer waits for its proof: sequence soon
        self._known: OrderedDict[str, int] = OrderedDict()  # entry key -> index (memo)
        self._queued: set[str] = set()
        # keys the store holds (queued or logged): a re-probe that sees the same certificate
        # again costs no store round trip (bounded like _known)
        self._stored: OrderedDict[str, None] = OrderedDict()
        self._batch: list[tuple[str, bytes]] = []  # queued by record(), not yet written
        self._flushing = False
        self._flush_soon: asyncio.TimerHandle | None = None
        self._checkpoint: bytes | None = None  # latest, with cosignatures
        self._size = 0
        self._proofs: OrderedDict[tuple[int, int], tuple[list[bytes], bytes]] = OrderedDict()
        self._pending_tasks: set[asyncio.Future[Any]] = set()
        self.db_errors = _Reporter("transparency log database")
        self.witness_errors = _Reporter("witness submission")
        self.dropped = 0
        self._session: aiohttp.ClientSession | None = None
        self._submitting: set[str] = set()  # witnesses with a submission in flight

    @property
    def verifier(self) -> Verifier:
        return self.signer.verifier

    @property
    def size(self) -> int:
        return self._size

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def start(self) -> None:
        """Open the log and start the sequencer loop. A store that cannot be reached (Redis
        down, a disk error) degrades the log and is retried every interval; a store holding
        another log (``ValueError``) is a configuration error and stops the start."""
        await self._open()
        if self._log is not None:
            await self._step()
        self._task = asyncio.create_task(self._loop())

    async def _open(self) -> None:
        try:
            self._log = await self._run(self._opener)
            self.db_errors.ok()
        except DB_ERRORS as exc:
            self.db_errors.failed(exc)

    async def stop(self) -> None:
        if self._flush_soon is not None:  # what was recorded is written before the log closes
            self._start_flush()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._pending_tasks:
            await asyncio.gather(*self._pending_tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        if self._log is not None:
            with contextlib.suppress(*DB_ERRORS):  # a clean stop frees the lease
                await self._run(self._log.release_lease, self._holder)
            await self._run(self._log.close)
        self._pool.shutdown(wait=True)

    # ------------------------------------------------------------------ queueing

    def record(self, entry: Entry) -> None:
        """Queue an observation (fire and forget; never raises).

        Entries recorded within :data:`RECORD_DELAY` seconds, or while a write is in flight,
        go to the store together (one transaction, one hand-off to the log's thread), so a
        busy notary pays one store round trip per batch rather than per probe. The
        sequencer writes what is waiting before it sequences, so the delay never makes a
        batch miss an entry recorded before it."""
        key = entry.key
        if (key in self._known or key in self._queued or key in self._stored
                or self._log is None):
            return
        self._queued.add(key)
        self._batch.append((key, entry.encode()))
        if not self._flushing and self._flush_soon is None:
            self._flush_soon = asyncio.get_running_loop().call_later(
                RECORD_DELAY, self._start_flush)

    def _start_flush(self) -> None:
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        if not self._flushing and self._batch:
            self._flushing = True
            fut = asyncio.ensure_future(self._flush())
            self._pending_tasks.add(fut)
            fut.add_done_callback(self._pending_tasks.discard)

    async def _flush(self) -> None:
        try:
            while self._batch and self._log is not None:
                items, self._batch = self._batch, []
                await self._enqueue(items)
        finally:
            self._flushing = False

    async def _enqueue(self, items: list[tuple[str, bytes]]) -> None:
        assert self._log is not None
        try:
            await self._run(self._log.enqueue_many, items)
            self.db_errors.ok()
        except LogFull as exc:
            self.dropped += len(items)
            self._queued.difference_update(k for k, _ in items)
            self.db_errors.failed(exc)
            return
        except DB_ERRORS as exc:  # the log degrades
            self._queued.difference_update(k for k, _ in items)
            self.db_errors.failed(exc)
            return
        for k, _ in items:
            self._stored[k] = None
        while len(self._stored) > 100_000:
            self._stored.popitem(last=False)

    # ------------------------------------------------------------------ sequencing

    async def _loop(self) -> None:
        while True:
            # a batch every interval, or sooner when an answer waits for its proof: the
            # answers waiting within ``coalesce`` seconds share one batch (at most
            # 1 / coalesce fsynced batches a second however many answers wait)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.settings.interval)
            if self._kick.is_set():
                await asyncio.sleep(self.settings.coalesce)
                self._kick.clear()
            if self._log is None:
                await self._open()
            if self._log is not None:
                await self._step()

    async def _step(self) -> None:
        assert self._log is not None
        tl = self._log
        if self._flush_soon is not None:  # what was recorded goes in before sequencing
            self._flush_soon.cancel()
            self._flush_soon = None
            if not self._flushing:
                self._flushing = True
                await self._flush()
        try:
            held = await self._run(tl.take_lease, self._holder, time.time(),
                                   self.settings.lease_ttl)
            batch = None
            if held:
                batch = await self._run(tl.sequence, self.signer, self.settings.max_batch)
            size = await self._run(tl.size)
            self.db_errors.ok()
        except DB_ERRORS as exc:  # the log degrades; answers go on
            self.db_errors.failed(exc)
            return
        if batch is not None and self.settings.witnesses:
            await self._start_cosign(batch.size, batch.checkpoint)
        if size != self._size or self._checkpoint is None:
            note = await self._run(tl.checkpoint, size)
            cosigs = await self._run(self._cosignatures, size)
            self._checkpoint = (note or b"") + cosigs
            self._size = size
            self._queued.clear()
            self._sequenced.set()
            self._sequenced = asyncio.Event()

    # ------------------------------------------------------------------ witnesses

    def _cosignatures(self, size: int) -> bytes:
        assert self._log is not None
        return self._log.cosignatures(size)

    async def _start_cosign(self, size: int, note: bytes) -> None:
        """Submit a new checkpoint to every witness not busy with an earlier one; wait for
        them at most ``cosign_wait`` (a slow witness never holds the sequencer up)."""
        todo = [w for w in self.settings.witnesses if w.url not in self._submitting]
        if not todo:
            return
        self._submitting.update(w.url for w in todo)
        task = asyncio.ensure_future(self._cosign(todo, size, note))
        self._pending_tasks.add(task)
        task.add_done_callback(self._pending_tasks.discard)
        await asyncio.wait({task}, timeout=min(self.settings.cosign_wait,
                                               self.settings.witness_timeout))

    async def _cosign(self, witnesses: list[Witness], size: int, note: bytes) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.settings.witness_timeout))
        assert self._log is not None
        try:
            results = await asyncio.gather(
                *(self._submit(w, size, note) for w in witnesses), return_exceptions=True)
            for w, res in zip(witnesses, results, strict=True):
                if isinstance(res, BaseException):
                    self.witness_errors.failed(RuntimeError(f"{w.url}: {res}"))
                    continue
                self.witness_errors.ok()
                await self._run(self._log.add_cosignature, size, w.verifier.name, res)
            if size == self._size and self._checkpoint is not None:
                # served already without these cosignatures: serve them from now on
                base = await self._run(self._log.checkpoint, size)
                cosigs = await self._run(self._cosignatures, size)
                if size == self._size:
                    self._checkpoint = (base or b"") + cosigs
        except DB_ERRORS as exc:
            self.db_errors.failed(exc)
        finally:
            self._submitting.difference_update(w.url for w in witnesses)

    async def _submit(self, w: Witness, size: int, note: bytes) -> str:
        assert self._log is not None and self._session is not None
        old = await self._run(self._log.witness_size, w.url)
        for _ in range(2):
            proof = await self._run(self._log.consistency, old, size) if old else []
            body = f"old {old}\n".encode()
            body += b"".join(base64.b64encode(h) + b"\n" for h in proof) + b"\n" + note
            async with self._session.post(w.url.rstrip("/") + "/add-checkpoint",
                                          data=body) as resp:
                text = await resp.text()
                if resp.status == 409 and text.strip().isdigit() and int(text) <= size:
                    old = int(text)  # the witness knows another size: prove from there
                    continue
                if resp.status != 200:
                    raise RuntimeError(f"status {resp.status}: {text[:200]}")
            line = self._check_cosignature(w, note, text)
            await self._run(self._log.set_witness_size, w.url, size)
            return line
        raise RuntimeError("the witness kept answering 409")

    @staticmethod
    def _check_cosignature(w: Witness, note: bytes, text: str) -> str:
        for line in text.splitlines(keepends=True):
            try:
                parsed = parse_note(note + line.encode())
                if w.verifier.name in verify_note(parsed, [w.verifier]):
                    return line
            except ValueError:
                continue
        raise RuntimeError("no valid cosignature by the witness's key in its answer")

    # ------------------------------------------------------------------ readers

    async def checkpoint(self) -> bytes | None:
        return self._checkpoint

    async def read(self, tp: TilePath) -> bytes | None:
        assert self._log is not None
        got: bytes | None = await self._run(self._log.read, tp, self._size)
        return got

    async def proof(self, entry: Entry) -> dict[str, Any] | None:
        """The transparency object for an answer about ``entry`` (queued now if the notary
        recorded it before the log existed): waits up to ``proof_wait`` for sequencing."""
        if self._log is None:
            return None
        key = entry.key
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.proof_wait
        idx = self._known.get(key)
        while True:
            if idx is None:
                try:
                    idx = await self._run(self._log.index_of, key)
                except DB_ERRORS as exc:  # the log degrades; no proof in this answer
                    self.db_errors.failed(exc)
                    return None
            if idx is not None and idx < self._size:
                break
            if idx is None:
                self._stored.pop(key, None)  # not logged yet: ask the store again
                self.record(entry)
            left = deadline - loop.time()
            if left <= 0:
                return None
            self._kick.set()
            try:
                await asyncio.wait_for(self._sequenced.wait(), left)
            except TimeoutError:
                return None
        self._known[key] = idx
        while len(self._known) > 100_000:
            self._known.popitem(last=False)
        size, note = self._size, self._checkpoint
        if note is None:
            return None
        cached = self._proofs.get((idx, size))
        if cached is None:
            try:
                proof = await self._run(self._log.inclusion, idx, size)
                (data,) = await self._run(self._log.entries, idx, idx + 1)
            except DB_ERRORS as exc:
                self.db_errors.failed(exc)
                return None
            cached = (proof, data)
            self._proofs[(idx, size)] = cached
            while len(self._proofs) > 10_000:
                self._proofs.popitem(last=False)
        proof, data = cached
        return {
            "checkpoint": note.decode(),
            "entry": base64.b64encode(data).decode(),
            "index": idx,
            "proof": [base64.b64encode(h).decode() for h in proof],
        }
