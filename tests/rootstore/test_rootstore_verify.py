"""CA verification: every accepted chain has a twin that must be rejected for one reason."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rootstore_support import NOW, NOW_TS, PKI

from notary.ca.checker import CAChecker, build_checker, parse_mode
from notary.ca.stores import (
    full_store,
    mozilla_store,
    parse_fingerprint_list,
    read_pem_bundle,
    top_k,
)
from notary.ca.verify import RootStore, sha256_der, verify_chain
from notary.errors import BadData
from notary.store.chain import decode_chain, encode_chain
from replay.pki import der, make_leaf, pem


def store_of(pki: PKI) -> RootStore:
    return RootStore("test", [r.cert for r in pki.roots])


def fp(pki: PKI, i: int) -> bytes:
    return sha256_der(pki.roots[i].cert)


def test_ok_chain(pki: PKI) -> None:
    v = verify_chain(pki.chain("a.test", 1), "a.test", NOW_TS, store_of(pki))
    assert v.ok and v.verdict == "ok"
    assert v.root_sha256 == fp(pki, 1)
    assert v.depth == 3
    assert v.root_name == "Test CA B"


def test_wrong_host_twin(pki: PKI) -> None:
    v = verify_chain(pki.chain("a.test", 1), "b.test", NOW_TS, store_of(pki))
    assert v.verdict == "wrong-host"
    assert "b.test" in v.reason


def test_wildcard_names(pki: PKI) -> None:
    leaf = make_leaf(["*.wild.test"], pki.inters[0], pki.key, NOW - dt.timedelta(days=1))
    chain = (der(leaf), der(pki.inters[0].cert))
    assert verify_chain(chain, "x.wild.test", NOW_TS, store_of(pki)).ok
    assert verify_chain(chain, "x.y.wild.test", NOW_TS, store_of(pki)).verdict == "wrong-host"


def test_ip_subject(pki: PKI) -> None:
    from cryptography import x509

    from replay.pki import make_leaf as _ml

    leaf = _ml(["ip.test"], pki.inters[0], pki.key, NOW - dt.timedelta(days=1))
    assert leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    chain = (der(leaf), der(pki.inters[0].cert))
    assert verify_chain(chain, "192.0.2.1", NOW_TS, store_of(pki)).verdict == "wrong-host"


def test_time_is_an_argument_expired_twin(pki: PKI) -> None:
    chain = pki.chain("a.test", 0)  # valid from NOW-1d for 90 days
    assert verify_chain(chain, "a.test", NOW_TS + 80 * 86400, store_of(pki)).ok
    late = verify_chain(chain, "a.test", NOW_TS + 100 * 86400, store_of(pki))
    assert late.verdict == "expired" and "expired on" in late.reason
    early = verify_chain(chain, "a.test", NOW_TS - 10 * 86400, store_of(pki))
    assert early.verdict == "expired" and "not valid before" in early.reason


def test_top_k_accepts_its_roots_and_names_the_others(pki: PKI) -> None:
    full = store_of(pki)
    top1 = top_k(full, [fp(pki, 0), fp(pki, 1), fp(pki, 2)], 1)
    assert len(top1) == 1 and top1.parent is full
    assert verify_chain(pki.chain("a.test", 0), "a.test", NOW_TS, top1).ok
    v = verify_chain(pki.chain("a.test", 2), "a.test", NOW_TS, top1)
    assert v.verdict == "not-in-top-k"
    assert v.root_sha256 == fp(pki, 2)


def test_full_intermediate_vs_missing_intermediate(pki: PKI) -> None:
    full = store_of(pki)
    chain = pki.chain("a.test", 0)
    assert verify_chain(chain, "a.test", NOW_TS, full).ok
    v = verify_chain(chain[:1], "a.test", NOW_TS, full)
    assert v.verdict == "missing-intermediate"


def test_pool_tells_a_missing_intermediate(pki: PKI) -> None:
    full = store_of(pki)
    # a two-level ladder where the server sends the lower intermediate only
    from replay.pki import make_ca

    upper = make_ca("Upper", "Ladder", NOW, pki.roots[0], path_length=1)
    upper_path_ok = make_ca("Lower", "Ladder", NOW, upper)
    leaf = make_leaf(["l.test"], upper_path_ok, pki.key, NOW - dt.timedelta(days=1))
    sent = (der(leaf), der(upper_path_ok.cert))
    # without knowing "Upper" we cannot tell a missing intermediate from an unknown root
    assert verify_chain(sent, "l.test", NOW_TS, full).verdict == "unknown-root"
    v = verify_chain(sent, "l.test", NOW_TS, full, pool=[upper.cert])
    assert v.verdict == "missing-intermediate"
    # the pool never makes a chain acceptable
    assert not v.ok


def test_root_sent_in_chain_still_ok(pki: PKI) -> None:
    chain = (*pki.chain("a.test", 0), der(pki.roots[0].cert))
    assert verify_chain(chain, "a.test", NOW_TS, store_of(pki)).ok


def test_leaf_issued_by_root_directly(pki: PKI) -> None:
    chain = (der(pki.leaf("d.test", 1, direct=True)),)
    assert verify_chain(chain, "d.test", NOW_TS, store_of(pki)).ok
    only_a = store_of(pki).restrict([fp(pki, 0)])
    assert verify_chain(chain, "d.test", NOW_TS, only_a).verdict == "not-in-top-k"


def test_self_signed_twin(pki: PKI) -> None:
    leaf = make_leaf(["s.test"], None, pki.key, NOW - dt.timedelta(days=1))
    v = verify_chain((der(leaf),), "s.test", NOW_TS, store_of(pki))
    assert v.verdict == "self-signed"
    # twin: the same certificate explicitly trusted as an anchor (a pin) is accepted
    own = RootStore("own", [leaf])
    assert verify_chain((der(leaf),), "s.test", NOW_TS, own).ok
    assert verify_chain((der(leaf),), "t.test", NOW_TS, own).verdict == "wrong-host"


def test_private_ca_twin(pki: PKI) -> None:
    leaf = make_leaf(["p.test"], pki.private_int, pki.key, NOW - dt.timedelta(days=1))
    chain = (der(leaf), der(pki.private_int.cert))
    v = verify_chain(chain, "p.test", NOW_TS, store_of(pki))
    assert v.verdict == "unknown-root"
    with_private = store_of(pki).with_roots([pki.private.cert], "test+private")
    assert verify_chain(chain, "p.test", NOW_TS, with_private).ok
    sent_root = verify_chain((*chain, der(pki.private.cert)), "p.test", NOW_TS, store_of(pki))
    assert sent_root.verdict == "unknown-root"
    assert "Private Root" in sent_root.reason


def test_bad_chains(pki: PKI) -> None:
    full = store_of(pki)
    assert verify_chain((b"not a certificate",), "a.test", NOW_TS, full).verdict == "bad-chain"
    assert verify_chain((), "a.test", NOW_TS, full).verdict == "bad-chain"
    # an intermediate of another CA presented as the issuer: nothing links to the leaf, so
    # the leaf's own issuer is what is missing
    wrong = (pki.chain("a.test", 0)[0], der(pki.inters[1].cert))
    assert verify_chain(wrong, "a.test", NOW_TS, full).verdict == "missing-intermediate"
    # a forged issuer with the right name but another key: the signature does not link
    from replay.pki import make_ca

    impostor = make_ca("Test Issuing A", "Test CA A", NOW, pki.roots[1])
    forged = (pki.chain("a.test", 0)[0], der(impostor.cert))
    assert verify_chain(forged, "a.test", NOW_TS, full).verdict == "bad-chain"
    # the bound: 10 certificates are looked at, 11 are refused unread
    chain = pki.chain("a.test", 0)
    at_bound = (*chain, *(der(pki.roots[1].cert),) * 8)
    assert len(at_bound) == 10 and verify_chain(at_bound, "a.test", NOW_TS, full).ok
    past = verify_chain((*at_bound, der(pki.roots[1].cert)), "a.test", NOW_TS, full)
    assert past.verdict == "bad-chain" and "more than 10" in past.reason


def test_mitm_rogue_intermediate_is_accepted_by_ca_trust(pki: PKI) -> None:
    from replay.pki import make_ca

    rogue = make_ca("Rogue Issuing", "Test CA A", NOW, pki.roots[0])
    leaf = make_leaf(["bank.test"], rogue, pki.key, NOW - dt.timedelta(days=1))
    forged = (der(leaf), der(rogue.cert))
    genuine = pki.chain("bank.test", 2)
    assert verify_chain(forged, "bank.test", NOW_TS, store_of(pki)).ok
    assert verify_chain(genuine, "bank.test", NOW_TS, store_of(pki)).ok
    assert hashlib.sha256(forged[0]).digest() != hashlib.sha256(genuine[0]).digest()


def test_restrict_refuses_unknown_roots(pki: PKI) -> None:
    with pytest.raises(BadData):
        store_of(pki).restrict([b"\x00" * 32])
    with pytest.raises(BadData):
        RootStore("empty", [])
    assert len(store_of(pki).restrict([fp(pki, 0), fp(pki, 1)])) == 2


def test_mozilla_store_loads_and_rejects_test_chains(pki: PKI) -> None:
    moz = mozilla_store()
    assert 50 < len(moz) < 1000
    assert verify_chain(pki.chain("a.test", 0), "a.test", NOW_TS, moz).verdict == "unknown-root"


def test_full_store_with_extra_roots(pki: PKI, tmp_path: Path) -> None:
    path = tmp_path / "roots.pem"
    path.write_bytes(pem(*(r.cert for r in pki.roots)))
    assert len(read_pem_bundle(path)) == 3
    mixed = full_store([path])
    assert verify_chain(pki.chain("a.test", 0), "a.test", NOW_TS, mixed).ok
    assert len(mixed) == len(mozilla_store()) + 3
    only = full_store([path], mozilla=False)
    assert len(only) == 3


def test_fingerprint_list_parsing(pki: PKI) -> None:
    text = f"# top roots\n{fp(pki, 0).hex().upper()}  # A\n\n" + ":".join(
        f"{b:02x}" for b in fp(pki, 1)) + "\n" + fp(pki, 0).hex() + "\n"
    assert parse_fingerprint_list(text) == [fp(pki, 0), fp(pki, 1)]
    with pytest.raises(BadData):
        parse_fingerprint_list("abcd\n")
    with pytest.raises(BadData):
        parse_fingerprint_list("zz" * 32 + "\n")


def test_chain_encoding_round_trip_and_rejects(pki: PKI) -> None:
    chain = pki.chain("a.test", 0)
    assert decode_chain(encode_chain(chain)) == chain
    raw = encode_chain(chain)
    for bad in (b"", b"C2" + raw[2:], raw[:-1], raw + b"\x00", b"C1"):
        with pytest.raises(BadData):
            decode_chain(bad)
    with pytest.raises(BadData):
        encode_chain(())
    with pytest.raises(BadData):
        encode_chain((b"x",) * 11)


def test_checker_caches_for_ttl_and_handles_missing_chain(pki: PKI) -> None:
    checker = CAChecker("both", store_of(pki), ttl=60)
    chain = pki.chain("a.test", 0)
    leaf_fp = hashlib.sha256(chain[0]).digest()
    assert checker.check("a.test", "a.test:443", leaf_fp, chain, NOW_TS).ok
    assert checker.check("a.test", "a.test:443", leaf_fp, chain, NOW_TS + 59).ok
    assert checker.computed == 1
    assert checker.check("a.test", "a.test:443", leaf_fp, chain, NOW_TS + 60).ok
    assert checker.computed == 2
    none = checker.check("b.test", "b.test:443", leaf_fp, (), NOW_TS)
    assert none.verdict == "bad-chain" and not checker.decides
    assert CAChecker("ca", store_of(pki)).decides


def test_checker_settings(pki: PKI, tmp_path: Path) -> None:
    assert build_checker("perspective", [], None, False) is None
    roots = tmp_path / "roots.pem"
    roots.write_bytes(pem(*(r.cert for r in pki.roots)))
    trust = tmp_path / "trust.txt"
    trust.write_text(fp(pki, 0).hex() + "\n", encoding="utf-8")
    checker = build_checker("ca", [str(roots)], trust, True)
    assert checker is not None and len(checker.store) == 1
    assert checker.check("a.test", "a:443", b"1", pki.chain("a.test", 0), NOW_TS).ok
    assert checker.check("a.test", "a:443", b"2", pki.chain("a.test", 1),
                         NOW_TS).verdict == "not-in-top-k"
    from notary.errors import BadConfig

    with pytest.raises(BadConfig):
        parse_mode("cas")
    with pytest.raises(BadConfig):
        CAChecker("perspective", store_of(pki))


def test_verify_cli(pki: PKI, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from replay.cli import main

    roots = tmp_path / "roots.pem"
    roots.write_bytes(pem(*(r.cert for r in pki.roots)))
    chain_file = tmp_path / "chain.pem"
    leaf = make_leaf(["v.test"], pki.inters[2], pki.key, NOW - dt.timedelta(days=1))
    chain_file.write_bytes(pem(leaf, pki.inters[2].cert))
    base = ["rootstore", "verify", "--chain", str(chain_file), "--roots", str(roots),
            "--no-mozilla", "--now", str(NOW_TS)]
    assert main([*base, "--host", "v.test"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "ok"
    assert main([*base, "--host", "w.test"]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "wrong-host"
    trust = tmp_path / "trust.txt"
    trust.write_text(fp(pki, 0).hex() + "\n", encoding="utf-8")
    assert main([*base, "--host", "v.test", "--trust", str(trust)]) == 1
    assert json.loads(capsys.readouterr().out)["verdict"] == "not-in-top-k"


@given(st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=10))
@settings(max_examples=100, deadline=None)
def test_chain_encoding_round_trips_any_chain(chain: list[bytes]) -> None:
    assert decode_chain(encode_chain(chain)) == tuple(chain)


@given(st.binary(max_size=200))
@settings(max_examples=150, deadline=None)
def test_chain_decoding_fails_only_as_bad_data(raw: bytes) -> None:
    try:
        out = decode_chain(raw)
    except BadData:
        return
    assert encode_chain(out) == raw  # anything accepted is exactly a canonical encoding


def test_settings_from_toml_and_flags(tmp_path: Path) -> None:
    from notary.cli import _parser, settings_from_args
    from notary.config import Settings, load_toml
    from notary.errors import BadConfig

    conf = tmp_path / "notary.toml"
    conf.write_text('[notary]\nverifier = "both"\nca_roots = ["a.pem"]\nca_trust = "t.txt"\n'
                    "ca_no_mozilla = true\n", encoding="utf-8")
    values = load_toml(conf)
    s = Settings(**values)
    s.check()
    assert (s.verifier, s.ca_roots, s.ca_trust, s.ca_no_mozilla) == (
        "both", ["a.pem"], Path("t.txt"), True)
    with pytest.raises(BadConfig):
        Settings(verifier="cas").check()
    args = _parser().parse_args(["serve", "--verifier", "ca", "--ca-roots", "x.pem",
                                 "--ca-roots", "y.pem", "--ca-no-mozilla"])
    flags = settings_from_args(args)
    assert (flags.verifier, flags.ca_roots, flags.ca_no_mozilla) == ("ca", ["x.pem", "y.pem"],
                                                                     True)
    assert settings_from_args(_parser().parse_args(["serve"])).verifier == "perspective"
