"""Support for the transparency-log tests: the independent Go reader, TLS sites on loopback,
notary processes and answers asked with a proof."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
from loopback import free_port

REPO = Path(__file__).resolve().parents[2]
GOREADER_SRC = Path(__file__).resolve().parent / "goreader"
NOTARY = str(Path(sys.executable).with_name("notary"))


def build_goreader(out: Path) -> Path:
    """Build the Go reader (module download through the Go proxy on first use)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise RuntimeError("Go is needed for the independent log reader (tests/tlog/goreader)")
    exe = out / "goreader"
    subprocess.run([go, "build", "-o", str(exe), "."], cwd=GOREADER_SRC, check=True,
                   timeout=600, capture_output=True)
    return exe


@dataclass
class Site:
    port: int
    sha256: str
    server: socket.socket

    def close(self) -> None:
        self.server.close()


def tls_site(ca: trustme.CA, name: str = "site.test") -> Site:
    """A TLS server on 127.0.0.1 that completes handshakes and closes."""
    leaf = ca.issue_cert(name, "127.0.0.1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(ctx)
    der = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
    import hashlib

    fp = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(5)
                with ctx.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return Site(int(srv.getsockname()[1]), fp, srv)


@dataclass
class Notary:
    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def vkey(self) -> str:
        return subprocess.run([NOTARY, "log-key", "--data-dir", str(self.data_dir)],
                              check=True, capture_output=True, text=True,
                              timeout=60).stdout.strip()

    def ask(self, host: str, port: int, fingerprint: str, transparency: bool = True,
            ip: str | None = None) -> tuple[int, bytes]:
        req: dict[str, Any] = {"host": host, "port": port, "fingerprint": fingerprint}
        if transparency:
            req["transparency"] = True
        if ip is not None:
            req["ip"] = ip
        r = urllib.request.Request(self.url + "/v2/answer", data=json.dumps(req).encode(),
                                   method="POST")
        try:
            with urllib.request.urlopen(r, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()


@contextmanager
def notary(data_dir: Path, *extra: str, port: int | None = None) -> Iterator[Notary]:
    port = port or free_port()
    log = open(data_dir.parent / f"{data_dir.name}-{port}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [NOTARY, "serve", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}",
         "--no-tls", "--allow-target", "127.0.0.0/8", "--resolve", "site.test=127.0.0.1",
         "--log-interval", "0.2", *extra],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    n = Notary(port, data_dir, proc)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"notary exited {proc.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("notary did not start") from None
                time.sleep(0.05)
        yield n
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        log.close()


def goreader(exe: Path, *args: str) -> tuple[int, str, str]:
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr
