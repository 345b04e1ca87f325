"""What a signed extended (v2) answer says about a failed target, and what the status of a
refusal reveals. A real ``notary serve`` (no TLS on its own port) whose name map sends
``closed.test`` to a loopback port nobody listens on and ``plain.test`` to a server that
answers the ClientHello with plain text.

* The ``detail`` of a signed ``unreachable`` answer about a name names the kind of failure
  only: no address the notary's resolver chose, no TLS library reason. Twin: when the client
  named the address itself, the detail names it.
* A name the notary resolves only to refused addresses and a name that does not resolve get
  the same status (403) and the same text, legacy and v2, so refusals do not tell which
  internal names exist. Twin: a client-named private address keeps its explicit 403 naming
  the range.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import free_port
from security_support import ThreadServer, running_notary

FP = ":".join(["00"] * 20)
# words of the TLS library's reasons for a plain-text answer to a ClientHello
LIBRARY_WORDS = ("WRONG_VERSION", "record layer", "SSL", "ssl", "errno", "Errno")


def plain_text(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.0 400 not TLS\r\n\r\n")


@pytest.fixture
def plain_server() -> Iterator[int]:
    with ThreadServer(plain_text) as srv:
        yield srv.port


@pytest.fixture
def notary(tmp_path: Path) -> Iterator[int]:
    with running_notary(tmp_path / "d", [
            "--no-log", "--allow-target", "127.0.0.0/8", "--resolve", "closed.test=127.0.0.1",
            "--resolve", "plain.test=127.0.0.1", "--negative-ttl", "0",
            "--probe-timeout", "2"], tls=False) as n:
        yield n.port


def answer(port: int, host: str, target_port: int, ip: str | None = None) -> tuple[int, Any]:
    doc: dict[str, Any] = {"host": host, "port": target_port, "fingerprint": FP}
    if ip is not None:
        doc["ip"] = ip
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v2/answer",
                                 data=json.dumps(doc).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, json.loads(resp.read())["statement"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["statement"]


def test_v2_detail_names_no_resolved_address_or_tls_reason(notary: int,
                                                           plain_server: int) -> None:
    closed = free_port()
    for host, port, says in (("closed.test", closed, "the target refused the connection"),
                             ("plain.test", plain_server, "the TLS handshake failed")):
        status, stmt = answer(notary, host, port)
        assert status == 503 and stmt["verdict"] == "unreachable", stmt
        detail = stmt["detail"]
        assert detail == f"{host}:{port}: {says}", detail
        assert "127." not in json.dumps(stmt), stmt
        assert not any(word in detail for word in LIBRARY_WORDS), detail


def test_twin_v2_detail_names_a_client_named_address(notary: int, plain_server: int) -> None:
    closed = free_port()
    for host, port, ip in (("127.0.0.1", closed, None), ("closed.test", closed, "127.0.0.1"),
                           ("plain.test", plain_server, "127.0.0.1")):
        status, stmt = answer(notary, host, port, ip)
        assert status == 503 and stmt["verdict"] == "unreachable", stmt
        assert "127.0.0.1" in stmt["detail"], stmt
        assert not any(word in stmt["detail"] for word in LIBRARY_WORDS), stmt


@pytest.fixture
def strict_notary(tmp_path: Path) -> Iterator[int]:
    """Loopback is not allowed here: ``internal.test`` resolves to a refused address."""
    with running_notary(tmp_path / "s", [
            "--no-log", "--resolve", "internal.test=127.0.0.1", "--negative-ttl", "0",
            "--probe-timeout", "2"], tls=False) as n:
        yield n.port


def legacy(port: int, host: str, target_port: int) -> tuple[int, str, str | None]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/target/{host}+{target_port}",
                                 data=f"fingerprint={FP}".encode())
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            return resp.status, resp.read().decode(), resp.headers.get("Cache-Status")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers.get("Cache-Status")


def test_internal_and_unresolvable_names_answered_alike(strict_notary: int) -> None:
    seen = []
    for host in ("internal.test", "nowhere.invalid"):
        status, text, cache = legacy(strict_notary, host, 443)
        v2_status, stmt = answer(strict_notary, host, 443)
        seen.append((status, text.replace(host, "NAME"), cache, v2_status, stmt["verdict"],
                     stmt["detail"].replace(host, "NAME"), stmt["address"]))
    assert seen[0] == seen[1], seen
    assert seen[0][0] == 403 and "127." not in repr(seen[0]), seen


def test_twin_client_named_private_address_keeps_its_403(strict_notary: int) -> None:
    status, text, _ = legacy(strict_notary, "127.0.0.1", 443)
    assert status == 403 and "127.0.0.1" in text and "loopback" in text, text
    v2_status, stmt = answer(strict_notary, "internal.test", 443, "127.0.0.1")
    assert v2_status == 403 and stmt["verdict"] == "refused", stmt
    assert "loopback" in stmt["detail"], stmt
