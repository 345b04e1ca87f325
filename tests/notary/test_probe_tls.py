"""The probe's TLS client (pyOpenSSL) offers a target what the ``ssl`` module's client did
(plus the hybrid post-quantum groups, without a key share).

The probe moved from the ``ssl`` module (the system's OpenSSL) to pyOpenSSL (the OpenSSL that
``cryptography`` ships) for speed; a target must not see a different offer because of it.
"""

from __future__ import annotations

import contextlib
import ssl
import struct

from OpenSSL import SSL

from notary.probe import client_context


def offered_ciphers(ctx: SSL.Context) -> list[str]:
    return SSL.Connection(ctx, None).get_cipher_list()


def stdlib_ciphers() -> list[str]:
    return [c["name"] for c in ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).get_ciphers()]


def test_cipher_offer_is_the_ssl_modules() -> None:
    ours = offered_ciphers(client_context())
    assert ours == stdlib_ciphers()
    assert "TLS_AES_128_GCM_SHA256" in ours  # TLS 1.3 suites offered too


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


def test_groups_are_the_ssl_modules_with_one_key_share() -> None:
    ours, our_shares = groups_and_shares(_pyopenssl_hello(client_context()))
    theirs, their_shares = groups_and_shares(_ssl_module_hello())
    assert ours[:len(theirs)] == theirs  # the same groups in the same order ...
    assert X25519MLKEM768 in ours[len(theirs):]  # ... then the hybrids, offered
    assert our_shares == their_shares == [X25519]  # one key share, as before


def test_groups_twin_openssl_default_sends_a_hybrid_share() -> None:
    """Twin: without the probe's groups OpenSSL 4.0 sends an X25519MLKEM768 share too,
    so the check above fails if setting the groups stops working."""
    _, shares = groups_and_shares(_pyopenssl_hello(SSL.Context(SSL.TLS_CLIENT_METHOD)))
    assert X25519MLKEM768 in shares
