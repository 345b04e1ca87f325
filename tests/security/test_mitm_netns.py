"""A real man-in-the-middle across Linux network namespaces made by this test.

Topology (all addresses private to the namespaces; nothing is linked to the host's network)::

    target  10.200.1.2 --+
    notary1 10.200.2.2 --+-- router (forwards) --+-- 10.200.4.2 client
    notary2 10.200.3.2 --+                        |
                                   mitm 10.200.5.1 +-- 10.200.5.2 client (second link)
                                   (also claims 10.200.1.2, the target's address)

The genuine TLS site runs in ``target``. The client reaches the notaries through the router.
With the attack on, the client's route to 10.200.1.2 goes to the ``mitm`` namespace, where an
intercepting TLS server presents a forged certificate for site.test (issued by the attacker's
own CA). The notaries reach the genuine site. ``converge()`` must say untrusted; once the
proxy and its route are removed, trusted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from security_support import (
    REPO,
    NotaryProcess,
    Results,
    copy_identity,
    have_netns,
    leaf_der,
    sha1_colon,
)

SUITE = "man in the middle (network namespaces)"
_WHY = have_netns()
pytestmark = [
    pytest.mark.needs_root,
    pytest.mark.skipif(_WHY is not None, reason=f"network namespaces unavailable: {_WHY}"),
]

TARGET_IP = "10.200.1.2"
N1_IP, N2_IP = "10.200.2.2", "10.200.3.2"

TLS_SERVER = textwrap.dedent("""
    import socket, ssl, sys, threading
    cert, key, host, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = socket.create_server((host, port))
    print("ready", flush=True)
    def handle(conn):
        try:
            with ctx.wrap_socket(conn, server_side=True) as tls:
                tls.settimeout(5)
                tls.recv(4096)
                tls.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 2\\r\\n\\r\\nok")
        except (OSError, ssl.SSLError):
            pass
    while True:
        c, _ = srv.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()
""")

CLIENT = textwrap.dedent("""
    import hashlib, json, socket, ssl, sys
    from converge import Config, Policy, converge, parse_bundle
    bundles = [parse_bundle(open(p, "rb").read()) for p in sys.argv[2:]]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((sys.argv[1], 443), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="site.test") as tls:
            der = tls.getpeercert(binary_form=True)
    fp = hashlib.sha1(der).digest().hex(":").upper()
    cfg = Config(directory=None, db=None, bundles=tuple(bundles), quorum=2,
                 agreement=Policy.CONSENSUS,
                 connect_timeout=5, notary_timeout=15, total_timeout=30)
    v = converge("site.test", 443, fp, config=cfg)
    print(json.dumps({"seen": fp, "trusted": bool(v), "verdict": v.to_json()}))
""")


def sh(*args: str) -> None:
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed: {r.stderr.strip()}")


class Lab:
    """Namespaces, links and processes; ``close()`` removes everything it made."""

    def __init__(self, tmp: Path) -> None:
        tag = f"cv{os.getpid() % 100000}"
        self.ns = {k: f"{tag}-{k}" for k in ("r", "t", "n1", "n2", "c", "m")}
        self.tmp = tmp
        self.procs: list[subprocess.Popen[str]] = []
        self.notaries: list[NotaryProcess] = []
        self.made: list[str] = []

    def exec(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[ns]]

    def build(self) -> None:
        for name in self.ns.values():
            sh("ip", "netns", "add", name)
            self.made.append(name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        links = [("r", "vt", "10.200.1.1", "t", "10.200.1.2"),
                 ("r", "vn1", "10.200.2.1", "n1", N1_IP),
                 ("r", "vn2", "10.200.3.1", "n2", N2_IP),
                 ("r", "vc", "10.200.4.1", "c", "10.200.4.2")]
        for a, ifname, a_ip, b, b_ip in links:
            sh("ip", "-n", self.ns[a], "link", "add", ifname, "type", "veth", "peer", "name",
               "eth0", "netns", self.ns[b])
            sh("ip", "-n", self.ns[a], "addr", "add", f"{a_ip}/24", "dev", ifname)
            sh("ip", "-n", self.ns[b], "addr", "add", f"{b_ip}/24", "dev", "eth0")
            sh("ip", "-n", self.ns[a], "link", "set", ifname, "up")
            sh("ip", "-n", self.ns[b], "link", "set", "eth0", "up")
            if b != "c":
                sh("ip", "-n", self.ns[b], "route", "add", "default", "via", a_ip)
        sh("ip", "-n", self.ns["c"], "route", "add", "10.200.0.0/16", "via", "10.200.4.1")
        sh(*self.exec("r"), "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        # the attacker's link to the client, and the target's address claimed in mitm
        sh("ip", "-n", self.ns["m"], "link", "add", "eth0", "type", "veth", "peer", "name",
           "eth1", "netns", self.ns["c"])
        sh("ip", "-n", self.ns["m"], "addr", "add", "10.200.5.1/24", "dev", "eth0")
        sh("ip", "-n", self.ns["c"], "addr", "add", "10.200.5.2/24", "dev", "eth1")
        sh("ip", "-n", self.ns["m"], "link", "set", "eth0", "up")
        sh("ip", "-n", self.ns["c"], "link", "set", "eth1", "up")
        sh("ip", "-n", self.ns["m"], "addr", "add", f"{TARGET_IP}/32", "dev", "lo")

    def intercept(self, on: bool) -> None:
        verb = "add" if on else "del"
        sh("ip", "-n", self.ns["c"], "route", verb, f"{TARGET_IP}/32", "via", "10.200.5.1")

    def tls_server(self, ns: str, cert: trustme.LeafCert) -> subprocess.Popen[str]:
        script = self.tmp / "tls_server.py"
        script.write_text(TLS_SERVER)
        cert_file = self.tmp / f"{ns}-cert.pem"
        key_file = self.tmp / f"{ns}-key.pem"
        cert.cert_chain_pems[0].write_to_path(str(cert_file))
        cert.private_key_pem.write_to_path(str(key_file))
        p = subprocess.Popen([*self.exec(ns), sys.executable, str(script), str(cert_file),
                              str(key_file), TARGET_IP, "443"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.strip() == "ready", p.stderr.read() if p.stderr else line
        return p

    def notary(self, ns: str, ip: str, identity_dir: Path) -> NotaryProcess:
        n = NotaryProcess(copy_identity(identity_dir, self.tmp / ns), [
            "--listen", f"{ip}:4242", "--allow-target", "10.200.0.0/16",
            "--resolve", f"site.test={TARGET_IP}", "--probe-timeout", "5"],
            prefix=self.exec(ns))
        self.notaries.append(n)
        return n

    def client(self, bundles: list[Path]) -> dict[str, Any]:
        script = self.tmp / "client.py"
        script.write_text(CLIENT)
        r = subprocess.run([*self.exec("c"), sys.executable, str(script), TARGET_IP,
                            *map(str, bundles)], capture_output=True, text=True, timeout=60,
                           cwd=REPO)
        assert r.returncode == 0, r.stderr[-3000:]
        out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        return out

    def close(self) -> None:
        for n in self.notaries:
            n.stop()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(5)
            for f in (p.stdout, p.stderr):
                if f is not None:
                    f.close()
        for name in self.made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path)
    try:
        lab.build()
        yield lab
    finally:
        lab.close()
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in left for n in lab.ns.values()), "namespaces left behind"


def bundle_file(path: Path, name: str, host: str, identity_dir: Path) -> Path:
    pem = (identity_dir / "notary.pem").read_text()
    path.write_text(json.dumps({"version": 1, "name": name, "hosts": [
        {"host": host, "ssl_port": 4242, "http_port": 80, "certificate": pem}]}))
    return path


def test_converge_detects_the_interception_and_trusts_without_it(
    lab: Lab, identity_dir: Path, site_cert: trustme.LeafCert, results: Results,
) -> None:
    attacker = trustme.CA()
    forged = attacker.issue_cert("site.test")
    genuine_fp = sha1_colon(leaf_der(site_cert))
    forged_fp = sha1_colon(leaf_der(forged))

    lab.tls_server("t", site_cert)
    mitm = lab.tls_server("m", forged)
    lab.notary("n1", N1_IP, identity_dir)
    lab.notary("n2", N2_IP, identity_dir)
    bundles = [bundle_file(lab.tmp / "n1.notary", "Notary One", N1_IP, identity_dir),
               bundle_file(lab.tmp / "n2.notary", "Notary Two", N2_IP, identity_dir)]

    lab.intercept(True)
    t0 = time.monotonic()
    attacked = lab.client(bundles)
    t_attacked = time.monotonic() - t0
    assert attacked["seen"] == forged_fp  # the client really was intercepted
    assert attacked["trusted"] is False
    votes = [n["outcome"] for n in attacked["verdict"]["notaries"]]
    assert "failure" in votes and "success" not in votes, attacked["verdict"]
    results.add(SUITE, "client behind an intercepting TLS proxy with a forged certificate; "
                "2 notaries on other paths (consensus policy)", "converge() untrusted",
                f"untrusted; notary votes {votes}", t_attacked)

    lab.intercept(False)
    mitm.kill()
    t0 = time.monotonic()
    clean = lab.client(bundles)
    t_clean = time.monotonic() - t0
    assert clean["seen"] == genuine_fp
    assert clean["trusted"] is True, clean["verdict"]
    votes = [n["outcome"] for n in clean["verdict"]["notaries"]]
    assert votes == ["success", "success"]  # consensus: both asked, both agree
    results.add(SUITE, "same client after the proxy and its route are removed",
                "converge() trusted", f"trusted; notary votes {votes}", t_clean)
