"""``notary witness``: a c2sp.org/tlog-witness, so that notary operators can witness each
other's logs.

``POST /add-checkpoint`` takes ``old <size>``, the consistency proof lines (base64 hashes),
a blank line and a signed checkpoint, and answers with the witness's cosignature line
(c2sp.org/tlog-cosignature, Ed25519, type 0x04) or, in the order the spec checks them:

* 400 a malformed request, or an old size above the checkpoint's;
* 404 a checkpoint origin the witness was not configured for (``--log VKEY``);
* 403 no valid signature by that log's key (none at all, or one by its key that fails);
* 409 the old size is not the size it last cosigned; the body is that size
  (``text/x.tlog.size``), so an honest log can prove consistency from there;
* 422 the proof does not prove the old tree a prefix of the new one, a proof that is not empty
  from size 0 or between equal sizes, equal sizes with another root, or a tree of size 0
  whose root is not the empty tree's.

The state (origin -> size and root it last cosigned) lives in SQLite and is updated by a
compare-and-swap in one transaction, so two concurrent requests can never roll it back; a
first checkpoint for a configured origin is trusted on first use, as every witness does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from notary.errors import BadConfig

from .merkle import EMPTY_ROOT, HASH_SIZE, ProofError, verify_consistency
from .note import (
    COSIGNATURE,
    ED25519,
    NoteError,
    Signer,
    Verifier,
    parse_checkpoint,
    parse_note,
    parse_size,
    verify_note,
)

MAX_BODY = 64 * 1024
MAX_PROOF = 63
SIZE_TYPE = "text/x.tlog.size"

SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    origin TEXT PRIMARY KEY, size INTEGER NOT NULL, root BLOB NOT NULL, updated REAL NOT NULL);
"""


class Refusal(Exception):
    """A request the witness refuses, with its tlog-witness status code."""

    def __init__(self, status: int, message: str, known: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.known = known  # for 409: the size the witness last cosigned


@dataclass(frozen=True)
class Request:
    old: int
    proof: tuple[bytes, ...]
    note: bytes


def parse_request(body: bytes) -> Request:
    """Split an add-checkpoint body; raise a 400 :class:`Refusal` when malformed."""
    if len(body) > MAX_BODY:
        raise Refusal(400, f"request larger than {MAX_BODY} bytes")
    head, sep, note = body.partition(b"\n\n")
    if not sep:
        raise Refusal(400, "no blank line between the proof and the checkpoint")
    lines = head.split(b"\n")
    first = lines[0]
    old = parse_size(first[4:].decode("latin-1")) if first.startswith(b"old ") else None
    if old is None:
        raise Refusal(400, "the first line is not 'old <size>' (a size of at most 64 bits)")
    if len(lines) - 1 > MAX_PROOF:
        raise Refusal(400, f"more than {MAX_PROOF} proof hashes")
    proof = []
    for line in lines[1:]:
        try:
            h = base64.b64decode(line, validate=True)
        except binascii.Error:
            h = b""
        if len(h) != HASH_SIZE:
            raise Refusal(400, "a proof line is not a base64 SHA-256 hash")
        proof.append(h)
    return Request(old, tuple(proof), note)


class WitnessState:
    """What the witness last cosigned per origin, in SQLite (thread-safe)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False,
                                   timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def get(self, origin: str) -> tuple[int, bytes]:
        with self._lock:
            row = self._db.execute("SELECT size, root FROM log WHERE origin = ?",
                                   (origin,)).fetchone()
        return (0, EMPTY_ROOT) if row is None else (int(row[0]), bytes(row[1]))

    def advance(self, origin: str, old: int, old_root: bytes, size: int, root: bytes) -> int:
        """Move ``origin`` from (old, old_root) to (size, root) unless another request moved it
        first; returns the size it holds afterwards (``size`` when this one won)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT size, root FROM log WHERE origin = ?",
                                       (origin,)).fetchone()
                now = (0, EMPTY_ROOT) if row is None else (int(row[0]), bytes(row[1]))
                if now != (old, old_root):
                    self._db.execute("ROLLBACK")
                    return now[0]
                self._db.execute("INSERT OR REPLACE INTO log VALUES (?, ?, ?, ?)",
                                 (origin, size, root, time.time()))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        return size


class Witness:
    def __init__(self, signer: Signer, logs: Sequence[Verifier], state: WitnessState,
                 clock: Callable[[], float] = time.time) -> None:
        if signer.kind != COSIGNATURE:
            raise ValueError("a witness signs cosignatures (type 0x04)")
        self.signer = signer
        self.state = state
        self.clock = clock
        self.logs: dict[str, list[Verifier]] = {}
        for v in logs:
            if v.kind != ED25519:
                raise BadConfig(f"--log {v.vkey()}: not a log's Ed25519 note key (type 0x01)")
            self.logs.setdefault(v.name, []).append(v)

    def add_checkpoint(self, body: bytes) -> str:
        """Check one request; return the cosignature line or raise :class:`Refusal`."""
        req = parse_request(body)
        origin = req.note.split(b"\n", 1)[0].decode("utf-8", "replace")
        known = self.logs.get(origin)
        if known is None:
            raise Refusal(404, f"unknown log origin {origin[:100]!r}")
        try:
            note = parse_note(req.note)
            verify_note(note, known)
        except NoteError as exc:  # no signature lines, or none by the log's key verifies
            raise Refusal(403, f"not signed by the log's key: {exc}") from exc
        try:
            ck = parse_checkpoint(note.text)
        except NoteError as exc:
            raise Refusal(400, f"not a checkpoint: {exc}") from exc
        if req.old > ck.size:
            raise Refusal(400, f"old size {req.old} is above the checkpoint's {ck.size}")
        size, root = self.state.get(origin)
        if req.old != size:
            raise Refusal(409, f"the last cosigned size is {size}", known=size)
        if ck.size == 0 and ck.root != EMPTY_ROOT:
            raise Refusal(422, "a tree of size 0 must have the empty tree's root")
        try:
            if req.old == 0 and req.proof:
                raise ProofError("a proof from size 0 must be empty")
            verify_consistency(req.old, ck.size, root, ck.root, req.proof)
        except ProofError as exc:
            raise Refusal(422, f"not consistent with the last cosigned checkpoint: {exc}") from exc
        now = self.state.advance(origin, size, root, ck.size, ck.root)
        if now != ck.size:
            raise Refusal(409, f"the last cosigned size is {now}", known=now)
        return self.signer.sign_line(note.text, int(self.clock()))


WITNESS = web.AppKey("witness", Witness)


async def handle_add_checkpoint(request: web.Request) -> web.Response:
    w = request.app[WITNESS]
    body = await request.read()  # the whole body; over client_max_size aiohttp answers 413
    try:
        line = await asyncio.get_running_loop().run_in_executor(None, w.add_checkpoint, body)
    except Refusal as exc:
        if exc.status == 409 and exc.known is not None:
            return web.Response(status=409, body=f"{exc.known}\n".encode(),
                                headers={"Content-Type": SIZE_TYPE})
        return web.Response(status=exc.status, text=exc.message + "\n")
    return web.Response(text=line, content_type="text/plain", charset="utf-8")


def create_app(w: Witness) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY)
    app[WITNESS] = w
    app.router.add_post("/add-checkpoint", handle_add_checkpoint)
    return app


def parse_logs(specs: Sequence[str]) -> list[Verifier]:
    out = []
    for spec in specs:
        try:
            out.append(Verifier.parse(spec))
        except NoteError as exc:
            raise BadConfig(f"--log {spec!r}: {exc}") from exc
    return out


async def serve(w: Witness, host: str, port: int) -> None:
    """Serve until cancelled."""
    runner = web.AppRunner(create_app(w), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
