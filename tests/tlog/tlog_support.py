"""Support for the transparency-log tests: the independent Go reader, TLS sites on loopback,
notary processes and answers asked with a proof."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
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


def tls_site(ca: trustme.CA, name: str = "site.test", port: int = 0) -> Site:
    """A TLS server on 127.0.0.1 that completes handshakes and closes (on ``port``, else a
    free one)."""
    leaf = ca.issue_cert(name, "127.0.0.1")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    leaf.configure_cert(ctx)
    der = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
    import hashlib

    fp = ":".join(f"{b:02X}" for b in hashlib.sha256(der).digest())
    srv = socket.create_server(("127.0.0.1", port))
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
        wait_listening(proc, port, "notary")
        yield n
    finally:
        stop_process(proc)
        log.close()


def wait_listening(proc: subprocess.Popen[Any], port: int, what: str) -> None:
    """Wait (30 s at most) until ``proc`` accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def goreader(exe: Path, *args: str) -> tuple[int, str, str]:
    p = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


# ---------------------------------------------------------------------------- litewitness

EMPTY_TREE_HASH = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="  # base64 SHA-256("")


def build_litewitness() -> Path:
    """litewitness (filippo.io/torchwood v0.6.1), built by scripts/build-litewitness."""
    p = subprocess.run([str(REPO / "scripts" / "build-litewitness")], check=True,
                       capture_output=True, text=True, timeout=900)
    return Path(p.stdout.strip().splitlines()[-1])


class LiteWitness:
    """A litewitness process with its own ssh-agent and Ed25519 key, its database knowing one
    log (the two rows witnessctl add-log and add-key would write). ``stop`` and ``start``
    keep the key, the database and the port; ``pause``/``resume`` make it slow (SIGSTOP)."""

    def __init__(self, exe: Path, log_vkey: str, name: str = "witness.test/lw") -> None:
        self.exe = exe
        self.name = name
        # a short directory: an ssh-agent socket path must fit in sun_path (108 bytes)
        self.dir = Path(tempfile.mkdtemp(prefix="lw", dir="/tmp"))
        self.sock = self.dir / "s"
        self.db = self.dir / "w.db"
        self.port = free_port()
        self.vkey = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(self.sock)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.sock.exists():
            if time.monotonic() > deadline or self.agent.poll() is not None:
                raise RuntimeError("ssh-agent did not start")
            time.sleep(0.02)
        key = self.dir / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f",
                        str(key)], check=True, timeout=30)
        subprocess.run(["ssh-add", "-q", str(key)], check=True, timeout=30,
                       env={**os.environ, "SSH_AUTH_SOCK": str(self.sock)},
                       capture_output=True)
        out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"],
                             check=True, timeout=30, capture_output=True, text=True).stdout
        self.fingerprint = next(w for w in out.split() if w.startswith("SHA256:"))
        self.add_log(log_vkey)

    def add_log(self, log_vkey: str) -> None:
        origin = log_vkey.split("+", 1)[0]
        with sqlite3.connect(self.db) as db:
            db.executescript(
                "CREATE TABLE IF NOT EXISTS log (origin TEXT PRIMARY KEY, tree_size INTEGER "
                "NOT NULL, tree_hash TEXT NOT NULL);"
                "CREATE TABLE IF NOT EXISTS key (origin TEXT NOT NULL, key TEXT NOT NULL, "
                "FOREIGN KEY(origin) REFERENCES log(origin));")
            db.execute("INSERT INTO log (origin, tree_size, tree_hash) VALUES (?, 0, ?)",
                       (origin, EMPTY_TREE_HASH))
            db.execute("INSERT INTO key (origin, key) VALUES (?, ?)", (origin, log_vkey))

    def tree_size(self, origin: str) -> int:
        with sqlite3.connect(self.db) as db:
            row = db.execute("SELECT tree_size FROM log WHERE origin = ?", (origin,)).fetchone()
        return int(row[0])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.dir / "litewitness.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(self.exe), "-listen", f"127.0.0.1:{self.port}", "-db", str(self.db),
             "-name", self.name, "-key", self.fingerprint, "-ssh-agent", str(self.sock)],
            stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            text = (self.dir / "litewitness.log").read_text(errors="replace")
            m = re.findall(r'vkey="?([^"\s]+)', text)
            if m and self._listening():
                self.vkey = m[-1]
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"litewitness exited {self.proc.returncode}: {text[-800:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"litewitness did not start: {text[-800:]}")
            time.sleep(0.05)

    def _listening(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            stop_process(self.proc)
        self.proc = None

    def close(self) -> None:
        self.stop()
        stop_process(self.agent)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_text(self) -> str:
        return (self.dir / "litewitness.log").read_text(errors="replace")


def cosigners(checkpoint: bytes, vkeys: list[str]) -> set[str]:
    """The names among ``vkeys`` whose (valid) cosignature the checkpoint carries."""
    from notary.tlog.note import NoteError, Verifier, parse_note, verify_note

    try:
        return set(verify_note(parse_note(checkpoint), [Verifier.parse(v) for v in vkeys]))
    except NoteError as exc:
        if "no signature by a known key" in str(exc):
            return set()
        raise


def wait_for(pred: Callable[[], bool], timeout: float = 20.0, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


def log_key(data_dir: Path) -> str:
    """The log verifier key of a notary data directory (the key is made on first use)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return subprocess.run([NOTARY, "log-key", "--data-dir", str(data_dir)], check=True,
                          capture_output=True, text=True, timeout=60).stdout.strip()


def checkpoint_size(note: bytes) -> int:
    return int(note.split(b"\n")[1])


def remove_log(data_dir: Path) -> None:
    """Rewrite the log under the same key: its file goes, the key stays."""
    for suffix in ("", "-wal", "-shm"):
        (data_dir / f"transparency.sqlite3{suffix}").unlink(missing_ok=True)


@contextmanager
def notary_witness(data_dir: Path, *log_vkeys: str, port: int | None = None,
                   name: str = "witness.test/ours") -> Iterator[tuple[str, str]]:
    """``notary witness`` for the given logs: yields (its URL, its verifier key)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    vkey = subprocess.run([NOTARY, "witness-key", "--data-dir", str(data_dir), "--name", name],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    port = port or free_port()
    args = [a for v in log_vkeys for a in ("--log", v)]
    log = open(data_dir / f"witness-{port}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([NOTARY, "witness", "--data-dir", str(data_dir), "--listen",
                             f"127.0.0.1:{port}", *args], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_listening(proc, port, "notary witness")
        yield f"http://127.0.0.1:{port}", vkey
    finally:
        stop_process(proc)
        log.close()


def post_checkpoint(url: str, body: bytes) -> tuple[int, str, str]:
    """POST <url>/add-checkpoint: (status, content type, body)."""
    r = urllib.request.Request(url + "/add-checkpoint", data=body, method="POST")
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def run_monitor(url: str, vkey: str, *args: str,
                timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    """``notary monitor URL --log-key VKEY --once --json ARGS``: (exit status, events, stderr)."""
    p = subprocess.run([NOTARY, "monitor", url, "--log-key", vkey, "--once", "--json", *args],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines()], p.stderr


def kinds(events: list[dict[str, Any]], severity: str | None = None) -> list[str]:
    return [e["kind"] for e in events if severity is None or e["severity"] == severity]


@contextmanager
def static_log(root: Path) -> Iterator[str]:
    """Serve ``root`` (a log exported as files: checkpoint, tile/...) with Python's own
    http.server in its own process; yields the log's URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                             str(port), "--directory", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_listening(proc, port, "http.server")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


def export_log(tl: Any, root: Path) -> None:
    """Write a TileLog's latest checkpoint and every tile and bundle as static files."""
    from notary.tlog.tiles import tiles_for_size

    size = tl.size()
    root.mkdir(parents=True, exist_ok=True)
    (root / "checkpoint").write_bytes(tl.checkpoint(size))
    for tp in tiles_for_size(size):
        f = root / tp.path()
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(tl.read(tp, size))
