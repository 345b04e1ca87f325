"""Helpers for the scale-out tests: a real redis-server and a real notary, both on loopback.

Every wait is bounded; every process started here is stopped by the fixture that started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from redis_testing import free_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
class NotaryProcess:
    """``notary serve`` in a subprocess, ready when its info page answers."""

    def __init__(self, data_dir: Path, port: int, args: list[str]) -> None:
        self.data_dir = data_dir
        self.port = port
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = data_dir / "notary.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [str(VENV_BIN / "notary"), "serve", "--data-dir", str(self.data_dir), "--no-tls",
               "--listen", f"127.0.0.1:{self.port}", "--allow-target", "127.0.0.0/8", *self.args]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir,
                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"notary exited early:\n{self.log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.url + "/", timeout=1).read()
                return
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"notary not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def info(self) -> dict[str, object]:
        req = urllib.request.Request(self.url + "/", headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            doc: dict[str, object] = json.loads(resp.read())
            return doc

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None


@contextlib.contextmanager
def running_notary(data_dir: Path, args: list[str], port: int | None = None
                   ) -> Iterator[NotaryProcess]:
    n = NotaryProcess(data_dir, port or free_port(), args)
    n.start()
    try:
        yield n
    finally:
        n.stop()


class TLSTarget:
    """A loopback TLS server (trustme certificate) that completes handshakes and hangs up.

    Answers any SNI name with one certificate, so many ``--resolve``/hosts-file names can
    point at it. Runs in a thread until :meth:`stop`.
    """

    def __init__(self, tmp: Path) -> None:
        import hashlib
        import ssl
        import threading

        import trustme
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import Encoding

        ca = trustme.CA()
        issued = ca.issue_cert("*.test", "127.0.0.1")
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        issued.configure_cert(self.ctx)
        der = x509.load_pem_x509_certificate(issued.cert_chain_pems[0].bytes()).public_bytes(
            Encoding.DER)
        self.sha1 = hashlib.sha1(der).digest().hex(":").upper()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import ssl

        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                with self.ctx.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def post_fp(base_url: str, host: str, port: int, fp: str, timeout: float = 10.0
            ) -> tuple[int, dict[str, str], bytes]:
    """POST fingerprint=FP to /target/host+port; (status, headers, body), errors included."""
    import urllib.error
    import urllib.parse

    data = urllib.parse.urlencode({"fingerprint": fp}).encode()
    req = urllib.request.Request(f"{base_url}/target/{host}+{port}", data=data, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()
