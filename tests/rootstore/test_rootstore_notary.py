"""The notary with ``--verifier perspective|both|ca`` over real sockets on loopback.

The default keeps legacy answers byte-identical; ``both`` adds the CA verdict to logs and
the extended statement; ``ca`` also refuses (409) a certificate whose chain fails.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from rootstore_support import NOW, PKI, ChainServer, roots_pem

from notary import keys
from notary.config import Settings
from notary.keys import Identity
from notary.server import server_ssl_context
from notary.web import SERVICE, create_app
from replay.pki import der, make_leaf

CLOCK = NOW.timestamp() + 3600


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> Identity:
    d = tmp_path_factory.mktemp("identity")
    return keys.generate(d / "notary.key", d / "notary.pem", "localhost",
                         now=dt.datetime.now(dt.UTC))


Started = tuple[int, web.Application]


@pytest.fixture
async def start(identity: Identity, tmp_path: Path) -> AsyncIterator[
        Callable[..., Awaitable[Started]]]:
    runners: list[web.AppRunner] = []

    async def factory(**kw: Any) -> Started:
        d = tmp_path / f"n{len(runners)}"
        d.mkdir()
        settings = Settings(data_dir=d, listen=["127.0.0.1:0"], allow_target=["127.0.0.0/8"],
                            resolve=["site.test=127.0.0.1"], probe_timeout=3.0, **kw)
        settings.check()
        app = create_app(settings, identity, clock=lambda: CLOCK,
                         signing_key=keys.ensure_signing_key(d / "signing.key"))
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(identity))
        await site.start()
        runners.append(runner)
        return runner.addresses[0][1], app

    yield factory
    for r in runners:
        await r.cleanup()


@pytest.fixture
async def target(pki: PKI, tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[
        ChainServer]]]:
    servers: list[ChainServer] = []

    async def factory(chain: tuple[bytes, ...]) -> ChainServer:
        s = await ChainServer(chain, pki.key_pem(), tmp_path / f"t{len(servers)}").start()
        servers.append(s)
        return s

    yield factory
    for s in servers:
        await s.stop()


async def legacy(port: int, spec: str, fp: str) -> tuple[int, bytes, str]:
    async with aiohttp.ClientSession() as session, session.post(
        f"https://127.0.0.1:{port}/target/{spec}", data=f"fingerprint={fp}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"}, ssl=False,
    ) as resp:
        return resp.status, await resp.read(), resp.headers.get("Cache-Status", "")


async def extended(port: int, target_port: int, fp: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"host": "site.test", "port": target_port, "fingerprint": fp})
    async with aiohttp.ClientSession() as session, session.post(
        f"https://127.0.0.1:{port}/v2/answer", data=body, ssl=False) as resp:
        return resp.status, json.loads(await resp.read())


def sha256_hex(chain: tuple[bytes, ...]) -> str:
    return hashlib.sha256(chain[0]).hexdigest()


def good_chain(pki: PKI) -> tuple[bytes, ...]:
    return pki.chain("site.test", 0)


def self_signed(pki: PKI) -> tuple[bytes, ...]:
    return (der(make_leaf(["site.test"], None, pki.key, NOW - dt.timedelta(days=1))),)


async def test_default_and_both_give_byte_identical_legacy_answers(
    pki: PKI, start: Any, target: Any, tmp_path: Path, identity: Identity
) -> None:
    roots = str(roots_pem(pki, tmp_path / "roots.pem"))
    chain = self_signed(pki)
    server = await target(chain)
    fp = sha256_hex(chain)
    spec = f"site.test+{server.port}"
    p_port, p_app = await start()
    b_port, b_app = await start(verifier="both", ca_roots=[roots], ca_no_mozilla=True)
    # the same certificate from the same clock: the same signed history, byte for byte
    first_p = await legacy(p_port, spec, fp)
    first_b = await legacy(b_port, spec, fp)
    assert first_p[0] == 200 and first_p == first_b
    hit_p, hit_b = await legacy(p_port, spec, fp), await legacy(b_port, spec, fp)
    assert hit_p == hit_b and hit_p[2] == "converge-notary; hit"
    # and both are exactly the legacy format's bytes for that one observation
    from notary.core import legacy as wire
    from notary.core.fingerprint import CertDigests
    from notary.core.history import observe
    from notary.core.signing import LegacySigner

    history = observe((), CertDigests.of(chain[0]), int(CLOCK))
    payload = wire.signed_payload(history)
    assert first_p[1] == wire.body(payload, LegacySigner(identity.key).sign(payload))
    # the chain is stored only when a CA verifier runs
    leaf = bytes.fromhex(fp)
    assert await b_app[SERVICE].store.get_chain(spec.replace("+", ":"), leaf) is not None
    assert await p_app[SERVICE].store.get_chain(spec.replace("+", ":"), leaf) is None
    assert p_app[SERVICE].ca is None


async def test_ca_mode_refuses_a_failing_chain_and_accepts_a_good_one(
    pki: PKI, start: Any, target: Any, tmp_path: Path
) -> None:
    roots = str(roots_pem(pki, tmp_path / "roots.pem"))
    port, _ = await start(verifier="ca", ca_roots=[roots], ca_no_mozilla=True)
    unsigned = self_signed(pki)
    bad = await target(unsigned)
    status, _, _ = await legacy(port, f"site.test+{bad.port}", sha256_hex(unsigned))
    assert status == 409
    # twin: a chain to a trusted root is vouched for, on the probe and on a cache hit
    chain = good_chain(pki)
    good = await target(chain)
    spec = f"site.test+{good.port}"
    assert (await legacy(port, spec, sha256_hex(chain)))[0] == 200
    status, _, cache = await legacy(port, spec, sha256_hex(chain))
    assert (status, cache) == (200, "converge-notary; hit")


async def test_restricted_store_in_ca_mode(
    pki: PKI, start: Any, target: Any, tmp_path: Path
) -> None:
    from notary.ca.verify import sha256_der

    roots = str(roots_pem(pki, tmp_path / "roots.pem"))
    trust = tmp_path / "top1.txt"
    trust.write_text(sha256_der(pki.roots[1].cert).hex() + "\n", encoding="utf-8")
    port, _ = await start(verifier="ca", ca_roots=[roots], ca_no_mozilla=True, ca_trust=trust)
    under_b = pki.chain("site.test", 1)
    under_a = pki.chain("site.test", 0)
    t_b, t_a = await target(under_b), await target(under_a)
    assert (await legacy(port, f"site.test+{t_b.port}", sha256_hex(under_b)))[0] == 200
    assert (await legacy(port, f"site.test+{t_a.port}", sha256_hex(under_a)))[0] == 409


async def test_extended_statement_has_ca_only_with_a_ca_verifier(
    pki: PKI, start: Any, target: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    roots = str(roots_pem(pki, tmp_path / "roots.pem"))
    chain = pki.chain("site.test", 0)
    server = await target(chain)
    p_port, _ = await start()
    b_port, _ = await start(verifier="both", ca_roots=[roots], ca_no_mozilla=True)
    status, doc = await extended(p_port, server.port, sha256_hex(chain))
    assert status == 200 and "ca" not in doc["statement"]
    with caplog.at_level(logging.DEBUG, logger="notary.ca"):
        status, doc = await extended(b_port, server.port, sha256_hex(chain))
    assert status == 200 and doc["statement"]["verdict"] == "match"
    ca = doc["statement"]["ca"]
    assert ca["verdict"] == "ok" and ca["store"] == "custom"
    assert ca["root_sha256"] == hashlib.sha256(der(pki.roots[0].cert)).hexdigest()
    # verdicts are counted (notary_ca_verdicts_total), logged only at DEBUG, never per probe
    # at INFO (a line per probe grew the log by gigabytes a day)
    assert any("verdict=ok" in r.getMessage() and r.levelno == logging.DEBUG
               for r in caplog.records)
    assert not [r for r in caplog.records
                if r.name == "notary.ca" and r.levelno >= logging.INFO and "verdict" in r.msg]
    # in "both" a failing chain is reported but does not change the verdict
    expired = pki.chain("site.test", 0, start=NOW - dt.timedelta(days=200))
    old = await target(expired)
    status, doc = await extended(b_port, old.port, sha256_hex(expired))
    assert status == 200 and doc["statement"]["verdict"] == "match"
    assert doc["statement"]["ca"]["verdict"] == "expired"


async def test_analysis_reads_the_chains_a_notary_kept(
    pki: PKI, start: Any, target: Any, tmp_path: Path
) -> None:
    import asyncio
    import csv

    from replay.cli import main

    roots = str(roots_pem(pki, tmp_path / "roots.pem"))
    port, app = await start(verifier="both", ca_roots=[roots], ca_no_mozilla=True)
    for root in (0, 0, 1):
        chain = pki.chain("site.test", root)
        server = await target(chain)
        assert (await legacy(port, f"site.test+{server.port}", sha256_hex(chain)))[0] == 200
    db = app[SERVICE].store.backend.path
    out = tmp_path / "analysis"
    rc = await asyncio.to_thread(main, [
        "rootstore", "analyze", "--db", str(db), "--roots", roots, "--no-mozilla", "--now",
        str(int(CLOCK)), "--out", str(out)])
    assert rc == 0
    with (out / "popularity.csv").open() as fh:
        rows = [(r["root"], r["sites"]) for r in csv.DictReader(fh)]
    assert rows == [("Test CA A", "2"), ("Test CA B", "1")]
    # twin: a notary in the default mode keeps no chains, so there is nothing to analyse
    p_port, p_app = await start()
    chain = pki.chain("site.test", 2)
    server = await target(chain)
    assert (await legacy(p_port, f"site.test+{server.port}", sha256_hex(chain)))[0] == 200
    rc = await asyncio.to_thread(main, [
        "rootstore", "analyze", "--db", str(p_app[SERVICE].store.backend.path), "--roots",
        roots, "--no-mozilla", "--out", str(tmp_path / "none")])
    assert rc == 2
