"""The conformance environment: real notaries, real TLS targets, all on loopback.

* Three notaries (``notary serve``), organisations Org A, B and C, on free 127.0.0.1 ports
  with ``--allow-target 127.0.0.0/8``. A and B resolve ``split.test`` to 127.0.0.1 (the
  genuine server), C to 127.0.0.2 (a forged certificate on the same port): a
  man-in-the-middle on C's path.
* Each notary also listens on 127.0.0.1{1,2,3}:<bounce port> (one port number for all, as
  4242 was) and runs its bounce relay (``--relay-listen``) on the same address; the bundles
  ``Org X@bounce`` describe that side (``http_port`` = the relay).
* "Org Dead": a bundle whose host port has nothing listening.
* "Org Wrongpin": Org C's host with Org A's certificate in the bundle.
* "Org Replay": a relay presenting Org B's own certificate (so the pin holds) that forwards
  each request to Org A and returns A's signed bytes: the signature cannot verify against
  B's key.
* "Org Swap": a relay presenting Org B's certificate that forwards each request to Org B
  about another target: 127.0.0.2:P (where the forged certificate is served) instead of
  127.0.0.1:P. A legacy answer names no target, so it is fooled; an extended one is bound to
  127.0.0.2 and is rejected as ``wrong-target``. "Org Inject" likewise keeps the target
  but asks B to connect to the address 127.0.0.2 (``/target/<h>+<p>/127.0.0.2``, or the
  extended request's ``ip``); the extended answer names that address and is rejected.
* HTTPS targets made with trustme: the genuine one on 127.0.0.1:P, the forged one on
  127.0.0.2:P, and the genuine certificate again on 127.0.0.1:R (another logged entry).
* The transparency cases' relays (``log_relays.py``), each presenting a notary's own
  certificate: "Org X Log" records the requests to notary X; "Org Log Stripped", "Org Log
  Altered" and "Org Log Other Entry" change B's answers' ``transparency`` member (removed, a
  proof hash flipped, the member of B's answer about 127.0.0.1:R swapped in); "Org Log
  Stripped No Log" is the stripping relay with a bundle that names no log.

* The TLS-hook cases (``hook``): ``hook.test`` on one port Q, the genuine HTTPS server on
  127.0.0.1:Q and a forged one on 127.0.0.2:Q, both certificates issued by one CA that the
  client is told to trust (so plain CA validation would accept either); a CONNECT proxy
  routing the name to the genuine server, an attacker's proxy routing it to the forged one;
  every notary resolves ``hook.test`` to the genuine server. "Org Hanging": B's bundle at a
  port that accepts connections and never answers. The attacker's own site, which the
  notaries honestly vouch for (``hook.test:R`` and ``site.test:Q``, on one TLS context with
  the forged server), starts the redirect and session-resumption cases.

Bundles: ``notary bundle`` advertises the extended format (``protocols`` and
``signing_keys``). The legacy cases use each bundle without those two fields (``Org A``);
the extended cases use it as written (``Org A+``, likewise ``Org Dead+``, ``Org Replay+``,
``Org Swap+``).

Everything is started once per session. When ``notary`` (the console script) is missing the
live cases are skipped with that reason; the vector cases still run.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import socket
import socketserver
import ssl
import struct
import subprocess
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from connect_proxy import ConnectProxy
from hostile_world import FORMS, start_hostile
from log_relays import LogRelay, ask_notary, proof_request, start_log_relay
from loopback import ThreadedServer as _Threaded
from loopback import read_request as _read_request
from loopback import tls_server as _tls_server

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"
HERE = Path(__file__).resolve().parent
NOTARY_STARTUP_TIMEOUT = 30.0


def notary_command() -> str | None:
    exe = VENV / "bin" / "notary"
    if exe.exists():
        return str(exe)
    return shutil.which("notary")


BOUNCE_IPS = ("127.0.0.11", "127.0.0.12", "127.0.0.13")
# With this set to 1 (scripts/test-all does), a registered CLI that is not built fails its
# cases instead of skipping them.
REQUIRE_ALL = "CONVERGE_CONFORMANCE_REQUIRE_ALL"
HOOK_HOST = "hook.test"
ATTACKER_HOST = "site.test"  # the attacker's own site in the hook cases
ATTACKER_IP = "127.0.0.3"


def common_free_port(hosts: tuple[str, ...]) -> int:
    """A port number free on every one of ``hosts``."""
    for _ in range(50):
        port = free_port(hosts[0])
        try:
            for h in hosts[1:]:
                with socket.socket() as s:
                    s.bind((h, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no common free port")


_GIVEN_PORTS: set[tuple[str, int]] = set()


def xdist_share(port: int) -> bool:
    """Under pytest-xdist, worker N of W hands out only ports with ``(port // 2) % W == N``,
    so two workers never both hand out one just-closed port (each process's memory of the
    ports it gave does not reach the other workers). Not ``port % W``: Linux gives ``bind``
    to port 0 odd ports while it can."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()
            and int(count) > 1):
        return True
    return port // 2 % int(count) == int(worker[2:]) % int(count)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` a moment ago, never one handed out before in this process (the
    kernel may give a just-closed port again, and two servers would then fight over it)."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if (host, port) not in _GIVEN_PORTS and xdist_share(port):
            _GIVEN_PORTS.add((host, port))
            return port


# ------------------------------------------------------------------------ clients


@dataclass
class ClientCli:
    language: str
    command: list[str]
    expected_failures: set[str]
    skip_reason: str | None = None

    def run(self, *args: str, timeout: float = 60) -> tuple[int, list[dict[str, Any]], str]:
        proc = subprocess.run(
            [*self.command, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        return proc.returncode, lines, proc.stderr


def load_clients(registry: Path | None = None) -> list[ClientCli]:
    raw = tomllib.loads((registry or HERE / "clients.toml").read_text())
    out = []
    for lang, spec in raw.items():
        cmd = [c.replace("{root}", str(ROOT)).replace("{venv}", str(VENV)) for c in spec["command"]]
        reason = None
        if not Path(cmd[0]).exists() and shutil.which(cmd[0]) is None:
            reason = f"{lang} conformance CLI {cmd[0]} is not built"
            if os.environ.get(REQUIRE_ALL) == "1":
                reason = f"{REQUIRE_ALL}=1: " + reason
        out.append(ClientCli(lang, cmd, set(spec.get("expected_failures", [])), reason))
    return out


CLIENTS = load_clients()


# ------------------------------------------------------------------------ servers


@dataclass
class Notary:
    name: str
    data_dir: Path
    port: int
    bundle_file: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    bounce_ip: str = ""
    relay_port: int = 0


@dataclass
class Environment:
    tmp: Path
    target_port: int
    genuine_sha1: str
    genuine_sha256: str
    forged_sha1: str
    bundles: dict[str, Path] = field(default_factory=dict)
    notaries: list[Notary] = field(default_factory=list)
    bounce_port: int = 0
    hook: HookScene | None = None
    other_port: int = 0  # the genuine certificate again, on 127.0.0.1:<other_port>
    log_relays: dict[str, LogRelay] = field(default_factory=dict)


@dataclass
class HookScene:
    """The TLS-hook cases' world: ``hook.test`` on port ``port``, the genuine HTTPS server on
    127.0.0.1 (body ``genuine``), a forged one on 127.0.0.2 (``forged``) whose certificate the
    same CA issued (``ca_file``), a proxy routing the name to each, and a notary that accepts
    connections and never answers."""

    port: int
    ca_file: Path
    genuine: RecordingServer
    forged: RecordingServer
    good_proxy: ConnectProxy
    evil_proxy: ConnectProxy
    hanging_port: int
    switching_proxy: ConnectProxy
    reset_port: int
    attacker: RecordingServer  # the attacker's own site (body ``attacker``), see _hook_scene
    attacker_port: int


@dataclass
class RecordingServer:
    """An HTTPS server answering with ``body``; ``heads`` holds the request heads it received
    (none when every client refused its certificate first). Paths: ``/go/<host>/<port>``
    answers ``302`` to ``https://<host>:<port>/``; ``/keep`` keeps the connection open for
    further requests (keep-alive, at most 20 on one connection); anything else closes it."""

    body: bytes
    heads: list[bytes] = field(default_factory=list)
    server: socketserver.TCPServer | None = None

    def handle(self, s: ssl.SSLSocket) -> None:
        for _ in range(20):
            head = _read_request(s)
            if not head:
                return
            self.heads.append(head.split(b"\r\n\r\n")[0])
            path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
            if path.startswith((b"https://", b"http://")):  # absolute-form (RFC 9112 3.2.2)
                path = b"/" + path.split(b"/", 3)[3] if path.count(b"/") >= 3 else b"/"
            keep = path.startswith(b"/keep")
            if path.startswith(b"/go/") and path.count(b"/") == 3:
                _, _, host, port = path.split(b"/")
                s.sendall(b"HTTP/1.1 302 Found\r\nLocation: https://" + host + b":" + port
                          + b"/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                      + str(len(self.body)).encode()
                      + (b"\r\nConnection: keep-alive" if keep else b"\r\nConnection: close")
                      + b"\r\n\r\n" + self.body)
            if not keep:
                return


def _wait_ready(n: Notary) -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + NOTARY_STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if n.proc is not None and n.proc.poll() is not None:
            log = n.log.read_text() if n.log else ""
            raise RuntimeError(f"notary {n.name} exited: {log[-2000:]}")
        conn = http.client.HTTPSConnection("127.0.0.1", n.port, timeout=2, context=ctx)
        try:
            conn.request("GET", "/", headers={"Accept": "application/json"})
            if conn.getresponse().status == 200:
                return
        except (OSError, ssl.SSLError, http.client.HTTPException):
            time.sleep(0.1)
        finally:
            conn.close()
    raise RuntimeError(f"notary {n.name} not ready after {NOTARY_STARTUP_TIMEOUT} s")


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr[-2000:]}")


def _bundle(notary: str, data_dir: Path, port: int, name: str, out: Path) -> Path:
    _run(
        [
            notary,
            "bundle",
            "--data-dir",
            str(data_dir),
            "--host",
            "127.0.0.1",
            "--ssl-port",
            str(port),
            "--name",
            name,
            "-o",
            str(out),
        ]
    )
    return out


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    notary = notary_command()
    if notary is None:
        pytest.skip(
            "the notary console script (.venv/bin/notary) is missing; "
            "run `make setup` once notary/ is installed"
        )
    tmp = tmp_path_factory.mktemp("conformance")
    ca = trustme.CA()
    genuine = ca.issue_cert("split.test", "127.0.0.1", "localhost")
    forged = ca.issue_cert("split.test", "127.0.0.1", "localhost")

    def der(leaf: trustme.LeafCert) -> bytes:
        return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())

    import hashlib

    def colon(d: bytes) -> str:
        return ":".join(f"{b:02X}" for b in d)

    servers: list[socketserver.TCPServer] = []
    proxies: list[ConnectProxy] = []
    procs: list[Notary] = []
    try:
        # the genuine target on 127.0.0.1:P, the forged one on 127.0.0.2:P
        forged_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        forged.configure_cert(forged_ctx)
        port = common_free_port(("127.0.0.2", "127.0.0.1"))
        forged_srv = _tls_server(("127.0.0.2", port), forged_ctx, lambda s: s.recv(1))
        servers.append(forged_srv)
        genuine_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        genuine.configure_cert(genuine_ctx)
        servers.append(_tls_server(("127.0.0.1", port), genuine_ctx, lambda s: s.recv(1)))
        other_srv = _tls_server(("127.0.0.1", 0), genuine_ctx, lambda s: s.recv(1))
        servers.append(other_srv)
        e = Environment(
            tmp,
            port,
            colon(hashlib.sha1(der(genuine)).digest()),
            colon(hashlib.sha256(der(genuine)).digest()),
            colon(hashlib.sha1(der(forged)).digest()),
        )
        e.other_port = other_srv.server_address[1]

        # each notary also listens on 127.0.0.1x:<bounce port> (the port behind a relay, the
        # same number for all, as 4242 was) and runs its bounce relay on 127.0.0.1x:<http port>
        e.bounce_port = common_free_port(BOUNCE_IPS)
        for (letter, split_ip), bounce_ip in zip(
            (("A", "127.0.0.1"), ("B", "127.0.0.1"), ("C", "127.0.0.2")), BOUNCE_IPS, strict=True
        ):
            d = tmp / f"notary-{letter}"
            p = free_port()
            log = tmp / f"notary-{letter}.log"
            n = Notary(f"Org {letter}", d, p, tmp / f"org-{letter.lower()}.notary", log=log)
            n.bounce_ip, n.relay_port = bounce_ip, free_port(bounce_ip)
            with log.open("wb") as fh:
                n.proc = subprocess.Popen(
                    [
                        notary,
                        "serve",
                        "--data-dir",
                        str(d),
                        "--listen",
                        f"127.0.0.1:{p}",
                        "--listen",
                        f"{bounce_ip}:{e.bounce_port}",
                        "--relay-listen",
                        f"{bounce_ip}:{n.relay_port}",
                        "--relay-port",
                        str(e.bounce_port),
                        "--allow-target",
                        "127.0.0.0/8",
                        "--resolve",
                        f"split.test={split_ip}",
                        "--resolve",
                        f"{HOOK_HOST}=127.0.0.1",
                        "--resolve",
                        f"{ATTACKER_HOST}={ATTACKER_IP}",
                        "--probe-timeout",
                        "2",
                        "--negative-ttl",
                        "1",
                    ],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    cwd=tmp,
                )
            procs.append(n)
        for n in procs:
            _wait_ready(n)
            _bundle(notary, n.data_dir, n.port, n.name, n.bundle_file)
            e.bundles[n.name] = n.bundle_file
            bounce_file = tmp / f"{n.name.lower().replace(' ', '-')}-bounce.notary"
            _run(
                [
                    notary,
                    "bundle",
                    "--data-dir",
                    str(n.data_dir),
                    "--host",
                    n.bounce_ip,
                    "--ssl-port",
                    str(e.bounce_port),
                    "--http-port",
                    str(n.relay_port),
                    "--name",
                    n.name,
                    "-o",
                    str(bounce_file),
                ]
            )
            e.bundles[f"{n.name}@bounce"] = bounce_file
        e.notaries = procs

        # Org Dead: a real key, nothing listening
        dead_dir = tmp / "notary-dead"
        _run([notary, "keygen", "--data-dir", str(dead_dir)])
        e.bundles["Org Dead"] = _bundle(
            notary, dead_dir, free_port(), "Org Dead", tmp / "org-dead.notary"
        )
        e.bundles["Org Dead2"] = _bundle(
            notary, dead_dir, free_port(), "Org Dead2", tmp / "org-dead2.notary"
        )

        # Org Wrongpin: C's address, A's certificate
        a = json.loads(e.bundles["Org A"].read_text())
        c = json.loads(e.bundles["Org C"].read_text())
        wp = {**c, "name": "Org Wrongpin"}
        wp["hosts"] = [{**c["hosts"][0], "certificate": a["hosts"][0]["certificate"]}]
        e.bundles["Org Wrongpin"] = tmp / "org-wrongpin.notary"
        e.bundles["Org Wrongpin"].write_text(json.dumps(wp))

        # Org Replay: presents B's certificate, answers with A's signed bytes
        relay_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        relay_ctx.load_cert_chain(
            str(procs[1].data_dir / "notary.pem"), str(procs[1].data_dir / "notary.key")
        )
        upstream_port = procs[0].port

        def relay(s: ssl.SSLSocket) -> None:
            req = _read_request(s)
            up_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            up_ctx.check_hostname = False
            up_ctx.verify_mode = ssl.CERT_NONE
            with (
                socket.create_connection(("127.0.0.1", upstream_port), timeout=10) as raw,
                up_ctx.wrap_socket(raw) as up,
            ):
                up.sendall(req)
                while chunk := up.recv(65536):
                    s.sendall(chunk)

        relay_srv = _tls_server(("127.0.0.1", 0), relay_ctx, relay)
        servers.append(relay_srv)
        b = json.loads(e.bundles["Org B"].read_text())
        rp = {**b, "name": "Org Replay"}
        rp["hosts"] = [{**b["hosts"][0], "ssl_port": relay_srv.server_address[1]}]
        e.bundles["Org Replay"] = tmp / "org-replay.notary"
        e.bundles["Org Replay"].write_text(json.dumps(rp))

        # Org Swap: presents B's certificate, asks B about 127.0.0.2 instead of 127.0.0.1;
        # Org Inject: asks B to probe the address 127.0.0.2 for the target 127.0.0.1
        b_port = procs[1].port

        def forward_to_b(s: ssl.SSLSocket, rewrite: Any) -> None:
            req = rewrite(_read_request(s))
            up_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            up_ctx.check_hostname = False
            up_ctx.verify_mode = ssl.CERT_NONE
            with (
                socket.create_connection(("127.0.0.1", b_port), timeout=10) as raw,
                up_ctx.wrap_socket(raw) as up,
            ):
                up.sendall(req)
                while chunk := up.recv(65536):
                    s.sendall(chunk)

        for name, rewrite in (
            ("Org Swap", lambda r: _swap_target(r, "127.0.0.1", "127.0.0.2")),
            ("Org Inject", lambda r: _inject_address(r, "127.0.0.2")),
        ):
            srv = _tls_server(
                ("127.0.0.1", 0), relay_ctx, lambda s, rw=rewrite: forward_to_b(s, rw)
            )
            servers.append(srv)
            doc = {**b, "name": name}
            doc["hosts"] = [{**b["hosts"][0], "ssl_port": srv.server_address[1]}]
            e.bundles[name] = tmp / f"{name.lower().replace(' ', '-')}.notary"
            e.bundles[name].write_text(json.dumps(doc))
        a_doc = json.loads(e.bundles["Org A"].read_text())
        for form_name, form in FORMS.items():
            name = f"Org Hostile {form_name}"
            srv, doc = start_hostile(name, form, procs[0].data_dir, a_doc, e.genuine_sha1,
                                     e.forged_sha1, _read_request, _tls_server)
            servers.append(srv)
            e.bundles[name] = tmp / f"org-hostile-{form_name}.notary"
            e.bundles[name].write_text(json.dumps(doc))
        servers += _log_relays(e, procs, tmp)
        e.hook = _hook_scene(tmp, ca, servers, proxies)
        e.bundles["Org Hanging"] = _hanging_bundle(tmp, e, b)
        _split_extended(e)
        yield e
    finally:
        for n in procs:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.terminate()
                try:
                    n.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    n.proc.kill()
                    n.proc.wait(timeout=10)
        for srv in servers:
            srv.shutdown()
            srv.server_close()
        for proxy in proxies:
            proxy.stop()


def _log_relays(e: Environment, procs: list[Notary], tmp: Path) -> list[socketserver.TCPServer]:
    """The transparency cases' relays (log_relays.py): ``Org X Log`` records the requests to
    notary X; ``Org Log Stripped`` / ``Altered`` / ``Other Entry`` change B's answers' member;
    ``Org Log Stripped No Log`` is the stripping relay with a bundle that names no log. Every
    notary first logs the genuine certificate at the other port (so each log holds two entries
    and ``Other Entry`` has a logged entry to swap in)."""
    other = proof_request("127.0.0.1", e.other_port, e.genuine_sha256)
    for n in procs:
        answer = ask_notary(n.port, other)
        if b',"transparency":' not in answer:
            raise RuntimeError(f"{n.name} answered without a proof: {answer[-500:]!r}")
    servers = []
    specs = [(f"{n.name} Log", "record", n) for n in procs] + [
        (f"Org Log {label}", mode, procs[1])
        for label, mode in (("Stripped", "strip"), ("Altered", "alter"),
                            ("Other Entry", "other-entry"))
    ]
    for name, mode, n in specs:
        relay = LogRelay(mode, n.port, other_request=other)
        srv = start_log_relay(relay, n.data_dir)
        servers.append(srv)
        e.log_relays[name] = relay
        doc = json.loads(n.bundle_file.read_text())
        if "transparency" not in doc:
            raise RuntimeError(f"notary bundle for {n.name} names no transparency log")
        doc["name"] = name
        doc["hosts"] = [{**doc["hosts"][0], "ssl_port": srv.server_address[1]}]
        e.bundles[name] = tmp / f"{name.lower().replace(' ', '-')}.notary"
        e.bundles[name].write_text(json.dumps(doc))
        if mode == "strip":
            name = f"{name} No Log"
            doc = {**doc, "name": name}
            doc.pop("transparency")
            e.bundles[name] = tmp / "org-log-stripped-no-log.notary"
            e.bundles[name].write_text(json.dumps(doc))
    return servers


def _hook_scene(
    tmp: Path,
    ca: trustme.CA,
    servers: list[socketserver.TCPServer],
    proxies: list[ConnectProxy],
) -> HookScene:
    """The hook cases' world. Besides the genuine and forged servers on port Q, the attacker's
    own site (body ``attacker``) serves ``hook.test:R`` (127.0.0.1:R and 127.0.0.2:R) and
    ``site.test:Q`` (127.0.0.3:Q) with the forged server's certificate, honestly: the
    notaries see that certificate there too and vouch for it. All of the attacker's servers
    share one TLS context, so a TLS session from his site resumes at his forged server: the
    redirect and resumption cases start at his site and end at ``hook.test:Q``."""
    genuine = RecordingServer(b"genuine")
    forged = RecordingServer(b"forged")
    attacker = RecordingServer(b"attacker")
    forged_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(HOOK_HOST, ATTACKER_HOST, "127.0.0.1").configure_cert(forged_ctx)
    port = common_free_port(("127.0.0.2", "127.0.0.1", ATTACKER_IP))
    forged.server = _tls_server(("127.0.0.2", port), forged_ctx, forged.handle)
    servers.append(forged.server)
    genuine_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(HOOK_HOST, "127.0.0.1").configure_cert(genuine_ctx)
    genuine.server = _tls_server(("127.0.0.1", port), genuine_ctx, genuine.handle)
    servers.append(genuine.server)
    attacker_port = common_free_port(("127.0.0.1", "127.0.0.2"))
    for addr in (("127.0.0.1", attacker_port), ("127.0.0.2", attacker_port),
                 (ATTACKER_IP, port)):
        servers.append(_tls_server(addr, forged_ctx, attacker.handle))
    ca_file = tmp / "hook-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    hanging = _Threaded(("127.0.0.1", 0), _Hang)
    threading.Thread(target=hanging.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    servers.append(hanging)
    site = {ATTACKER_HOST: ATTACKER_IP}
    proxies.append(ConnectProxy({HOOK_HOST: "127.0.0.1", **site}).start())
    proxies.append(ConnectProxy({HOOK_HOST: "127.0.0.2", **site}).start())
    proxies.append(
        ConnectProxy({HOOK_HOST: "127.0.0.1", **site},
                     later_routes={HOOK_HOST: "127.0.0.2", **site}).start()
    )
    reset_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert(HOOK_HOST, "127.0.0.1").configure_cert(reset_ctx)
    reset = _tls_server(("127.0.0.1", 0), reset_ctx, _reset_after_handshake)
    servers.append(reset)
    return HookScene(port, ca_file, genuine, forged, proxies[-3], proxies[-2],
                     int(hanging.server_address[1]), proxies[-1], int(reset.server_address[1]),
                     attacker, attacker_port)


def _reset_after_handshake(s: ssl.SSLSocket) -> None:
    """Hold the connection while the client asks its notaries, then reset it (RST)."""
    time.sleep(0.5)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Hang(socketserver.BaseRequestHandler):
    """Accepts, reads, never answers (until the client gives up, at most 60 s)."""

    def handle(self) -> None:
        self.request.settimeout(60)
        with contextlib.suppress(OSError):
            while self.request.recv(4096):
                pass


def _hanging_bundle(tmp: Path, e: Environment, like: dict[str, Any]) -> Path:
    """Org B's bundle pointing at a port that accepts connections and never answers."""
    assert e.hook is not None
    doc = {**like, "name": "Org Hanging"}
    doc["hosts"] = [{**like["hosts"][0], "ssl_port": e.hook.hanging_port}]
    path = tmp / "org-hanging.notary"
    path.write_text(json.dumps(doc))
    return path


def _inject_address(request: bytes, address: str) -> bytes:
    """Rewrite a request so that the notary probes ``address`` for the same target: the
    legacy ``/target/<h>+<p>/<address>`` or the extended ``"ip"`` member."""
    head, _, body = request.partition(b"\r\n\r\n")
    if head.startswith(b"POST /target/"):
        first, _, rest = head.partition(b"\r\n")
        method, path, version = first.split(b" ", 2)
        return b" ".join((method, path + b"/" + address.encode(), version)) + b"\r\n" + rest + (
            b"\r\n\r\n" + body
        )
    return _rewrite_json(head, body, lambda doc: doc.update(ip=address))


def _swap_target(request: bytes, old: str, new: str) -> bytes:
    """Rewrite a legacy (``/target/<old>+``) or extended (JSON ``"host"``) request to ask
    about ``new`` instead of ``old``."""
    head, _, body = request.partition(b"\r\n\r\n")
    if head.startswith(b"POST /target/"):
        return request.replace(f"/target/{old}+".encode(), f"/target/{new}+".encode(), 1)
    def swap(doc: dict[str, Any]) -> None:
        if doc.get("host") == old:
            doc["host"] = new

    return _rewrite_json(head, body, swap)


def _rewrite_json(head: bytes, body: bytes, change: Any) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return head + b"\r\n\r\n" + body
    if isinstance(doc, dict):
        change(doc)
    body = json.dumps(doc).encode()
    lines = [
        line
        for line in head.split(b"\r\n")
        if not line.lower().startswith(b"content-length:")
    ]
    lines.append(f"Content-Length: {len(body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


EXTENDED_FIELDS = ("protocols", "signing_keys")


def _split_extended(e: Environment) -> None:
    """``X+`` = the bundle as ``notary bundle`` wrote it (extended format advertised);
    ``X`` = the same bundle without the extended fields (a legacy bundle)."""
    for name, path in list(e.bundles.items()):
        doc = json.loads(path.read_text())
        if not all(f in doc for f in EXTENDED_FIELDS):
            raise RuntimeError(f"notary bundle for {name} does not advertise the extended format")
        e.bundles[f"{name}+"] = path
        legacy = path.with_name(path.stem + "-legacy.notary")
        legacy.write_text(json.dumps({k: v for k, v in doc.items() if k not in EXTENDED_FIELDS}))
        e.bundles[name] = legacy


def make_config_dir(
    base: Path, env: Environment, notaries: list[str], settings: dict[str, Any]
) -> Path:
    """A fresh configuration directory enabling ``notaries`` (file names keep their order)."""
    d = base
    (d / "notaries-available").mkdir(parents=True)
    (d / "notaries-enabled").mkdir()
    for i, name in enumerate(notaries):
        slug = name.lower().replace(" ", "-").replace("+", "-ext")
        fname = f"{i:02d}-{slug}.notary"
        shutil.copy(env.bundles[name], d / "notaries-available" / fname)
        os.symlink(Path("..") / "notaries-available" / fname, d / "notaries-enabled" / fname)
    placeholders = {
        "$bounce_port": env.bounce_port,
        "$wrong_bounce_port": env.bounce_port + 1 if env.bounce_port < 65535 else 1024,
    }
    settings = {k: placeholders.get(v, v) if isinstance(v, str) else v for k, v in settings.items()}
    cfg = {
        "db": "cache.sqlite3",
        "early-return": False,
        "connect-timeout": 3,
        "notary-timeout": 5,
        "total-timeout": 10,
        **settings,
    }
    (d / "converge.config").write_text(json.dumps(cfg))
    return d


__all__ = [
    "ATTACKER_HOST", "CLIENTS", "HOOK_HOST", "REQUIRE_ALL", "ClientCli", "Environment",
    "HookScene", "env", "make_config_dir",
]
