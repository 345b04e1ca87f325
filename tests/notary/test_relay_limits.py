"""The bounce relay's CONNECT rate per client address (--relay-rate-limit/-burst).

A real ``notary serve`` with a relay and a budget of 2 CONNECTs per client: the third from
127.0.0.2 is 503 (with Retry-After) while 127.0.0.3 is still answered; the twin without the
limit answers all three. The CONNECTs name a port the relay refuses (403), so nothing is
dialled."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loopback import free_port
from redis_testing import wait_port

NOTARY = str(Path(sys.executable).parent / "notary")


@pytest.fixture
def relay(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    port, relay_port = free_port(), free_port()
    with open(tmp_path / "notary.log", "wb") as err:
        proc = subprocess.Popen(
            [NOTARY, "serve", "--data-dir", str(tmp_path / "d"), "--no-tls", "--no-log",
             "--listen", f"127.0.0.1:{port}", "--relay-listen", f"127.0.0.1:{relay_port}",
             "--relay-rate-limit", request.param, "--relay-rate-burst", "2"], stderr=err)
    try:
        wait_port(relay_port, 60)
        yield relay_port
    finally:
        proc.terminate()
        proc.wait(20)


def connect_status(port: int, source: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10,
                                  source_address=(source, 0)) as s:
        s.sendall(b"CONNECT notary.example:443 HTTP/1.0\r\n\r\n")
        return int(s.recv(200).split()[1])


@pytest.mark.parametrize("relay", ["0.001"], indirect=True)
def test_third_connect_from_one_address_is_503(relay: int) -> None:
    assert [connect_status(relay, "127.0.0.2") for _ in range(3)] == [403, 403, 503]
    assert connect_status(relay, "127.0.0.3") == 403  # its own budget


@pytest.mark.parametrize("relay", ["0"], indirect=True)
def test_twin_without_the_limit(relay: int) -> None:
    assert [connect_status(relay, "127.0.0.2") for _ in range(3)] == [403, 403, 403]
