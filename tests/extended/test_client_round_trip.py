"""The Python client (package ``converge``) against a real notary on loopback, extended format.

The notary runs in-process (``tests/extended/conftest.py``: real TLS, real probes of a real
TLS target); the client pins its certificate, asks ``POST /v2/answer``, verifies the signed
answer against the bundle's signing keys and turns it into a vote.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from converge import Client, parse_bundle
from converge import extended as cext
from converge.cli import main as converge_main
from converge.config import Config
from converge.errors import ConfigError
from converge.fingerprint import Fingerprint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from notary import keys
from notary.cli import make_bundle
from notary.core import extended as sext
from notary.core.canonical import canonical_json

if TYPE_CHECKING:
    from tests.extended.conftest import Notary, Target


def bundle_doc(n: Notary, *, signing: bool = True, name: str = "Org T") -> dict[str, Any]:
    port = int(n.url.rsplit(":", 1)[1])
    doc = make_bundle(n.identity.cert_pem, "127.0.0.1", port, 80, name, None, None)
    if signing:
        doc["protocols"] = ["convergence-v1", sext.FORMAT]
        doc["signing_keys"] = keys.bundle_signing_keys(
            n.settings.signing_key_path, now=int(n.clock[0])
        )
    return doc


def client(
    tmp: Path, docs: list[dict[str, Any]], clock: Callable[[], float], **kw: Any
) -> Client:
    cfg = Config(
        directory=tmp,
        db=tmp / "cache.sqlite3",
        bundles=tuple(parse_bundle(d) for d in docs),
        early_return=False,
        connect_timeout=3,
        notary_timeout=5,
        total_timeout=10,
        **kw,
    )
    return Client(cfg, clock=clock)


def sha256(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def sha1(der: bytes) -> str:
    return hashlib.sha1(der).hexdigest()


async def test_match_is_a_verified_success_and_the_answer_verifies_offline(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0])
    v = await c.acheck("site.test", tls_target.port, sha256(tls_target.der))
    (r,) = v.results
    assert v.trusted and (r.vote, r.kind, r.protocol) == ("success", "match", sext.FORMAT)
    assert r.answer is not None
    stmt = json.loads(r.answer)["statement"]
    assert stmt["request"]["nonce"] is not None  # a fresh nonce by default
    assert stmt["target"] == {"host": "site.test", "port": tls_target.port, "ip": None}
    # what the client verified is the statement exactly as the notary's signer wrote it
    kid, _, signed = cext.split_answer(r.answer)
    assert signed == canonical_json(stmt) and kid == stmt["key_id"]
    # twin: the same statement bytes under a key the bundle does not hold
    trusted = {k.key_id: k.public_key for k in parse_bundle(bundle_doc(notary)).signing_keys}
    with pytest.raises(cext.AnswerRejected) as info:
        cext.verify_answer(r.answer.replace(kid.encode(), b"0" * 16, 1), trusted)
    assert info.value.kind == "unknown-key"
    c.close()


async def test_mismatch_is_a_failure(notary: Notary, tls_target: Target, tmp_path: Path) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0])
    v = await c.acheck("site.test", tls_target.port, "ab" * 32)
    assert not v.trusted
    assert [(r.vote, r.kind, r.status) for r in v.results] == [("failure", "mismatch", 409)]
    c.close()


async def test_sha1_is_accepted_and_a_known_certificate_asks_by_sha256(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0], cache_lifetime=0)
    v = await c.acheck("site.test", tls_target.port, sha1(tls_target.der))
    assert v.trusted and v.results[0].kind == "match"
    assert json.loads(v.results[0].answer or b"")["statement"]["request"]["alg"] == "sha1"
    notary.clock[0] += 1  # the local cache entry (lifetime 0) is now stale
    v = await c.acheck("site.test", tls_target.port, sha1(tls_target.der),
                       certificate=tls_target.der)
    stmt = json.loads(v.results[0].answer or b"")["statement"]
    assert v.trusted and stmt["request"]["alg"] == "sha256"
    c.close()


async def test_a_skewed_clock_makes_the_answer_stale(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    late = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0] + 301)
    v = await late.acheck("site.test", tls_target.port, sha256(tls_target.der))
    assert not v.trusted and [(r.vote, r.kind) for r in v.results] == [("failure", "stale")]
    late.close()
    # twin: within the skew it is a success
    ok = client(tmp_path / "ok", [bundle_doc(notary)], lambda: notary.clock[0] + 300)
    assert (await ok.acheck("site.test", tls_target.port, sha256(tls_target.der))).trusted
    ok.close()


async def test_an_answer_by_a_key_the_bundle_does_not_hold_is_a_failure(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    doc = bundle_doc(notary)
    other = Ed25519PrivateKey.generate().public_key()
    raw = sext.raw_public(other)
    doc["signing_keys"] = [{"alg": "ed25519", "key_id": sext.key_id(other),
                            "public_key": sext.b64url(raw), "status": "current"}]
    c = client(tmp_path, [doc], lambda: notary.clock[0])
    v = await c.acheck("site.test", tls_target.port, sha256(tls_target.der))
    assert not v.trusted
    assert [(r.vote, r.kind) for r in v.results] == [("failure", "unknown-key")]
    c.close()


async def test_off_speaks_legacy_to_the_same_notary(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0], extended="off")
    v = await c.acheck("site.test", tls_target.port, sha1(tls_target.der))
    r = v.results[0]
    assert v.trusted and (r.kind, r.protocol, r.answer) == ("listed", "convergence-v1", None)
    c.close()


async def test_legacy_bundle_stays_legacy_and_require_refuses_it(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    legacy_doc = bundle_doc(notary, signing=False)
    c = client(tmp_path, [legacy_doc], lambda: notary.clock[0])
    v = await c.acheck("site.test", tls_target.port, sha1(tls_target.der))
    assert v.trusted and v.results[0].protocol == "convergence-v1"
    c.close()
    strict = client(tmp_path / "s", [legacy_doc], lambda: notary.clock[0], extended="require")
    with pytest.raises(ConfigError, match="offers converge-answer/1"):
        await strict.acheck("site.test", tls_target.port, sha1(tls_target.der))
    strict.close()


async def test_refused_and_unreachable_targets_stand_aside(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0])
    v = await c.acheck("private.test", 443, "ab" * 32)
    assert [(r.vote, r.kind, r.status) for r in v.results] == [("unreachable", "refused", 403)]
    v = await c.acheck("site.test", 1, "ab" * 32)
    assert [(r.vote, r.kind, r.status) for r in v.results] == [
        ("unreachable", "target-unreachable", 503)
    ]
    assert not v.trusted  # nobody reachable is never trusted
    c.close()


@pytest.fixture
async def notary_without_signing_key(tmp_path: Path) -> AsyncIterator[tuple[str, Any]]:
    """A notary that speaks only the legacy format (no Ed25519 key): /v2/answer is a 400."""
    import datetime as dt

    from aiohttp import web

    from notary.config import Settings
    from notary.server import server_ssl_context
    from notary.web import create_app

    settings = Settings(data_dir=tmp_path / "legacy-notary", listen=["127.0.0.1:0"],
                        allow_target=["127.0.0.0/8"], resolve=["site.test=127.0.0.1"])
    identity = keys.generate(settings.key_path, settings.cert_path, "localhost",
                             now=dt.datetime.now(dt.UTC))
    app = create_app(settings, identity)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ssl_context(identity))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"https://127.0.0.1:{port}", identity
    await runner.cleanup()


async def test_fallback_only_when_configured(
    notary: Notary, notary_without_signing_key: tuple[str, Any], tls_target: Target,
    tmp_path: Path,
) -> None:
    url, identity = notary_without_signing_key
    doc = bundle_doc(notary)  # advertises our key ...
    doc["hosts"][0]["ssl_port"] = int(url.rsplit(":", 1)[1])  # ... at a legacy-only notary
    doc["hosts"][0]["certificate"] = identity.cert_pem
    prefer = client(tmp_path, [doc], lambda: notary.clock[0])
    v = await prefer.acheck("site.test", tls_target.port, sha1(tls_target.der))
    assert [(r.vote, r.kind, r.status) for r in v.results] == [("unreachable", "status", 400)]
    prefer.close()
    fallback = client(tmp_path / "f", [doc], lambda: notary.clock[0], extended="fallback")
    v = await fallback.acheck("site.test", tls_target.port, sha1(tls_target.der))
    r = v.results[0]
    assert v.trusted and (r.vote, r.kind, r.protocol) == ("success", "listed", "convergence-v1")
    fallback.close()
    # a bundle naming a transparency log is never asked in the legacy format, which carries
    # no proof: a notary refusing the extended request would otherwise skip its log
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from notary.tlog.note import Signer

    logged = {**doc, "transparency": {
        "log": Signer("log.test/l", Ed25519PrivateKey.generate()).verifier.vkey(),
        "url": "https://127.0.0.1/log", "witnesses": [], "min_cosignatures": 0}}
    fallback = client(tmp_path / "g", [logged], lambda: notary.clock[0], extended="fallback")
    v = await fallback.acheck("site.test", tls_target.port, sha1(tls_target.der))
    assert not v.trusted
    assert [(r.vote, r.kind, r.status) for r in v.results] == [("unreachable", "status", 400)]
    fallback.close()


async def test_check_saves_answers_and_verify_answer_checks_them(
    notary: Notary, tls_target: Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "cfg"
    (cfg / "notaries-available").mkdir(parents=True)
    (cfg / "notaries-enabled").mkdir()
    bundle_file = cfg / "notaries-available" / "org-t.notary"
    bundle_file.write_text(json.dumps(bundle_doc(notary)))
    (cfg / "notaries-enabled" / "org-t.notary").symlink_to("../notaries-available/org-t.notary")
    # no local cache: every check asks the notary
    (cfg / "converge.config").write_text(json.dumps({"early-return": False, "db": None}))
    saved = tmp_path / "answers"
    argv = ["--config-dir", str(cfg), "check", f"site.test:{tls_target.port}",
            "--fingerprint", sha256(tls_target.der), "--save-answers", str(saved), "--json"]
    notary.clock[0] = float(int(time.time()))  # the CLI's client reads the real clock
    code = await asyncio.to_thread(converge_main, argv)
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"] is True
    (path,) = [Path(p) for p in out["saved_answers"]]
    text_argv = [a for a in argv if a != "--json"]
    assert await asyncio.to_thread(converge_main, text_argv) == 0
    text = capsys.readouterr().out
    assert "converge-answer/1" in text and "match" in text and "saved" in text
    ok = ["verify-answer", str(path), "--bundle", str(bundle_file), "--host", "site.test",
          "--port", str(tls_target.port), "--json"]
    assert converge_main(ok) == 0
    proven = json.loads(capsys.readouterr().out)
    assert (proven["notary"], proven["verdict"]) == ("Org T", "match")
    fp = Fingerprint("sha256", hashlib.sha256(tls_target.der).digest())
    assert proven["observations"][0]["sha256"] == fp.colon_hex()
    assert proven["request"]["fingerprint"] == fp.colon_hex()
    # twins: another target, a late clock, a tampered byte
    assert converge_main([*ok[:4], "--host", "other.test", "--port", "1"]) == 1
    assert "wrong-target" in capsys.readouterr().out
    late = str(int(notary.clock[0]) + 10_000)
    assert converge_main([*ok[:4], "--now", late, "--max-skew", "300"]) == 1
    assert "stale" in capsys.readouterr().out
    tampered = tmp_path / "tampered.answer"
    tampered.write_bytes(path.read_bytes().replace(b'"match"', b'"mismatch"'))
    assert converge_main(["verify-answer", str(tampered), "--bundle", str(bundle_file)]) == 1
    assert "bad-signature" in capsys.readouterr().out
    assert converge_main(["verify-answer", str(tmp_path / "missing"), "--bundle",
                          str(bundle_file)]) == 2
    assert converge_main([*ok[:4], "--host", "site.test"]) == 2  # --port missing



async def test_a_named_address_is_probed_and_bound(
    notary: Notary, tls_target: Target, tmp_path: Path
) -> None:
    c = client(tmp_path, [bundle_doc(notary)], lambda: notary.clock[0])
    v = await c.acheck("Site.Test", tls_target.port, sha256(tls_target.der), ip="127.0.0.1")
    r = v.results[0]
    assert v.trusted and (r.kind, r.protocol) == ("match", sext.FORMAT)
    assert json.loads(r.answer or b"")["statement"]["target"]["ip"] == "127.0.0.1"
    c.close()
    # the legacy format names the address in the path: /target/<host>+<port>/<ip>
    legacy = client(tmp_path / "l", [bundle_doc(notary)], lambda: notary.clock[0],
                    extended="off")
    v = await legacy.acheck("site.test", tls_target.port, sha1(tls_target.der), ip="127.0.0.1")
    assert v.trusted and v.results[0].kind == "listed"
    legacy.close()
    # twin: a malformed address is bad input, not a vote
    with pytest.raises(ValueError):
        await client(tmp_path / "x", [bundle_doc(notary)], lambda: notary.clock[0]).acheck(
            "site.test", tls_target.port, sha1(tls_target.der), ip="not-an-ip")


async def test_an_unreachable_notary_reports_the_format_it_was_asked_in(
    notary: Notary, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    doc = bundle_doc(notary)
    doc["hosts"][0]["ssl_port"] = dead
    for mode, proto in (("prefer", sext.FORMAT), ("off", "convergence-v1")):
        c = client(tmp_path / mode, [doc], lambda: notary.clock[0], extended=mode)
        v = await c.acheck("site.test", 443, "ab" * 32)
        assert [(r.vote, r.kind, r.protocol) for r in v.results] == [
            ("unreachable", "unreachable", proto)
        ]
        c.close()
