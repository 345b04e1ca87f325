"""converge()/aconverge() against loopback notaries over real TLS (each must-pass has its
must-fail twin)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest
from converge import Client, ConfigError, FingerprintError, Policy, TargetError, converge
from converge.bundle import parse_bundle
from converge.client import aconverge
from converge_fixtures import FakeNotary, TlsTarget, dead_port, make_config


def _votes(verdict: Any) -> list[tuple[str, str]]:
    return [(r.vote, r.kind) for r in verdict.results]


def _client(tmp_path: Path, bundles: list[Any], **kw: Any) -> Client:
    return Client(make_config(tmp_path, bundles, **kw))


def test_genuine_certificate_is_trusted(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    c = _client(tmp_path, [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    v = c.check("127.0.0.1", target.port, pki["target"].sha1)
    assert v and v.trusted and not v.from_cache
    assert _votes(v) == [("success", "listed")] * 3
    assert {r.cache_status for r in v.results} == {"converge-notary; fwd=miss"}
    # the request is byte-for-byte the legacy add-on's
    req = notaries[0].requests[-1]
    assert req.startswith(f"POST /target/127.0.0.1+{target.port} HTTP/1.0\r\n".encode())
    assert b"Host:" not in req and b"Connection: close\r\n" in req
    assert req.endswith(f"fingerprint={pki['target'].sha1}".encode())


def test_forged_certificate_is_not_trusted(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    c = _client(tmp_path, [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    v = c.check("127.0.0.1", target.port, pki["forged"].sha1)
    assert not v
    assert _votes(v) == [("failure", "mismatch")] * 3
    assert c._open_caches()[0].entries() == []  # an untrusted verdict is never cached


def test_fingerprint_forms(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    c = _client(
        tmp_path, [n.bundle(f"Org {i}") for i, n in enumerate(notaries)], cache_lifetime=None
    )
    lower = pki["target"].sha1.replace(":", "").lower()
    assert c.check("127.0.0.1", target.port, lower)
    # SHA-256 alone: the v1 lists carry SHA-1, so the pinned 200 decides
    v = Client(
        make_config(tmp_path / "b", [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    ).check("127.0.0.1", target.port, pki["target"].sha256)
    assert v and _votes(v) == [("success", "status-only")] * 3
    # SHA-256 with the certificate: the SHA-1 alias is matched in the signed list
    v = Client(
        make_config(tmp_path / "c", [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    ).check("127.0.0.1", target.port, pki["target"].sha256, certificate=pki["target"].der)
    assert v and _votes(v) == [("success", "listed")] * 3
    with pytest.raises(FingerprintError):
        c.check("127.0.0.1", target.port, "AB:CD")
    with pytest.raises(FingerprintError):  # certificate and fingerprint disagree
        c.check("127.0.0.1", target.port, pki["target"].sha1, certificate=pki["forged"].der)
    with pytest.raises(TargetError):
        c.check("127.0.0.1/x", target.port, lower)


def test_wrong_pin_is_a_failure(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries[:2])]
    bundles.append(notaries[2].bundle("Org 2", cert_pem=pki["notaries"][3].cert_pem))
    v = _client(tmp_path, bundles, agreement=Policy.CONSENSUS).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert not v
    assert _votes(v)[2] == ("failure", "pin")
    assert notaries[2].requests == []  # nothing is sent to a notary that fails its pin
    # twin: the right pin
    v = _client(
        tmp_path / "ok",
        [n.bundle(f"Org {i}") for i, n in enumerate(notaries)],
        agreement=Policy.CONSENSUS,
    ).check("127.0.0.1", target.port, pki["target"].sha1)
    assert v


def test_bad_signature_is_a_failure(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    notaries[2].mode = "bad-signature"
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries)]
    v = _client(tmp_path, bundles, agreement=Policy.CONSENSUS).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert not v
    assert _votes(v) == [("success", "listed")] * 2 + [("failure", "signature")]
    v = _client(tmp_path / "m", bundles, agreement=Policy.MAJORITY).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert v


@pytest.mark.parametrize(
    "mode,vote,kind",
    [
        ("status:503", "unreachable", "status"),
        ("status:403", "unreachable", "status"),
        ("status:303", "unreachable", "inconclusive"),
        ("garbage", "failure", "response"),
        ("huge", "failure", "response"),
    ],
)
def test_misbehaving_notary(
    tmp_path: Path,
    pki: dict[str, Any],
    target: TlsTarget,
    notaries: list[FakeNotary],
    mode: str,
    vote: str,
    kind: str,
) -> None:
    notaries[0].mode = mode
    v = _client(tmp_path, [notaries[0].bundle("Org 0")]).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert not v
    assert _votes(v) == [(vote, kind)]


def test_unreachable_notary_stands_aside(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    dead = parse_bundle(
        {
            "version": 1,
            "name": "Dead Org",
            "hosts": [
                {
                    "host": "127.0.0.1",
                    "ssl_port": dead_port(),
                    "http_port": 80,
                    "certificate": pki["notaries"][3].cert_pem,
                }
            ],
        }
    )
    bundles = [notaries[0].bundle("Org 0"), notaries[1].bundle("Org 1"), dead]
    v = _client(tmp_path, bundles, agreement=Policy.CONSENSUS, stand_aside=True).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert v
    assert _votes(v)[2] == ("unreachable", "unreachable")
    # twin: unreachable counts as failure
    v = _client(tmp_path / "b", bundles, agreement=Policy.CONSENSUS, stand_aside=False).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert not v
    # nobody reachable is never trusted, stand-aside or not
    v = _client(tmp_path / "c", [dead], agreement=Policy.MINORITY, stand_aside=True).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert not v


def test_physical_hosts_are_raced(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    dead_host = {
        "host": "127.0.0.1",
        "ssl_port": dead_port(),
        "http_port": 80,
        "certificate": notaries[0].ident.cert_pem,
    }
    b = notaries[0].bundle("Org 0", extra_hosts=[dead_host])
    assert len(b.hosts) == 2
    v = _client(tmp_path, [b]).check("127.0.0.1", target.port, pki["target"].sha1)
    assert v and v.results[0].host == f"127.0.0.1:{notaries[0].port}"


def test_early_return_does_not_wait_for_slow_notaries(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    notaries[2].mode = "slow:2.5"
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries)]
    t0 = time.monotonic()
    v = _client(tmp_path, bundles, early_return=True).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert time.monotonic() - t0 < 1.5
    assert v and _votes(v)[2] == ("skipped", "settled")
    # twin: without early return the slow notary is waited for
    t0 = time.monotonic()
    v = _client(tmp_path / "w", bundles, early_return=False).check(
        "127.0.0.1", target.port, pki["target"].sha1
    )
    assert time.monotonic() - t0 >= 2.4
    assert v and _votes(v)[2] == ("success", "listed")


def test_notary_timeout(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    notaries[0].mode = "slow:2"
    t0 = time.monotonic()
    v = _client(
        tmp_path, [notaries[0].bundle("Org 0"), notaries[1].bundle("Org 1")], notary_timeout=0.3
    ).check("127.0.0.1", target.port, pki["target"].sha1)
    assert time.monotonic() - t0 < 1.5
    assert _votes(v)[0] == ("unreachable", "timeout")
    assert v  # majority of the one that counts (stand-aside)



@pytest.mark.parametrize("which", ["notary", "total"])
async def test_one_notary_times_out_alone(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary],
    which: str,
) -> None:
    """One notary with one host is asked without a race (no task): its notary and total
    timeouts still end the check, leave nothing running and say which limit ran out; the
    twin answers in time."""
    notaries[0].mode = "slow:3"
    limits = ({"notary_timeout": 0.3, "total_timeout": 5.0} if which == "notary"
              else {"notary_timeout": 5.0, "total_timeout": 0.3})
    c = _client(tmp_path, [notaries[0].bundle("Org 0")], **limits)
    t0 = time.monotonic()
    v = await c.acheck("127.0.0.1", target.port, pki["target"].sha1)
    assert time.monotonic() - t0 < 1.5
    assert not v and _votes(v) == [("unreachable", "timeout")]
    assert v.results[0].detail == "no answer within 0.3 s"
    assert asyncio.all_tasks() == {asyncio.current_task()}
    twin = _client(tmp_path / "twin", [notaries[1].bundle("Org 1")], **limits)
    v = await twin.acheck("127.0.0.1", target.port, pki["target"].sha1)
    assert v and _votes(v) == [("success", "listed")]


def test_local_cache(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    now = [1_700_000_000.0]
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries)]
    c = Client(make_config(tmp_path, bundles, cache_lifetime=3600), clock=lambda: now[0])
    fp = pki["target"].sha1
    assert not c.check("127.0.0.1", target.port, fp).from_cache
    for n in notaries:
        n.stop()
    v = c.check("127.0.0.1", target.port, fp.replace(":", "").lower())
    assert v and v.from_cache and v.results == ()
    # another process sharing the file sees the entry
    c2 = Client(make_config(tmp_path, bundles, cache_lifetime=3600), clock=lambda: now[0])
    assert c2.check("127.0.0.1", target.port, fp).from_cache
    assert c.config.db is not None and c.config.db.exists()
    # stale: the notaries are asked again (and are now down -> not trusted)
    now[0] += 3601
    v = c.check("127.0.0.1", target.port, fp)
    assert not v and not v.from_cache
    # a different fingerprint is a miss
    now[0] -= 3601
    assert not c.check("127.0.0.1", target.port, pki["forged"].sha1).from_cache
    for n in notaries:
        n.start()


def test_no_notaries_is_a_config_error(tmp_path: Path, pki: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _client(tmp_path, []).check("127.0.0.1", 443, pki["target"].sha1)


def test_quorum_limits_the_notaries_asked(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries)]
    bundles.append(notaries[0].bundle("Org 0"))  # same name: de-duplicated
    v = _client(tmp_path, bundles, quorum=2).check("127.0.0.1", target.port, pki["target"].sha1)
    assert len(v.results) == 2 and len({r.name for r in v.results}) == 2


class _CountingRandom(random.Random):
    """A seeded generator that counts the draws that pick notaries."""

    def __init__(self) -> None:
        super().__init__(7)
        self.samples = 0

    def sample(self, population: Any, k: int, **kw: Any) -> list[Any]:
        self.samples += 1
        return super().sample(population, k, **kw)


@pytest.mark.parametrize("quorum,draws,asked", [(3, 0, 3), (16, 0, 3), (2, 1, 2)])
def test_notaries_are_drawn_only_when_the_quorum_leaves_some_out(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary],
    quorum: int, draws: int, asked: int,
) -> None:
    rng = _CountingRandom()
    bundles = [n.bundle(f"Org {i}") for i, n in enumerate(notaries)]
    c = Client(make_config(tmp_path, bundles, quorum=quorum), rng=rng)
    v = c.check("127.0.0.1", target.port, pki["target"].sha1)
    assert (rng.samples, len(v.results)) == (draws, asked)
    # every notary asked when none is left out, in configuration order
    names = [r.name for r in v.results]
    assert names == sorted(names) and (asked < 3 or names == ["Org 0", "Org 1", "Org 2"])


async def test_aconverge_and_converge_inside_a_loop(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    cfg = make_config(tmp_path, [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    v = await aconverge("127.0.0.1", target.port, pki["target"].sha1, config=cfg)
    assert v and not v.from_cache
    v2 = await aconverge("127.0.0.1", target.port, pki["forged"].sha1, config=cfg)
    assert not v2
    # the synchronous API from inside a running loop (runs in a helper thread)
    cfg2 = make_config(tmp_path / "s", [n.bundle(f"Org {i}") for i, n in enumerate(notaries)])
    assert converge("127.0.0.1", target.port, pki["target"].sha1, config=cfg2)
    assert not converge("127.0.0.1", target.port, pki["forged"].sha1, config=cfg2)
    await asyncio.sleep(0)


def test_converge_discovers_a_config_directory(
    tmp_path: Path,
    pki: dict[str, Any],
    target: TlsTarget,
    notaries: list[FakeNotary],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from converge.config import add_notary

    d = tmp_path / "conf"
    d.mkdir()
    (d / "converge.config").write_text(
        json.dumps({"notary-agreement": "consensus", "early-return": False})
    )
    for i, n in enumerate(notaries):
        add_notary(d, json.dumps(n.bundle(f"Org {i}").to_json()).encode())
    monkeypatch.setenv("CONVERGE_CONFIG_DIR", str(d))
    v = converge("127.0.0.1", target.port, pki["target"].sha1)
    assert v and v.policy is Policy.CONSENSUS and len(v.results) == 3
    assert (d / "cache.sqlite3").exists()
    assert not converge("127.0.0.1", target.port, pki["forged"].sha1)
    j = v.to_json()
    assert j["verdict"] is True and [n["outcome"] for n in j["notaries"]] == ["success"] * 3


async def test_total_timeout_cancels_every_query(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notaries: list[FakeNotary]
) -> None:
    for n in notaries:
        n.mode = "slow:3"
    c = _client(
        tmp_path,
        [n.bundle(f"Org {i}") for i, n in enumerate(notaries)],
        total_timeout=0.4,
        notary_timeout=5.0,
    )
    t0 = time.monotonic()
    v = await c.acheck("127.0.0.1", target.port, pki["target"].sha1)
    assert time.monotonic() - t0 < 1.5
    assert not v and _votes(v) == [("unreachable", "timeout")] * 3
    # nothing keeps running in the caller's loop after the verdict
    assert asyncio.all_tasks() == {asyncio.current_task()}
