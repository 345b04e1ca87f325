"""``notary monitor`` against a real ``notary serve`` and real TLS sites on loopback, and
against a log served as static files (Python's http.server) that the tests corrupt. Every
detection has its twin: a watched site whose certificate changed after it was logged, a log
rewritten under the same key, a split view, missing cosignatures; corrupt tiles, truncated
bundles, a wrong signature, an unknown key, a down or slow log give typed events, a clear
exit status and no hang."""

from __future__ import annotations

import base64
import hashlib
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from loopback import free_port
from tlog_support import (
    NOTARY,
    Notary,
    Site,
    checkpoint_size,
    cosigners,
    export_log,
    kinds,
    notary,
    notary_witness,
    remove_log,
    run_monitor,
    static_log,
    stop_process,
    tls_site,
    wait_for,
)

from notary import keys
from notary.tlog.entry import Entry
from notary.tlog.log import TileLog
from notary.tlog.note import Checkpoint, Signer

pytestmark = pytest.mark.timeout(300)

PROBE = ["--resolve", "site.test=127.0.0.1", "--allow-target", "127.0.0.0/8"]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def grow(n: Notary, ca: trustme.CA, count: int, host: str = "site.test") -> None:
    before = checkpoint_size(n.get("/log/checkpoint")[1])
    for _ in range(count):
        s = tls_site(ca, host)
        assert n.ask(host, s.port, s.sha256)[0] == 200
        s.close()
    assert wait_for(lambda: checkpoint_size(n.get("/log/checkpoint")[1]) >= before + count)


def reopen(ca: trustme.CA, port: int) -> Site:
    """Another certificate on the port of a site just closed (its accept loop lets the port
    go within its 0.2 s accept timeout)."""
    for _ in range(50):
        try:
            return tls_site(ca, port=port)
        except OSError:
            time.sleep(0.1)
    return tls_site(ca, port=port)


def test_an_address_a_client_named_is_never_an_alert(ca: trustme.CA, tmp_path: Path) -> None:
    """Any client can have the notary log what an address of its choosing (its own server)
    presents for a watched name; the monitor reports such an entry as information, names the
    address, and does not connect to it. The twin: the same certificate change on the name's
    own resolution is an alert."""
    named, own = tls_site(ca), tls_site(ca)
    with notary(tmp_path / "n") as n:
        vkey = n.vkey()
        assert n.ask("site.test", named.port, named.sha256, ip="127.0.0.1")[0] == 200
        assert n.ask("site.test", own.port, own.sha256)[0] == 200
        assert wait_for(lambda: checkpoint_size(n.get("/log/checkpoint")[1]) >= 2)
        for s in (named, own):  # both now present another certificate
            s.close()
        named2, own2 = reopen(ca, named.port), reopen(ca, own.port)
        rc, ev, err = run_monitor(n.url + "/log", vkey, "--watch", "site.test", *PROBE)
        assert rc == 1, (ev, err)
        (info,) = [e for e in ev if e["kind"] == "client-named-address"]
        assert info["severity"] == "info" and info["ip"] == "127.0.0.1"
        assert info["port"] == named.port and "at 127.0.0.1" in info["message"]
        (alert,) = [e for e in ev if e["severity"] == "alert"]
        assert alert["kind"] == "unseen-certificate" and alert["port"] == own.port
        assert "seen_sha256" not in info  # not probed from here
        named2.close()
        own2.close()


def test_watched_entries_are_reprobed(ca: trustme.CA, tmp_path: Path) -> None:
    a, b = tls_site(ca), tls_site(ca)
    with notary(tmp_path / "n", "--resolve", "other.test=127.0.0.1") as n:
        vkey = n.vkey()
        for s in (a, b):
            assert n.ask("site.test", s.port, s.sha256)[0] == 200
        grow(n, ca, 1, host="other.test")  # not watched: never probed
        assert wait_for(lambda: checkpoint_size(n.get("/log/checkpoint")[1]) >= 3)
        url = n.url + "/log"
        kept = str(tmp_path / "kept")
        rc, ev, err = run_monitor(url, vkey, "--watch", "site.test", "--state", kept, *PROBE)
        assert rc == 0, (ev, err)
        ok = [e for e in ev if e["kind"] == "watched-ok"]
        assert sorted(e["port"] for e in ok) == sorted([a.port, b.port])
        assert kinds(ev, "alert") == [] and kinds(ev, "warning") == []
        # b's certificate changes after it was logged
        b.close()
        b2 = reopen(ca, b.port)
        assert b2.sha256 != b.sha256
        rc, ev, err = run_monitor(url, vkey, "--watch", "site.test",
                                  "--state", str(tmp_path / "fresh"), *PROBE)
        assert rc == 1, (ev, err)
        (alert,) = [e for e in ev if e["severity"] == "alert"]
        assert alert["kind"] == "unseen-certificate" and alert["port"] == b.port
        assert alert["logged_sha256"] == b.sha256 and alert["seen_sha256"] == b2.sha256
        assert [e["port"] for e in ev if e["kind"] == "watched-ok"] == [a.port]
        # the kept state: those entries were checked already, nothing new to probe
        rc, ev, _ = run_monitor(url, vkey, "--watch", "site.test", "--state", kept, *PROBE)
        assert rc == 0 and kinds(ev) == ["checkpoint"]
        # a site the monitor may not probe (no --allow-target) is a warning, never a pass
        rc, ev, _ = run_monitor(url, vkey, "--watch", "site.test",
                                "--resolve", "site.test=127.0.0.1")
        assert rc == 0 and kinds(ev, "warning") == ["probe-failed", "probe-failed"]
        # text for a person: one line per event
        p = subprocess.run([NOTARY, "monitor", url, "--log-key", vkey, "--once"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and len(p.stdout.splitlines()) == 1
        assert " INFO    checkpoint: size 3, root " in p.stdout
    a.close()
    b2.close()


def test_rewritten_log_and_cosignatures(ca: trustme.CA, tmp_path: Path) -> None:
    data = tmp_path / "n"
    state = str(tmp_path / "state")
    with notary(data) as n0:
        vkey = n0.vkey()
    with notary_witness(tmp_path / "w", vkey) as (wurl, wkey):
        other = Signer("witness.test/absent", Ed25519PrivateKey.generate(), 0x04)
        flags = ["--log-witness", f"{wurl}={wkey}"]
        with notary(data, *flags) as n:
            url = n.url + "/log"
            grow(n, ca, 3)
            assert wait_for(lambda: cosigners(n.get("/log/checkpoint")[1], [wkey]) != set())
            rc, ev, err = run_monitor(url, vkey, "--state", state, "--witness", wkey)
            assert rc == 0, (ev, err)
            grow(n, ca, 2)
            assert wait_for(lambda: cosigners(n.get("/log/checkpoint")[1], [wkey]) != set()
                            and checkpoint_size(n.get("/log/checkpoint")[1]) == 5)
            rc, ev, _ = run_monitor(url, vkey, "--state", state, "--witness", wkey)
            assert rc == 0 and "consistent" in kinds(ev)
            # a witness whose cosignature is required but absent
            rc, ev, _ = run_monitor(url, vkey, "--witness", wkey, "--witness",
                                    other.verifier.vkey())
            assert rc == 1 and kinds(ev, "alert") == ["missing-cosignatures"]
            rc, ev, _ = run_monitor(url, vkey, "--witness", wkey, "--witness",
                                    other.verifier.vkey(), "--min-cosignatures", "1")
            assert rc == 0
    remove_log(data)  # rewritten under the same key
    with notary(data) as n:
        url = n.url + "/log"
        grow(n, ca, 2)
        rc, ev, _ = run_monitor(url, vkey, "--state", state)
        assert rc == 1 and kinds(ev, "alert") == ["inconsistent"]
        assert "shrank" in ev[-1]["message"]
        grow(n, ca, 4)  # past the size the monitor kept
        rc, ev, _ = run_monitor(url, vkey, "--state", state)
        assert rc == 1 and kinds(ev, "alert") == ["inconsistent"]
        assert "not consistent with size 5" in ev[-1]["message"]
        # twin: a monitor that never saw the old log finds nothing wrong with the new one
        rc, ev, _ = run_monitor(url, vkey, "--state", str(tmp_path / "new"))
        assert rc == 0


def test_split_view(ca: trustme.CA, tmp_path: Path) -> None:
    data = tmp_path / "n"
    with notary(data) as n:
        url, vkey = n.url + "/log", n.vkey()
        grow(n, ca, 3)
        genuine3 = n.get("/log/checkpoint")[1]
        grow(n, ca, 2)
        genuine5 = n.get("/log/checkpoint")[1]
        key, origin = keys.ensure_log_identity(data / "log.key", "localhost")
        signer = Signer(origin, key)
        files = {}
        for name, note in (("g3", genuine3), ("g5", genuine5),
                           ("f5", signer.sign(Checkpoint(origin, 5, bytes(32)).text()).encode()),
                           ("f2", signer.sign(Checkpoint(origin, 2, bytes(32)).text()).encode()),
                           ("k5", Signer(origin, Ed25519PrivateKey.generate()).sign(
                               Checkpoint(origin, 5, bytes(32)).text()).encode())):
            files[name] = tmp_path / f"{name}.txt"
            files[name].write_bytes(note)
        for ok in ("g3", "g5"):  # twins: genuine checkpoints, of this size or earlier
            rc, ev, _ = run_monitor(url, vkey, "--peer-checkpoint", str(files[ok]))
            assert rc == 0 and "peer-consistent" in kinds(ev), ev
        for bad in ("f5", "f2"):
            rc, ev, _ = run_monitor(url, vkey, "--peer-checkpoint", str(files[bad]))
            assert rc == 1 and kinds(ev, "alert") == ["split-view"], ev
        rc, ev, _ = run_monitor(url, vkey, "--peer-checkpoint", str(files["k5"]))
        assert rc == 1 and kinds(ev, "alert") == ["bad-checkpoint"]


# ------------------------------------------------------------------ a log as static files

@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A log of 300 entries (a full level-0 tile and a partial one) as static files."""
    d = tmp_path_factory.mktemp("static")
    signer = Signer("static.test/log", Ed25519PrivateKey.generate())
    tl = TileLog(d / "log.sqlite3", signer.name)
    for i in range(300):
        e = Entry("x.test", 1000 + i, None, hashlib.sha256(b"%d" % i).digest(),
                  hashlib.sha1(b"%d" % i).digest(), 1795324044)
        tl.enqueue(e.key, e.encode())
    assert tl.sequence(signer) is not None
    export_log(tl, d / "files")
    tl.close()
    return d / "files", signer.verifier.vkey()


def corrupt(src: Path, dst: Path, rel: str, how: str) -> Path:
    shutil.copytree(src, dst)
    f = dst / rel
    data = bytearray(f.read_bytes())
    if how.startswith("flip"):
        data[10 if how == "flip-entry" else len(data) // 2] ^= 1  # 10: in the first entry
        f.write_bytes(bytes(data))
    elif how == "truncate":
        f.write_bytes(bytes(data[:-5]))
    elif how == "delete":
        f.unlink()
    return dst


@pytest.mark.parametrize(("rel", "how", "kind", "says"), [
    ("tile/0/000", "flip", "bad-tile", "does not hash to its parent"),
    ("tile/0/001.p/44", "flip", "bad-tile", "do not make the checkpoint's root"),
    ("tile/1/000.p/1", "flip", "bad-tile", "do not make the checkpoint's root"),
    ("tile/0/001.p/44", "truncate", "bad-tile", "tile of 1403 bytes, expected 1408"),
    ("tile/entries/001.p/44", "truncate", "bad-entries", "truncated"),
    ("tile/entries/000", "flip-entry", "bad-entries", "does not hash to its leaf"),
    ("tile/entries/000", "delete", "bad-tile", "HTTP 404"),
    ("checkpoint", "flip", "bad-checkpoint", ""),
])
def test_a_corrupt_log_is_reported(exported: tuple[Path, str], tmp_path: Path, rel: str,
                                   how: str, kind: str, says: str) -> None:
    files, vkey = exported
    if rel == "checkpoint":  # a byte of the signature, not of the text
        bad = corrupt(files, tmp_path / "c", "tile/0/000", "none")
        note = (bad / "checkpoint").read_bytes()
        sig = note.rstrip(b"\n").rsplit(b" ", 1)[1]
        raw = bytearray(base64.b64decode(sig))
        raw[-1] ^= 1
        (bad / "checkpoint").write_bytes(note.replace(sig, base64.b64encode(bytes(raw))))
    else:
        bad = corrupt(files, tmp_path / "c", rel, how)
    with static_log(bad) as url:
        rc, ev, err = run_monitor(url, vkey)
    assert rc == 1, (ev, err)
    (alert,) = [e for e in ev if e["severity"] == "alert"]
    assert alert["kind"] == kind and says in alert["message"], alert
    assert "Traceback" not in err


def test_the_untouched_static_log_and_an_unknown_key(exported: tuple[Path, str]) -> None:
    files, vkey = exported
    with static_log(files) as url:
        rc, ev, err = run_monitor(url, vkey, "--state", str(files.parent / "st"))
        assert rc == 0, (ev, err)
        assert kinds(ev) == ["checkpoint"] and ev[0]["size"] == 300
        other = Signer("static.test/log", Ed25519PrivateKey.generate()).verifier.vkey()
        rc, ev, _ = run_monitor(url, other)
        assert rc == 1 and kinds(ev, "alert") == ["bad-checkpoint"]
        assert "does not verify" in ev[0]["message"] or "known key" in ev[0]["message"]
        rc, _, err = run_monitor(url, "not a key")
        assert rc == 2 and "notary:" in err and "Traceback" not in err


def test_a_down_or_slow_log(exported: tuple[Path, str]) -> None:
    _, vkey = exported
    down = f"http://127.0.0.1:{free_port()}/log"
    rc, ev, err = run_monitor(down, vkey)
    assert rc == 3 and kinds(ev) == ["unreachable"], (ev, err)
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        t0 = time.monotonic()
        rc, ev, err = run_monitor(f"http://127.0.0.1:{silent.getsockname()[1]}/log", vkey,
                                  "--timeout", "1")
        assert rc == 3 and kinds(ev) == ["unreachable"], (ev, err)
        assert "no answer in time" in ev[0]["message"]
        assert time.monotonic() - t0 < 20


def test_metrics(exported: tuple[Path, str]) -> None:
    files, vkey = exported
    port = free_port()
    with static_log(files) as url:
        proc = subprocess.Popen([NOTARY, "monitor", url, "--log-key", vkey, "--interval", "0.5",
                                 "--metrics-listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            def scraped() -> str:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                                timeout=5) as r:
                        return str(r.read().decode())
                except OSError:
                    return ""
            assert wait_for(lambda: "converge_monitor_log_size 300.0" in scraped())
            text = scraped()
            assert 'converge_monitor_events_total{kind="checkpoint",severity="info"}' in text
            assert "converge_monitor_last_pass_ok 1.0" in text
        finally:
            stop_process(proc)


def test_one_key_may_not_be_two_witnesses() -> None:
    """--witness keys: one key under two names, or the log's key as a witness's, is refused
    (a cosignature does not sign the name: it would count twice); twin: two keys pass."""
    from notary.tlog.note import COSIGNATURE, NoteError, parse_witnesses

    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    log = Signer("log.test/l", Ed25519PrivateKey.generate()).verifier
    a = Signer("w.test/a", key, COSIGNATURE).verifier.vkey()
    b_same = Signer("w.test/b", key, COSIGNATURE).verifier.vkey()
    b = Signer("w.test/b", other, COSIGNATURE).verifier.vkey()
    with pytest.raises(NoteError, match="already named"):
        parse_witnesses([a, b_same], log)
    log_as_witness = Signer("w.test/c", Ed25519PrivateKey.from_private_bytes(bytes(32)),
                            COSIGNATURE).verifier
    same_log = Signer("log.test/l", Ed25519PrivateKey.from_private_bytes(bytes(32))).verifier
    with pytest.raises(NoteError, match="already named"):
        parse_witnesses([log_as_witness.vkey()], same_log)
    assert [v.name for v in parse_witnesses([a, b], log)] == ["w.test/a", "w.test/b"]


def test_entries_a_client_would_only_half_check_are_alerts(ca: trustme.CA,
                                                           tmp_path: Path) -> None:
    """A notary's own log, signed by its key, holding what clients accept but the notary
    never logs: an entry whose SHA-1 is a lie beside the genuine SHA-256 (a client asking by
    SHA-1 checks only the SHA-1), one without its SHA-1 and time, one with a time in a
    string, one of 4,000 nested brackets (json.loads: RecursionError), one with port 70,000
    (the probe's connect raised OverflowError). Each is an alert and the pass goes on; the
    twin, the genuine entry, is watched-ok."""
    import ssl

    from notary.core.canonical import canonical_json
    from notary.core.fingerprint import colon_hex

    site = tls_site(ca)
    der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", site.port)))
    sha1, sha256 = hashlib.sha1(der).digest(), hashlib.sha256(der).digest()
    genuine = Entry("site.test", site.port, None, sha256, sha1, 1795324044)
    lie = Entry("site.test", site.port, None, sha256, hashlib.sha1(b"lie").digest(), 1795324044)
    partial = {"type": "converge-observation/1", "host": "site.test", "port": site.port,
               "ip": None, "sha256": colon_hex(sha256)}
    entries = [genuine.encode(), lie.encode(), canonical_json(partial),
               canonical_json({**genuine.to_json(), "observed_at": "1"}), b"[" * 4000,
               canonical_json({**genuine.to_json(), "port": 70000})]
    signer = Signer("hostile.test/log", Ed25519PrivateKey.generate())
    tl = TileLog(tmp_path / "log.sqlite3", signer.name)
    for i, data in enumerate(entries):
        tl.enqueue(f"entry {i}", data)
    assert tl.sequence(signer) is not None
    export_log(tl, tmp_path / "files")
    tl.close()
    try:
        with static_log(tmp_path / "files") as url:
            rc, ev, err = run_monitor(url, signer.verifier.vkey(), "--watch", "site.test",
                                      *PROBE)
    finally:
        site.close()
    assert rc == 1 and "Traceback" not in err, err
    assert [e["index"] for e in ev if e["kind"] == "watched-ok"] == [0]
    (lied,) = [e for e in ev if e["kind"] == "unseen-certificate"]
    assert lied["index"] == 1 and lied["logged_sha1"] == colon_hex(lie.sha1)
    assert lied["seen_sha1"] == colon_hex(sha1) and lied["seen_sha256"] == colon_hex(sha256)
    bad = [e for e in ev if e["kind"] == "bad-entry"]
    assert [e["index"] for e in bad] == [2, 3, 4, 5] and {e["severity"] for e in bad} == {
        "alert"}
    assert "members" in bad[0]["message"] and "observed_at" in bad[1]["message"]
    assert "not JSON" in bad[2]["message"] and "port" in bad[3]["message"]


@pytest.mark.parametrize("change", [
    {"sha256": "ab" * 32}, {"sha1": "AB" * 20}, {"host": "Site.Test"}, {"ip": "127.0.0.1"},
    {"ip": "site.test"}, {"port": True}, {"port": 0}, {"observed_at": -1},
    {"observed_at": 1.5}, {"extra": 1}, {"host": "a" * 4000 + ".test"},
])
def test_only_the_notarys_own_encoding_is_an_entry(change: dict[str, Any]) -> None:
    """Each change makes an entry the notary never writes; the twins: its own encodings,
    with and without an ip, decode."""
    import json

    from notary.tlog.entry import decode

    e = Entry("127.0.0.1", 443, None, bytes(32), bytes(20), 1)
    named = Entry("site.test", 443, "127.0.0.1", bytes(32), bytes(20), 1)
    assert decode(e.encode())["host"] == "127.0.0.1" and decode(named.encode())["ip"]
    doc = {**(named if "ip" not in change else e).to_json(), **change}
    with pytest.raises(ValueError):  # canonical as far as JSON goes: only the change is wrong
        decode(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    with pytest.raises(ValueError, match="canonical"):
        decode(named.encode().replace(b",", b", "))
