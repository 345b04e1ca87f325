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

import base64
import contextlib
import hashlib
import http.server
import json
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
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
# CONVERGE_XPI: test another build of the extension (default: the one test.sh builds)
XPI = Path(os.environ.get("CONVERGE_XPI", EXT / "dist" / "converge-0.1.0.xpi"))


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


WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SW_JS = b"""self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));
self.addEventListener("message", (e) => {
  // a URL, or { url, init } (e.g. credentials: "include" for a cross-origin fetch)
  const [url, init] = typeof e.data === "string" ? [e.data, {}] : [e.data.url, e.data.init];
  fetch(url, { cache: "no-store", ...init }).then(
    (r) => e.source.postMessage("ok " + r.status), (err) => e.source.postMessage("error " + err));
});
"""
GIF = bytes.fromhex(
    "47494638396101000100800000000000ffffff21f90401000000002c00000000010001000002024401003b"
)


@dataclass
class Hit:
    """One request a site received: what a server (or a forger) could read."""

    method: str
    path: str
    host: str
    cookie: str
    body: bytes
    upgrade: bool


class _Site(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # WebSocket needs it; every response closes its connection
    body = b""
    hits: list[Hit]
    many: str = ""
    files: dict[str, bytes]

    def setup(self) -> None:
        # the TLS handshake in this connection's own thread, not in the accept loop (where one
        # slow or idle client would stall every other)
        self.request.settimeout(30)
        self.request.do_handshake()
        super().setup()

    def _record(self, body: bytes = b"") -> None:
        self.hits.append(
            Hit(
                self.command,
                self.path,
                self.headers.get("Host", ""),
                self.headers.get("Cookie", ""),
                body,
                self.headers.get("Upgrade", "").lower() == "websocket",
            )
        )

    def _send(
        self, status: int, ctype: str, data: bytes, extra: dict[str, str] | None = None
    ) -> None:
        self.close_connection = True
        self.send_response(status)
        self.send_header("Connection", "close")
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        # CORS: a credentialed cross-origin fetch/XHR needs its origin named, not "*"
        origin = self.headers.get("Origin")
        if origin and origin != "null":
            self.send_header("Access-Control-Allow-Origin", origin)
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Vary", "Origin")
        else:
            self.send_header("Access-Control-Allow-Origin", "*")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self) -> None:  # noqa: N802
        self._record()
        self._send(200, "text/html; charset=utf-8", self.body)

    def do_OPTIONS(self) -> None:  # noqa: N802
        """A CORS preflight: any method and header allowed, for the requesting origin."""
        self._record()
        self._send(
            204,
            "text/plain",
            b"",
            {
                "Access-Control-Allow-Methods": "GET, HEAD, POST, PUT, DELETE",
                "Access-Control-Allow-Headers": self.headers.get(
                    "Access-Control-Request-Headers", ""
                ),
            },
        )

    def do_POST(self) -> None:  # noqa: N802
        n = min(int(self.headers.get("Content-Length", "0") or 0), 1 << 20)
        self._record(self.rfile.read(n))
        self._send(
            200,
            "text/html; charset=utf-8",
            b"<!doctype html><title>posted</title><p id='page'>posted</p>",
        )

    do_PUT = do_POST  # noqa: N815

    def do_GET(self) -> None:  # noqa: N802
        self._record()
        path, _, query = self.path.partition("?")
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers.get("Sec-WebSocket-Key", "")
            accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", accept)
            self.end_headers()
            self.wfile.flush()
            time.sleep(1.0)
            self.close_connection = True
            return
        if path == "/setcookie":
            domain = f"; Domain={query[7:]}" if query.startswith("domain=") else ""
            self._send(
                200,
                "text/html; charset=utf-8",
                self.body,
                {"Set-Cookie": f"session=SECRET-SESSION; Secure; SameSite=None; Path=/{domain}"},
            )
        elif path == "/redirect":
            self._send(302, "text/plain", b"", {"Location": urllib.parse.unquote(query)})
        elif path == "/sw.js":
            self._send(200, "application/javascript", SW_JS)
        elif path in self.files:
            self._send(200, "application/json", self.files[path])
        elif path == "/img.gif":
            self._send(200, "image/gif", GIF)
        elif path == "/many" and self.many:
            n, _, port = query.partition(":")
            imgs = "".join(
                f"<img src='https://h{i}.{self.many}:{port}/img.gif' width=1 height=1>"
                for i in range(int(n))
            )
            page = f"<!doctype html><title>many</title><p id='page'>many</p>{imgs}"
            self._send(200, "text/html; charset=utf-8", page.encode())
        else:
            self._send(200, "text/html; charset=utf-8", self.body)

    def log_message(self, *args: Any) -> None:
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (a cancelled or refused request) is not news


@dataclass
class Site:
    host: str
    port: int
    body: str
    server: http.server.ThreadingHTTPServer
    hits: list[Hit] = field(default_factory=list)
    context: ssl.SSLContext | None = None
    files: dict[str, bytes] = field(default_factory=dict)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def serve(self, cert: trustme.LeafCert) -> None:
        """New connections get this certificate (the site sends Connection: close)."""
        assert self.context is not None
        cert.configure_cert(self.context)


def start_site(
    host: str, port: int, cert: trustme.LeafCert, text: str, tmp: Path, many: str = ""
) -> Site:
    hits: list[Hit] = []
    files: dict[str, bytes] = {}
    body = f"<!doctype html><title>{text}</title><p id='page'>{text}</p>".encode()
    handler = type("H", (_Site,), {"body": body, "hits": hits, "many": many, "files": files})
    server = _QuietServer((host, port), handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # no session resumption: a certificate changed by serve() is shown on the next handshake
    ctx.num_tickets = 0
    ctx.options |= ssl.OP_NO_TICKET
    cert.configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Site(host, port, text, server, hits, ctx, files)


@dataclass
class H2Site:
    """A Node HTTP/2 site (tests/h2site.mjs); `log()` lists its requests as
    "METHOD PATH cookie:yes|no VERSION" lines."""

    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_h3(host: str, port: int, cert: trustme.LeafCert, text: str, tmp: Path) -> H2Site:
    """An HTTP/3 site (tests/h3site.py, aioquic) on UDP host:port."""
    return start_h2(host, port, cert, text, tmp, [sys.executable, "-W", "ignore", "h3site.py"])


def start_h2(
    host: str,
    port: int,
    cert: trustme.LeafCert,
    text: str,
    tmp: Path,
    program: list[str] | None = None,
) -> H2Site:
    """An HTTP/2 site (tests/h2site.mjs), or another `program` taking the same arguments."""
    program = [*(program or ["node", "h2site.mjs"])]
    program[-1] = str(Path(__file__).with_name(program[-1]))
    d = Path(tempfile.mkdtemp(dir=tmp, prefix="h2-"))
    cert.cert_chain_pems[0].write_to_path(str(d / "cert.pem"))
    cert.private_key_pem.write_to_path(str(d / "key.pem"))
    log = d / "requests.log"
    proc = subprocess.Popen(
        [
            *program,
            host,
            str(port),
            str(d / "cert.pem"),
            str(d / "key.pem"),
            text,
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while "ready" not in log.read_text():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"h2 site did not start: {log.read_text()}")
        time.sleep(0.1)
    return H2Site(port, proc, log)


class _Proxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Connect(socketserver.StreamRequestHandler):
    """An HTTP CONNECT proxy that resolves names itself (as a proxy does: the browser sends
    it the name, not an address) and records the targets it was asked for."""

    resolve: dict[str, str]
    asked: list[str]

    def handle(self) -> None:
        line = self.rfile.readline(4096).decode("latin-1")
        while self.rfile.readline(4096) not in (b"\r\n", b"\n", b""):
            pass
        parts = line.split()
        if len(parts) < 2 or parts[0] != "CONNECT":
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        name, _, port = parts[1].rpartition(":")
        self.asked.append(parts[1])
        try:
            up = socket.create_connection((self.resolve.get(name, name), int(port)), timeout=10)
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        self.wfile.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        self.wfile.flush()
        down = self.connection

        def pump(a: socket.socket, b: socket.socket) -> None:
            try:
                while data := a.recv(65536):
                    b.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    b.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=pump, args=(up, down), daemon=True)
        t.start()
        pump(down, up)
        t.join(timeout=30)
        up.close()


@dataclass
class Proxy:
    port: int
    asked: list[str]
    server: _Proxy

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_proxy(resolve: dict[str, str]) -> Proxy:
    asked: list[str] = []
    handler = type("P", (_Connect,), {"resolve": resolve, "asked": asked})
    server = _Proxy(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Proxy(server.server_address[1], asked, server)


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

    def rate_limited(self) -> float:
        return self._metric("notary_rate_limited")

    def requests_answered(self) -> float:
        return self._metric("notary_requests_total")

    def _metric(self, prefix: str) -> float:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(prefix) and not line.startswith(prefix + "_created")
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
    swap: Site
    many: Site
    many_names: list[str]
    proxy: Proxy
    h2_forged: H2Site
    h2_good: H2Site
    stops: list[Any] = field(default_factory=list)
    # HTTP/3 (UDP, aioquic): a forged bank.test (the notaries reach a genuine one at
    # 127.0.0.2 over TCP) and a genuine good.test (and the same certificate over TCP)
    h3_forged: H2Site | None = None
    h3_good: H2Site | None = None
    # the certificate swap.test's genuine server shows (serve() it back after a forgery)
    swap_cert: trustme.LeafCert | None = None

    def close(self) -> None:
        for n in self.notaries:
            n.proc.terminate()
        for n in self.notaries:
            try:
                n.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                n.proc.kill()
        for s in (
            self.good,
            self.bank_genuine,
            self.bank_forged,
            self.many,
            self.proxy,
            *self.stops,
        ):
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
    # swap.test: the browser's server (127.0.0.1) shows the genuine certificate first, then a
    # forged one; the notaries reach a genuine one (127.0.0.2)
    swap_port = free_port_on_both(("127.0.0.1", "127.0.0.2"))
    swap_cert = good_ca.issue_cert("swap.test")
    swap = start_site("127.0.0.1", swap_port, swap_cert, "swap.test", tmp)
    swap_genuine = start_site("127.0.0.2", swap_port, swap_cert, "genuine swap.test", tmp)
    # a page whose images come from 200 host names, all genuine
    many_names = [f"h{i}.many.test" for i in range(200)]
    many = start_site(
        "127.0.0.1",
        free_port(),
        good_ca.issue_cert("many.test", *many_names),
        "many",
        tmp,
        many="many.test",
    )
    hosts_file = tmp / "hosts"
    hosts_file.write_text(
        "127.0.0.2 bank.test swap.test\n127.0.0.1 good.test many.test "
        + " ".join(many_names)
        + "\n"
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
                "--hosts-file",
                str(hosts_file),
                # a small per-client budget (a public notary's is larger, and so are its users)
                # the loopback sites share this busy machine with 200 connections of the browser
                "--probe-timeout",
                "10",
                "--rate-limit",
                "20",
                "--rate-burst",
                "40",
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
    # an operator's bundle list on good.test, naming both notaries' bundles (and a plain-HTTP
    # URL, which is ignored)
    base = f"https://good.test:{good.port}"
    for n in notaries:
        good.files[f"/{n.bundle.name}"] = n.bundle.read_bytes()
    good.files["/notaries.json"] = json.dumps(
        {"bundles": [f"{base}/{n.bundle.name}" for n in notaries] + ["http://good.test/x.notary"]}
    ).encode()
    proxy = start_proxy({"bank.test": "127.0.0.1", "good.test": "127.0.0.1"})
    # HTTP/2: a forged bank.test (the notaries reach a genuine one at 127.0.0.2) and a
    # genuine good.test
    h2_port = free_port_on_both(("127.0.0.1", "127.0.0.2"))
    h2_forged = start_h2(
        "127.0.0.1", h2_port, evil_ca.issue_cert("bank.test"), "forged bank.test", tmp
    )
    h2_bank = start_site(
        "127.0.0.2", h2_port, good_ca.issue_cert("bank.test"), "genuine bank.test", tmp
    )
    h2_good = start_h2(
        "127.0.0.1", free_port(), good_ca.issue_cert("good.test"), "genuine good.test", tmp
    )
    w = World(
        tmp,
        good_ca,
        evil_ca,
        good,
        bank_genuine,
        bank_forged,
        notaries,
        replay_bundle,
        dead_bundle,
        swap,
        many,
        many_names,
        proxy,
        h2_forged,
        h2_good,
    )
    w.stops += [relay, swap, swap_genuine, h2_forged, h2_bank, h2_good]
    w.swap_cert = swap_cert
    h3_port = free_port_on_both(("127.0.0.1", "127.0.0.2"))
    w.h3_forged = start_h3(
        "127.0.0.1", h3_port, evil_ca.issue_cert("bank.test"), "forged bank.test", tmp
    )
    w.stops += [w.h3_forged]
    w.stops += [
        start_site("127.0.0.2", h3_port, good_ca.issue_cert("bank.test"), "genuine bank.test", tmp)
    ]
    h3_good_port = free_port()
    h3_good_cert = good_ca.issue_cert("good.test")
    w.h3_good = start_h3("127.0.0.1", h3_good_port, h3_good_cert, "genuine good.test", tmp)
    w.stops += [
        w.h3_good,
        start_site("127.0.0.1", h3_good_port, h3_good_cert, "genuine good.test", tmp),
    ]
    return w


def make_profile(w: World, extra: dict[str, Any] | None = None) -> tuple[Path, str]:
    """A fresh Firefox profile trusting both CAs (and `extra` preferences); returns it and
    the extension's UUID."""
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
        "network.dns.localDomains": ",".join(
            ["bank.test", "good.test", "swap.test", "many.test", *w.many_names]
        ),
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
        **(extra or {}),
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
