"""A failed probe's 503 text reveals nothing internal: not the address the notary's resolver
chose, not the TLS library's reason. A real ``notary serve`` whose name map sends
``closed.test`` to a loopback port nobody listens on and ``plain.test`` to a server that
answers the ClientHello with plain text: 503 saying only the kind of failure. The twin: a probe that
times out keeps its own text, which names only the bound (the replacement is targeted)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port
from redis_testing import wait_port

NOTARY = str(Path(sys.executable).parent / "notary")
FP = "fingerprint=" + ":".join(["00"] * 20)


@pytest.fixture
def plain_server() -> Iterator[int]:
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():  # bounded by the fixture's end
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"HTTP/1.0 400 not TLS\r\n\r\n")
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join(5)
    srv.close()


@pytest.fixture
def notary(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    with open(tmp_path / "notary.log", "wb") as err:
        proc = subprocess.Popen(
            [NOTARY, "serve", "--data-dir", str(tmp_path / "d"), "--no-tls", "--no-log",
             "--listen", f"127.0.0.1:{port}", "--allow-target", "127.0.0.0/8",
             "--resolve", "closed.test=127.0.0.1", "--resolve", "plain.test=127.0.0.1",
             "--negative-ttl", "0", "--probe-timeout", "0.5"], stderr=err)
    try:
        wait_port(port, 60)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def ask(port: int, spec: str) -> tuple[int, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/target/{spec}", data=FP.encode())
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_probe_failures_name_no_address_or_tls_reason(notary: int, plain_server: int) -> None:
    closed = free_port()
    for spec, says in ((f"closed.test+{closed}", "the target refused the connection"),
                       (f"plain.test+{plain_server}", "the TLS handshake failed")):
        status, text = ask(notary, spec)
        assert status == 503, text
        assert text.strip() == f"{spec.replace('+', ':')}: {says}"


def test_twin_a_timeout_keeps_its_text(notary: int) -> None:
    # a listener that never answers: the only detail is the bound, which is public policy
    with socket.create_server(("127.0.0.1", 0)) as silent:
        status, text = ask(notary, f"closed.test+{silent.getsockname()[1]}")
    assert status == 503 and "no TLS handshake within 0.5 s" in text, text
