"""Chain capture by the notary's prober against real TLS servers on loopback."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from rootstore_support import NOW, NOW_TS, PKI, ChainServer

from notary.ca.verify import RootStore, verify_chain
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import Target
from notary.probe import MAX_CHAIN_CERTS, TLSProber
from notary.resolve import Resolver
from replay.pki import der, make_ca, make_leaf


def prober(*, want_chain: bool = True) -> TLSProber:
    policy = AddressPolicy(parse_networks(["127.0.0.0/8"]))
    return TLSProber(Resolver({}), policy, 3.0, want_chain=want_chain)


async def capture(chain: tuple[bytes, ...], pki: PKI, tmp: Path, **kw: bool) -> tuple[
        bytes, tuple[bytes, ...]]:
    server = await ChainServer(chain, pki.key_pem(), tmp).start()
    try:
        result = await prober(**kw).probe(Target("127.0.0.1", server.port))
    finally:
        await server.stop()
    return result.leaf, result.chain


@pytest.mark.parametrize("length", [1, 2, 3])
async def test_captures_chains_of_each_length(pki: PKI, tmp_path: Path, length: int) -> None:
    full = (der(pki.leaf("127.0.0.1")), der(pki.inters[0].cert), der(pki.roots[0].cert))
    leaf, chain = await capture(full[:length], pki, tmp_path)
    assert chain == full[:length]
    assert leaf == full[0]


async def test_leaf_only_server_gives_leaf_only_chain(pki: PKI, tmp_path: Path) -> None:
    only = (der(pki.leaf("127.0.0.1")),)
    leaf, chain = await capture(only, pki, tmp_path)
    assert chain == only
    # the captured chain is what a CA verifier then judges: its issuer is missing
    full = pki_store(pki)
    assert verify_chain(chain, "127.0.0.1", NOW_TS, full).verdict == "wrong-host"  # IP SAN
    named = (der(pki.leaf("leaf-only.test")),)
    assert verify_chain(named, "leaf-only.test", NOW_TS, full).verdict == (
        "missing-intermediate")


async def test_no_chain_unless_asked(pki: PKI, tmp_path: Path) -> None:
    chain = (der(pki.leaf("127.0.0.1")), der(pki.inters[0].cert))
    leaf, captured = await capture(chain, pki, tmp_path, want_chain=False)
    assert captured == ()
    assert hashlib.sha256(leaf).digest() == hashlib.sha256(chain[0]).digest()


async def test_chain_is_bounded_in_count(pki: PKI, tmp_path: Path) -> None:
    cas = [pki.roots[0]]
    for i in range(MAX_CHAIN_CERTS + 1):  # a deep ladder of intermediates
        cas.append(make_ca(f"Ladder {i}", "Ladder", NOW, cas[-1]))
    leaf = make_leaf(["127.0.0.1"], cas[-1], pki.key, NOW)
    sent = (der(leaf), *(der(c.cert) for c in reversed(cas[1:])))
    assert len(sent) == MAX_CHAIN_CERTS + 2
    # one past the bound: the first ten are kept
    _, chain = await capture(sent[: MAX_CHAIN_CERTS + 1], pki, tmp_path)
    assert chain == sent[:MAX_CHAIN_CERTS]
    # at the bound: kept whole
    _, whole = await capture(sent[:MAX_CHAIN_CERTS], pki, tmp_path / "at")
    assert whole == sent[:MAX_CHAIN_CERTS]


def pki_store(pki: PKI) -> RootStore:
    return RootStore("test", [r.cert for r in pki.roots])
