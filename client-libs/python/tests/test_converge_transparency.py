"""The transparency log's proofs (docs/transparency.md, "Clients"): bundle parsing, the request
flag, the answer split, and the six checks against a real ``notary serve`` whose checkpoints a
real ``notary witness`` (c2sp.org/tlog-witness) cosigns, directly and through relays that strip
the member (log-missing), change a proof hash (log-proof), drop the witness's cosignature
(log-witness), break the log's signature (log-checkpoint) or swap in another entry (log-entry).
Each must-fail case has a must-pass twin."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from converge import extended, transparency
from converge.bundle import NotaryBundle, parse_bundle
from converge.cli import main as cli_main
from converge.client import Client
from converge.errors import BundleError
from converge.fingerprint import parse_fingerprint
from converge_fixtures import TlsTarget, identity, in_threads, make_config
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "client-libs" / "conformance"))
from log_relays import LogRelay, start_log_relay  # noqa: E402  (the runner's relays)
from log_relays import change_member as rewrite_member  # noqa: E402

NOTARY = ROOT / ".venv" / "bin" / "notary"
MEMBER = b',"transparency":'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- a witness on 127.0.0.1


@dataclass
class Witness:
    """``notary witness`` (c2sp.org/tlog-witness: it cosigns a checkpoint only when it is
    consistent with the last one it cosigned) with its own key, for one log."""

    name: str
    vkey: str
    url: str
    proc: subprocess.Popen[bytes]
    base: Path  # the notary's data directory is base / "data"


def _notary(*args: str) -> str:
    return subprocess.run([str(NOTARY), *args], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip()


# ---------------------------------------------------------------- a real notary


@dataclass
class RealNotary:
    data_dir: Path
    port: int
    proc: subprocess.Popen[bytes]
    bundle_doc: dict[str, Any]

    def bundle(self, name: str = "Org Log", port: int | None = None, log: bool = True,
               **over: Any) -> NotaryBundle:
        doc = {**self.bundle_doc, "name": name}
        doc["hosts"] = [{**doc["hosts"][0], "ssl_port": port or self.port}]
        if not log:
            doc.pop("transparency")
        elif over:
            doc["transparency"] = {**doc["transparency"], **over}
        return parse_bundle(doc)


def _wait_ready(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"notary not listening after 30 s: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def witness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Witness]:
    """The notary's log key is made first (``notary log-key``), so that the witness can be
    told which log it witnesses before the notary starts submitting to it."""
    if not NOTARY.exists():
        pytest.skip("the notary console script is not installed (make setup)")
    d = tmp_path_factory.mktemp("log-notary")
    log_vkey = _notary("log-key", "--data-dir", str(d / "data"))
    name = "witness.test/w1"
    vkey = _notary("witness-key", "--data-dir", str(d / "witness"), "--name", name)
    port = _free_port()
    log = d / "witness.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(NOTARY), "witness", "--data-dir", str(d / "witness"), "--listen",
             f"127.0.0.1:{port}", "--log", log_vkey], stdout=fh, stderr=subprocess.STDOUT)
    try:
        _wait_ready(port, proc, log)
        yield Witness(name, vkey, f"http://127.0.0.1:{port}", proc, d)
    finally:
        _stop(proc)


@pytest.fixture(scope="module")
def notary(witness: Witness) -> Iterator[RealNotary]:
    d = witness.base
    port = _free_port()
    log = d / "notary.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [str(NOTARY), "serve", "--data-dir", str(d / "data"), "--listen", f"127.0.0.1:{port}",
             "--allow-target", "127.0.0.0/8", "--probe-timeout", "2", "--log-interval", "0.2",
             "--log-witness", f"{witness.url}={witness.vkey}"],
            stdout=fh, stderr=subprocess.STDOUT,
        )
    try:
        _wait_ready(port, proc, log)
        out = subprocess.run(
            [str(NOTARY), "bundle", "--data-dir", str(d / "data"), "--host", "127.0.0.1",
             "--ssl-port", str(port), "--name", "Org Log", "--witness", witness.vkey,
             "--min-cosignatures", "1"],
            capture_output=True, text=True, timeout=60, check=True,
        )
        yield RealNotary(d / "data", port, proc, json.loads(out.stdout))
    finally:
        _stop(proc)


# ---------------------------------------------------------------- relays


class Relay:
    """The runner's relay (``log_relays.LogRelay``) in front of the notary, with its own
    certificate, passing each answer's body through ``rewrite``; keeps requests and answers."""

    def __init__(self, notary: RealNotary, rewrite: Callable[[bytes], bytes]) -> None:
        self.answers: list[bytes] = []

        def keep(body: bytes) -> bytes:
            out = rewrite(body)
            self.answers.append(out)
            return out

        self.relay = LogRelay("custom", notary.port, custom=keep)
        self.notary = notary

    def start(self) -> Relay:
        self.server = start_log_relay(self.relay, self.notary.data_dir)
        self.port = int(self.server.server_address[1])
        return self

    @property
    def requests(self) -> list[bytes]:
        return self.relay.requests

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[TlsTarget]]:
    """Two HTTPS targets with one certificate on two ports (so the log holds two entries and
    every proof has a hash)."""
    ident = identity(trustme.CA(), "127.0.0.1")
    tmp = tmp_path_factory.mktemp("sites")
    ts = [TlsTarget(ident, tmp).start() for _ in range(2)]
    yield ts
    for t in ts:
        t.stop()


def _check(tmp: Path, bundle: NotaryBundle, site: TlsTarget) -> Any:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = make_config(tmp, [bundle], cache_lifetime=0)
    return Client(cfg).check("127.0.0.1", site.port, site.ident.sha256)


def _keep(into: list[bytes]) -> Callable[[bytes], bytes]:
    def keep(body: bytes) -> bytes:
        into.append(body)
        return body

    return keep


@pytest.fixture(scope="module")
def logged(notary: RealNotary, sites: list[TlsTarget],
           tmp_path_factory: pytest.TempPathFactory) -> RealNotary:
    """Both sites asked once, so the log holds both entries."""
    tmp = tmp_path_factory.mktemp("warm")
    for i, s in enumerate(sites):
        v = _check(tmp / str(i), notary.bundle(), s)
        assert v.trusted, v.results
    return notary


def _kind(v: Any) -> tuple[str, str]:
    (r,) = v.results
    return r.vote, r.kind


# ---------------------------------------------------------------- live: direct and relayed


def test_a_match_with_a_valid_cosigned_proof_is_trusted(
    logged: RealNotary, sites: list[TlsTarget], witness: Witness, tmp_path: Path
) -> None:
    relay = Relay(logged, lambda b: b).start()
    try:
        v = _check(tmp_path, logged.bundle(port=relay.port), sites[1])
    finally:
        relay.stop()
    assert v.trusted and _kind(v) == ("success", "match"), v.results
    assert b'"transparency":true' in relay.requests[-1]
    member = json.loads(relay.answers[-1][relay.answers[-1].find(MEMBER) + len(MEMBER) : -1])
    assert member["proof"] and f"\u2014 {witness.name} " in member["checkpoint"]


@pytest.mark.parametrize("name,change,kind", [
    ("stripped", None, "log-missing"),
    ("altered", "proof", "log-proof"),
    ("not-cosigned", "witness", "log-witness"),
    ("bad-log-signature", "log-signature", "log-checkpoint"),
])
def test_a_relay_that_breaks_the_member_makes_a_failure(
    logged: RealNotary, sites: list[TlsTarget], witness: Witness, tmp_path: Path,
    name: str, change: str | None, kind: str
) -> None:
    def mutate(m: dict[str, Any]) -> None:
        if change == "proof":
            h = bytearray(base64.b64decode(m["proof"][0]))
            h[0] ^= 1
            m["proof"][0] = base64.b64encode(bytes(h)).decode()
        elif change == "witness":
            m["checkpoint"] = "".join(line for line in m["checkpoint"].splitlines(True)
                                      if not line.startswith(f"\u2014 {witness.name} "))
        else:  # the log's signature line: its last byte changed
            lines = m["checkpoint"].splitlines(True)
            i = next(i for i, line in enumerate(lines) if line.startswith("\u2014 ")
                     and witness.name not in line)
            sig = bytearray(base64.b64decode(lines[i].split()[-1]))
            sig[-1] ^= 1
            lines[i] = " ".join(lines[i].split()[:-1]) + " " + base64.b64encode(sig).decode() + "\n"
            m["checkpoint"] = "".join(lines)

    relay = Relay(logged, lambda b: rewrite_member(b, None if change is None else mutate)).start()
    try:
        v = _check(tmp_path, logged.bundle(port=relay.port), sites[1])
        assert not v.trusted and _kind(v) == ("failure", kind), (name, v.results)
        # twin: the same relay, a bundle naming no log: the statement alone decides
        twin = _check(tmp_path / "twin", logged.bundle(port=relay.port, log=False), sites[1])
        assert twin.trusted and _kind(twin) == ("success", "match"), twin.results
        assert b'"transparency"' not in relay.requests[-1]
    finally:
        relay.stop()


def test_another_logged_entry_with_its_own_proof_is_log_entry(
    logged: RealNotary, sites: list[TlsTarget], tmp_path: Path
) -> None:
    """A relay answers about site 1 with the member of site 0's answer (a valid proof of
    another entry of the same log, for another port)."""
    other: list[bytes] = []
    grab = Relay(logged, _keep(other)).start()
    try:
        assert _check(tmp_path / "grab", logged.bundle(port=grab.port), sites[0]).trusted
    finally:
        grab.stop()
    theirs = json.loads(other[-1][other[-1].find(MEMBER) + len(MEMBER) : -1])
    relay = Relay(logged, lambda b: rewrite_member(b, lambda m: m.update(theirs))).start()
    try:
        v = _check(tmp_path, logged.bundle(port=relay.port), sites[1])
    finally:
        relay.stop()
    assert not v.trusted and _kind(v) == ("failure", "log-entry"), v.results


def test_no_witness_required_then_an_uncosigned_checkpoint_is_enough(
    logged: RealNotary, sites: list[TlsTarget], witness: Witness, tmp_path: Path
) -> None:
    """Twin of not-cosigned: the same relay with a bundle requiring 0 cosignatures."""
    def drop(m: dict[str, Any]) -> None:
        m["checkpoint"] = "".join(line for line in m["checkpoint"].splitlines(True)
                                  if not line.startswith(f"\u2014 {witness.name} "))

    relay = Relay(logged, lambda b: rewrite_member(b, drop)).start()
    try:
        v = _check(tmp_path, logged.bundle(port=relay.port, min_cosignatures=0), sites[1])
    finally:
        relay.stop()
    assert v.trusted and _kind(v) == ("success", "match"), v.results


def test_verify_answer_checks_a_saved_answers_proof(
    logged: RealNotary, sites: list[TlsTarget], tmp_path: Path
) -> None:
    saved: list[bytes] = []
    relay = Relay(logged, _keep(saved)).start()
    try:
        assert _check(tmp_path, logged.bundle(port=relay.port), sites[1]).trusted
    finally:
        relay.stop()
    answer, bundle_file = tmp_path / "a.answer", tmp_path / "log.notary"
    answer.write_bytes(saved[-1])
    bundle_file.write_text(json.dumps(logged.bundle().to_json()))

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        out = io.StringIO()
        code = cli_main(["verify-answer", *args, "--bundle", str(bundle_file), "--json"], out)
        return code, json.loads(out.getvalue())

    code, doc = run(str(answer))
    assert code == 0 and doc["transparency"]["tree_size"] >= 2, doc
    assert any(c.startswith("entry ") for c in doc["checked"]), doc
    # twin: one proof hash changed in the saved file
    bad = tmp_path / "bad.answer"
    bad.write_bytes(rewrite_member(saved[-1], lambda m: m.update(
        proof=[base64.b64encode(bytes(32)).decode(), *m["proof"][1:]])))
    code, doc = run(str(bad))
    assert code == 1 and doc["kind"] == "log-proof", doc
    # and a bundle naming no log checks the statement alone
    bundle_file.write_text(json.dumps(logged.bundle(log=False).to_json()))
    code, doc = run(str(bad))
    assert code == 0 and doc["transparency"] is None, doc


# ---------------------------------------------------------------- pure: bundle, request, split


def _policy_doc() -> dict[str, Any]:
    vectors = json.loads((ROOT / "client-libs" / "vectors" / "transparency.json").read_text())
    case = next(c for c in vectors["tests"] if c["type"] == "answer")
    return {**case["bundle"], "url": "https://notary.test/log"}


@pytest.mark.parametrize("change", [
    {"log": "notary.test/log+00000000+AQ=="},
    {"log": None},
    {"min_cosignatures": 2},
    {"min_cosignatures": -1},
    {"min_cosignatures": True},
    {"url": "http://notary.test/log"},
    {"extra": 1},
    {"witnesses": "none"},
])
def test_a_malformed_transparency_member_is_a_bundle_error(change: dict[str, Any]) -> None:
    doc = _policy_doc()
    transparency.parse_log_policy(doc)  # twin: as written it loads
    with pytest.raises(BundleError):
        transparency.parse_log_policy({**doc, **change})


def test_witness_keys_must_be_cosignature_keys_named_as_listed() -> None:
    doc = _policy_doc()
    w = doc["witnesses"][0]
    with pytest.raises(BundleError):  # the log's key (type 0x01) as a witness
        transparency.parse_log_policy({**doc, "witnesses": [{"name": doc["log"].split("+")[0],
                                                              "vkey": doc["log"]}]})
    with pytest.raises(BundleError):
        transparency.parse_log_policy({**doc, "witnesses": [{**w, "name": "another"}]})
    with pytest.raises(BundleError):
        transparency.parse_log_policy({**doc, "witnesses": [w, w]})


def test_the_request_asks_for_a_proof_only_when_told() -> None:
    fp = parse_fingerprint("AB" * 32)
    body = extended.request_body("example.org", 443, fp, nonce=None, transparency=True)
    assert json.loads(body)["transparency"] is True
    assert b"transparency" not in extended.request_body("example.org", 443, fp, nonce=None)


def test_the_statement_ends_at_the_first_transparency_member() -> None:
    prefix = b'{"signature":{"alg":"ed25519","key_id":"k","value":"v"},"statement":'
    t = b'{"a":1}'
    assert extended.split_parts(prefix + t + b"}")[2:] == (t, None)
    raw = prefix + t + b',"transparency":{"x":",\\"transparency\\":"},"transparency":1}'
    assert extended.split_parts(raw)[2:] == (
        t, b'{"x":",\\"transparency\\":"},"transparency":1')


def test_every_malformed_member_is_a_typed_failure() -> None:
    """Whatever bytes follow ``,"transparency":``, the check ends in a LogError."""
    doc = _policy_doc()
    policy = transparency.parse_log_policy(doc)
    fp = parse_fingerprint("AB" * 32)
    target = {"host": "www.example.org", "port": 443, "ip": None}
    for member in (b"", b"{", b"[]", b"1e999", b'{"index":1}', b"\xff", b"[" * 40 + b"]" * 40,
                   b'{"checkpoint":"\\u0000","entry":"","index":0,"proof":[]}',
                   b'{"checkpoint":"x\\n\\n\\u2014 a AAAA\\n","entry":"","index":0,"proof":[]}'):
        with pytest.raises(transparency.LogError) as e:
            transparency.check_member(member, policy, target=target, fingerprint=fp)
        assert e.value.kind in transparency.LOG_KINDS


_VALID = json.loads((ROOT / "client-libs" / "vectors" / "transparency.json").read_text())
_VALID_ANSWER = next(c for c in _VALID["tests"] if c["type"] == "answer" and c["result"] == "valid")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 2000))
def test_any_bytes_in_the_member_end_in_a_typed_failure_or_the_valid_answer(
    junk: bytes, at: int
) -> None:
    """The valid vector member with bytes spliced in at any place (or bytes alone): the check
    ends in a LogError of a documented kind, or passes only if the member is unchanged."""
    case = _VALID_ANSWER
    good = json.dumps(case["transparency"], separators=(",", ":")).encode()
    member = good[:at] + junk + good[at:]
    exp = case["expect"]
    fp = parse_fingerprint(exp.get("sha256") or exp["sha1"])
    target = {"host": exp["host"], "port": exp["port"], "ip": exp.get("ip")}
    policy = transparency.parse_log_policy(case["bundle"])
    for m in (member, junk):
        try:
            transparency.check_member(m, policy, target=target, fingerprint=fp)
        except transparency.LogError as e:
            assert e.kind in transparency.LOG_KINDS
        else:
            assert json.loads(m) == case["transparency"]


def test_a_big_tree_proof_verifies_and_a_wrong_index_does_not() -> None:
    """RFC 9162 inclusion over a 1000-leaf tree, every 37th leaf (twin: the index next to it)."""
    leaves = [hashlib.sha256(b"\x00" + b"%d" % i).digest() for i in range(1000)]
    root = transparency.tree_root(leaves)

    def path(i: int, lo: int, hi: int) -> list[bytes]:
        if hi - lo == 1:
            return []
        k = 1 << ((hi - lo - 1).bit_length() - 1)
        if i < lo + k:
            return [*path(i, lo, lo + k), transparency.tree_root(leaves[lo + k : hi])]
        return [*path(i, lo + k, hi), transparency.tree_root(leaves[lo : lo + k])]

    for i in range(0, 1000, 37):
        transparency.verify_inclusion(leaves[i], i, 1000, path(i, 0, 1000), root)
        with pytest.raises(ValueError):
            transparency.verify_inclusion(leaves[i], i ^ 1, 1000, path(i, 0, 1000), root)



# ---------------------------------------------------------------- kept connections


class CountingForwarder:
    """A TCP forwarder on 127.0.0.1 in front of the notary (TLS passes through it untouched,
    so the pin is the notary's): counts the connections clients open, and can cut them all."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.accepted = 0
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection(("127.0.0.1", self.upstream), timeout=10)
            with self.lock:
                self.accepted += 1
                self.open += [down, up]
            for a, b in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        """Close every connection (as a notary does with idle ones after its timeout)."""
        with self.lock:
            for s in self.open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self.open.clear()

    def stop(self) -> None:
        self.listener.close()
        self.cut()


@pytest.fixture()
def forwarder(logged: RealNotary) -> Iterator[CountingForwarder]:
    f = CountingForwarder(logged.port)
    yield f
    f.stop()


def _client(tmp: Path, bundle: NotaryBundle, **over: Any) -> Client:
    tmp.mkdir(parents=True, exist_ok=True)
    return Client(dataclasses.replace(make_config(tmp, [bundle], cache_lifetime=0), **over))


def test_extended_checks_keep_one_connection_to_the_notary(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path
) -> None:
    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        for _ in range(3):
            v = c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256)
            assert v.trusted and _kind(v) == ("success", "match"), v.results
    assert forwarder.accepted == 1


def test_without_keep_alive_or_in_the_legacy_format_each_check_connects(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path
) -> None:
    """Twin of the kept connection: Config(keep_alive=False), and the legacy format (the
    add-on's exact request, Connection: close) with keep-alive on."""
    bundle = logged.bundle(port=forwarder.port)
    with _client(tmp_path / "a", bundle, keep_alive=False) as c:
        for _ in range(3):
            assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
    assert forwarder.accepted == 3
    with _client(tmp_path / "b", bundle, extended="off") as c:
        for _ in range(2):
            assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
    assert forwarder.accepted == 5


def test_a_kept_connection_the_notary_closed_is_replaced_once(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path
) -> None:
    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
        forwarder.cut()
        time.sleep(0.1)
        v = c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256)
        assert v.trusted and _kind(v) == ("success", "match"), v.results
        assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
    assert forwarder.accepted == 2


def test_a_kept_connection_still_checks_the_pin_and_the_answer(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path
) -> None:
    """A reused connection is no shortcut: a fingerprint the notary did not see is still a
    failure on it (twin: the genuine one before and after, same connection)."""
    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
        v = c.check("127.0.0.1", sites[0].port, "AB" * 32)
        assert not v.trusted and v.results[0].vote == "failure", v.results
        assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
    assert forwarder.accepted == 1


def test_kept_connections_stay_on_their_threads_loop_and_within_the_bound(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Six threads (each checks on its own event loop) each keep their own connection: all
    first checks end before any second one starts, and each second check reuses its thread's
    kept connection, never another loop's (nor is another thread's connection closed from
    here, which left it unclosed until its loop ran again)."""
    import asyncio

    from converge import notary_io

    taken: list[tuple[int, int | None]] = []  # (this loop, the taken connection's loop)
    take = notary_io._take_idle

    def recording(ctx: Any) -> Any:
        idle = take(ctx)
        taken.append((id(asyncio.get_running_loop()), None if idle is None else id(idle.loop)))
        return idle

    monkeypatch.setattr(notary_io, "_take_idle", recording)
    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        between = threading.Barrier(6, timeout=30)

        def twice() -> None:
            assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
            between.wait()
            assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted

        errors = in_threads(twice, 6, 60)
        assert not errors
    first, second = taken[:6], taken[6:]
    # twin: the first checks found nothing to reuse; each second one reused a connection of
    # its own loop (6 loops)
    assert [t for _, t in first] == [None] * 6
    assert len(second) == 6 and all(mine == theirs for mine, theirs in second)
    assert len({mine for mine, _ in second}) == 6
    assert forwarder.accepted >= 6


def test_one_loop_keeps_at_most_four_connections_per_host(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path
) -> None:
    """Six checks at once on one loop open six connections and keep the 4 newest (twin: the
    next six at once reuse those 4 and open 2)."""
    import asyncio

    from converge import client as client_module
    from converge import notary_io

    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        async def six() -> None:
            got = await asyncio.gather(*(
                c.acheck("127.0.0.1", sites[0].port, sites[0].ident.sha256) for _ in range(6)))
            assert all(v.trusted for v in got)

        client_module._run_on_thread_loop(six())  # type: ignore[arg-type]
        ctx = next(v for k, v in notary_io._PINNED.items() if k[1] == forwarder.port)
        assert forwarder.accepted == 6 and len(ctx.idle) == notary_io.MAX_IDLE_PER_HOST
        client_module._run_on_thread_loop(six())  # type: ignore[arg-type]
        assert forwarder.accepted == 8 and len(ctx.idle) == notary_io.MAX_IDLE_PER_HOST


def test_a_check_per_asyncio_run_leaves_no_connection_open(
    logged: RealNotary, sites: list[TlsTarget], forwarder: CountingForwarder, tmp_path: Path,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """acheck() on the caller's loop keeps nothing (nothing would close it when that loop
    ends): one connection per query, no unclosed socket; twin: check() on the client's own
    loop reuses its connection."""
    import asyncio
    import gc

    with _client(tmp_path, logged.bundle(port=forwarder.port)) as c:
        for _ in range(3):
            v = asyncio.run(c.acheck("127.0.0.1", sites[0].port, sites[0].ident.sha256))
            assert v.trusted, v.results
        gc.collect()
        assert forwarder.accepted == 3

        async def twice() -> None:
            for _ in range(2):
                assert (await c.acheck("127.0.0.1", sites[0].port, sites[0].ident.sha256)).trusted

        asyncio.run(twice())
        assert forwarder.accepted == 5
        for _ in range(2):
            assert c.check("127.0.0.1", sites[0].port, sites[0].ident.sha256).trusted
        assert forwarder.accepted == 6
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)], \
        [str(w.message) for w in recwarn]


# ----------------------------------------------------- one key named twice in a bundle


def _vkey(name: str, kind: int, key: Any) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    kid = transparency.key_id(name, kind, raw).hex()
    return f"{name}+{kid}+{base64.b64encode(bytes([kind]) + raw).decode()}"


def _line(name: str, kind: int, key: Any, text: str, t: int = 1_700_000_000) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    if kind == 0x04:
        sig = t.to_bytes(8, "big") + key.sign(f"cosignature/v1\ntime {t}\n{text}".encode())
    else:
        sig = key.sign(text.encode())
    blob = base64.b64encode(transparency.key_id(name, kind, raw) + sig).decode()
    return f"\u2014 {name} {blob}\n"


def test_one_witness_key_under_two_names_is_refused() -> None:
    """A cosignature does not sign the witness's name: a bundle listing one key under two
    names would let one witness count twice (shown with a policy made without the parse),
    so the parse refuses it, and a witness with the log's own key. Twin: two witnesses with
    their own keys parse, and both are needed."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    origin = "log.test/converge-log/1"
    log_key, w_key, w2_key = (Ed25519PrivateKey.generate() for _ in range(3))
    text = f"{origin}\n5\n{base64.b64encode(bytes(32)).decode()}\n"
    log_vkey = _vkey(origin, 0x01, log_key)

    def member(*ws: tuple[str, Any]) -> dict[str, Any]:
        return {"log": log_vkey, "min_cosignatures": len(ws),
                "witnesses": [{"name": n, "vkey": _vkey(n, 0x04, k)} for n, k in ws]}

    def note(*ws: tuple[str, Any]) -> str:
        return text + "\n" + _line(origin, 0x01, log_key, text) + "".join(
            _line(n, 0x04, k, text) for n, k in ws)

    twice = (("w.test/a", w_key), ("w.test/b", w_key))
    one_signer = transparency.LogPolicy(
        transparency.parse_vkey(log_vkey, 0x01), None,
        tuple(transparency.parse_vkey(_vkey(n, 0x04, k), 0x04) for n, k in twice), 2)
    assert transparency.open_checkpoint(note(*twice), one_signer).size == 5  # the danger
    with pytest.raises(BundleError, match="one key twice"):
        transparency.parse_log_policy(member(*twice))
    with pytest.raises(BundleError, match="one key twice"):
        transparency.parse_log_policy(member(("w.test/log", log_key)))
    two = (("w.test/a", w_key), ("w.test/b", w2_key))
    policy = transparency.parse_log_policy(member(*two))
    assert transparency.open_checkpoint(note(*two), policy).size == 5
    with pytest.raises(transparency.LogError) as e:
        transparency.open_checkpoint(note(two[0]), policy)
    assert e.value.kind == "log-witness"
