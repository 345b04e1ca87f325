"""The notary's checkpoints cosigned by an independent c2sp.org/tlog-witness: litewitness from
filippo.io/torchwood v0.6.1 (built by scripts/build-litewitness), signing through its own
ssh-agent. It follows the log batch after batch with consistency proofs, refuses a log
rewritten under the same key, and a witness that is down or slow never stops the notary."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from tlog_support import (
    LiteWitness,
    Notary,
    build_litewitness,
    checkpoint_size,
    cosigners,
    log_key,
    notary,
    post_checkpoint,
    remove_log,
    tls_site,
    wait_for,
)

from notary.tlog.log import TileLog
from notary.tlog.note import NoteError, Verifier, parse_note, verify_note

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def exe() -> Path:
    return build_litewitness()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "n"


@pytest.fixture
def lw(exe: Path, data: Path) -> Iterator[LiteWitness]:
    w = LiteWitness(exe, log_key(data))
    w.start()
    yield w
    w.close()


def grow(n: Notary, ca: trustme.CA, count: int) -> list[bytes]:
    """Probe ``count`` new sites through the notary; every answer must carry a proof."""
    bodies = []
    for _ in range(count):
        s = tls_site(ca)
        t0 = time.monotonic()
        status, body = n.ask("site.test", s.port, s.sha256)
        s.close()
        assert status == 200, body
        assert b',"transparency":{' in body, "the answer carries no proof"
        assert time.monotonic() - t0 < 4.5
        bodies.append(body)
    return bodies


def restarted(n: Notary, ca: trustme.CA) -> None:
    """Wait until a restarted notary sequences again (a lease its previous process held may
    still run), so that the answers that follow carry proofs."""
    before = checkpoint_size(served(n))
    s = tls_site(ca)
    assert n.ask("site.test", s.port, s.sha256, transparency=False)[0] == 200
    s.close()
    assert wait_for(lambda: checkpoint_size(served(n)) > before, timeout=15)


def served(n: Notary) -> bytes:
    status, body = n.get("/log/checkpoint")
    assert status == 200
    return body


def cosigned_at(n: Notary, w: LiteWitness, size: int) -> bool:
    note = served(n)
    return checkpoint_size(note) >= size and w.name in cosigners(note, [w.vkey])


def test_litewitness_cosigns_every_batch(lw: LiteWitness, data: Path, ca: trustme.CA) -> None:
    assert lw.vkey.startswith(lw.name + "+")
    wv = Verifier.parse(lw.vkey)
    with notary(data, "--log-witness", f"{lw.url}={lw.vkey}") as n:
        vkey = n.vkey()
        origin = vkey.split("+")[0]
        sizes = []
        for batch in range(3):
            grow(n, ca, 2 + batch)
            size = checkpoint_size(served(n))
            assert wait_for(lambda size=size: cosigned_at(n, lw, size)), served(n).decode()
            note = served(n)
            signed = verify_note(parse_note(note), [wv, Verifier.parse(vkey)])
            assert signed[lw.name] > 0 and signed[origin] == 0  # a cosignature has a time
            assert lw.tree_size(origin) == checkpoint_size(note)  # the witness follows
            sizes.append(checkpoint_size(note))
        assert sizes == sorted(set(sizes)) and sizes[-1] >= 9
        # an answer's checkpoint carries the cosignature too (the clients' check)
        body = grow(n, ca, 1)[0]
        assert wait_for(lambda: cosigned_at(n, lw, sizes[-1] + 1))
        note = served(n)
        answered = json.loads(body)["transparency"]["checkpoint"].encode()
        assert lw.name in cosigners(answered, [lw.vkey]) or checkpoint_size(answered) > sizes[-1]
        # twins: a cosignature changed by one bit, or checked with another witness's key
        lines = note.decode().split("\n")
        i = next(k for k, line in enumerate(lines) if line.startswith("\u2014 " + lw.name))
        sig = bytearray(base64.b64decode(lines[i].rsplit(" ", 1)[1]))
        sig[-1] ^= 1
        lines[i] = lines[i].rsplit(" ", 1)[0] + " " + base64.b64encode(sig).decode()
        with pytest.raises(NoteError, match="does not verify"):
            verify_note(parse_note("\n".join(lines).encode()), [wv])
        other = LiteWitness(lw.exe, vkey, name=lw.name)
        try:
            other.start()
            assert other.vkey != lw.vkey
            assert cosigners(note, [other.vkey]) == set()
        finally:
            other.close()


def test_litewitness_refuses_a_rewritten_log(lw: LiteWitness, data: Path,
                                             ca: trustme.CA) -> None:
    witness = f"{lw.url}={lw.vkey}"
    with notary(data, "--log-witness", witness) as n:
        origin = n.vkey().split("+")[0]
        grow(n, ca, 4)
        assert wait_for(lambda: cosigned_at(n, lw, 4))
    # twin: an honest restart keeps the log; the witness keeps cosigning
    with notary(data, "--log-witness", witness) as n:
        restarted(n, ca)
        grow(n, ca, 2)
        assert wait_for(lambda: cosigned_at(n, lw, 7))
        old = checkpoint_size(served(n))
    assert lw.tree_size(origin) == old
    remove_log(data)
    with notary(data, "--log-witness", witness) as n:
        grow(n, ca, old + 2)  # the new log grows past the size the witness holds
        assert wait_for(lambda: checkpoint_size(served(n)) >= old + 2)
        time.sleep(1.5)  # every batch was submitted (and refused)
        note = served(n)
        assert lw.name not in cosigners(note, [lw.vkey]), "the witness cosigned a fork"
        assert lw.tree_size(origin) == old
        log_text = Path(f"{data}-{n.port}.log").read_text()
        assert "witness submission failed" in log_text and "status 4" in log_text
    # what the witness answers for the forked log, asked directly as the notary asks
    tl = TileLog(data / "transparency.sqlite3", origin)
    try:
        size = tl.size()
        ck = tl.checkpoint(size)
        assert ck is not None
        status, ctype, text = post_checkpoint(lw.url, b"old 0\n\n" + ck)
        assert (status, ctype, text.strip()) == (409, "text/x.tlog.size", str(old))
        proof = tl.consistency(old, size)
        body = f"old {old}\n".encode() + b"".join(base64.b64encode(h) + b"\n" for h in proof)
        status, _, text = post_checkpoint(lw.url, body + b"\n" + ck)
        assert status == 422, text
    finally:
        tl.close()


def test_a_down_or_slow_witness_never_stops_the_notary(lw: LiteWitness, data: Path,
                                                      ca: trustme.CA) -> None:
    with notary(data, "--log-witness", f"{lw.url}={lw.vkey}") as n:
        grow(n, ca, 2)
        assert wait_for(lambda: cosigned_at(n, lw, 2))
        for make_bad, make_good in ((lw.pause, lw.resume), (lw.stop, lw.start)):
            make_bad()
            before = checkpoint_size(served(n))
            grow(n, ca, 3)  # answers carry proofs within the usual wait
            assert wait_for(lambda before=before: checkpoint_size(served(n)) >= before + 3)
            assert lw.name not in cosigners(served(n), [lw.vkey])
            make_good()
            # twin: the witness is back; the next batch is cosigned again
            grow(n, ca, 1)
            size = checkpoint_size(served(n))
            assert wait_for(lambda size=size: cosigned_at(n, lw, size), timeout=30), (
                served(n).decode())
