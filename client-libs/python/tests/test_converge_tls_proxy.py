"""The TLS hooks behind an HTTP CONNECT proxy and on ports other than 443.

The site ``site.test`` listens on port P: the genuine server on 127.0.0.1:P, a forged one on
127.0.0.2:P whose certificate is issued by the same CA the client trusts (a mis-issued
certificate, or a TLS-inspecting proxy's). The notaries see the genuine certificate at
``site.test:P``. Two proxies route ``site.test``: one to the genuine server, one (the
attacker's) to the forged server. Every stack must

* reach the genuine server through the proxy, asking the notaries about ``site.test:P`` (the
  origin, not the proxy's port);
* refuse the forged server through the attacker's proxy before writing the request, although
  plain CA validation would accept it (the twin shows it does).
"""

from __future__ import annotations

import asyncio
import http.client
import re
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from converge import Client, NotTrusted, close_clients, get_client
from converge.tls import (
    ConvergeHTTPSConnection,
    aiohttp_connector,
    converge_ssl_context,
    httpx_async_client,
    httpx_client,
    open_connection,
    origin,
    requests_session,
    urllib3_proxy_manager,
    urlopen,
)
from converge_fixtures import FakeNotary, TlsTarget, identity, make_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
from connect_proxy import ConnectProxy  # noqa: E402

SITE = "site.test"


class Scene:
    def __init__(self, ca: trustme.CA, pki: dict[str, Any], tmp: Path) -> None:
        self.genuine = TlsTarget(identity(ca, SITE), pki["tmp"], body=b"genuine").start()
        self.port = self.genuine.port
        self.forged = TlsTarget(
            identity(ca, SITE), pki["tmp"], port=self.port, host="127.0.0.2", body=b"forged"
        ).start()
        self.notaries = [
            FakeNotary(pki["notaries"][i], pki["tmp"],
                       seen={f"{SITE}:{self.port}": self.genuine.ident}).start()
            for i in range(3)
        ]
        self.client = Client(make_config(
            tmp, [n.bundle(f"Org {i}") for i, n in enumerate(self.notaries)],
            cache_lifetime=None,
        ))
        self.good_proxy = ConnectProxy({SITE: "127.0.0.1"}).start()
        self.evil_proxy = ConnectProxy({SITE: "127.0.0.2"}).start()
        self.cafile = tmp / "ca.pem"
        ca.cert_pem.write_to_path(str(self.cafile))
        self.url = f"https://{SITE}:{self.port}/"

    def asked(self) -> set[str]:
        """The host:port the notaries were asked about."""
        out = set()
        for n in self.notaries:
            for req in n.requests:
                m = re.match(rb"POST /target/([^+]+)\+(\d+)", req)
                assert m, req
                out.add(f"{m.group(1).decode()}:{m.group(2).decode()}")
        return out

    def stop(self) -> None:
        for s in (self.genuine, self.forged, *self.notaries, self.good_proxy, self.evil_proxy):
            s.stop()
        self.client.close()


@pytest.fixture()
def scene(ca: trustme.CA, pki: dict[str, Any], tmp_path: Path) -> Iterator[Scene]:
    s = Scene(ca, pki, tmp_path)
    yield s
    s.stop()


def _genuine_ok(scene: Scene, body: bytes | str) -> None:
    assert body in (b"genuine", "genuine")
    assert scene.asked() == {f"{SITE}:{scene.port}"}
    assert scene.good_proxy.connects == [(SITE, scene.port)] or scene.good_proxy.connects[0] == (
        SITE, scene.port)


def _forged_refused(scene: Scene) -> None:
    assert scene.forged.received == [], "the request reached the forged server"
    assert scene.evil_proxy.connects and scene.evil_proxy.connects[0] == (SITE, scene.port)
    assert scene.asked() == {f"{SITE}:{scene.port}"}


# ------------------------------------------------------------------ the twins: CA alone


def test_twin_plain_ca_validation_accepts_the_forged_server(scene: Scene) -> None:
    """Without converge, the attacker's proxy wins: the forged certificate is CA-valid."""
    ctx = ssl.create_default_context(cafile=str(scene.cafile))
    conn = http.client.HTTPSConnection("127.0.0.1", scene.evil_proxy.port, context=ctx,
                                       timeout=5)
    conn.set_tunnel(SITE, scene.port)
    conn.request("GET", "/")
    assert conn.getresponse().read() == b"forged"
    conn.close()


def test_twin_requests_without_converge_accepts_the_forged_server(scene: Scene) -> None:
    requests = pytest.importorskip("requests")
    r = requests.get(scene.url, proxies={"https": scene.evil_proxy.url},
                     verify=str(scene.cafile), timeout=5)
    assert r.text == "forged"


# ------------------------------------------------------------------ requests


def test_requests_through_a_proxy(scene: Scene) -> None:
    requests = pytest.importorskip("requests")
    with requests_session(scene.client) as s:
        s.verify = str(scene.cafile)  # if converge were bypassed, CA checks would pass
        r = s.get(scene.url, proxies={"https": scene.good_proxy.url}, timeout=5)
        _genuine_ok(scene, r.text)
        with pytest.raises(requests.exceptions.SSLError, match="converge does not trust"):
            s.get(scene.url, proxies={"https": scene.evil_proxy.url}, timeout=5)
    _forged_refused(scene)


def test_requests_honours_https_proxy_from_the_environment(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = pytest.importorskip("requests")
    monkeypatch.setenv("HTTPS_PROXY", scene.evil_proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with requests_session(scene.client) as s:
        s.verify = str(scene.cafile)
        with pytest.raises(requests.exceptions.SSLError, match="converge does not trust"):
            s.get(scene.url, timeout=5)
    _forged_refused(scene)


def test_requests_refuses_a_socks_proxy_clearly(scene: Scene) -> None:
    requests = pytest.importorskip("requests")
    with requests_session(scene.client) as s, pytest.raises(
        requests.exceptions.InvalidProxyURL, match="HTTP\\(S\\) proxies only"
    ):
        s.get(scene.url, proxies={"https": "socks5://127.0.0.1:1"}, timeout=5)


# ------------------------------------------------------------------ urllib, http.client


def test_urlopen_through_the_environment_proxy(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("https_proxy", scene.good_proxy.url)
    with urlopen(scene.url, config=scene.client, timeout=5) as resp:
        _genuine_ok(scene, resp.read())
    monkeypatch.setenv("https_proxy", scene.evil_proxy.url)
    with pytest.raises(urllib.error.URLError) as exc:
        urlopen(scene.url, config=scene.client, timeout=5)
    assert isinstance(exc.value.reason, NotTrusted)
    _forged_refused(scene)


def test_http_client_set_tunnel(scene: Scene) -> None:
    conn = ConvergeHTTPSConnection("127.0.0.1", scene.good_proxy.port, config=scene.client,
                                   timeout=5)
    conn.set_tunnel(SITE, scene.port)
    conn.request("GET", "/")
    _genuine_ok(scene, conn.getresponse().read())
    conn.close()
    conn = ConvergeHTTPSConnection("127.0.0.1", scene.evil_proxy.port, config=scene.client,
                                   timeout=5)
    conn.set_tunnel(SITE, scene.port)
    with pytest.raises(NotTrusted):
        conn.request("GET", "/")
    conn.close()
    _forged_refused(scene)


def test_twin_a_bare_context_in_a_tunnel_asks_about_the_proxy_port(scene: Scene) -> None:
    """Why the integrations announce the origin: a bare context inside a tunnel sees only
    the proxy's address, asks about the proxy's port, and (fail-closed) refuses the genuine
    server."""
    conn = http.client.HTTPSConnection("127.0.0.1", scene.good_proxy.port, timeout=5,
                                       context=converge_ssl_context(scene.client))
    conn.set_tunnel(SITE, scene.port)
    with pytest.raises(NotTrusted):
        conn.request("GET", "/")
    conn.close()
    assert scene.asked() == {f"{SITE}:{scene.good_proxy.port}"}


def test_origin_context_manager_for_hand_made_tunnels(scene: Scene) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", scene.good_proxy.port, timeout=5,
                                       context=converge_ssl_context(scene.client))
    conn.set_tunnel(SITE, scene.port)
    with origin(SITE, scene.port):
        conn.request("GET", "/")
    _genuine_ok(scene, conn.getresponse().read())
    conn.close()


# ------------------------------------------------------------------ urllib3


def test_urllib3_proxy_manager(scene: Scene) -> None:
    urllib3 = pytest.importorskip("urllib3")
    pm = urllib3_proxy_manager(scene.good_proxy.url, scene.client)
    r = pm.request("GET", scene.url, retries=False)
    _genuine_ok(scene, r.data)
    pm = urllib3_proxy_manager(scene.evil_proxy.url, scene.client)
    with pytest.raises(urllib3.exceptions.SSLError):
        pm.request("GET", scene.url, retries=False)
    _forged_refused(scene)


# ------------------------------------------------------------------ httpx


def test_httpx_through_a_proxy(scene: Scene) -> None:
    httpx = pytest.importorskip("httpx")
    with httpx_client(scene.client, proxy=scene.good_proxy.url) as c:
        _genuine_ok(scene, c.get(scene.url).text)
    with httpx_client(scene.client, proxy=scene.evil_proxy.url) as c, pytest.raises(
        httpx.ConnectError, match="converge does not trust"
    ):
        c.get(scene.url)
    _forged_refused(scene)


async def test_httpx_async_through_a_proxy(scene: Scene) -> None:
    httpx = pytest.importorskip("httpx")
    async with httpx_async_client(scene.client, proxy=scene.good_proxy.url) as c:
        _genuine_ok(scene, (await c.get(scene.url)).text)
    async with httpx_async_client(scene.client, proxy=scene.evil_proxy.url) as c:
        with pytest.raises(httpx.ConnectError, match="converge does not trust"):
            await c.get(scene.url)
    _forged_refused(scene)


# ------------------------------------------------------------------ aiohttp, asyncio


async def test_aiohttp_through_a_proxy(scene: Scene) -> None:
    aiohttp = pytest.importorskip("aiohttp")
    async with aiohttp.ClientSession(connector=aiohttp_connector(scene.client)) as s:
        async with s.get(scene.url, proxy=scene.good_proxy.url) as r:
            _genuine_ok(scene, await r.read())
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await s.get(scene.url, proxy=scene.evil_proxy.url)
    _forged_refused(scene)


async def test_asyncio_open_connection_on_another_port(
    scene: Scene, pki: dict[str, Any]
) -> None:
    target = TlsTarget(pki["target"], pki["tmp"]).start()
    notary = FakeNotary(pki["notaries"][3], pki["tmp"],
                        seen={f"127.0.0.1:{target.port}": pki["target"]}).start()
    try:
        client = Client(make_config(pki["tmp"] / "o", [notary.bundle("Org O")]))
        _, w = await open_connection("127.0.0.1", target.port, config=client)
        w.close()
        await w.wait_closed()
        assert any(f"/target/127.0.0.1+{target.port}".encode() in r for r in notary.requests)
    finally:
        notary.stop()
        target.stop()


async def test_twin_memory_bio_without_a_port_is_refused_not_guessed(scene: Scene) -> None:
    """asyncio cannot tell an SSLObject its port: without an announced origin or an explicit
    port the handshake is refused (it used to assume 443)."""
    with pytest.raises(NotTrusted, match="cannot tell which port"):
        await asyncio.open_connection("127.0.0.1", scene.port, server_hostname=SITE,
                                      ssl=converge_ssl_context(scene.client))
    assert scene.asked() == set()


# ------------------------------------------------------------------ shared clients


def test_client_is_a_context_manager(scene: Scene, tmp_path: Path) -> None:
    with Client(make_config(tmp_path / "cm", [scene.notaries[0].bundle("Org 0")])) as c:
        assert c.check(SITE, scene.port, scene.genuine.ident.sha1)
        assert c._caches
    assert c._caches is None


def test_shared_client_reloads_a_changed_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import os
    import time

    import converge.client as client_mod

    d = tmp_path / "conf"
    (d / "notaries-available").mkdir(parents=True)
    (d / "notaries-enabled").mkdir()
    (d / "converge.config").write_text(json.dumps({"quorum": 2}))
    monkeypatch.setattr(client_mod, "RELOAD_CHECK_INTERVAL", 0.0)
    first = get_client(d)
    assert first.config.quorum == 2 and get_client(d) is first
    (d / "converge.config").write_text(json.dumps({"quorum": 1, "db": "x.sqlite3"}))
    st = (d / "converge.config").stat()
    os.utime(d / "converge.config", ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))
    second = get_client(d)
    assert second is not first and second.config.quorum == 1
    close_clients()
    assert get_client(d) is not second
    monkeypatch.setattr(client_mod, "RELOAD_CHECK_INTERVAL", 3600.0)
    third = get_client(d)
    (d / "converge.config").write_text(json.dumps({"quorum": 3}))
    time.sleep(0.01)
    assert get_client(d) is third  # twin: within the interval the shared client stays
    close_clients()
