"""Trust under an adversary: what one client can change for others.

Each attack runs against real ``notary serve`` processes on loopback, and each has a twin
that shows the same machinery still works for honest use (or that the attack lands when the
defence is turned off):

1. cache poisoning through the client-named address (legacy path segment, v2 ``ip``;
   attacker first and genuine first; one process on SQLite and two workers on Redis);
2. one address taking every probe slot or every relay tunnel;
3. the default log naming clients or targets, and growing with malformed requests;
4. a permissive umask or a writable data directory;
5. refusals revealing the addresses the operator's resolver answers;
6. special-purpose ranges that older Python releases call global;
7. ``Expect: 100-continue`` with an oversize body.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trustme
from redis_testing import RedisServer
from security_support import (
    REPO,
    NotaryProcess,
    Reply,
    Results,
    ThreadServer,
    copy_identity,
    exchange,
    free_port,
    leaf_der,
    parse_reply,
    read_to_eof,
    server_ctx,
    sha1_colon,
    tls_handler,
)

SUITE = "trust"


# -- targets on chosen loopback addresses ---------------------------------------------------


def serve_at(handler, host: str, port: int) -> ThreadServer:  # type: ignore[no-untyped-def]
    """A threaded server on ``host:port`` (ThreadServer binds 127.0.0.1 only)."""
    srv = ThreadServer.__new__(ThreadServer)
    srv._handler = handler
    srv._sock = socket.create_server((host, port), backlog=512)
    srv._sock.settimeout(0.2)
    srv.port = port
    srv.accepted = 0
    srv._conns = []
    srv._stop = threading.Event()
    srv._thread = threading.Thread(target=srv._loop, daemon=True)
    srv._thread.start()
    return srv


@pytest.fixture(scope="module")
def forged_cert(ca: trustme.CA) -> trustme.LeafCert:
    """The attacker's certificate for the victim's name (from a CA nobody here trusts)."""
    return trustme.CA().issue_cert("bank.test")


@pytest.fixture(scope="module")
def bank(ca: trustme.CA, forged_cert: trustme.LeafCert) -> Iterator[tuple[int, str, str]]:
    """(port, genuine SHA-1, forged SHA-1): the genuine site on 127.0.0.1:port, the
    attacker's server on 127.0.0.2 at the same port."""
    genuine_cert = ca.issue_cert("bank.test")
    genuine = ThreadServer(tls_handler(server_ctx(genuine_cert), hold=0.2))
    forged = serve_at(tls_handler(server_ctx(forged_cert), hold=0.2), "127.0.0.2", genuine.port)
    yield genuine.port, sha1_colon(leaf_der(genuine_cert)), sha1_colon(leaf_der(forged_cert))
    forged.close()
    genuine.close()


def fingerprints(reply: Reply) -> list[str]:
    return [e["fingerprint"] for e in json.loads(reply.body)["fingerprintList"]]


def v2(port: int, doc: dict[str, object], tls: bool = False) -> tuple[int, dict[str, object]]:
    body = json.dumps(doc).encode()
    req = (f"POST /v2/answer HTTP/1.1\r\nHost: n\r\nContent-Type: application/json\r\n"
           f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
    r = exchange(port, req, tls=tls)
    return r.status, json.loads(r.body)["statement"] if r.body.startswith(b"{") else {}


def wait_ready(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
            return
        time.sleep(0.1)
    raise AssertionError(f"no notary on port {port} after {timeout} s")


# -- 1. cache poisoning through the address segment -----------------------------------------


def poisoning_round(n: NotaryProcess | int, port: int, genuine: str, forged: str, *,
                    attacker_first: bool, tls: bool = False) -> None:
    def ask(spec: str, fp: str) -> Reply:
        nport = n if isinstance(n, int) else n.port
        return exchange(nport, _legacy(spec, fp), tls=tls)

    victim = f"bank.test+{port}"
    if not attacker_first:
        first = ask(victim, genuine)
        assert first.status == 200, first
    attack = ask(f"{victim}/127.0.0.2", forged)
    # the attacker learns what 127.0.0.2 presents: that is true and harms nobody ...
    assert attack.status == 200, attack
    # ... but nobody asking about bank.test itself is answered from it
    fooled = ask(victim, forged)
    assert fooled.status == 409, (fooled.status, fooled.body[:200])
    ok = ask(victim, genuine)
    assert ok.status == 200, ok
    assert forged not in fingerprints(ok) and genuine in fingerprints(ok)
    again = ask(victim, forged)
    assert again.status == 409 and again.header("cache-status") != "converge-notary; hit"


def _legacy(spec: str, fp: str) -> bytes:
    body = f"fingerprint={fp}".encode()
    return (f"POST /target/{spec} HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded"
            f"\r\nConnection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.fixture
def one_notary(identity_dir: Path, tmp_path: Path) -> Iterator[NotaryProcess]:
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "bank.test=127.0.0.1"], tls=False)
    yield n
    n.stop()


@pytest.mark.parametrize("attacker_first", [True, False])
def test_address_segment_cannot_poison_the_name(
    one_notary: NotaryProcess, bank: tuple[int, str, str], results: Results,
    attacker_first: bool,
) -> None:
    port, genuine, forged = bank
    poisoning_round(one_notary, port, genuine, forged, attacker_first=attacker_first)
    results.add(SUITE, f"POST /target/bank+port/<attacker IP> with the forged fingerprint, "
                f"{'before' if attacker_first else 'after'} a genuine client; then the victim "
                "asks without the address (SQLite, 1 process)",
                "victim: forged 409, genuine 200, forged never in the history",
                "forged 409, genuine 200, history holds only the genuine certificate")


def test_v2_ip_cannot_poison_the_name(
    one_notary: NotaryProcess, bank: tuple[int, str, str], results: Results
) -> None:
    port, genuine, forged = bank
    status, stmt = v2(one_notary.port, {"host": "bank.test", "port": port,
                                        "fingerprint": forged, "ip": "127.0.0.2"})
    assert status == 200 and stmt["verdict"] == "match" and stmt["address"] == "127.0.0.2"
    status, stmt = v2(one_notary.port, {"host": "bank.test", "port": port,
                                        "fingerprint": forged, "ip": None})
    assert status == 409 and stmt["verdict"] == "mismatch", stmt
    assert stmt["address"] == "127.0.0.1"  # the address the notary resolved and probed
    status, stmt = v2(one_notary.port, {"host": "bank.test", "port": port,
                                        "fingerprint": genuine})
    assert status == 200 and stmt["verdict"] == "match", stmt
    assert len(stmt["observations"]) == 1  # type: ignore[arg-type]
    results.add(SUITE, "POST /v2/answer with \"ip\": attacker, then \"ip\": null",
                "second answer: signed mismatch, address = the notary's own resolution",
                "mismatch (409), address 127.0.0.1, one observation")


def test_address_the_notary_resolves_itself_is_answered_and_cached(
    one_notary: NotaryProcess, bank: tuple[int, str, str], results: Results
) -> None:
    """Twin: naming the address the name really resolves to works as before."""
    port, genuine, _ = bank
    first = one_notary.query(f"bank.test+{port}/127.0.0.1", genuine)
    assert first.status == 200 and first.header("cache-status") == "converge-notary; fwd=miss"
    hit = one_notary.query(f"bank.test+{port}/127.0.0.1", genuine)
    assert hit.status == 200 and hit.header("cache-status") == "converge-notary; hit"
    results.add(SUITE, "twin: POST /target/bank+port/<its real address> twice",
                "200 probed, then 200 from the cache", "200 miss, 200 hit")


def test_two_workers_on_redis_cannot_be_poisoned(
    identity_dir: Path, tmp_path: Path, bank: tuple[int, str, str], results: Results
) -> None:
    port, genuine, forged = bank
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    nport = free_port()
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), [
        "--allow-target", "127.0.0.0/8", "--resolve", "bank.test=127.0.0.1", "--workers", "2",
        "--redis", redis.url, "--listen", f"127.0.0.1:{nport}"], tls=False)
    try:
        wait_ready(nport)
        # many connections, so both workers see some of them (SO_REUSEPORT spreads them)
        poisoning_round(nport, port, genuine, forged, attacker_first=True)
        for _ in range(20):
            r = exchange(nport, _legacy(f"bank.test+{port}", forged), tls=False)
            assert r.status == 409, r
    finally:
        n.stop()
        redis.stop()
    results.add(SUITE, "attacker-named address, then 20 victim requests (2 workers, Redis)",
                "every victim request with the forged fingerprint: 409",
                "20 of 20 answered 409")


# -- 2. one address cannot take every probe slot or tunnel --------------------------------


def silent(conn: socket.socket) -> None:
    conn.settimeout(10)
    with contextlib.suppress(OSError):
        while conn.recv(65536):
            pass


def flood_then_ask(n: NotaryProcess, silent_port: int, spec: str, fp: str, count: int
                   ) -> tuple[Reply, float]:
    """Address 127.0.0.1 sends ``count`` requests about distinct silent targets and holds
    them; then 127.0.0.3 asks about ``spec``."""
    return hold_then_ask(n, silent_port, ["127.0.0.1"], count, spec, fp, "127.0.0.3")


def hold_then_ask(n: NotaryProcess, silent_port: int, sources: list[str], each: int,
                  spec: str, fp: str, asker: str) -> tuple[Reply, float]:
    """Each address of ``sources`` sends ``each`` requests about distinct silent targets and
    holds them; then ``asker`` asks about ``spec``: its reply and how long it took."""
    socks = []
    try:
        for k, source in enumerate(sources):
            for i in range(each):
                s = socket.create_connection(("127.0.0.1", n.port), timeout=10,
                                             source_address=(source, 0))
                s.sendall(_legacy(f"s{k}-{i}.test+{silent_port}/127.0.0.1", "00" * 20))
                socks.append(s)
        time.sleep(0.5 + 0.002 * len(socks))  # let the notary start their probes
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", n.port), timeout=10,
                                      source_address=(asker, 0)) as b:
            b.sendall(_legacy(spec, fp))
            reply = parse_reply(read_to_eof(b), 0.0)
        return reply, time.monotonic() - t0
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("share", ["default", "0"])
def test_one_address_cannot_take_every_probe_slot(
    identity_dir: Path, tmp_path: Path, ca: trustme.CA, results: Results, share: str
) -> None:
    cert = ca.issue_cert("new.test")
    target = ThreadServer(tls_handler(server_ctx(cert), hold=0.2))
    quiet = ThreadServer(silent)
    args = ["--allow-target", "127.0.0.0/8", "--resolve", "new.test=127.0.0.1",
            "--probe-timeout", "3"]
    if share == "0":
        args += ["--client-share", "0", "--group-share", "0", "--probe-reserve", "0"]
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), args, tls=False)
    try:
        reply, secs = flood_then_ask(n, quiet.port, f"new.test+{target.port}",
                                     sha1_colon(leaf_der(cert)), 300)
    finally:
        n.stop()
        quiet.close()
        target.close()
    if share == "default":
        assert reply.status == 200 and secs < 3.0, (reply.status, reply.body, secs)
        results.add(SUITE, "address A holds 300 requests to silent targets; address B asks "
                    "about a new site (default 256 slots, share 0.25)",
                    "B answered (200) within the probe timeout",
                    f"B: {reply.status} in {secs:.2f} s", secs)
    else:
        assert reply.status == 503 and b"probe slots are busy" in reply.body, reply
        results.add(SUITE, "twin: the same flood with --client-share 0",
                    "B refused 503 (every slot taken by A)", f"B: {reply.status}", secs)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("attackers", "each"), [(4, 70), (16, 20)])
@pytest.mark.parametrize("hierarchy", ["on", "off"])
def test_many_addresses_cannot_take_every_probe_slot(
    identity_dir: Path, tmp_path: Path, ca: trustme.CA, results: Results, hierarchy: str,
    attackers: int, each: int,
) -> None:
    """Hierarchical shares (per address, per /24 or /48, a reserve for clients holding no
    probe): the new client is answered within the probe timeout; the twin with per-address
    shares only gets 503."""
    cert = ca.issue_cert("new.test")
    target = ThreadServer(tls_handler(server_ctx(cert), hold=0.2))
    quiet = ThreadServer(silent)
    args = ["--allow-target", "127.0.0.0/8", "--resolve", "new.test=127.0.0.1",
            "--probe-timeout", "3"]
    if hierarchy == "off":
        args += ["--group-share", "0", "--probe-reserve", "0"]
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), args, tls=False)
    try:
        # each attacker in its own /24 (127.0.K.1), the new client in another
        reply, secs = hold_then_ask(
            n, quiet.port, [f"127.0.{k}.1" for k in range(1, attackers + 1)], each,
            f"new.test+{target.port}", sha1_colon(leaf_der(cert)), "127.0.200.1")
    finally:
        n.stop()
        quiet.close()
        target.close()
    held = attackers * each
    if hierarchy == "on":
        assert reply.status == 200 and secs < 3.0, (reply.status, reply.body, secs)
        results.add(SUITE, f"{attackers} addresses (a /24 each) hold {held} requests to "
                    "silent targets; a new client asks about a new site (256 slots; shares "
                    "0.25 per address, 0.5 per /24, 0.25 reserved for clients holding none)",
                    "new client answered (200) within the probe timeout",
                    f"{reply.status} in {secs:.2f} s", secs)
    else:
        assert reply.status == 503 and b"probe slots are busy" in reply.body, reply
        results.add(SUITE, f"twin: {attackers} addresses, {held} held requests, per-address "
                    "share only (--group-share 0 --probe-reserve 0)",
                    "new client refused 503 (every slot taken)", f"{reply.status}", secs)


@pytest.mark.parametrize("share", ["default", "0"])
def test_one_address_cannot_take_every_tunnel(
    identity_dir: Path, tmp_path: Path, results: Results, share: str
) -> None:
    echo = ThreadServer(silent)
    relay_port = free_port()
    args = ["--allow-target", "127.0.0.0/8", "--relay-listen", f"127.0.0.1:{relay_port}",
            "--relay-port", str(echo.port), "--max-tunnels", "8"]
    if share == "0":
        args += ["--client-share", "0"]
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), args, tls=False)
    held = []
    try:
        for _ in range(8):  # address A opens tunnels and holds them
            s = socket.create_connection(("127.0.0.1", relay_port), timeout=10)
            s.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
            held.append(s)
        time.sleep(0.3)
        b = socket.create_connection(("127.0.0.1", relay_port), timeout=10,
                                     source_address=("127.0.0.3", 0))
        with b:
            b.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n\r\n".encode())
            head = b.recv(200)
    finally:
        for s in held:
            s.close()
        n.stop()
        echo.close()
    if share == "default":
        assert head.startswith(b"HTTP/1.0 200 Connection Established"), head
        results.add(SUITE, "relay: address A opens 8 tunnels (--max-tunnels 8); address B "
                    "connects", "B's tunnel established (A holds at most 2)", "B: 200")
    else:
        assert head.startswith(b"HTTP/1.0 503"), head
        results.add(SUITE, "twin: the same with --client-share 0", "B refused 503",
                    "B: 503")


# -- 3. the default log says nothing about who asked what ----------------------------------


MALFORMED = b"GET /target/secret-site.test+443 HTTP/1.1\r\nNo colon here\r\n\r\n"


@pytest.mark.parametrize("opt_in", [False, True])
def test_default_log_names_no_client_and_no_target(
    identity_dir: Path, tmp_path: Path, results: Results, opt_in: bool
) -> None:
    mport = free_port()
    args = ["--metrics-listen", f"127.0.0.1:{mport}", "--resolve",
            "secret-name.test=10.20.30.40"]
    if opt_in:
        args.append("--log-client-addresses")
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), args, tls=False)
    try:
        start = len(n.lines)
        for _ in range(300):
            with contextlib.suppress(OSError):
                exchange(n.port, MALFORMED, tls=False, timeout=10)
        n.query("secret-name.test+443", "00" * 20)  # refused by policy
        n.query("other-secret.test+443", "00" * 20)  # unresolvable
        time.sleep(0.5)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5
                                         ).read().decode()
    finally:
        n.stop()
    after = n.lines[start:]
    text = "\n".join(after)
    growth = sum(len(line) + 1 for line in after)
    assert "notary_malformed_requests_total 300.0" in metrics
    if not opt_in:
        for word in ("127.0.0.1", "secret", "Traceback"):
            assert word not in text, (word, after[:5])
        assert growth / 300 < len(MALFORMED), growth  # per request, less than its size
        results.add(SUITE, "300 malformed requests + requests about two named sites, "
                    "default logging", "no client address or target name in the log; "
                    "growth under one request's size; counted in metrics",
                    f"{len(after)} log line(s), {growth} bytes; metric 300")
    else:
        assert "127.0.0.1" in text and growth > 300 * len(MALFORMED)
        results.add(SUITE, "twin: the same with --log-client-addresses",
                    "each rejected request logged with its client address",
                    f"{len(after)} lines, {growth} bytes")


# -- 4. permissions whatever the umask -----------------------------------------------------


def serve_briefly(data_dir: Path, umask: int = 0o022,
                  while_serving: Callable[[], None] | None = None,
                  ) -> subprocess.CompletedProcess[str]:
    """``notary serve`` until it says it serves; ``while_serving`` runs then, before it is
    stopped (files it removes when it stops, such as its pid file, are still there)."""

    def child() -> None:
        os.umask(umask)

    proc = subprocess.Popen(
        [sys.executable, "-m", "notary.cli", "serve", "--data-dir", str(data_dir), "--no-tls",
         "--listen", "127.0.0.1:0"], cwd=REPO, stderr=subprocess.PIPE, text=True,
        preexec_fn=child,
    )
    assert proc.stderr is not None
    err = []
    deadline = time.monotonic() + 30
    for line in proc.stderr:
        err.append(line)
        if "pin" in line or "no TLS" in line or time.monotonic() > deadline:
            break
    try:
        if while_serving is not None and proc.poll() is None:
            while_serving()
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=10)[1]
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", "".join(err) + rest)


def test_umask_000_leaves_nothing_writable_by_others(tmp_path: Path, results: Results) -> None:
    d = tmp_path / "data"
    modes: dict[str, str] = {}

    def look() -> None:  # while it serves: the pid file exists only then
        modes.update({p.name: oct(p.stat().st_mode & 0o777) for p in [d, *sorted(d.iterdir())]})

    r = serve_briefly(d, umask=0, while_serving=look)
    assert "notary: serving" in r.stderr, r.stderr
    assert modes["data"] == "0o700"
    for name in ("notary.key", "signing.key", "notary.sqlite3"):
        assert modes[name] == "0o600", modes
    assert modes["notary.pem"] == "0o644"
    assert modes["notary.pid"] == "0o644", modes
    for name, mode in modes.items():
        assert not int(mode, 8) & 0o022, (name, modes)
    results.add(SUITE, "notary serve under umask 000", "data dir 0700, keys and database "
                "0600, certificate 0644", ", ".join(f"{k} {v[2:]}" for k, v in modes.items()))


def test_a_symlinked_pid_file_is_refused_and_its_target_kept(tmp_path: Path,
                                                             results: Results) -> None:
    d = tmp_path / "data"
    assert "notary: serving" in serve_briefly(d).stderr  # first run: the data directory
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (d / "notary.pid").symlink_to(victim)
    r = serve_briefly(d)
    assert r.returncode not in (0, None) and "notary: serving" not in r.stderr, r.stderr
    assert f"cannot write {d / 'notary.pid'}" in r.stderr, r.stderr
    assert victim.read_text() == "keep\n"
    results.add(SUITE, "DATA/notary.pid a symlink to another file", "refused, the file "
                "kept", r.stderr.strip().splitlines()[-1][:120])


def test_twin_a_stale_pid_file_is_replaced_with_mode_0644(tmp_path: Path) -> None:
    d = tmp_path / "data"
    assert "notary: serving" in serve_briefly(d).stderr
    stale = d / "notary.pid"
    stale.write_text("999999\n")
    stale.chmod(0o666)
    seen: dict[str, str] = {}

    def look() -> None:
        seen["text"] = stale.read_text()
        seen["mode"] = oct(stale.stat().st_mode & 0o777)

    r = serve_briefly(d, while_serving=look)
    assert "notary: serving" in r.stderr, r.stderr
    assert seen["text"].strip().isdigit() and seen["text"] != "999999\n", seen
    assert seen["mode"] == "0o644", seen


@pytest.mark.parametrize("what", ["dir 0777", "cert 0666", "key owned by another user",
                                  "database 0666"])
def test_writable_or_foreign_data_is_refused(
    identity_dir: Path, tmp_path: Path, results: Results, what: str
) -> None:
    d = copy_identity(identity_dir, tmp_path / "data")
    os.chmod(d, 0o700)
    # twin first: the same data directory, tidy, starts
    ok = serve_briefly(d)
    assert "notary: serving" in ok.stderr, ok.stderr
    if what == "dir 0777":
        os.chmod(d, 0o777)
    elif what == "cert 0666":
        os.chmod(d / "notary.pem", 0o666)
    elif what == "database 0666":
        os.chmod(d / "notary.sqlite3", 0o666)
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(d / "notary.key", 65534, 65534)
    bad = serve_briefly(d)
    assert bad.returncode == 2, bad
    assert ("writable by other users" in bad.stderr or "owned by uid" in bad.stderr), bad.stderr
    assert "Traceback" not in bad.stderr
    results.add(SUITE, f"start with {what}", "exit 2 with one line saying what to fix "
                "(twin: the tidy directory starts)", bad.stderr.strip().splitlines()[-1][:90])


# -- 5. refusals do not reveal internal DNS answers ----------------------------------------


def test_refusal_names_the_policy_not_the_resolved_address(
    identity_dir: Path, tmp_path: Path, results: Results
) -> None:
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"),
                      ["--resolve", "intranet.test=10.9.8.7"], tls=False)
    try:
        legacy = n.query("intranet.test+443", "00" * 20)
        status, stmt = v2(n.port, {"host": "intranet.test", "port": 443,
                                   "fingerprint": "00" * 32})
        named = n.query("intranet.test+443/10.9.8.7", "00" * 20)
    finally:
        n.stop()
    assert legacy.status == 403 and b"address policy" in legacy.body
    assert b"10.9.8.7" not in legacy.body and b"private" not in legacy.body.split(b":", 2)[-1]
    assert status == 403 and stmt["verdict"] == "refused" and stmt["address"] is None
    assert "10.9.8.7" not in json.dumps(stmt)
    # twin: an address the client named itself is named back with its range
    assert named.status == 403 and b"10.9.8.7" in named.body and b"private-use" in named.body
    results.add(SUITE, "ask about a name the operator's resolver maps to 10.9.8.7",
                "403 / signed 'refused' naming the policy, never the address",
                "legacy 403 and v2 refused (address null) without 10.9.8.7; twin names it")


# -- 6. special-purpose ranges, whatever Python's patch level ------------------------------


@pytest.mark.parametrize("literal", ["192.0.0.1", "[3fff::1]", "198.18.0.1", "100.64.0.1"])
def test_special_purpose_ranges_refused_on_this_python(
    one_notary: NotaryProcess, results: Results, literal: str
) -> None:
    r = one_notary.query(f"{literal}+443", "00" * 20)
    assert r.status == 403 and b"not globally reachable" in r.body, r
    results.add(SUITE, f"probe {literal} (Python {sys.version.split()[0]})",
                "403 naming the IANA range", r.body.decode().strip().split("(", 1)[1][:80])


# -- 7. Expect: 100-continue with an oversize body -----------------------------------------


def expect_exchange(port: int, path: str, length: int) -> tuple[bytes, float, bool]:
    """(what the notary sent within 2 s, seconds until it closed, closed?)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    with s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: n\r\nExpect: 100-continue\r\n"
                  f"Content-Length: {length}\r\n\r\n".encode())
        s.settimeout(2)
        t0 = time.monotonic()
        data = b""
        closed = False
        with contextlib.suppress(TimeoutError):
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    closed = True
                    break
                data += chunk
        return data, time.monotonic() - t0, closed


@pytest.mark.parametrize("path", ["/target/site.test+443", "/v2/answer"])
def test_expect_continue_with_oversize_body_gets_413_at_once(
    one_notary: NotaryProcess, results: Results, path: str
) -> None:
    data, secs, closed = expect_exchange(one_notary.port, path, 1_000_000)
    assert data.startswith(b"HTTP/1.1 413") and b"100 Continue" not in data, data[:80]
    assert closed and secs < 1.0, (closed, secs)
    # twin: a body within the bound gets 100 Continue
    small, _, _ = expect_exchange(one_notary.port, path, 40)
    assert small.startswith(b"HTTP/1.1 100 Continue"), small[:80]
    results.add(SUITE, f"POST {path} with Expect: 100-continue, Content-Length 1000000",
                "413 at once, no 100, connection closed (twin: 40 bytes -> 100 Continue)",
                f"413 and closed after {secs:.3f} s", secs)


def test_relay_never_sends_100_continue(
    identity_dir: Path, tmp_path: Path, results: Results
) -> None:
    relay_port = free_port()
    n = NotaryProcess(copy_identity(identity_dir, tmp_path / "data"), [
        "--relay-listen", f"127.0.0.1:{relay_port}"], tls=False)
    try:
        s = socket.create_connection(("127.0.0.1", relay_port), timeout=5)
        with s:
            s.sendall(b"CONNECT other.test:443 HTTP/1.1\r\nExpect: 100-continue\r\n"
                      b"Content-Length: 1000000\r\n\r\n")
            head = read_to_eof(s)
    finally:
        n.stop()
    assert head.startswith(b"HTTP/1.0 403 Access Denied") and b"100" not in head.split(b"\r\n")[0]
    results.add(SUITE, "relay: CONNECT with Expect: 100-continue and Content-Length 1000000",
                "the usual answer (403 for a port other than 4242), never 100",
                head.split(b"\r\n")[0].decode())
