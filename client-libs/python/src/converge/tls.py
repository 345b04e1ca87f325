"""Use converge in place of (or on top of) CA validation in Python's TLS stacks.

One mechanism serves every stack: :func:`converge_ssl_context` returns an
:class:`ssl.SSLContext` whose sockets (``sslsocket_class``) and memory-BIO objects
(``sslobject_class``, used by asyncio, aiohttp and anyio/httpx) ask converge about the peer's
certificate as soon as the handshake completes, before any application data is written, and
raise :class:`~converge.errors.NotTrusted` (an :class:`ssl.SSLCertVerificationError`) when the
verdict is negative. By default no CA or host name check is made (converge replaces them);
``require_ca=True`` keeps both.

**Which host:port is asked about.** Always the *origin* the application wants to reach, never
a proxy in between. The host is the connection's ``server_hostname``. The port comes, in this
order, from the origin that the stack integrations below announce for the connection (a
context variable, see :func:`origin`: they know the URL even inside a proxy's CONNECT tunnel),
then from an explicit ``converge_ssl_context(port=...)``, then, for a plain socket, from the
peer address (right for a direct connection). A memory-BIO connection (asyncio) cannot see
its peer: with neither an announced origin nor an explicit port the handshake is refused,
never checked against a guessed port.

=====================  =========================================================
stack                  how (proxies honoured as the stack honours them)
=====================  =========================================================
ssl / socket           ``converge_ssl_context().wrap_socket(sock, server_hostname=h)``
http.client            :class:`ConvergeHTTPSConnection` (``set_tunnel`` for a proxy)
urllib.request         :func:`urlopen`, or ``build_opener(https_handler())``
requests               :func:`requests_session` (direct, ``HTTPS_PROXY``, ``proxies=``)
urllib3                :func:`urllib3_pool_manager`, :func:`urllib3_proxy_manager`
httpx                  :func:`httpx_client`, :func:`httpx_async_client`
aiohttp                ``aiohttp.ClientSession(connector=aiohttp_connector())``
asyncio streams        :func:`open_connection`
=====================  =========================================================

The check after a handshake is synchronous: a local-cache hit costs microseconds; a miss asks
the notaries (up to ``total-timeout``). Inside an event loop a miss therefore blocks that loop
while the notaries answer; ``await prefetch(host, port)`` beforehand asks them asynchronously
and fills the cache so the handshake check is a hit.

The integrations live in :mod:`converge.hooks`, one module each; their public names are
imported here.
"""

from __future__ import annotations

from .hooks.aiohttp import aiohttp_connector
from .hooks.asyncio import open_connection
from .hooks.certificate import afetch_certificate, fetch_certificate, prefetch, verify_server
from .hooks.context import (
    ConvergeSSLContext,
    ConvergeSSLObject,
    ConvergeSSLSocket,
    converge_ssl_context,
    origin,
)
from .hooks.httpx import httpx_async_client, httpx_client
from .hooks.requests import requests_adapter, requests_session
from .hooks.urllib import ConvergeHTTPSConnection, ConvergeHTTPSHandler, https_handler, urlopen
from .hooks.urllib3 import urllib3_pool_manager, urllib3_proxy_manager

__all__ = [
    "ConvergeHTTPSConnection",
    "ConvergeHTTPSHandler",
    "ConvergeSSLContext",
    "ConvergeSSLObject",
    "ConvergeSSLSocket",
    "afetch_certificate",
    "aiohttp_connector",
    "converge_ssl_context",
    "fetch_certificate",
    "https_handler",
    "httpx_async_client",
    "httpx_client",
    "open_connection",
    "origin",
    "prefetch",
    "requests_adapter",
    "requests_session",
    "urllib3_pool_manager",
    "urllib3_proxy_manager",
    "urlopen",
    "verify_server",
]
