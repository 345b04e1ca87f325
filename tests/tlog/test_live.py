"""The log of a real ``notary serve`` process, read by an independent reader built only on the
ecosystem's Go code and the C2SP specs (tests/tlog/goreader): every probed site is found with
its SHA-256, answers' inclusion proofs verify, and checkpoints stay consistent across a
SIGKILL in the middle of sequencing; a rewritten log is caught."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import trustme
from tlog_support import build_goreader, goreader, notary, tls_site

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_goreader(tmp_path_factory.mktemp("goreader"))


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def test_the_reader_finds_every_probed_site(reader: Path, ca: trustme.CA,
                                            tmp_path: Path) -> None:
    sites = [tls_site(ca) for _ in range(5)]
    with notary(tmp_path / "n") as n:
        answers = []
        for s in sites:
            status, body = n.ask("site.test", s.port, s.sha256)
            assert status == 200, body
            assert b',"transparency":{' in body
            answers.append(body)
        vkey = n.vkey()
        rc, out, err = goreader(reader, "read", "-url", n.url + "/log", "-vkey", vkey)
        assert rc == 0, err
        doc = json.loads(out)
        found = {(e["host"], e["port"], e["sha256"]) for e in doc["entries"]}
        assert {("site.test", s.port, s.sha256) for s in sites} <= found
        assert doc["size"] == len(doc["entries"]) == len(sites)
        for i, body in enumerate(answers):
            f = tmp_path / f"answer-{i}.json"
            f.write_bytes(body)
            rc, out, err = goreader(reader, "inclusion", "-vkey", vkey, "-answer", str(f))
            assert rc == 0, err
            assert json.loads(out)["entry"]["port"] == sites[i].port

        # twins: a proof hash changed, an entry changed, another log's key
        doc = json.loads(answers[-1])
        t = doc["transparency"]
        assert t["proof"], "five entries: every proof has hashes"
        bad_hash = {**t, "proof": [base64.b64encode(bytes(32)).decode(), *t["proof"][1:]]}
        entry = json.loads(base64.b64decode(t["entry"]))
        bad_entry = {**t, "entry": base64.b64encode(json.dumps(
            {**entry, "port": entry["port"] + 1}).encode()).decode()}
        for name, tr in (("hash", bad_hash), ("entry", bad_entry)):
            f = tmp_path / f"bad-{name}.json"
            f.write_text(json.dumps({**doc, "transparency": tr}))
            rc, _, err = goreader(reader, "inclusion", "-vkey", vkey, "-answer", str(f))
            assert rc == 1 and "inclusion proof" in err
        other = tmp_path / "other"
        with notary(other) as o:
            rc, _, err = goreader(reader, "inclusion", "-vkey", o.vkey(), "-answer",
                                  str(tmp_path / "answer-0.json"))
            assert rc == 1 and "checkpoint" in err
    for s in sites:
        s.close()


def test_consistent_across_a_sigkill_mid_sequencing(reader: Path, ca: trustme.CA,
                                                    tmp_path: Path) -> None:
    data = tmp_path / "n"
    state = tmp_path / "reader-state"
    first = [tls_site(ca) for _ in range(3)]
    killed_during = [tls_site(ca) for _ in range(12)]
    later = [tls_site(ca) for _ in range(3)]
    with notary(data) as n:
        vkey = n.vkey()
        for s in first:
            assert n.ask("site.test", s.port, s.sha256)[0] == 200
        rc, out, err = goreader(reader, "read", "-url", n.url + "/log", "-vkey", vkey,
                                "-state", str(state))
        assert rc == 0, err
        size_before = json.loads(out)["size"]

        def ask(port: int, fp: str) -> None:
            with contextlib.suppress(OSError):  # the notary is killed under it
                n.ask("site.test", port, fp)

        threads = [threading.Thread(target=ask, args=(s.port, s.sha256)) for s in killed_during]
        for t in threads:
            t.start()
        time.sleep(0.3)  # probes recorded, some queued, a batch due any moment
        os.kill(n.proc.pid, signal.SIGKILL)
        n.proc.wait(timeout=10)
        for t in threads:
            t.join(timeout=40)
    with notary(data) as n:
        for s in later:
            assert n.ask("site.test", s.port, s.sha256)[0] == 200
        rc, out, err = goreader(reader, "read", "-url", n.url + "/log", "-vkey", vkey,
                                "-state", str(state))
        assert rc == 0, err
        doc = json.loads(out)
        assert doc["consistent_from"] == size_before
        ports = {e["port"] for e in doc["entries"]}
        assert {s.port for s in first + later} <= ports
        assert len(ports) == len(doc["entries"])  # no entry twice
        size_after = doc["size"]

    # twin: the same key, the log rewritten (its file replaced), grown past the old size
    (data / "transparency.sqlite3").unlink()
    for suffix in ("-wal", "-shm"):
        (data / f"transparency.sqlite3{suffix}").unlink(missing_ok=True)
    with notary(data) as n:
        for s in [tls_site(ca) for _ in range(size_after + 1)]:
            assert n.ask("site.test", s.port, s.sha256)[0] == 200
        rc, _, err = goreader(reader, "read", "-url", n.url + "/log", "-vkey", vkey,
                              "-state", str(state))
        assert rc == 1 and "not consistent" in err


def test_no_log_and_answers_without_the_flag(ca: trustme.CA, tmp_path: Path) -> None:
    site = tls_site(ca)
    with notary(tmp_path / "off", "--no-log") as n:
        assert n.get("/log/checkpoint")[0] == 404
        status, body = n.ask("site.test", site.port, site.sha256)
        assert status == 200 and b"transparency" not in body
        assert not (tmp_path / "off" / "transparency.sqlite3").exists()
    with notary(tmp_path / "on") as n:
        status, body = n.ask("site.test", site.port, site.sha256, transparency=False)
        assert status == 200 and b"transparency" not in body  # unchanged unless asked
        assert body.startswith(b'{"signature":{"alg":"ed25519",') and body.endswith(b"}}")
        status, body = n.ask("site.test", site.port, site.sha256)
        assert b',"transparency":{' in body
        assert n.get("/log/checkpoint")[0] == 200
        for bad in ("/log/tile/0/000.p/2", "/log/tile/0/1", "/log/tile/9/000",
                    "/log/tile/entries/x001/000"):
            assert n.get(bad)[0] == 404, bad
    site.close()


def test_the_transparency_vectors_agree_with_the_go_implementation(
    reader: Path, tmp_path: Path
) -> None:
    """client-libs/vectors/transparency.json cross-checked with golang.org/x/mod/sumdb/tlog,
    note and torchwood's cosignatures (keys rebuilt from the test-only seeds)."""
    vectors = Path(__file__).resolve().parents[2] / "client-libs" / "vectors" / "transparency.json"
    rc, out, err = goreader(reader, "vectors", str(vectors))
    assert rc == 0, err
    assert json.loads(out)["checked"] >= 40
    # twin: one stated result flipped is a disagreement
    doc = json.loads(vectors.read_text())
    case = next(c for c in doc["tests"] if c["type"] == "inclusion" and c["result"] == "valid")
    case["result"] = "invalid"
    flipped = tmp_path / "flipped.json"
    flipped.write_text(json.dumps(doc))
    rc, _, err = goreader(reader, "vectors", str(flipped))
    assert rc == 1 and "disagree" in err


def test_two_nodes_on_redis_keep_one_log(reader: Path, ca: trustme.CA, tmp_path: Path) -> None:
    """Two notary processes with the same keys sharing a real redis-server: one log, whichever
    node answers or serves the tiles."""
    from redis_testing import RedisServer

    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        a_dir, b_dir = tmp_path / "a", tmp_path / "b"
        with notary(a_dir, "--redis", server.url):
            pass  # keys made on first run
        shutil.copytree(a_dir, b_dir)
        sites = [tls_site(ca) for _ in range(6)]
        with notary(a_dir, "--redis", server.url) as a, notary(b_dir, "--redis",
                                                               server.url) as b:
            answers = []
            for i, s in enumerate(sites):
                node = (a, b)[i % 2]
                status, body = node.ask("site.test", s.port, s.sha256)
                assert status == 200 and b',"transparency":{' in body
                answers.append(body)
            vkey = a.vkey()
            assert b.vkey() == vkey
            time.sleep(0.5)  # both nodes have seen the last batch
            docs = []
            for node in (a, b):
                rc, out, err = goreader(reader, "read", "-url", node.url + "/log", "-vkey", vkey)
                assert rc == 0, err
                docs.append(json.loads(out))
            assert docs[0]["root"] == docs[1]["root"] and docs[0]["size"] == len(sites)
            assert {e["port"] for e in docs[0]["entries"]} == {s.port for s in sites}
            f = tmp_path / "answer-from-b.json"
            f.write_bytes(answers[1])
            rc, _, err = goreader(reader, "inclusion", "-vkey", vkey, "-answer", str(f))
            assert rc == 0, err
    finally:
        server.stop()
