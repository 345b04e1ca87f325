"""The probe's TLS client (pyOpenSSL) offers a target what the ``ssl`` module's client did,
less finite-field Diffie-Hellman (plus the hybrid post-quantum groups, without a key share).

The probe moved from the ``ssl`` module (the system's OpenSSL) to pyOpenSSL (the OpenSSL that
``cryptography`` ships) for speed; a target must not see a different offer because of it.
Finite-field DH is left out on purpose: the target picks the group, and ffdhe8192 made a
probe cost the notary 20 times its usual CPU (notary/probe.py); live targets that speak only
that are refused here, with twins that also speak a curve.
"""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from OpenSSL import SSL

from bench.notary.procs import Processes
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.target import Target
from notary.errors import TargetUnreachable
from notary.probe import TLSProber, client_context
from notary.resolve import Resolver
from tests.loopback import free_port


def offered_ciphers(ctx: SSL.Context) -> list[str]:
    return SSL.Connection(ctx, None).get_cipher_list()


def stdlib_ciphers() -> list[str]:
    return [c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).get_ciphers()]


def test_cipher_offer_is_the_ssl_modules_without_dhe() -> None:
    ours = offered_ciphers(client_context())
    assert ours == [c for c in stdlib_ciphers() if not c.startswith("DHE-")]
    assert "TLS_AES_128_GCM_SHA256" in ours  # TLS 1.3 suites offered too
    assert any(c.startswith("DHE-") for c in stdlib_ciphers())  # so something was left out


def test_cipher_offer_twin_openssl_default_differs() -> None:
    """Twin: OpenSSL's own default list is not the ssl module's, so the check above can
    fail (it would, had the probe kept pyOpenSSL's defaults). The minimum version (TLS 1.2)
    has its test with a live target: test_http_integration's TLS 1.1 target."""
    assert offered_ciphers(SSL.Context(SSL.TLS_CLIENT_METHOD)) != stdlib_ciphers()



def _pyopenssl_hello(ctx: SSL.Context) -> bytes:
    conn = SSL.Connection(ctx, None)
    conn.set_tlsext_host_name(b"site.test")
    conn.set_connect_state()
    with contextlib.suppress(SSL.WantReadError):
        conn.do_handshake()
    return conn.bio_read(65536)


def _ssl_module_hello() -> bytes:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="site.test")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def _extensions(hello: bytes) -> dict[int, bytes]:
    """A ClientHello record's extensions by type."""
    assert hello[0] == 0x16 and hello[5] == 0x01  # handshake record, ClientHello
    p = 5 + 4 + 2 + 32  # record header, handshake header, version, random
    p += 1 + hello[p]  # session id
    p += 2 + struct.unpack(">H", hello[p:p + 2])[0]  # cipher suites
    p += 1 + hello[p]  # compression methods
    end = p + 2 + struct.unpack(">H", hello[p:p + 2])[0]
    p += 2
    out: dict[int, bytes] = {}
    while p < end:
        kind, size = struct.unpack(">HH", hello[p:p + 4])
        out[kind] = hello[p + 4:p + 4 + size]
        p += 4 + size
    return out


def groups_and_shares(hello: bytes) -> tuple[list[int], list[int]]:
    ext = _extensions(hello)
    sg = ext[10]  # supported_groups
    size = struct.unpack(">H", sg[:2])[0]
    groups = [struct.unpack(">H", sg[i:i + 2])[0] for i in range(2, 2 + size, 2)]
    ks, p, shares = ext[51], 2, []  # key_share
    while p < len(ks):
        group, size = struct.unpack(">HH", ks[p:p + 4])
        shares.append(group)
        p += 4 + size
    return groups, shares


X25519, X25519MLKEM768 = 0x001D, 0x11EC
FFDHE = range(0x0100, 0x0200)  # RFC 7919's finite-field groups


def test_groups_are_the_ssl_modules_curves_with_one_key_share() -> None:
    ours, our_shares = groups_and_shares(_pyopenssl_hello(client_context()))
    theirs, their_shares = groups_and_shares(_ssl_module_hello())
    curves = [g for g in theirs if g not in FFDHE]
    assert len(curves) < len(theirs)  # the ssl module offered ffdhe groups ...
    assert ours[:len(curves)] == curves  # ... the probe its curves in the same order ...
    assert X25519MLKEM768 in ours[len(curves):]  # ... then the hybrids, offered
    assert not [g for g in ours if g in FFDHE]
    assert our_shares == their_shares == [X25519]  # one key share, as before


def test_groups_twin_openssl_default_sends_a_hybrid_share() -> None:
    """Twin: without the probe's groups OpenSSL 4.0 sends an X25519MLKEM768 share too,
    so the check above fails if setting the groups stops working."""
    _, shares = groups_and_shares(_pyopenssl_hello(SSL.Context(SSL.TLS_CLIENT_METHOD)))
    assert X25519MLKEM768 in shares


# Live targets: ``openssl s_server`` (installed by scripts/install-system-deps) limited to
# finite-field DH, and twins that also speak a curve.
DH_ONLY = {
    "TLS 1.3, ffdhe8192 only": ["-tls1_3", "-groups", "ffdhe8192"],
    "TLS 1.2, DHE suites only": ["-tls1_2", "-cipher", "DHE-RSA-AES128-GCM-SHA256",
                                  "-dhparam", "{dhparam}"],
}
WITH_A_CURVE = {
    "TLS 1.3, ffdhe8192 only": ["-tls1_3", "-groups", "ffdhe8192:X25519"],
    "TLS 1.2, DHE suites only": ["-tls1_2", "-cipher",
                                  "DHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256",
                                  "-dhparam", "{dhparam}"],
}


@pytest.fixture(scope="module")
def server_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("dh-targets")
    ca = trustme.CA(key_type=trustme.KeyType.RSA)  # the suites below are RSA-authenticated
    leaf = ca.issue_cert("site.test", key_type=trustme.KeyType.RSA)
    leaf.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    leaf.private_key_pem.write_to_path(str(d / "key.pem"))
    subprocess.run(["openssl", "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt",
                    "group:ffdhe8192", "-out", str(d / "dh.pem")], check=True,
                   capture_output=True, timeout=60)
    return {"cert": d / "cert.pem", "key": d / "key.pem", "dhparam": d / "dh.pem"}


@contextlib.contextmanager
def s_server(files: dict[str, Path], args: list[str]) -> Iterator[int]:
    port = free_port()
    argv = ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(files["cert"]),
            "-key", str(files["key"]), "-www", "-quiet",
            *(a.format(dhparam=files["dhparam"]) for a in args)]
    with Processes(files["cert"].parent / "logs") as ps:
        ps.start("s_server", argv)
        ps.wait_tcp("s_server", "127.0.0.1", port, timeout=10)
        yield port


def _prober() -> TLSProber:
    return TLSProber(Resolver({"site.test": [ipaddress.ip_address("127.0.0.1")]},
                              use_system=False),
                     AddressPolicy(parse_networks(["127.0.0.0/8"])), 10.0)


@pytest.mark.parametrize("case", list(DH_ONLY))
async def test_finite_field_dh_only_target_is_unreachable(
    server_files: dict[str, Path], case: str
) -> None:
    with (s_server(server_files, DH_ONLY[case]) as port,
          pytest.raises(TargetUnreachable, match="the TLS handshake failed")):
        await _prober().probe(Target("site.test", port))


@pytest.mark.parametrize("case", list(WITH_A_CURVE))
async def test_twin_the_same_target_with_a_curve_is_probed(
    server_files: dict[str, Path], case: str
) -> None:
    with s_server(server_files, WITH_A_CURVE[case]) as port:
        result = await _prober().probe(Target("site.test", port))
    pem = server_files["cert"].read_bytes()
    assert result.leaf == x509.load_pem_x509_certificate(pem).public_bytes(Encoding.DER)
