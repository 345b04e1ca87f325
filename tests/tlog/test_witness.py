"""``notary witness``, our c2sp.org/tlog-witness: every status code of the spec on a real
server (a log built with the notary's own log code), its state kept across a restart, and
against a real ``notary serve``: it cosigns, litewitness cosigns the same checkpoints, and
both refuse the log rewritten under the same key."""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tlog_support import (
    LiteWitness,
    build_litewitness,
    checkpoint_size,
    cosigners,
    log_key,
    notary,
    notary_witness,
    post_checkpoint,
    remove_log,
    tls_site,
    wait_for,
)

from notary.tlog.log import TileLog
from notary.tlog.note import (
    Checkpoint,
    NoteError,
    Signer,
    Verifier,
    parse_checkpoint,
    parse_note,
    verify_note,
)
from notary.tlog.witness import Refusal, parse_request

pytestmark = pytest.mark.timeout(300)

ORIGIN = "log.test/converge-log/1"


class Log:
    """A log made with the notary's own code, grown on demand."""

    def __init__(self, path: Path, key: Ed25519PrivateKey | None = None) -> None:
        self.signer = Signer(ORIGIN, key or Ed25519PrivateKey.generate())
        self.tl = TileLog(path, ORIGIN)
        self.n = 0

    def grow(self, count: int, tag: str = "") -> bytes:
        for _ in range(count):
            self.tl.enqueue(f"{tag}{self.n}", f"entry {tag}{self.n}".encode())
            self.n += 1
        batch = self.tl.sequence(self.signer)
        assert batch is not None
        return batch.checkpoint

    def body(self, old: int, note: bytes, proof: list[bytes] | None = None) -> bytes:
        if proof is None:
            proof = self.tl.consistency(old, checkpoint_size(note)) if old else []
        lines = b"".join(base64.b64encode(h) + b"\n" for h in proof)
        return f"old {old}\n".encode() + lines + b"\n" + note


def test_parse_request_bounds() -> None:
    assert parse_request(b"old 0\n\nx").old == 0
    assert parse_request(b"old 18446744073709551615\n\nx").old == 2**64 - 1
    # past 64 bits, and past int()'s 4,300-digit limit (a ValueError, once a 500)
    for bad in (b"old 0\nx", b"new 0\n\nx", b"old -1\n\nx", b"old 01\n\nx", b"old 1\nAAAA\n\nx",
                b"old 1\n" + b"A" * 44 + b"\n\nx", b"x" * 70_000,
                b"old 18446744073709551616\n\nx", b"old " + b"9" * 5000 + b"\n\nx",
                b"old \xd9\xa1\n\nx", b"old \n\nx"):
        with pytest.raises(Refusal) as e:
            parse_request(bad)
        assert e.value.status == 400


def test_a_checkpoint_size_is_ascii_digits_of_at_most_64_bits() -> None:
    """Signed or not, a size another implementation would refuse is refused here too: digits
    of another script (``int()`` reads Arabic-Indic ones), past 64 bits, past ``int()``'s
    digit limit. The twin: the largest 64-bit size and 0 are read."""
    root = base64.b64encode(bytes(32)).decode()
    for size in ("\u0661\u0662", "18446744073709551616", "9" * 5000, "01", "+1", " 1"):
        with pytest.raises(NoteError):
            parse_checkpoint(f"{ORIGIN}\n{size}\n{root}\n")
    for size, n in (("18446744073709551615", 2**64 - 1), ("0", 0)):
        assert parse_checkpoint(f"{ORIGIN}\n{size}\n{root}\n").size == n


def test_every_status_code_of_the_spec(tmp_path: Path) -> None:
    log = Log(tmp_path / "log.sqlite3")
    vkey = log.signer.verifier.vkey()
    first = log.grow(3)
    with notary_witness(tmp_path / "w", vkey) as (url, wkey):
        wv = Verifier.parse(wkey)
        # 404: a log it does not witness
        other = Signer("other.test/log", Ed25519PrivateKey.generate())
        status, _, _ = post_checkpoint(url, log.body(0, other.sign(
            Checkpoint("other.test/log", 1, bytes(32)).text()).encode()))
        assert status == 404
        # 403: signed by another key under the log's name; no signature at all
        forger = Signer(ORIGIN, Ed25519PrivateKey.generate())
        text = parse_note(first).text
        assert post_checkpoint(url, log.body(0, forger.sign(text).encode()))[0] == 403
        assert post_checkpoint(url, log.body(0, text.encode() + b"\n"))[0] == 403
        # 400: old above the checkpoint's size
        assert post_checkpoint(url, log.body(4, first, proof=[]))[0] == 400
        # 422: a size-0 checkpoint with another root; a proof from 0 that is not empty
        zero = log.signer.sign(Checkpoint(ORIGIN, 0, bytes(32)).text()).encode()
        assert post_checkpoint(url, log.body(0, zero))[0] == 422
        assert post_checkpoint(url, log.body(0, first, proof=[bytes(32)]))[0] == 422
        # 200: trusted on first use; the cosignature verifies with the witness's key
        status, _, line = post_checkpoint(url, log.body(0, first))
        assert status == 200, line
        assert wv.name in verify_note(parse_note(first + line.encode()), [wv])
        # 409: the old size is not the last cosigned one; the body says which
        second = log.grow(4)
        status, ctype, text409 = post_checkpoint(url, log.body(0, second))
        assert (status, ctype, text409) == (409, "text/x.tlog.size", "3\n")
        # 422: a wrong proof; equal sizes with another root
        proof = log.tl.consistency(3, 7)
        bad = [proof[0][:-1] + bytes([proof[0][-1] ^ 1]), *proof[1:]]
        assert post_checkpoint(url, log.body(3, second, proof=bad))[0] == 422
        fork3 = log.signer.sign(Checkpoint(ORIGIN, 3, bytes(32)).text()).encode()
        assert post_checkpoint(url, log.body(3, fork3))[0] == 422
        # twin of every refusal: the right proof is cosigned
        status, _, line = post_checkpoint(url, log.body(3, second))
        assert status == 200 and wv.name in cosigners(second + line.encode(), [wkey])
    # its state survives a restart
    with notary_witness(tmp_path / "w", vkey) as (url, wkey2):
        assert wkey2 == wkey
        assert post_checkpoint(url, log.body(3, second))[:3:2] == (409, "7\n")
        third = log.grow(1)
        assert post_checkpoint(url, log.body(7, third))[0] == 200
    log.tl.close()


def test_witness_refuses_a_log_rewritten_under_the_same_key(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    honest = Log(tmp_path / "a.sqlite3", key)
    vkey = honest.signer.verifier.vkey()
    with notary_witness(tmp_path / "w", vkey) as (url, _):
        assert post_checkpoint(url, honest.body(0, honest.grow(5)))[0] == 200
        fork = Log(tmp_path / "b.sqlite3", key)  # same key, other entries
        note = fork.grow(9, tag="fork")
        status, ctype, body = post_checkpoint(url, fork.body(0, note))
        assert (status, body) == (409, "5\n")
        proof = fork.tl.consistency(5, 9)
        assert post_checkpoint(url, fork.body(5, note, proof))[0] == 422
        # twin: the honest log grown to 9 is cosigned
        assert post_checkpoint(url, honest.body(5, honest.grow(4)))[0] == 200
    honest.tl.close()
    fork.tl.close()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_ours_and_litewitness_cosign_the_same_checkpoints(tmp_path: Path,
                                                         ca: trustme.CA) -> None:
    data = tmp_path / "n"
    vkey = log_key(data)
    origin = vkey.split("+")[0]
    lw = LiteWitness(build_litewitness(), vkey)
    lw.start()
    try:
        with notary_witness(tmp_path / "w", vkey) as (url, wkey):
            name = Verifier.parse(wkey).name
            flags = ["--log-witness", f"{url}={wkey}", "--log-witness", f"{lw.url}={lw.vkey}"]
            with notary(data, *flags) as n:
                for batch in range(3):
                    for _ in range(batch + 2):
                        s = tls_site(ca)
                        status, body = n.ask("site.test", s.port, s.sha256)
                        s.close()
                        assert status == 200 and b',"transparency":{' in body
                    size = checkpoint_size(n.get("/log/checkpoint")[1])
                    assert wait_for(lambda size=size: cosigners(
                        n.get("/log/checkpoint")[1], [wkey, lw.vkey]) == {name, lw.name}
                        and checkpoint_size(n.get("/log/checkpoint")[1]) == size)
                assert lw.tree_size(origin) == size
                old = size
            remove_log(data)  # the log rewritten under the same key
            with notary(data, *flags) as n:
                for _ in range(old + 2):
                    s = tls_site(ca)
                    assert n.ask("site.test", s.port, s.sha256)[0] == 200
                    s.close()
                assert wait_for(lambda: checkpoint_size(n.get("/log/checkpoint")[1]) > old)
                time.sleep(1.5)
                assert cosigners(n.get("/log/checkpoint")[1], [wkey, lw.vkey]) == set()
                assert lw.tree_size(origin) == old
                # ours still holds the honest size: a request from it is refused with 409
                note = n.get("/log/checkpoint")[1]
                assert post_checkpoint(url, b"old 0\n\n" + note)[:3:2] == (409, f"{old}\n")
    finally:
        lw.close()


def test_a_body_in_pieces_and_an_oversized_one(tmp_path: Path) -> None:
    log = Log(tmp_path / "log.sqlite3")
    body = log.body(0, log.grow(2))
    with notary_witness(tmp_path / "w", log.signer.verifier.vkey()) as (url, wkey):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"POST /add-checkpoint HTTP/1.1\r\nHost: w\r\nConnection: close\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body[:20])
            time.sleep(0.3)  # the server reads a first piece alone
            s.sendall(body[20:])
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        head, _, text = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), answer
        assert cosigners(parse_note(body.split(b"\n\n", 1)[1]).text.encode() + b"\n"
                         + text, [wkey])
        # twin: the whole body over the bound is refused, the witness still serves
        assert post_checkpoint(url, body + b"x" * 70_000)[0] == 413
        assert post_checkpoint(url, log.body(2, log.grow(1)))[0] == 200
    log.tl.close()
