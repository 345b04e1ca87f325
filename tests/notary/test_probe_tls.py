"""The probe's TLS client (pyOpenSSL) offers a target what the ``ssl`` module's client did.

The probe moved from the ``ssl`` module (the system's OpenSSL) to pyOpenSSL (the OpenSSL that
``cryptography`` ships) for speed; a target must not see a different offer because of it.
"""

from __future__ import annotations

import ssl

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

