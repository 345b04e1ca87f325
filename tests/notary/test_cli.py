"""One subprocess test per CLI command (serve, keygen, bundle, check), plus key permissions
and two worker processes sharing one SQLite store."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import trustme
from notary_support import (
    Notary,
    TLSTarget,
    exchange,
    free_port,
    get_request,
    leaf_der,
    legacy_post_request,
    parse_reply,
    sha1_fp,
    sha256_fp,
)

from notary.keys import Identity, load

MakeTarget = Callable[..., Awaitable[TLSTarget]]
MakeNotary = Callable[..., Awaitable[Notary]]

NOTARY = str(Path(sys.executable).parent / "notary")


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NOTARY, *args], capture_output=True, text=True, timeout=timeout, check=False
    )


async def run_cli_async(*args: str, timeout: float = 60) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        NOTARY, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# -- keygen ---------------------------------------------------------------------------------


def test_keygen_creates_a_private_key_and_refuses_to_overwrite(tmp_path: Path) -> None:
    data = tmp_path / "data"
    r = run_cli("keygen", "--data-dir", str(data), "--hostname", "notary.test")
    assert r.returncode == 0, r.stderr
    key, cert = data / "notary.key", data / "notary.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    ident = load(key, cert)
    assert ident.pin_sha1 in r.stdout and ident.pin_sha256 in r.stdout
    assert ident.key.key_size == 2048
    # twin: a second run does not replace the key
    again = run_cli("keygen", "--data-dir", str(data))
    assert again.returncode == 1
    assert "exists" in again.stderr
    assert load(key, cert).pin_sha1 == ident.pin_sha1
    forced = run_cli("keygen", "--data-dir", str(data), "--force")
    assert forced.returncode == 0
    assert load(key, cert).pin_sha1 != ident.pin_sha1
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


# -- bundle ---------------------------------------------------------------------------------

V1_HOST_KEYS = {"host", "ssl_port", "http_port", "certificate"}
V1_OPTIONAL = {"region", "protocols", "signing_keys"}  # extra keys v1 clients ignore


def check_v1_bundle(doc: dict[str, object]) -> None:
    """The v1 bundle shape of convergence-v1.md."""
    assert doc["version"] == 1
    assert isinstance(doc["name"], str) and doc["name"]
    loc = doc["bundle_location"]
    assert isinstance(loc, str) and loc.startswith("https://") and loc.endswith(".notary")
    assert set(doc) - {"version", "name", "bundle_location", "hosts"} <= V1_OPTIONAL
    hosts = doc["hosts"]
    assert isinstance(hosts, list) and len(hosts) >= 1
    for h in hosts:
        assert set(h) == V1_HOST_KEYS
        assert isinstance(h["host"], str)
        assert isinstance(h["ssl_port"], int) and isinstance(h["http_port"], int)
        assert h["certificate"].startswith("-----BEGIN CERTIFICATE-----")


def test_bundle_writes_the_v1_shape(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert run_cli("keygen", "--data-dir", str(data)).returncode == 0
    out = tmp_path / "example.notary"
    r = run_cli(
        "bundle", "--data-dir", str(data), "--host", "Notary.Example.org", "--ssl-port", "8443",
        "--http-port", "8080", "--name", "Example Org", "--region", "de", "-o", str(out),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    check_v1_bundle(doc)
    assert doc["name"] == "Example Org"
    # the default location is on the notary's own HTTPS port
    assert doc["bundle_location"] == "https://notary.example.org:8443/example-org.notary"
    assert doc["region"] == "DE"
    (host,) = doc["hosts"]
    assert host["host"] == "notary.example.org"
    assert (host["ssl_port"], host["http_port"]) == (8443, 8080)
    assert host["certificate"] == (data / "notary.pem").read_text()
    # to stdout as well
    r2 = run_cli("bundle", "--data-dir", str(data), "--host", "n.example", "--name", "X",
                 "--ssl-port", "443", "--bundle-location", "https://n.example/x.notary")
    assert r2.returncode == 0
    doc2 = json.loads(r2.stdout)
    check_v1_bundle(doc2)
    r3 = run_cli("bundle", "--data-dir", str(data), "--host", "n.example", "--name", "X",
                 "--ssl-port", "443")
    # twin: on port 443 the default location names no port
    assert json.loads(r3.stdout)["bundle_location"] == "https://n.example/x.notary"
    assert doc2["hosts"][0]["ssl_port"] == 443 and doc2["hosts"][0]["http_port"] == 80
    # without --ssl-port: the port notary serve and make run listen on
    r4 = run_cli("bundle", "--data-dir", str(data), "--host", "n.example", "--name", "X")
    assert json.loads(r4.stdout)["hosts"][0]["ssl_port"] == 8443


@pytest.mark.parametrize(
    "extra",
    [
        ["--bundle-location", "http://n.example/x.notary"],
        ["--bundle-location", "https://n.example/x.json"],
        ["--ssl-port", "0"],
        ["--http-port", "70000"],
        ["--region", "DEU"],
    ],
)
def test_bundle_rejects_bad_values(tmp_path: Path, identity: Identity, extra: list[str]) -> None:
    r = run_cli(
        "bundle", "--data-dir", str(tmp_path), "--cert", str(identity.cert_path),
        "--host", "n.example", "--name", "X", *extra,
    )
    assert r.returncode == 2
    assert r.stderr.startswith("notary: ")
    assert r.stdout == ""


def test_bundle_without_a_certificate_fails(tmp_path: Path) -> None:
    r = run_cli("bundle", "--data-dir", str(tmp_path), "--host", "n.example", "--name", "X")
    assert r.returncode == 2
    assert "cannot read certificate" in r.stderr


# -- check ----------------------------------------------------------------------------------


async def test_check_prints_the_target_fingerprints(
    make_target: MakeTarget, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert)
    rc, out, err = await run_cli_async(
        "check", f"site.test:{target.port}", "--resolve", "site.test=127.0.0.1", "--json"
    )
    assert rc == 0, err
    doc = json.loads(out)
    der = leaf_der(site_cert)
    assert doc["sha1"] == sha1_fp(der) and doc["sha256"] == sha256_fp(der)
    assert doc["target"] == f"site.test:{target.port}"
    assert doc["address"] == "127.0.0.1"
    assert doc["chain"][0]["subject"]
    assert target.sni_seen == ["site.test"]
    # human-readable form
    rc, out, err = await run_cli_async(
        "check", f"127.0.0.1:{target.port}", "--ip", "127.0.0.1"
    )
    assert rc == 0, err
    assert f"SHA-1:   {sha1_fp(der)}" in out


async def test_check_names_an_ipv6_target_in_brackets(
    make_target: MakeTarget, site_cert: trustme.LeafCert
) -> None:
    target = await make_target(site_cert, host="::1")
    rc, out, err = await run_cli_async("check", f"[::1]:{target.port}", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["target"] == f"[::1]:{target.port}"  # not "::1:PORT", which reads as an address
    assert doc["address"] == "::1"


async def test_check_dead_port_fails(tmp_path: Path) -> None:
    port = free_port()
    rc, out, err = await run_cli_async("check", f"127.0.0.1:{port}", "--timeout", "2")
    assert rc == 1
    assert "refused" in err and out == ""


# -- serve ----------------------------------------------------------------------------------


async def wait_ready(port: int, proc: asyncio.subprocess.Process, timeout: float = 30) -> None:
    """Poll ``GET /`` until the notary answers (fails early if the process exits)."""
    async with asyncio.timeout(timeout):
        while True:
            if proc.returncode is not None:
                raise AssertionError(f"notary exited early with {proc.returncode}")
            try:
                raw, _ = await exchange(port, get_request("/"), timeout=5)
                if raw.startswith(b"HTTP/1.") and parse_reply(raw).status == 200:
                    return
            except (OSError, TimeoutError):
                pass
            await asyncio.sleep(0.2)


@pytest.fixture
async def spawn_serve(
    tmp_path: Path,
) -> AsyncIterator[Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int]]]]:
    procs: list[asyncio.subprocess.Process] = []

    async def spawn(
        *extra: str, data: Path | None = None
    ) -> tuple[asyncio.subprocess.Process, int]:
        port = free_port()
        log = open(tmp_path / f"serve{len(procs)}.log", "wb")  # noqa: SIM115
        try:
            proc = await asyncio.create_subprocess_exec(
                NOTARY, "serve", "--data-dir", str(data or tmp_path / "data"),
                "--listen", f"127.0.0.1:{port}", "--allow-target", "127.0.0.0/8",
                "--resolve", "site.test=127.0.0.1", *extra,
                stdout=log, stderr=log,
            )
        finally:
            log.close()
        procs.append(proc)
        return proc, port

    yield spawn
    for proc in procs:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_serve_answers_and_stops_cleanly_on_sigterm(
    spawn_serve: Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int]]],
    make_target: MakeTarget,
    site_cert: trustme.LeafCert,
    tmp_path: Path,
) -> None:
    target = await make_target(site_cert)
    proc, port = await spawn_serve()
    await wait_ready(port, proc)
    data = tmp_path / "data"
    assert stat.S_IMODE((data / "notary.key").stat().st_mode) == 0o600
    assert (data / "notary.sqlite3").exists()
    fp = sha1_fp(leaf_der(site_cert))
    raw, peer = await exchange(
        port, legacy_post_request(f"/target/site.test+{target.port}", f"fingerprint={fp}".encode())
    )
    r = parse_reply(raw, peer)
    assert r.status == 200 and r.fingerprints() == [fp]
    assert sha1_fp(peer or b"") == load(data / "notary.key", data / "notary.pem").pin_sha1
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 15) == 0
    with pytest.raises(OSError):
        await exchange(port, get_request("/"), timeout=5)


async def test_serve_refuses_a_world_readable_key(
    spawn_serve: Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int]]],
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    assert run_cli("keygen", "--data-dir", str(data)).returncode == 0
    os.chmod(data / "notary.key", 0o644)
    proc, port = await spawn_serve()
    assert await asyncio.wait_for(proc.wait(), 30) == 2
    log = (tmp_path / "serve0.log").read_text()
    assert "accessible by other users" in log and "chmod 600" in log
    # twin: after chmod 600 the same data directory serves
    os.chmod(data / "notary.key", 0o600)
    proc2, port2 = await spawn_serve()
    await wait_ready(port2, proc2)
    proc2.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc2.wait(), 15) == 0


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    if not path.exists():
        return []
    return [int(x) for x in path.read_text().split()]


async def test_two_workers_share_one_store(
    spawn_serve: Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int]]],
    make_target: MakeTarget,
    site_cert: trustme.LeafCert,
    ca: trustme.CA,
    tmp_path: Path,
) -> None:
    target = await make_target(site_cert)
    proc, port = await spawn_serve("--workers", "2")
    await wait_ready(port, proc)
    if Path(f"/proc/{proc.pid}").exists():
        live = [c for c in _children(proc.pid) if Path(f"/proc/{c}").exists()]
        assert len(live) >= 2  # two workers (plus, possibly, multiprocessing's tracker)
    fp = sha1_fp(leaf_der(site_cert))
    req = legacy_post_request(f"/target/site.test+{target.port}", f"fingerprint={fp}".encode())

    first = parse_reply((await exchange(port, req))[0])
    assert first.status == 200 and first.cache_status == "converge-notary; fwd=miss"

    # many connections, spread over both workers by the kernel: every one is answered from
    # the shared store, without another probe
    sem = asyncio.Semaphore(8)

    async def one() -> tuple[int, str | None, list[str]]:
        async with sem:
            r = parse_reply((await exchange(port, req))[0])
            return r.status, r.cache_status, r.fingerprints()

    results = await asyncio.gather(*(one() for _ in range(48)))
    assert all(r == (200, "converge-notary; hit", [fp]) for r in results), results
    assert target.hellos == 1

    # twin: a wrong fingerprint is probed (by whichever worker gets it) and refused
    wrong = sha1_fp(leaf_der(ca.issue_cert("site.test")))
    bad = legacy_post_request(f"/target/site.test+{target.port}", f"fingerprint={wrong}".encode())
    r = parse_reply((await exchange(port, bad))[0])
    assert r.status == 409 and r.fingerprints() == [fp]
    assert target.hellos == 2

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 20) == 0
    with pytest.raises(OSError):
        await exchange(port, get_request("/"), timeout=5)
    # one history in the SQLite file: one row for the one certificate seen
    with sqlite3.connect(tmp_path / "data" / "notary.sqlite3") as db:
        rows = db.execute(
            "SELECT COUNT(*) FROM observations WHERE location = ?", (f"site.test:{target.port}",)
        ).fetchone()
        version = db.execute(
            "SELECT version FROM targets WHERE location = ?", (f"site.test:{target.port}",)
        ).fetchone()
    assert rows == (1,)
    assert version == (2,)


# -- main(argv) in-process ------------------------------------------------------------------


def test_main_in_process(
    tmp_path: Path, identity: Identity, capsys: pytest.CaptureFixture[str]
) -> None:
    from notary.cli import main

    assert main(["bundle", "--data-dir", str(tmp_path), "--cert", str(identity.cert_path),
                 "--host", "n.example", "--name", "N"]) == 0
    check_v1_bundle(json.loads(capsys.readouterr().out))
    # bad input is exit 2 with a one-line message, never a traceback
    assert main(["serve", "--data-dir", str(tmp_path), "--workers", "0"]) == 2
    assert capsys.readouterr().err.startswith("notary: workers must be positive")
    assert main(["check", "bad host:443"]) == 2
    assert "notary: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2


async def test_access_log_does_not_pair_clients_with_targets(
    spawn_serve: Callable[..., Awaitable[tuple[asyncio.subprocess.Process, int]]],
    make_target: MakeTarget,
    site_cert: trustme.LeafCert,
    tmp_path: Path,
) -> None:
    target = await make_target(site_cert)
    fp = sha1_fp(leaf_der(site_cert))
    req = legacy_post_request(f"/target/site.test+{target.port}", f"fingerprint={fp}".encode())
    lines: dict[str, list[str]] = {}
    sizes: list[int] = []
    for i, extra in enumerate(([], ["--log-client-addresses"])):
        proc, port = await spawn_serve("--access-log", *extra, data=tmp_path / f"d{i}")
        await wait_ready(port, proc)
        raw = (await exchange(port, req))[0]
        assert parse_reply(raw).status == 200
        sizes.append(len(raw))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 15) == 0
        log = (tmp_path / f"serve{i}.log").read_text()
        lines[" ".join(extra)] = [ln for ln in log.splitlines() if "/target/" in ln]
    private = lines[""]
    assert private, "the access log recorded the request"
    # the answer's status and its size on the wire (head and body), as aiohttp logs them
    assert any(f'" 200 {sizes[0]} ' in ln for ln in private), (sizes, private)
    assert not any("127.0.0.1" in ln for ln in private), private
    # twin: asked to, the operator gets client addresses
    assert any("127.0.0.1" in ln for ln in lines["--log-client-addresses"])


def test_bundle_refuses_one_witness_key_named_twice(tmp_path: Path) -> None:
    """``notary bundle --witness``: the clients refuse a transparency member naming one key
    twice (a cosignature does not sign the witness's name), so the notary does not write
    one: one key under two names, or the log's own key as a witness's. Twin: two keys."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from notary.tlog.note import COSIGNATURE, Signer, Verifier

    data = tmp_path / "data"
    assert run_cli("keygen", "--data-dir", str(data)).returncode == 0
    r = run_cli("log-key", "--data-dir", str(data))
    assert r.returncode == 0, r.stderr
    log = Verifier.parse(r.stdout.strip())
    key = Ed25519PrivateKey.generate()
    a = Signer("w.test/a", key, COSIGNATURE).verifier.vkey()
    a_again = Signer("w.test/b", key, COSIGNATURE).verifier.vkey()
    b = Signer("w.test/b", Ed25519PrivateKey.generate(), COSIGNATURE).verifier.vkey()
    log_as_witness = Verifier("w.test/log", COSIGNATURE, log.public, log.raw).vkey()
    base = ["bundle", "--data-dir", str(data), "--host", "n.example", "--name", "X"]
    for ws in ([a, a_again], [a, log_as_witness]):
        r = run_cli(*base, *(x for w in ws for x in ("--witness", w)))
        assert r.returncode == 2 and "already named" in r.stderr, r.stderr
        assert r.stdout == ""
    r = run_cli(*base, "--witness", a, "--witness", b)
    assert r.returncode == 0, r.stderr
    member = json.loads(r.stdout)["transparency"]
    assert [w["vkey"] for w in member["witnesses"]] == [a, b]
    assert member["min_cosignatures"] == 2 and member["log"] == log.vkey()
