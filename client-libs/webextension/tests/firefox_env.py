"""A real Firefox with the extension, real notaries and real HTTPS sites, all on loopback.

- Two certificate authorities: the honest one (it issued the sites' genuine certificates
  and the notaries' TLS certificates) and the attacker's (it issued a forged certificate for
  ``bank.test``). The browser's fresh profile trusts both, as if the attacker's CA had been
  compromised or coerced: the browser alone cannot tell the forgery.
- Sites: ``good.test`` at 127.0.0.1 (both the browser and the notaries reach it), the
  genuine ``bank.test`` at 127.0.0.2 (where the notaries reach it) and the forged one at
  127.0.0.1 (where the browser is sent: ``network.dns.localDomains``).
- Notaries: real ``notary serve`` processes (``--resolve`` maps the names), serving HTTPS
  with a certificate the browser trusts, extended answers signed with their own keys; a
  relay that replays answers (it swaps the client's nonce for its own); a bundle whose
  notary does not exist.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme

ROOT = Path(__file__).resolve().parents[3]
EXT = ROOT / "client-libs" / "webextension"
NOTARY = ROOT / ".venv" / "bin" / "notary"
ADDON_ID = "converge@converge-notary.github.io"
ARTIFACTS = ROOT / "var" / "results" / "webextension"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port_on_both(hosts: tuple[str, ...]) -> int:
    """A port free on every one of these loopback addresses."""
    for _ in range(100):
        port = free_port()
        try:
            socks = []
            for h in hosts:
                s = socket.socket()
                s.bind((h, port))
                socks.append(s)
            for s in socks:
                s.close()
            return port
        except OSError:
            for s in socks:
                s.close()
    raise RuntimeError("no common free port")


class _Site(http.server.BaseHTTPRequestHandler):
    body = b""
    hits: list[str]

    def do_GET(self) -> None:  # noqa: N802
        self.hits.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Site:
    host: str
    port: int
    body: str
    server: http.server.ThreadingHTTPServer
    hits: list[str] = field(default_factory=list)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_site(host: str, port: int, cert: trustme.LeafCert, text: str, tmp: Path) -> Site:
    hits: list[str] = []
    body = f"<!doctype html><title>{text}</title><p id='page'>{text}</p>".encode()
    handler = type("H", (_Site,), {"body": body, "hits": hits})
    server = http.server.ThreadingHTTPServer((host, port), handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Site(host, port, text, server, hits)


class _Replay(http.server.BaseHTTPRequestHandler):
    """Forwards POST /v2/answer to a notary with its own nonce: the answer comes back
    signed by that notary, but bound to the relay's nonce (a replay)."""

    upstream = ""
    context: ssl.SSLContext

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        body["nonce"] = "cmVwbGF5ZWQtbm9uY2UtMDE"
        req = urllib.request.Request(
            self.upstream + self.path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=10) as r:
                status, ctype, data = r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            status, ctype, data = e.code, e.headers.get("Content-Type", ""), e.read()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Notary:
    name: str
    port: int
    metrics_port: int
    proc: subprocess.Popen[bytes]
    bundle: Path

    def requests_answered(self) -> float:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("notary_requests_total")
        )


@dataclass
class World:
    tmp: Path
    good_ca: trustme.CA
    evil_ca: trustme.CA
    good: Site
    bank_genuine: Site
    bank_forged: Site
    notaries: list[Notary]
    replay_bundle: Path
    dead_bundle: Path
    stops: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for n in self.notaries:
            n.proc.terminate()
        for n in self.notaries:
            try:
                n.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                n.proc.kill()
        for s in (self.good, self.bank_genuine, self.bank_forged, *self.stops):
            s.stop() if hasattr(s, "stop") else s.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)


def _wait_tls(port: int, ca: trustme.CA, timeout: float = 30.0) -> None:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as s,
                ctx.wrap_socket(s, server_hostname="127.0.0.1"),
            ):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"notary on {port} did not start")


def start_world() -> World:
    tmp = Path(tempfile.mkdtemp(prefix="converge-firefox-"))
    good_ca = trustme.CA(organization_name="Honest CA", key_type=trustme.KeyType.RSA)
    evil_ca = trustme.CA(organization_name="Compromised CA", key_type=trustme.KeyType.RSA)
    good_port = free_port()
    good = start_site(
        "127.0.0.1", good_port, good_ca.issue_cert("good.test"), "genuine good.test", tmp
    )
    bank_port = free_port_on_both(("127.0.0.1", "127.0.0.2"))
    bank_genuine = start_site(
        "127.0.0.2", bank_port, good_ca.issue_cert("bank.test"), "genuine bank.test", tmp
    )
    bank_forged = start_site(
        "127.0.0.1", bank_port, evil_ca.issue_cert("bank.test"), "forged bank.test", tmp
    )
    notaries: list[Notary] = []
    for name in ("Org A", "Org B"):
        d = tmp / name.replace(" ", "")
        d.mkdir(mode=0o700)
        leaf = good_ca.issue_cert("127.0.0.1", key_type=trustme.KeyType.RSA)
        leaf.cert_chain_pems[0].write_to_path(str(d / "tls.pem"))
        leaf.private_key_pem.write_to_path(str(d / "tls.key"))
        os.chmod(d / "tls.key", 0o600)
        port, mport = free_port(), free_port()
        subprocess.run(
            [str(NOTARY), "keygen", "--data-dir", str(d / "data")], check=True, capture_output=True
        )
        proc = subprocess.Popen(
            [
                str(NOTARY),
                "serve",
                "--data-dir",
                str(d / "data"),
                "--listen",
                f"127.0.0.1:{port}",
                "--cert",
                str(d / "tls.pem"),
                "--key",
                str(d / "tls.key"),
                "--allow-target",
                "127.0.0.0/8",
                "--resolve",
                "bank.test=127.0.0.2",
                "--resolve",
                "good.test=127.0.0.1",
                "--metrics-listen",
                f"127.0.0.1:{mport}",
            ],
            stdout=(d / "notary.log").open("wb"),
            stderr=subprocess.STDOUT,
        )
        _wait_tls(port, good_ca)
        bundle = d / f"{name.replace(' ', '-')}.notary"
        subprocess.run(
            [
                str(NOTARY),
                "bundle",
                "--data-dir",
                str(d / "data"),
                "--cert",
                str(d / "tls.pem"),
                "--host",
                "127.0.0.1",
                "--ssl-port",
                str(port),
                "--name",
                name,
                "-o",
                str(bundle),
            ],
            check=True,
            capture_output=True,
        )
        notaries.append(Notary(name, port, mport, proc, bundle))
    # the replaying relay in front of Org A, with a certificate the browser trusts
    relay_port = free_port()
    ctx = ssl.create_default_context()
    good_ca.configure_trust(ctx)
    handler = type(
        "R", (_Replay,), {"upstream": f"https://127.0.0.1:{notaries[0].port}", "context": ctx}
    )
    relay = http.server.ThreadingHTTPServer(("127.0.0.1", relay_port), handler)
    sctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    good_ca.issue_cert("127.0.0.1").configure_cert(sctx)
    relay.socket = sctx.wrap_socket(relay.socket, server_side=True)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    doc = json.loads(notaries[0].bundle.read_text())
    doc["name"] = "Org Replay"
    doc["hosts"][0]["ssl_port"] = relay_port
    replay_bundle = tmp / "Org-Replay.notary"
    replay_bundle.write_text(json.dumps(doc))
    doc = json.loads(notaries[1].bundle.read_text())
    doc["name"] = "Org Dead"
    doc["hosts"][0]["ssl_port"] = free_port()
    dead_bundle = tmp / "Org-Dead.notary"
    dead_bundle.write_text(json.dumps(doc))
    w = World(
        tmp, good_ca, evil_ca, good, bank_genuine, bank_forged, notaries, replay_bundle, dead_bundle
    )
    w.stops.append(relay)
    return w


def make_profile(w: World) -> tuple[Path, str]:
    """A fresh Firefox profile trusting both CAs; returns it and the extension's UUID."""
    profile = w.tmp / f"profile-{uuid.uuid4().hex[:8]}"
    profile.mkdir()
    subprocess.run(
        ["certutil", "-N", "-d", f"sql:{profile}", "--empty-password"],
        check=True,
        capture_output=True,
    )
    for nick, ca in (("honest-ca", w.good_ca), ("compromised-ca", w.evil_ca)):
        pem = w.tmp / f"{nick}.pem"
        ca.cert_pem.write_to_path(str(pem))
        subprocess.run(
            ["certutil", "-A", "-d", f"sql:{profile}", "-n", nick, "-t", "C,,", "-i", str(pem)],
            check=True,
            capture_output=True,
        )
    ext_uuid = str(uuid.uuid4())
    prefs = {
        "network.dns.localDomains": "bank.test,good.test",
        "network.dns.disableIPv6": True,
        "network.proxy.type": 0,
        "extensions.webextensions.uuids": json.dumps({ADDON_ID: ext_uuid}),
        "browser.shell.checkDefaultBrowser": False,
        "datareporting.policy.dataSubmissionEnabled": False,
        "toolkit.telemetry.enabled": False,
        "app.update.enabled": False,
        "browser.startup.homepage_override.mstone": "ignore",
        "network.captive-portal-service.enabled": False,
        "network.connectivity-service.enabled": False,
        "browser.safebrowsing.malware.enabled": False,
        "browser.safebrowsing.phishing.enabled": False,
        "extensions.getAddons.cache.enabled": False,
        "security.enterprise_roots.enabled": False,
        "network.http.http3.enable": False,
    }
    with (profile / "user.js").open("w") as fh:
        for k, v in prefs.items():
            fh.write(f"user_pref({json.dumps(k)}, {json.dumps(v)});\n")
    return profile, ext_uuid


def firefox(profile: Path) -> Any:
    from selenium import webdriver
    from selenium.webdriver.firefox.service import Service

    geckodriver = subprocess.run(
        [str(ROOT / "scripts" / "install-geckodriver")], check=True, capture_output=True, text=True
    ).stdout.strip()
    opts = webdriver.FirefoxOptions()
    opts.add_argument("-headless")
    opts.add_argument("-profile")
    opts.add_argument(str(profile))
    opts.binary_location = shutil.which("firefox-esr") or shutil.which("firefox") or "firefox"
    # --allow-system-access: WebDriver may then open the extension's own pages
    # (moz-extension://), which the tests drive like a user
    service = Service(
        executable_path=geckodriver,
        service_args=["--allow-system-access"],
        log_output=str(profile.parent / "geckodriver.log"),
    )
    driver = webdriver.Firefox(options=opts, service=service)
    driver.set_page_load_timeout(60)
    driver.set_window_size(1100, 900)
    return driver
