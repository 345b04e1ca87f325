"""Malformed certificates and unusual names get a verdict, never a 500 or a traceback.

The certificates come from our own DER-level generator (``fuzz/certmut.py``): a valid chain
with one defect each (a SAN that is not DER, an empty extKeyUsage, a duplicated extension,
a malformed authorityInfoAccess, zero and negative serials, an unknown critical extension,
a truncated signature, an underscore and an over-long label in the name). Each is served as
a real TLS target on loopback through a notary in ``ca`` and ``both`` modes, and fed to
``verify_chain`` and ``replay rootstore analyze``.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

from notary import keys
from notary.ca.verify import RootStore, verify_chain
from notary.config import Settings
from notary.keys import Identity
from notary.server import server_ssl_context
from notary.web import SERVICE, create_app
from replay.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from certmut import Defect, defects, make_chain, mutate_extensions, pem  # noqa: E402
from rootstore_support import ChainServer  # noqa: E402

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DEFECTS = defects(NOW)
BY_NAME = {d.name: d for d in DEFECTS}
# names the notary's target parser already refuses (a label over 63 characters): unit only
SERVED = [d for d in DEFECTS if d.name != "over-long-label"]
EXPECTED = {
    "san-not-der": ("bad-chain", "subjectAltName extension does not parse"),
    "empty-eku": ("bad-chain", "extendedKeyUsage extension does not parse"),
    "duplicate-extension": ("bad-chain", "duplicate subjectAltName extension"),
    "malformed-aia": ("bad-chain", "authorityInfoAccess extension does not parse"),
    "zero-serial": ("bad-chain", "serial number is not positive"),
    "negative-serial": ("bad-chain", "serial number is not positive"),
    "unknown-critical-extension": ("bad-chain", "unaccounted-for critical extensions"),
    "truncated-signature": ("bad-chain", "did not sign it"),
    "underscore-name": ("wrong-host", "is not a host name the web-PKI rules accept"),
    "over-long-label": ("wrong-host", "is not a host name the web-PKI rules accept"),
}


def store_of(*roots: bytes) -> RootStore:
    return RootStore("test", [x509.load_der_x509_certificate(r) for r in roots])


@pytest.mark.parametrize("d", DEFECTS, ids=[d.name for d in DEFECTS])
def test_every_defect_gets_a_verdict_naming_it(d: Defect) -> None:
    v = verify_chain((d.leaf, d.root), d.host, int(NOW.timestamp()), store_of(d.root))
    verdict, words = EXPECTED[d.name]
    assert v.verdict == verdict and words in v.reason, (d.name, v)
    assert v.unevaluable is (d.name not in {"unknown-critical-extension",
                                             "truncated-signature"})
    assert "\n" not in v.reason and "<Certificate" not in v.reason


def test_twin_the_unmodified_chain_is_ok() -> None:
    c = make_chain("fine.test", NOW)
    root = c.root_der
    leaf = c.leaf.public_bytes(Encoding.DER)
    v = verify_chain((leaf, root), "fine.test", int(NOW.timestamp()), store_of(root))
    assert v.ok and not v.unevaluable


# -- through a notary ----------------------------------------------------------------------


# OpenSSL will not load these as a server's own certificate; they are served second in the
# chain instead, after a valid leaf (the notary parses the whole presented chain)
AS_SECOND = {"san-not-der", "duplicate-extension"}


class Served(ChainServer):
    """A defect's chain (or, for :data:`AS_SECOND`, a good leaf with the defect second)."""

    def __init__(self, d: Defect, tmp: Path) -> None:
        if d.name in AS_SECOND:
            c = make_chain(d.host, NOW)
            self.leaf = c.leaf.public_bytes(Encoding.DER)
            chain = [self.leaf, d.leaf, c.root_der]
            key = c.leaf_key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        else:
            self.leaf, chain, key = d.leaf, [d.leaf, d.root], d.key_pem
        super().__init__(chain, key, tmp)

    async def start(self) -> Served:
        await super().start()
        return self


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> Identity:
    d = tmp_path_factory.mktemp("identity")
    return keys.generate(d / "notary.key", d / "notary.pem", "localhost",
                         now=dt.datetime.now(dt.UTC))


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[dict[str, Served]]:
    out = {d.name: await Served(d, tmp_path / d.name).start() for d in SERVED}
    yield out
    for s in out.values():
        await s.stop()


async def notary(identity: Identity, tmp_path: Path, mode: str
                 ) -> tuple[web.AppRunner, int, web.Application]:
    roots = tmp_path / "roots.pem"
    roots.write_bytes(b"".join(pem(d.root) for d in DEFECTS))
    d = tmp_path / f"notary-{mode}"
    d.mkdir()
    settings = Settings(data_dir=d, listen=["127.0.0.1:0"], allow_target=["127.0.0.0/8"],
                        resolve=[f"{x.host}=127.0.0.1" for x in SERVED], probe_timeout=3.0,
                        verifier=mode, ca_roots=[str(roots)], ca_no_mozilla=True)
    settings.check()
    app = create_app(settings, identity, signing_key=keys.ensure_signing_key(d / "signing.key"))
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(identity))
    await site.start()
    return runner, runner.addresses[0][1], app


async def ask(session: aiohttp.ClientSession, port: int, d: Defect, target: Served
              ) -> tuple[int, int, dict[str, Any]]:
    fp = hashlib.sha1(target.leaf).hexdigest()
    async with session.post(f"https://127.0.0.1:{port}/target/{d.host}+{target.port}",
                            data=f"fingerprint={fp}", ssl=False) as r:
        legacy = r.status
    body = json.dumps({"host": d.host, "port": target.port,
                       "fingerprint": hashlib.sha256(target.leaf).hexdigest()})
    async with session.post(f"https://127.0.0.1:{port}/v2/answer", data=body, ssl=False) as r:
        ext = r.status
        doc = json.loads(await r.read())
    return legacy, ext, doc["statement"]


@pytest.mark.parametrize("mode", ["both", "ca"])
async def test_notary_answers_every_malformed_target(
    identity: Identity, tmp_path: Path, served: dict[str, Served], mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner, port, app = await notary(identity, tmp_path, mode)
    try:
        with caplog.at_level(logging.DEBUG):
            async with aiohttp.ClientSession() as session:
                for d in SERVED:
                    legacy, ext, stmt = await ask(session, port, d, served[d.name])
                    # both: the perspective answer is unaffected; ca: the signed failure
                    want = 200 if mode == "both" else 409
                    assert (legacy, ext) == (want, want), (d.name, legacy, ext, stmt)
                    assert stmt["ca"]["verdict"] == EXPECTED[d.name][0], (d.name, stmt["ca"])
                ca = app[SERVICE].ca
                assert ca is not None
                computed = ca.computed
                # the verdicts are cached: asking again verifies nothing anew
                for d in SERVED:
                    legacy, _, _ = await ask(session, port, d, served[d.name])
                    assert legacy == (200 if mode == "both" else 409)
                assert ca.computed == computed
    finally:
        await runner.cleanup()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    # verdicts are counted (notary_ca_verdicts_total), not logged per probe: nothing at INFO,
    # one DEBUG line per target computed
    infos = [r for r in caplog.records if r.name == "notary.ca" and r.levelno >= logging.INFO]
    assert infos == []
    debugs = [r for r in caplog.records if r.name == "notary.ca" and r.levelno == logging.DEBUG]
    assert len(debugs) >= len(SERVED)


# -- batch tools ---------------------------------------------------------------------------


def test_rootstore_analyze_keeps_going_and_counts(tmp_path: Path) -> None:
    good = make_chain("good.test", NOW)
    lines = [{"host": "good.test", "port": 443, "chain": [
        base64.b64encode(good.leaf.public_bytes(Encoding.DER)).decode(),
        base64.b64encode(good.root_der).decode()]}]
    roots = [good.root_der]
    for d in SERVED:
        lines.append({"host": d.host, "port": 443, "chain": [
            base64.b64encode(d.leaf).decode(), base64.b64encode(d.root).decode()]})
        roots.append(d.root)
    chains = tmp_path / "chains.jsonl"
    chains.write_text("".join(json.dumps(x) + "\n" for x in lines))
    roots_file = tmp_path / "roots.pem"
    roots_file.write_bytes(b"".join(pem(r) for r in roots))
    out = tmp_path / "analysis"
    rc = main(["rootstore", "analyze", "--chains", str(chains), "--roots", str(roots_file),
               "--no-mozilla", "--now", str(int(time.time())), "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["sites_with_chain"] == len(lines)
    assert summary["valid_sites"] == 1  # the twin
    unevaluable = sum(1 for d in SERVED if d.name not in {"unknown-critical-extension",
                                                         "truncated-signature"})
    assert summary["sites_unevaluable"] == unevaluable


# -- fuzzing -------------------------------------------------------------------------------


def test_seeded_extension_mutations_always_get_a_verdict() -> None:
    import random

    rng = random.Random(1)
    chain = make_chain("fuzz.test", NOW)
    store = store_of(chain.root_der)
    seen: set[str] = set()
    for _ in range(300):
        leaf = mutate_extensions(chain, rng)
        v = verify_chain((leaf, chain.root_der), "fuzz.test", int(NOW.timestamp()), store)
        seen.add(v.verdict)
    assert "bad-chain" in seen  # the mutations do break certificates
